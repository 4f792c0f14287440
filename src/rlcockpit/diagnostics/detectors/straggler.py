"""Straggler: one data-parallel rank persistently slower than the others in a phase (issue 13;
000 §3.3: one GPU's throughput falls 15% and the whole group waits for it).

Failure mode: data parallel is synchronous — the advantage statistics and the gradient
all-reduce wait for every rank — so one slow rank (a hot or throttled GPU, a noisy neighbour on
the host, a shard of longer prompts, a rank swapping) sets the pace of all of them; the group
pays its extra seconds every step and nothing fails.
Signal: each rank's own phase durations ``dist/time/<phase>_s/rank/<r>`` (rollout, score,
advantage, update) against the median of the other ranks at the same step. Collectives make the
fast ranks wait, and the wait lands in the next phase that holds a collective (advantage
statistics, the all-reduce in update), which then looks slow on them — with two ranks the waiting
rank's phase is as far above the other's as the straggler's. So a slow phase counts only when its
rank is also *behind* at the end of it: its time since the step began exceeds the others' (a
waiting rank leaves the collective together with the straggler). ``dist/step_s/rank/<r>`` is read only when no phase times are logged (the
collectives make the ranks' step times agree, so it rarely shows a straggler).
Default thresholds: a rank is slow at a step when its phase time is ≥ 1.5× the others' median
and ≥ 0.05 s above it; slow on ≥ 5 of the last 8 steps → orange (key ``rank/<r>``), naming the
rank, the phase and the seconds the group loses per step; ≥ 1.25× (and ≥ 0.05 s) on 7 of 8 →
yellow. Calibrated on synthetic synchronous steps (tests/test_detectors_dist.py) with every
rank's phase times jittering independently by 12% or 20% (lognormal σ): 2, 3, 4, 8 and 16
ranks, 150 steps, 20 seeds each — 200 runs, no orange, one yellow (2 ranks at 20%); a rank 1.6×
slower in rollout is orange within 5-7 steps in every run of 2, 4 and 8 ranks. At 30% jitter
per rank and step both tiers fire by chance: raise ``min_hits`` / ``yellow_hits`` to 8 or
``floor_s`` for such noisy phases.
Practical significance: orange at most, never red: a slow rank costs the group its extra seconds
every step (``lost_s``) but breaks nothing. Orange at ≥ 1.5× the other ranks' median phase time on 5
of 8 steps, yellow at ≥ 1.25× on 7 of 8 — ratios between ranks at the same step, at any model size.
No z-score; the 0.05 s floor (above the others, and behind them at the end of the phase) keeps
millisecond phases from making a ratio.
Scale assumptions: ratios to the other ranks at the same step, so they hold at any model size and
step time; the 0.05 s floor keeps millisecond phases (advantage on a tiny batch) from alarming —
raise it for slow steps with loose timing, lower it for a fast inner loop. At least 2 ranks.
False positives: an uneven split of the work (a shard of longer prompts or responses makes its
rank slower in rollout for as long as the split lasts: real, and worth fixing, but not hardware);
with two ranks a slow phase that lies after the last collective of a step (its wait lands in the
next step) is blamed on the waiting rank; a slow phase whose collective sits inside the same phase
(the all-reduce in the backward pass of update) does not show at all.
Fix: look at that rank's host and device (``nvidia-smi``: temperature, clocks, other processes;
``dist/rss_gb/rank/<r>``: swapping); balance the shards by tokens rather than prompts; move the
job off a bad node. The finding's ``lost_s`` is what the straggler costs every step.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from rlcockpit.config import Config, check, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.detectors._ranks import PHASES, others_median, per_rank, ranks_logged
from rlcockpit.diagnostics.registry import register

_STEP = "step"  # the fallback signal: the rank's whole step


@dataclass(frozen=True)
class StragglerConfig(Config):
    window: int = option(8, help="Recent steps judged.", range=(1, 10000))
    min_hits: int = option(5, help="Orange when a rank was slow (orange_ratio) on at least this "
                           "many of the last `window` steps ...", range=(1, 10000))
    orange_ratio: float = option(1.5, help="... slow: its phase time ≥ this × the median of the "
                                 "other ranks ...", range=(1.0, 1e6))
    yellow_hits: int = option(7, help="Yellow when it was mildly slow (yellow_ratio) on at least "
                              "this many of the last `window` steps ...", range=(1, 10000))
    yellow_ratio: float = option(1.25, help="... mildly slow: ≥ this × the others' median.",
                                 range=(1.0, 1e6))
    floor_s: float = option(0.05, help="... and at least this many seconds above it (tiny phases "
                            "never alarm).", range=(0.0, 1e6))

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("min_hits", "yellow_hits"):
            check(getattr(self, key) <= self.window, key, getattr(self, key),
                  f"must be at most window={self.window}")
        check(self.yellow_ratio <= self.orange_ratio, "yellow_ratio", self.yellow_ratio,
              f"must be at most orange_ratio={self.orange_ratio}")


@dataclass(frozen=True)
class _Slow:
    """One rank slow in one phase at one step: level 2 (orange ratio) or 1 (yellow ratio)."""

    step: int
    level: int
    seconds: float
    others_s: float

    @property
    def ratio(self) -> float:
        return self.seconds / self.others_s if self.others_s > 0 else float("inf")


@register
class Straggler(Detector):
    name = "straggler"
    family = "distributed"
    reads = ("dist/time/", "dist/step_s/")
    patterns = ("rank_straggler",)
    signal = "rank phase time"
    Config = StragglerConfig

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        phases = [ranks_logged(names, f"time/{p}_s") for p in PHASES]
        return max(phases) >= 2 or (not any(phases) and ranks_logged(names, "step_s") >= 2)

    def __init__(self, config: StragglerConfig | None = None) -> None:
        super().__init__(config)
        # per step, the (phase, rank) pairs found slow, after the "earliest phase" rule
        self._history: deque[dict[tuple[str, int], _Slow]] = deque(maxlen=self.config.window)

    def update(self, view: StepView) -> list[Condition] | object:
        times = self._times(view)
        if not times:
            return SKIPPED
        self._history.append(self._slow_now(times, view.step))
        return [c for c in (self._judge(rank) for rank in self._ranks()) if c is not None]

    def _times(self, view: StepView) -> dict[str, dict[int, float]]:
        """{phase: {rank: seconds}} with at least two ranks; the step time only without phases."""
        phases = {p: per_rank(view, f"time/{p}_s") for p in PHASES}
        found = {p: t for p, t in phases.items() if len(t) >= 2}
        if not found and not any(phases.values()):
            step = per_rank(view, "step_s")
            found = {_STEP: step} if len(step) >= 2 else {}
        return found

    def _slow_now(self, times: dict[str, dict[int, float]], step: int) -> dict[tuple[str, int], _Slow]:
        """Every (phase, rank) slow at this step: its phase time is ≥ yellow_ratio × the others'
        median, and the rank is *behind* the others at the end of the phase (its time since the
        step began exceeds theirs by floor_s). A rank that waited at a collective for a straggler
        has a long phase too, but it ends the phase together with the straggler, not behind it."""
        cfg = self.config
        found: dict[tuple[str, int], _Slow] = {}
        elapsed: dict[int, float] = {}
        for phase, by_rank in times.items():  # in the phase machine's order
            elapsed = {r: elapsed.get(r, 0.0) + t for r, t in by_rank.items()}
            for rank, seconds in by_rank.items():
                base = others_median(by_rank, rank)
                behind = elapsed[rank] - others_median(elapsed, rank)
                if seconds - base < cfg.floor_s or behind < cfg.floor_s:
                    continue
                level = 2 if seconds >= cfg.orange_ratio * base else \
                    1 if seconds >= cfg.yellow_ratio * base else 0
                if level:
                    found[(phase, rank)] = _Slow(step, level, seconds, base)
        return found

    def _ranks(self) -> list[int]:
        return sorted({rank for step in self._history for _, rank in step})

    def _judge(self, rank: int) -> Condition | None:
        """The rank's worst phase over the window: orange / yellow when slow often enough."""
        cfg = self.config
        best: tuple[int, int, str] | None = None  # (level, hits, phase)
        seen = {p for step in self._history for p, r in step if r == rank}
        for phase in (p for p in (*PHASES, _STEP) if p in seen):  # ties: the earliest phase
            slow = [s[(phase, rank)] for s in self._history if (phase, rank) in s]
            for level, needed in ((2, cfg.min_hits), (1, cfg.yellow_hits)):
                hits = sum(s.level >= level for s in slow)
                if hits >= needed and (best is None or (level, hits) > best[:2]):
                    best = (level, hits, phase)
        if best is None:
            return None
        return self._condition(rank, *best)

    def _condition(self, rank: int, level: int, hits: int, phase: str) -> Condition:
        cfg = self.config
        slow = [s[(phase, rank)] for s in self._history if (phase, rank) in s]
        slow = [s for s in slow if s.level >= level]
        last = slow[-1]
        lost = last.seconds - last.others_s
        metric = "dist/step_s" if phase == _STEP else f"dist/time/{phase}_s"
        evidence = {"rank": rank, "phase": phase, "metric": f"{metric}/rank/{rank}",
                    "seconds": last.seconds, "others_median_s": last.others_s,
                    "ratio": last.ratio, "lost_s": lost, "hits": hits, "window": cfg.window,
                    "threshold_ratio": cfg.orange_ratio if level == 2 else cfg.yellow_ratio,
                    "floor_s": cfg.floor_s, "signal": "rank phase time",
                    "onset_step": slow[0].step}
        where = "its whole step" if phase == _STEP else f"{phase}"
        return Condition("orange" if level == 2 else "yellow",
                         f"straggler: rank {rank} is slow in {where} ({last.seconds:.3g} s vs "
                         f"{last.others_s:.3g} s on the other ranks, {last.ratio:.1f}×) on {hits} "
                         f"of the last {len(self._history)} steps; the group waits ~{lost:.2g} s "
                         "per step for it", evidence, key=f"rank/{rank}",
                         message_zh=f"慢节点：rank {rank} 的 {where} 阶段偏慢（{last.seconds:.3g} 秒，"
                                    f"其他 rank 中位数 {last.others_s:.3g} 秒，{last.ratio:.1f} 倍），"
                                    f"最近 {len(self._history)} 步中有 {hits} 步如此；"
                                    f"整个进程组每步为它多等约 {lost:.2g} 秒")
