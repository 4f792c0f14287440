"""Length hacking: responses grow longer to earn reward, or run into the length limit (001 Q6).

Failure mode: the reward model prefers longer answers, so the policy pads: the mean length grows
steadily and does not converge even when the reward stops rising; answers hit the maximum length
and are truncated (the model "does not want to stop"); a minority becomes abnormally long.
Signal, key "length": ``response/length_mean`` — a Mann–Kendall trend over the last
``trend_window`` (30) steps with the relative growth between the medians of its first and last 5
values, or the mean of the last ``recent`` (3) steps as a robust z against the ``window`` (20)
steps before (a fast rise).
Key "collapse": the mean length below ``collapse_frac`` (0.2) × its early level (median of the
first 3 values that did not collapse; judged from the second value on: 017 collapses at its
second logged step) for 2 steps in a row → orange; where the run's own noise reaches that level
(a share p of its last 500 steps outside the current streak, judged from 20 on), for the k steps in a row with
p**k ≤ ``collapse_chance`` (1e-4): MiniMind's 4-answer batches swing 17–500 tokens, 5% of their
steps below 20% of the early level, so k = 4 there — the opposite failure, a policy that stops
answering (real runs: 011 1,759 → 1 token, 017 53 → 3 tokens; the healthy-labelled runs keep
≥ 45% of their early length, the tiny world's ≥ 67%).
Key "truncation": ``response/truncated_frac`` — its recent mean against the reference median.
Key "distribution" (samples): this step's sample lengths against the pooled lengths of the
reference steps: a two-sample KS test with the median shifted right, a long tail (share of
lengths above ``tail_factor`` × the reference 95th percentile), or a second mode appearing (Sarle's
bimodality coefficient crossing 5/9 while the reference stays below).
A rise (its recent mean, or the trend's last-5 median) must also pass the 95th percentile of the
run's last 500 lengths (from 50 on): back up to a level the run held before is noise (006's 20-step median dips to 96 tokens in a run whose
usual length is 210).
Default thresholds: "length" yellow when (trend z ≥ ``z_trend`` = 3 or fast z ≥ ``z_jump`` = 5)
and the growth ≥ ``growth`` (0.2), orange when the growth ≥ ``growth_orange`` (0.6);
"truncation" yellow when the recent truncated share ≥ ``trunc_min`` (0.15) and ≥ ``trunc_rise``
(0.1) above the reference. Growth into the length cap with more truncation stays yellow: the
healthy-labelled real run 002 (Qwen3.5-9B, GSM8K, 512-token cap) grows 358 → 512 tokens with
96% truncated while its reward converges to 1.0 — a cap too short for the task, which the
``levels`` detector names; the agentic run 023 grows 1,000 → 5,000 tokens (+400%: orange).
Practical significance: never red. Orange for a growth ≥ 60% of the run's own length (trend or fast
rise) and for a collapse below 20% of the early length for 2 steps (answers of 1–3 tokens: a policy
that stopped answering); a growth of 20–60%, truncation and a distribution change are yellow —
growth into the cap stays yellow even at 96% truncated (healthy run 002). The robust z's scale is
floored at 2% of the reference length; a reference length of 0 gives no ratio.
Scale assumptions: growth relative to the run's own level and noise (robust z, Mann–Kendall);
truncation a share of responses. "distribution" yellow when KS p < ``ks_p`` (1e-4) with D ≥ ``ks_d`` (0.25) and the
median ≥ 1.2× the reference median, or the tail share ≥ ``tail_share`` (0.1), or the bimodality
coefficient crosses 5/9 from a reference median below 5/9 − 0.15 — each for ``dist_steps`` (3)
steps in a row. Judged after ``warmup`` (10) reference steps. Calibration: on the healthy
tiny-world runs the 30-step trend Z stayed ≤ 2.9 and the growth ≤ 14% at that Z; the
``length_reward`` fault grows the tiny model's answers only from 12 to 14–15 tokens (the 24-token
limit), reaching Z 3.2 and +21% at 55 steps after its onset.
False positives: a curriculum moving to harder prompts (longer answers are right); a changed
``rollout/max_new_tokens`` (truncation moves with it).
Fix: add a length penalty or normalise the reward by length, retrain the reward model with
length-controlled pairs, strengthen the KL constraint; check the truncated samples' endings.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from rlcockpit.config import Config, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.stats import (
    BC_UNIFORM,
    Lagged,
    bimodality_coefficient,
    sample_values,
)
from rlcockpit.diagnostics.windows import (
    Streak,
    Window,
    band_exit,
    mann_kendall,
    median,
    quantile,
    relative_growth,
)
from rlcockpit.metrics.ks import ks_test


@dataclass(frozen=True)
class LengthHackingConfig(Config):
    z_trend: float = option(3.0, help="Mann–Kendall Z of the length that counts as a rising trend.",
                            range=(0.5, 1e6))
    z_jump: float = option(5.0, help="Robust z of the recent mean length that counts as a fast "
                           "rise.", range=(1.0, 1e6))
    growth: float = option(0.2, help="Relative growth needed for yellow (0.2 = +20%).",
                           range=(0.0, 1e6))
    growth_orange: float = option(0.6, help="Relative growth that makes it orange.",
                                  range=(0.0, 1e6))
    trend_window: int = option(30, help="Steps of the trend test.", range=(5, 10_000))
    window: int = option(20, help="Reference window (steps before the recent ones).",
                         range=(3, 10_000))
    recent: int = option(3, help="Steps averaged as the current level.", range=(1, 100))
    warmup: int = option(10, help="Reference steps needed before judging.", range=(3, 10_000))
    trunc_min: float = option(0.15, help="Truncated share needed for the truncation condition.",
                              range=(0.0, 1.0))
    trunc_rise: float = option(0.1, help="... and its rise over the reference median.",
                               range=(0.0, 1.0))
    ks_p: float = option(1e-4, help="Distribution: KS p-value below which lengths shifted.",
                         range=(0.0, 1.0))
    ks_d: float = option(0.25, help="Distribution: smallest KS statistic D.", range=(0.0, 1.0))
    tail_factor: float = option(2.0, help="Distribution: 'long' is above this × the reference "
                                "95th percentile.", range=(1.0, 1e6))
    tail_share: float = option(0.1, help="Distribution: share of long samples that counts.",
                               range=(0.0, 1.0))
    dist_steps: int = option(3, help="Distribution: steps in a row the shape change must hold.",
                             range=(1, 1000))
    collapse_frac: float = option(0.2, help="Collapse: the mean length below this × its early "
                                  "level (median of the first `early_steps` values) ...",
                                  range=(0.0, 1.0))
    collapse_steps: int = option(2, help="... for this many steps in a row.", range=(1, 1000))
    early_steps: int = option(3, help="Collapse: values whose median is the early level.",
                              range=(1, 1000))
    collapse_history: int = option(500, help="Collapse: recent values (outside a collapse) that "
                                   "say how often the run's own noise reaches the collapse level.",
                                   range=(10, 1_000_000))
    collapse_chance: float = option(1e-4, help="Collapse: a run whose noise reaches the level in a "
                                    "share p of its steps needs a streak k with p**k at most this.",
                                    range=(1e-12, 0.5))


@register
class LengthHacking(Detector):
    name = "length_hacking"
    family = "length_hacking"
    reads = ("response/length_mean", "response/truncated_frac")
    reads_samples = True
    patterns = ("length_hacking", "truncation_rise")
    signal = "response length"
    Config = LengthHackingConfig

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        return "response/length_mean" in names or samples

    def __init__(self, config: LengthHackingConfig | None = None) -> None:
        super().__init__(config)
        cfg = self.config
        self._length = Lagged(cfg.window, cfg.recent)
        self._trend = Window(cfg.trend_window)
        self._trunc = Lagged(cfg.window, cfg.recent)
        self._dist = LengthShape(cfg)
        self._early: list[float] = []
        self._shrunk = Streak()
        self._history: deque[float] = deque(maxlen=self.config.collapse_history)

    def update(self, view: StepView) -> list[Condition] | object:
        if view.get("response/length_mean") is None and not view.samples:
            return SKIPPED
        cfg = self.config
        self._length.push(view.finite("response/length_mean"), view.step)
        self._trend.push(view.finite("response/length_mean"), view.step)
        self._trunc.push(view.finite("response/truncated_frac"), view.step)
        trunc = self._truncation() if self._trunc.ready(cfg.warmup) else None
        length = self._growth(trunc is not None) if self._length.ready(cfg.warmup) else None
        dist = self._dist.update(view)
        collapse = self._collapse(view)
        return [c for c in (length, trunc, dist, collapse) if c is not None]

    def _collapse(self, view: StepView) -> Condition | None:
        """The answers shrank to a fraction of their early length (key "collapse")."""
        cfg = self.config
        value = view.finite("response/length_mean")
        if value is None:
            return None
        if not self._early:
            self._early.append(value)
            return None
        early = median(self._early)
        shrunk = value < cfg.collapse_frac * early
        if not shrunk and len(self._early) < cfg.early_steps:
            self._early.append(value)  # the early level: the first values that did not collapse
        held = self._shrunk.update(shrunk, view.step)
        need, chance = self._streak_needed(cfg.collapse_frac * early, held)
        self._history.append(value)
        if held < need:
            return None
        evidence = {"length_now": value, "length_early": early, "share": value / early,
                    "threshold": cfg.collapse_frac, "steps": held, "steps_needed": need,
                    "noise_share_below": chance, "signal": "response length",
                    "onset_step": self._shrunk.onset}
        return Condition("orange", f"responses collapsed to {value:.3g} tokens, {value / early:.0%} "
                         f"of their early length {early:.3g}, for {held} steps: the policy may "
                         "have degenerated (empty or one-token answers)", evidence, key="collapse",
                         message_zh=f"回答长度坍缩至 {value:.3g}（早期 {early:.3g} 的 "
                                    f"{value / early:.0%}），已持续 {held} 步：策略可能已退化")

    def _streak_needed(self, level: float, held: int) -> tuple[int, float]:
        """Steps in a row a collapse must hold: ``collapse_steps``, or more where the run's own
        noise reaches ``level`` (a batch of 4 answers swings 17–500 tokens: two low steps in a row
        are chance there). With a share p of the last ``collapse_history`` values below the level
        (judged from 20 values on), k is the smallest streak with p**k at most
        ``collapse_chance``. The current streak's earlier values are not the run's noise."""
        cfg = self.config
        streak = max(held - 1, 0)
        n = len(self._history) - streak
        below = sum(1 for v in self._history if v < level) - streak if n >= 20 else 0
        if below <= 0:
            return cfg.collapse_steps, 0.0
        p = below / n
        return max(cfg.collapse_steps, math.ceil(math.log(cfg.collapse_chance) / math.log(p))), p

    def _seen_before(self, now: float) -> bool:
        """A rise back to a level the run held before is its noise, not a rise: ``now`` at or
        below the 95th percentile of the last ``collapse_history`` values (from 50 values on; a
        20-step window of a 4-answer batch can sit at half the run's usual length)."""
        history = self._history
        return len(history) >= 50 and now <= quantile(np.fromiter(history, float), 0.95)

    def _growth(self, truncating: bool) -> Condition | None:
        cfg = self.config
        ref = self._length.median
        now = float(self._length.recent.mean())
        z = self._length.z(max(0.02 * abs(ref), 1e-9))
        trend = mann_kendall(self._trend.values) if self._trend.full else None
        trend_growth = relative_growth(self._trend.values, k=5) if trend is not None else 0.0
        fast_growth = now / ref - 1.0 if ref > 0 else 0.0
        rising = (trend is not None and trend.z >= cfg.z_trend and trend_growth >= cfg.growth
                  and not self._seen_before(median(self._trend.values[-5:])))
        jumped = z >= cfg.z_jump and fast_growth >= cfg.growth and not self._seen_before(now)
        if not (rising or jumped):
            return None
        growth = max(trend_growth if rising else 0.0, fast_growth if jumped else 0.0)
        if rising and trend_growth >= fast_growth:  # show the trend's own start and end levels
            values = self._trend.values
            ref, now = median(values[:5]), median(values[-5:])
        severity = "orange" if growth >= cfg.growth_orange else "yellow"
        # onset: where the length left its band (stayed above start + 20% of the rise), not the
        # start of the trend window
        onset = (band_exit(self._trend.values, self._trend.steps, ref + 0.2 * (now - ref))
                 or int(self._trend.steps[-1])) if rising else self._length.onset(lambda v: v > ref)
        evidence = {"length_now": now, "length_reference": ref, "growth": growth,
                    "trend_z": trend.z if trend else None, "trend_window": cfg.trend_window,
                    "z": z, "growth_threshold": cfg.growth, "truncating": truncating,
                    "signal": "response length", "onset_step": onset}
        return Condition(severity, f"response length grew {growth:+.0%} (now {now:.1f}, was "
                         f"{ref:.1f}){' with more truncation' if truncating else ''}", evidence,
                         key="length", message_zh=f"回答长度增长 {growth:+.0%}（现在 {now:.1f}，"
                         f"此前 {ref:.1f}）")

    def _truncation(self) -> Condition | None:
        cfg = self.config
        ref = self._trunc.median
        now = float(self._trunc.recent.mean())
        if now < cfg.trunc_min or now - ref < cfg.trunc_rise:
            return None
        evidence = {"truncated_frac": now, "reference": ref, "threshold": cfg.trunc_min,
                    "rise_threshold": cfg.trunc_rise, "signal": "truncation",
                    "onset_step": self._trunc.onset(lambda v: v - ref >= cfg.trunc_rise)}
        return Condition("yellow", f"{now:.0%} of responses truncated at the length limit (was "
                         f"{ref:.0%})", evidence, key="truncation",
                         message_zh=f"{now:.0%} 的回答被截断（此前 {ref:.0%}）")


class LengthShape:
    """The sample part of :class:`LengthHacking`: this step's lengths against the reference."""

    def __init__(self, cfg: LengthHackingConfig) -> None:
        self.cfg = cfg
        self._pending: deque[np.ndarray] = deque(maxlen=cfg.recent)
        self._pool: deque[np.ndarray] = deque(maxlen=cfg.window)
        self._bcs: deque[float] = deque(maxlen=cfg.window)
        self._streak = Streak()

    def update(self, view: StepView) -> Condition | None:
        lengths = sample_values(view.samples, "length")
        if lengths.size < 8 or not np.any(lengths > 0):
            return None  # no samples (or no lengths recorded): the distribution part is skipped
        found = self._judge(lengths) if len(self._pool) >= self.cfg.warmup else None
        if len(self._pending) == self._pending.maxlen:
            self._pool.append(self._pending[0])
            self._bcs.append(bimodality_coefficient(self._pending[0]))
        self._pending.append(lengths)
        held = self._streak.update(found is not None, view.step)
        if found is None or held < self.cfg.dist_steps:
            return None
        found.update(signal="length distribution", onset_step=self._streak.onset, steps=held)
        return Condition("yellow", f"response length distribution changed: {found['why']}",
                         found, key="distribution",
                         message_zh=f"回答长度分布变化：{found['why']}")

    def _judge(self, lengths: np.ndarray) -> dict | None:
        cfg = self.cfg
        ref = np.concatenate(list(self._pool))
        med, ref_med = median(lengths), median(ref)
        p95 = quantile(ref, 0.95)
        tail = float(np.mean(lengths > cfg.tail_factor * p95))
        bc = bimodality_coefficient(lengths)
        bcs = [b for b in self._bcs if math.isfinite(b)]
        ref_bc = median(bcs) if bcs else math.nan
        bimodal = math.isfinite(bc) and bc > BC_UNIFORM and ref_bc < BC_UNIFORM - 0.15
        if med < 1.2 * ref_med and tail < cfg.tail_share and not bimodal:
            return None  # no rule can hold: the KS test (the costly part) is not run
        d, p = ks_test(lengths, ref)
        evidence = {"ks_d": d, "ks_p": p, "median": med, "reference_median": ref_med,
                    "tail_share": tail, "reference_p95": p95, "bimodality": bc,
                    "reference_bimodality": ref_bc}
        if p < cfg.ks_p and d >= cfg.ks_d and med >= 1.2 * ref_med:
            return {**evidence, "why": f"median {med:.0f} vs {ref_med:.0f} (KS p {p:.1e})"}
        if tail >= cfg.tail_share:
            return {**evidence, "why": f"{tail:.0%} of lengths above {cfg.tail_factor:g}× the "
                    f"reference 95th percentile {p95:.0f}"}
        if bimodal:
            return {**evidence, "why": f"bimodal (coefficient {bc:.2f}, reference {ref_bc:.2f})"}
        return None
