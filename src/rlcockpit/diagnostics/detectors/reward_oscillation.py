"""Reward oscillation: the reward rises, falls and rises again periodically (001 Q18).

Failure mode: an "overshoot and correct" cycle (001 Q18) — a too-high actor learning rate jumping
over the optimum and back, a critic lagging the policy, a prompt stream that cycles through
categories, or an adaptive KL coefficient reacting too slowly. The mean reward goes nowhere while
each half-period undoes the last.
Signal: ``reward/mean`` over the last ``window`` (60) steps, linearly detrended; its
autocorrelation function up to lag ``window`` / 3. An oscillation is a local ACF peak at a lag
(the period) ≥ ``min_lag`` (2) with a trough below zero before it, and a sinusoid of that period
fitted by least squares whose amplitude stands out of the residual noise.
Default thresholds: yellow when the ACF peak ≥ ``acf_min`` (0.4; the ACF's noise is about
1/√60 ≈ 0.13), the trough ≤ −``trough`` (0.2), the amplitude ≥ ``amp_ratio`` (0.8) × the
residual standard deviation, for ``steps`` (3) evaluations in a row with the period within ±1.
Judged once ``min_steps`` (40) values are in the window.
Practical significance: yellow only — an oscillating reward wastes compute, it breaks nothing. No
z-score: an autocorrelation peak ≥ 0.4 after a trough ≤ −0.2 (its noise ~0.13 on 60 steps) and a
fitted amplitude ≥ 0.8 × the residual spread, for 3 evaluations in a row; a flat series has an
autocorrelation of 0 and gives no period.
Scale assumptions: none — autocorrelation and the fitted amplitude relative to the series' own
spread.
False positives: a prompt stream that really cycles by design (curriculum rounds); periodic
evaluation steps logged into the training reward.
Fix: look at whether the period matches the data order, the KL controller's horizon or the
critic's lag; lower the actor learning rate first (001 Q18), shuffle the prompt stream, slow
the adaptive β.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlcockpit.config import Config, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.windows import Window


@dataclass(frozen=True)
class RewardOscillationConfig(Config):
    window: int = option(60, help="Steps of reward/mean analysed.", range=(12, 10_000))
    min_steps: int = option(40, help="Values needed before judging.", range=(12, 10_000))
    min_lag: int = option(2, help="Shortest period (steps) counted.", range=(2, 10_000))
    acf_min: float = option(0.4, help="Smallest autocorrelation at the period.", range=(0.0, 1.0))
    trough: float = option(0.2, help="The ACF must dip below minus this before the peak.",
                           range=(0.0, 1.0))
    amp_ratio: float = option(0.8, help="Smallest amplitude of the fitted sinusoid relative to "
                              "the residual standard deviation.", range=(0.0, 1e6))
    steps: int = option(3, help="Evaluations in a row with the same period (±1).",
                        range=(1, 1000))


def detrend(x: np.ndarray) -> np.ndarray:
    """The series minus its least-squares line."""
    t = np.arange(x.size, dtype=float)
    coef = np.polyfit(t, x, 1)
    return x - np.polyval(coef, t)


def acf(x: np.ndarray, max_lag: int) -> np.ndarray:
    """Autocorrelation r_k = Σ x_t x_{t+k} / Σ x_t² of a centred series for k = 0..max_lag."""
    c = x - x.mean()
    denom = float(np.dot(c, c))
    if denom <= 0:
        return np.zeros(max_lag + 1)
    return np.asarray([float(np.dot(c[: c.size - k], c[k:])) / denom
                       for k in range(max_lag + 1)])


def sinusoid_fit(x: np.ndarray, period: float) -> tuple[float, float]:
    """(amplitude, residual std) of a least-squares fit a·sin + b·cos + c at ``period`` steps."""
    t = np.arange(x.size, dtype=float)
    w = 2.0 * np.pi / period
    design = np.column_stack([np.sin(w * t), np.cos(w * t), np.ones_like(t)])
    coef, *_ = np.linalg.lstsq(design, x, rcond=None)
    residual = x - design @ coef
    return float(np.hypot(coef[0], coef[1])), float(residual.std())


def find_period(r: np.ndarray, min_lag: int, acf_min: float, trough: float) -> int | None:
    """The first lag ≥ min_lag where the ACF has a local peak ≥ acf_min after a dip ≤ −trough."""
    for k in range(max(min_lag, 1), r.size - 1):
        if r[k] >= acf_min and r[k] >= r[k - 1] and r[k] >= r[k + 1] \
                and float(r[1:k].min()) <= -trough:
            return k
    return None


@register
class RewardOscillation(Detector):
    name = "reward_oscillation"
    family = "reward_oscillation"
    reads = ("reward/mean",)
    patterns = ("reward_oscillation",)
    signal = "reward"
    Config = RewardOscillationConfig

    def __init__(self, config: RewardOscillationConfig | None = None) -> None:
        super().__init__(config)
        self._values = Window(self.config.window)
        self._held = 0
        self._period: int | None = None

    def update(self, view: StepView) -> Condition | object | None:
        if view.get("reward/mean") is None:
            return SKIPPED
        self._values.push(view.finite("reward/mean"), view.step)
        found = self._judge() if len(self._values) >= self.config.min_steps else None
        if found is None:
            self._held, self._period = 0, None
            return None
        same = self._period is not None and abs(found["period"] - self._period) <= 1
        self._held = self._held + 1 if same else 1
        self._period = found["period"]
        if self._held < self.config.steps:
            return None
        period, amp = found["period"], found["amplitude"]
        found.update(signal="reward", onset_step=int(self._values.steps[0]), steps=self._held,
                     window=len(self._values))
        return Condition("yellow", f"reward oscillates with a period of {period} steps "
                         f"(amplitude {amp:.3g}, autocorrelation {found['acf']:.2f})", found,
                         message_zh=f"奖励周期性振荡：周期 {period} 步，振幅 {amp:.3g}")

    def _judge(self) -> dict | None:
        cfg = self.config
        x = detrend(self._values.values)
        r = acf(x, max(len(x) // 3, cfg.min_lag + 1))
        period = find_period(r, cfg.min_lag, cfg.acf_min, cfg.trough)
        if period is None:
            return None
        amplitude, noise = sinusoid_fit(x, period)
        if amplitude < cfg.amp_ratio * max(noise, 1e-12):
            return None
        return {"period": period, "acf": float(r[period]), "trough": float(r[1:period].min()),
                "amplitude": amplitude, "residual_std": noise, "acf_threshold": cfg.acf_min,
                "amp_ratio_threshold": cfg.amp_ratio}
