"""KL suddenly zero after being clearly positive: reference synced with the actor, or a KL bug
(001 Q3).

Failure mode: "almost always a technical fault, not convergence" (001 Q3): the actor's weights were
copied into the frozen reference model (save/load or freezing bug), or the KL code broke (log-probs
truncated, a variable overwritten). The KL penalty is gone; the run is unconstrained from here on.
No metric threshold catches it: every tier and trend detector sees a *healthy* low KL.
Signal: ``kl/token_max`` (every token's KL) and ``kl/mean`` both ~0, after a history (the
``window`` steps before) whose median KL was above ``floor``. A token maximum below 1e-4 means the
actor and the reference agree on every sampled token to float precision — it never happens by
chance once training has started (healthy tiny-world runs: ≥ 0.13 from step 2 on), so one step is
enough; that also catches a one-time sync, after which the actor drifts away again at once.
Default thresholds: ``kl/mean`` below 1e-4 and ``kl/token_max`` below 1e-4 for 1 step → red; when
the run logs no token maximum (imported runs), ``kl/mean`` alone for 3 steps (the k1 estimate of
a healthy KL can cross 0). The history (the last 10 non-zero steps) must show a collapse: its
median at least ``collapse`` (100) × the current |KL| and above ``floor`` (1e-3 nats per
sequence, 10 × the zero bound), so the very start of a run (policy = reference, KL ~1e-6) does
not fire, at any KL scale: the ref_synced_to_actor fault run seed 1 had a pre-onset median of
0.007 — under the former absolute floor of 0.01 — and KL 1e-6 after.
Practical significance: red, in the KL's own units: |KL| below its zero bound (1e-4 per sequence,
1e-6 per token) and every token's KL < 1e-4 after a history whose median was ≥ 100× the current |KL|
and above ``floor`` — the penalty is gone and, after a sync, the reference stays wrong for the rest
of the run (the finding latches: an effect that persists). Without a token maximum it needs 3 zero
steps in a row. No z-score: a history of exact zeros or below ``floor`` (a run's start) is no
evidence and never fires.
Scale assumptions: the token maximum is per token (float precision: any scale); the bounds on
the mean are in its own unit — ``kl/mean`` per sequence (eps 1e-4, floor 1e-3), or, for runs
that log only ``kl/token_mean`` (TRL, verl), per token (``eps_token_mean`` 1e-6, floor 10× that);
the collapse factor is relative. Real runs: TRL per-token KL medians 2.7e-4 (016) … 2.5 (008).
The finding stays open (``latch``) for the rest of the run: after a one-time sync the actor drifts
away again at once and the KL looks healthy — measured against the wrong reference.
An intended sync is no finding: a run that mixes the actor into the reference every N steps on
purpose (TRL ``sync_ref_model=True``: every ``ref_model_sync_steps``, default 512, α 0.6) logs
``kl/ref_sync_every`` = N; a zero whose first step is a multiple of N or the step after one (TRL
syncs at the end of step kN, the KL of step kN + 1 is the first against the new reference) starts
a new history instead. A run without a reference model (``kl/coef`` = 0, no KL logged) reports
status "no reference", not "skipped".
False positives: a policy collapsed to a mode the reference also prefers (only EOS): then the
reward and the response length collapse too (001 Q3), which other detectors report.
Fix: stop and review the code: check that the reference is frozen and never loaded from the
actor's checkpoint, and that the KL is computed from the current reference log-probs.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlcockpit.config import Config, option
from rlcockpit.diagnostics.base import Condition, Detector, StepView
from rlcockpit.diagnostics.detectors._kl import has_kl, kl_missing
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.windows import Streak, Window, median


@dataclass(frozen=True)
class KLZeroConfig(Config):
    eps: float = option(1e-4, help="|kl/mean| below this counts as zero.", range=(0.0, 1.0))
    eps_token: float = option(1e-4, help="kl/token_max below this counts as zero.",
                              range=(0.0, 1.0))
    steps: int = option(1, help="Consecutive zero steps before firing.", range=(1, 1000))
    steps_mean_only: int = option(3, help="... when kl/token_max is not logged.",
                                  range=(1, 1000))
    window: int = option(10, help="Steps of history before the zeros.", range=(1, 10000))
    latch: bool = option(True, help="Keep the finding open for the rest of the run: after a sync "
                         "the KL looks healthy again, against the wrong reference.")
    floor: float = option(1e-3, help="The history's median KL must exceed this (nats/sequence).",
                          range=(0.0, 1e6))
    eps_token_mean: float = option(1e-6, help="|kl/token_mean| below this counts as zero when "
                                   "kl/mean is not logged (the history must exceed 10x it).",
                                   range=(0.0, 1.0))
    collapse: float = option(100.0, help="... and be at least this × the current |KL| (a collapse, "
                             "whatever the run's KL scale).", range=(1.0, 1e12))


@register
class KLZero(Detector):
    name = "kl_zero"
    family = "kl"
    reads = ("kl/mean", "kl/token_mean", "kl/token_max", "kl/ref_sync_every")
    patterns = ("kl_zero_ref_synced",)
    signal = "KL"
    Config = KLZeroConfig

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        return bool({"kl/mean", "kl/token_mean"} & names)

    def __init__(self, config: KLZeroConfig | None = None) -> None:
        super().__init__(config)
        self._history = Window(self.config.window)
        self._zero = Streak()
        self._latched: Condition | None = None

    def update(self, view: StepView) -> Condition | object | None:
        if not has_kl(view):
            return kl_missing(view)
        found = self._judge(view)
        if found is not None and self.config.latch:
            self._latched = self._latched or found
        return self._latched or found

    def _judge(self, view: StepView) -> Condition | None:
        cfg = self.config
        kl, eps, floor = view.finite("kl/mean"), cfg.eps, cfg.floor
        if view.get("kl/mean") is None:  # per token only (TRL, verl): bounds in per-token units
            kl, eps, floor = view.finite("kl/token_mean"), cfg.eps_token_mean, 10 * cfg.eps_token_mean
        if kl is None:
            return None
        peak = view.finite("kl/token_max")
        is_zero = abs(kl) < eps and (peak is None or abs(peak) < cfg.eps_token)
        held = self._zero.update(is_zero, view.step)
        if not is_zero:
            self._history.push(kl, view.step)
            return None
        if _synced(self._zero.onset, view.finite("kl/ref_sync_every")):
            self._history = Window(cfg.window)  # the reference moved on purpose: a new history
            return None
        before = median(self._history.values) if len(self._history) else 0.0
        needed = cfg.steps if peak is not None else cfg.steps_mean_only
        if held < needed or before <= floor or before < cfg.collapse * abs(kl):
            return None
        evidence = {"kl": kl, "token_max": peak, "median_before": before, "zero_steps": held,
                    "collapse": before / max(abs(kl), 1e-12),
                    "window": cfg.window, "signal": "KL", "onset_step": self._zero.onset,
                    "hint": "reference model may be a copy of the actor, or the KL code is broken"}
        span = "1 step" if held == 1 else f"{held} steps"
        return Condition("red", f"KL dropped to ~0 for {span} after a median of "
                         f"{before:.3g}: the reference model may be a copy of the actor "
                         "(or the KL computation is broken)", evidence,
                         message_zh=f"KL 在中位数 {before:.3g} 之后连续 {held} 步降为约 0："
                                    "参考模型可能被同步成了 Actor 的副本（或 KL 计算有误）")


def _synced(onset: int | None, period: float | None) -> bool:
    """The zero began at an intended reference sync: step kN or kN + 1 (k >= 1) of period N."""
    if onset is None or period is None or period < 1:
        return False
    n = int(period)
    return onset >= n and onset % n in (0, 1)

