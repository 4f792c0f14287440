"""Rank gradient outlier: one data-parallel rank's gradient norm far from the other ranks' (001 Q14).

Failure mode: before the all-reduce every rank computes the gradient of its own shard of the
batch with (what should be) the same parameters, so the ranks' local norms are of one order. One
rank far above the others got a batch of abnormal samples (gibberish, extreme rewards, NaN / inf
inputs — the most common cause), holds parameters that drifted out of sync, or runs on faulty
hardware (memory bit flips) — 001 Q14. The all-reduce averages it into every rank's update, and
gradient clipping hides its size. One rank far *below* the others learns nothing from its shard
(all its groups have zero reward spread) or has a detached loss.
Signal: ``dist/grad_norm/rank/<r>`` (local actor norm before the all-reduce and before clipping)
against the median of the other ranks at the same step: the fold x / median(others). With six
ranks or more also a robust z of log10 norms over the other ranks (their own spread is the scale).
With two ranks the fold says only that they differ; the outlier is the rank farther from the
typical norm of the recent steps where no rank stood out (the higher one when there is no such
history yet).
Default thresholds: a rank is an outlier at a step when its fold is ≥ 5× (or ≤ 1/5×); with ≥ 6
ranks also when its robust z is ≥ 5 (log scale floored at 0.05 decade) and its fold ≥ 2× (or ≤
1/2×). High: on ≥ 3 of the last 8 steps → yellow (key ``rank/<r>``); on ≥ 6 of them, or ≥ 3 with
a median fold ≥ 20× → orange. Low (≤ 1/5×): 8 steps in a row → yellow (key ``low/rank/<r>``): a
shard without learning signal happens by chance on tiny per-rank batches, a run of eight does not.
The seed's "≥ 3× the median" (001 Q14) is where to start looking; 5× on 3 of 8 steps leaves room
for the honest spread of small shards. Calibrated on synthetic per-rank norms
(tests/test_detectors_dist.py: lognormal spread 25-40% between ranks, a level drifting by half,
2 to 16 ranks, 150 steps, 20 seeds each): no finding; with the robust z from 4 ranks (3 others)
3 of 20 four-rank runs at 40% spread fired, hence 6. A rank ×6 is found in 18 of 20 two-rank
runs and all runs of 4 and 8 ranks; a rank ×3 among ranks agreeing within 5% by the z from 6.
Practical significance: orange at most, never red: one rank's gradient is averaged into the update
and clipped, so its damage shows first in the KL or the loss. An outlier (fold ≥ 5× the other ranks'
median) on 3 of 8 steps is yellow, on 6 of 8 (or a median fold ≥ 20×) orange; a low rank for 8 steps
yellow. The robust z (≥ 6 ranks) uses log10 norms with its scale floored at 0.05 decade, zero norms
count as 1e-12, and a step where the others' median fell below 1/5 of the typical norm (sparse
rewards) is not judged high.
Scale assumptions: ratios between ranks at the same step, so no absolute norm is assumed; a zero
norm counts as 1e-12. The more ranks, the better the median of the others: with two ranks
attribution leans on the history.
False positives: uneven shards (a rank whose prompts are all of one hard category); very sparse
rewards on tiny per-rank batches (most ranks' norms ~0 and one rank's not: a step whose other
ranks' median is below 1/5 of the recent typical norm is not judged high).
Fix: save and replay that rank's batch on a healthy device (001 Q14: norm still huge → the data;
normal → the rank's state or hardware); compare the parameter hashes (``rank_divergence``); run
``dcgmi diag`` on its GPU; drop the bad samples or replace the device; keep gradient clipping on
(it limits the damage, it does not fix the cause).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from rlcockpit.config import Config, check, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.detectors._ranks import others, others_median, per_rank, ranks_logged
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.windows import Streak, Window, median, robust_z

TINY = 1e-12  # a zero norm, for ratios and logs


@dataclass(frozen=True)
class RankGradOutlierConfig(Config):
    ratio: float = option(5.0, help="A rank is an outlier when its norm is ≥ this × the median "
                          "of the other ranks (or ≤ 1/this ×).", range=(1.0, 1e9))
    z: float = option(5.0, help="With ≥ min_ranks_z ranks, also when the robust z of its log10 "
                      "norm over the other ranks is ≥ this ...", range=(0.5, 1e6))
    z_min_fold: float = option(2.0, help="... and its fold is ≥ this (or ≤ 1/this).",
                               range=(1.0, 1e9))
    z_floor: float = option(0.05, help="Smallest log10 scale of the robust z (decades): ranks that "
                            "agree closely do not make a 10% difference an outlier.",
                            range=(1e-6, 10.0))
    min_ranks_z: int = option(6, help="Ranks needed for the robust z (the MAD of fewer than 5 "
                             "other ranks is too noisy a scale).", range=(3, 100000))
    window: int = option(8, help="Recent steps judged.", range=(1, 10000))
    min_hits: int = option(3, help="Yellow when the same rank is a high outlier on this many of "
                           "the last `window` steps ...", range=(1, 10000))
    orange_hits: int = option(6, help="... orange on this many ...", range=(1, 10000))
    orange_fold: float = option(20.0, help="... or on min_hits steps with a median fold ≥ this.",
                                range=(1.0, 1e12))
    low_steps: int = option(8, help="Yellow when a rank is a low outlier (≤ 1/ratio) this many "
                            "steps in a row.", range=(1, 100000))

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("min_hits", "orange_hits"):
            check(getattr(self, key) <= self.window, key, getattr(self, key),
                  f"must be at most window={self.window}")
        check(self.min_hits <= self.orange_hits, "min_hits", self.min_hits,
              f"must be at most orange_hits={self.orange_hits}")


@register
class RankGradOutlier(Detector):
    name = "rank_grad_outlier"
    family = "distributed"
    reads = ("dist/grad_norm/rank/",)
    patterns = ("rank_grad_outlier",)
    signal = "rank grad norm"
    Config = RankGradOutlierConfig

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        return ranks_logged(names, "grad_norm") >= 2

    def __init__(self, config: RankGradOutlierConfig | None = None) -> None:
        super().__init__(config)
        cfg = self.config
        self._high: deque[tuple[int, int, float] | None] = deque(maxlen=cfg.window)  # (step, rank, fold)
        self._low: dict[int, Streak] = {}
        self._typical = Window(max(cfg.window, 8))  # median norm of the steps without an outlier

    def update(self, view: StepView) -> list[Condition] | object:
        norms = {r: max(v, TINY) for r, v in per_rank(view, "grad_norm").items() if v >= 0}
        if len(norms) < 2:
            return SKIPPED
        outlier = self._outlier(norms)
        high = outlier if outlier and outlier[1] > 1 else None
        self._high.append((view.step, *high) if high else None)
        for rank in norms:
            low = outlier is not None and outlier[0] == rank and outlier[1] < 1
            self._low.setdefault(rank, Streak()).update(low, view.step)
        if outlier is None:
            self._typical.push(median(norms.values()), view.step)
        found = [self._judge_high(rank) for rank in norms]
        found += [self._judge_low(rank, norms) for rank in norms]
        return [c for c in found if c is not None]

    def _outlier(self, norms: dict[int, float]) -> tuple[int, float] | None:
        """(rank, fold vs the others' median) of this step's outlier rank, or None."""
        if len(norms) == 2:
            return self._pair(norms)
        cfg, flagged = self.config, []
        typical = median(self._typical.values) if len(self._typical) >= 3 else None
        for rank, value in norms.items():
            base = others_median(norms, rank)
            if typical is not None and base < typical / cfg.ratio and value > base:
                continue  # most shards had no signal this step: not one rank standing out
            fold = value / max(base, TINY)
            far = fold >= cfg.ratio or fold <= 1 / cfg.ratio
            if not far and len(norms) >= cfg.min_ranks_z and \
                    (fold >= cfg.z_min_fold or fold <= 1 / cfg.z_min_fold):
                logs = [math.log10(v) for v in others(norms, rank)]
                far = abs(robust_z(math.log10(value), logs, floor=cfg.z_floor)) >= cfg.z
            if far:
                flagged.append((abs(math.log(fold)), rank, fold))
        if not flagged:
            return None
        _, rank, fold = max(flagged)
        return rank, fold

    def _pair(self, norms: dict[int, float]) -> tuple[int, float] | None:
        """Two ranks: they differ by ≥ ratio; the outlier is the one farther (in log) from the
        typical norm of the clean recent steps, the higher one without such history."""
        (r0, a), (r1, b) = norms.items()
        if max(a, b) / min(a, b) < self.config.ratio:
            return None
        rank = r0 if a >= b else r1
        if len(self._typical) >= 3:
            typical = max(median(self._typical.values), TINY)
            rank = max((r0, r1), key=lambda r: (abs(math.log(norms[r] / typical)), norms[r]))
        other = r1 if rank == r0 else r0
        return rank, norms[rank] / norms[other]

    def _judge_high(self, rank: int) -> Condition | None:
        cfg = self.config
        hits = [h for h in self._high if h is not None and h[1] == rank]
        if len(hits) < cfg.min_hits:
            return None
        fold = median(h[2] for h in hits)
        orange = len(hits) >= cfg.orange_hits or fold >= cfg.orange_fold
        evidence = {"rank": rank, "fold": hits[-1][2], "median_fold": fold, "hits": len(hits),
                    "window": cfg.window, "threshold_ratio": cfg.ratio,
                    "signal": "rank grad norm", "onset_step": hits[0][0]}
        return Condition("orange" if orange else "yellow",
                         f"rank {rank}'s gradient norm is {hits[-1][2]:.1f}× the other ranks' "
                         f"median (on {len(hits)} of the last {len(self._high)} steps, median "
                         f"{fold:.1f}×): bad data on that rank, diverged parameters or faulty "
                         "hardware", evidence, key=f"rank/{rank}",
                         message_zh=f"rank {rank} 的梯度范数为其他 rank 中位数的 {hits[-1][2]:.1f} 倍"
                                    f"（最近 {len(self._high)} 步中有 {len(hits)} 步）：该卡数据异常、"
                                    "参数不同步或硬件故障")

    def _judge_low(self, rank: int, norms: dict[int, float]) -> Condition | None:
        streak = self._low[rank]
        if streak.count < self.config.low_steps:
            return None
        base = others_median(norms, rank)
        fold = norms[rank] / max(base, TINY)
        evidence = {"rank": rank, "fold": fold, "grad_norm": norms[rank], "others_median": base,
                    "steps": streak.count, "signal": "rank grad norm",
                    "onset_step": streak.onset}
        return Condition("yellow", f"rank {rank}'s gradient norm is {fold:.2g}× the other ranks' "
                         f"median for {streak.count} steps: its shard teaches nothing (no reward "
                         "spread, detached loss) or it runs other parameters", evidence,
                         key=f"low/rank/{rank}",
                         message_zh=f"rank {rank} 的梯度范数连续 {streak.count} 步仅为其他 rank "
                                    f"中位数的 {fold:.2g} 倍：该分片没有学习信号，或参数已不同步")
