"""Rank divergence: the data-parallel ranks no longer hold the same parameters (001 Q13).

Failure mode: data parallel trains one model on every rank — each step all-reduces the gradients
and every rank applies the same update — so the ranks' parameters must stay bit-identical. A
rank loaded from another checkpoint, an update applied on one rank only (a live change, a
rollback or a ticket that missed a rank), a lost or corrupted collective, a non-deterministic
kernel or a memory bit flip makes them drift apart silently: each rank then trains its own model,
the averaged gradients belong to none of them, and a checkpoint saved from rank 0 is not what the
others ran (001 Q13: "if any worker's hash differs from rank 0's, stop at once").
Signal: ``dist/param_hash_mismatch`` — the number of ranks whose parameter hash differs from
rank 0's — at the steps where the trainer compares them (every ``distributed.hash_every``
steps; ``dist/param_hash_checked`` is 1 there). The verdict of a check holds until the next
one: parameters that diverged do not come back together by themselves.
Default thresholds: any mismatch (> 0) at a checked step → red (key ``mismatch``); the evidence
names the last check that matched, so the divergence happened between those two steps (roll
back to a checkpoint saved before it). A later check with 0 mismatches (after a rollback or a
resume of the whole group) resolves it. No threshold to tune: a hash either matches or not.
Practical significance: red on any hash mismatch — an exact test, in ranks at any world size, of an
effect that persists: parameters that diverged do not come back together (the verdict holds until a
check matches again), and every update from then on averages gradients of different models. No
statistics and no history, so nothing to floor.
Scale assumptions: none; the count is in ranks, at any world size. The check's cost grows with
the model (one pass over the parameters every ``hash_every`` steps), not with the world size.
False positives: none expected from the trainer's exact hash. A home-made check that hashes
parameters in low precision or at different moments on different ranks (before / after the
optimizer step) would produce them.
Fix: stop and restart the whole group from the last checkpoint saved before the last matching
check (``rlcockpit train --resume``; every rank loads the same file, with a barrier at init);
look for what touched one rank only (audit log: live changes, tickets, rollbacks at those steps);
``dist/grad_norm/rank/<r>`` often shows the odd rank (the ``rank_grad_outlier`` detector); run
the hardware diagnostics (``dcgmi diag``) on that rank's device.
"""

from __future__ import annotations

from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register

MISMATCH, CHECKED = "dist/param_hash_mismatch", "dist/param_hash_checked"


@register
class RankDivergence(Detector):
    name = "rank_divergence"
    family = "distributed"
    reads = (MISMATCH, CHECKED, "dist/world_size")
    patterns = ("dist_param_mismatch",)
    signal = "parameter hash"

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        return bool({"dist/param_hash_mismatch", "dist/param_hash_checked"} & names)

    def __init__(self, config: object = None) -> None:
        super().__init__(config)
        self._checks = 0
        self._last_match: int | None = None  # step of the last check without a mismatch
        self._diverged: Condition | None = None  # the verdict of the last check, held till the next
        self._world: float | None = None

    def update(self, view: StepView) -> Condition | object | None:
        self._world = view.finite("dist/world_size") or self._world
        mismatch = view.get(MISMATCH)
        checked = (view.finite(CHECKED) or 0) >= 1 or mismatch is not None
        if not checked:
            return SKIPPED if not self._checks else self._diverged
        self._checks += 1
        if mismatch is None or mismatch == 0:
            self._last_match = view.step
            self._diverged = None
            return None
        if self._diverged is None:
            self._diverged = self._condition(mismatch, view.step)
        return self._diverged

    def _condition(self, mismatch: float, step: int) -> Condition:
        world = int(self._world) if self._world else None
        count = f"{mismatch:.0f}" if mismatch == mismatch else "an unknown number of"  # NaN
        of = f" of the {world - 1} other ranks" if world else ""
        since = (f"; the last matching check was at step {self._last_match}"
                 if self._last_match is not None else "; no earlier check matched")
        evidence = {"mismatched_ranks": mismatch, "world_size": world, "check_step": step,
                    "last_matching_check": self._last_match, "signal": "parameter hash",
                    "onset_step": step}
        zh_since = (f"；上一次一致的校验在第 {self._last_match} 步"
                    if self._last_match is not None else "")
        return Condition("red", f"parameters diverged between ranks: {count}{of} rank(s) differ "
                         f"from rank 0 at the hash check of step {step}{since}", evidence,
                         key="mismatch",
                         message_zh=f"各 rank 的参数已不一致：第 {step} 步的哈希校验中有 {count} 个 "
                                    f"rank 与 rank 0 不同{zh_since}")
