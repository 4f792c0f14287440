"""Baseline: the run leaves the range of a healthy run of the same recipe at the same steps.

Failure mode: a failure present from the first step — a learning rate too high, β far too large,
a sampling temperature collapsed, a reward scaled or biased, a reference that is not the SFT model,
too many PPO epochs — or any failure, judged against a run known to be good rather than against
the run's own history. Every other detector compares the run with its own past, so a run broken
from step 1 looks normal to them; an RL engineer compares it with the last good run of the recipe.
Runs only when ``diagnostics.baseline`` names such a run (``STORE_URI#RUN_ID``; another seed of
the same config): without one it is skipped, and the coverage table says so.

Signal: one ``key`` per metric. Scale quantities — KL to the reference per token
(``kl/token_mean``, else per sequence ``kl/mean``), ``policy/approx_kl``, ``policy/clip_frac``,
``policy/entropy``, ``reward/std``, ``value/loss``, ``grad/norm/actor``, ``grad/norm/critic``,
``response/length_mean`` — are judged as ratios: the median of the run's last ``recent`` steps
against the range (min–max) of the baseline's values within ``window`` steps either side of the
current step. ``reward/mean`` is judged as a shift: the mean of the run's last ``recent`` steps
minus the baseline's mean over the same steps, in units of the baseline's step-to-step noise
(1.4826 × the median absolute difference of consecutive steps / √2, over its window) — a
reward model whose bias moved, or a reward scaled, moves it with no other sign.

Default thresholds: from step ``recent`` on (5), with at least 5 baseline values in the window
(± ``window`` = 10 steps). Yellow when a ratio is ≥ ``ratio_yellow`` = 2 beyond the baseline's
range (above its maximum or below its minimum), orange at ≥ ``ratio_orange`` = 10; reward mean
yellow at a shift of ≥ ``shift_yellow`` = 5 noise units, orange at ≥ ``shift_orange`` = 20. Never
red: a difference from another run is a reason to look, not to stop a run. Calibrated on the
tiny world (docs/detection.md): healthy runs of seeds 100–104 against the healthy run of seed 0
of the same config, 200 steps each — the seeds agree within ×1.5 on every ratio metric over the
first 20 steps, while a learning rate ×3 from step 1 moves ``policy/approx_kl`` ×8, β = 10 moves
the KL ×0.09, a temperature of 0.6 the entropy ×0.29, six PPO epochs ``policy/approx_kl`` ×28.

Practical significance: never red — each finding is a difference from another run of the same
recipe, a reason to look rather than a consequence in the metric's own units. Yellow at
``ratio_yellow`` (2) × beyond the baseline's range or ``shift_yellow`` (5) noise units, orange at
``ratio_orange`` (10) × or ``shift_orange`` (20) units. The reward shift is a z-score in the
baseline's step noise: a noise of exactly 0 is not judged, but there is no floor above 0; a ratio
needs a baseline bound above 0.

Scale assumptions: none in absolute units — every threshold is a ratio to, or a shift in the noise
of, the baseline run itself. The baseline must be the same recipe (model, data, batch size,
response length, algorithm); a baseline of another scale or task makes every metric "different".
Steps are matched by number: a baseline shorter than the run judges nothing after its last step.

False positives: a baseline of another config (a changed batch size changes ``reward/std`` noise
and ``grad/norm`` scale); a run that is deliberately different (a new learning rate tried on
purpose — the finding says what moved, which is what the comparison is for); runs whose seeds
diverge by more than the thresholds late in training (long runs: compare early steps, or pick a
baseline seed closer in time).

Fix: read which metric left the baseline and at which step; compare the two runs' configs
(``rlcockpit compare``) — the learning rate, β, temperature, PPO epochs, reward scale, the
reward model's and the reference model's checkpoints. If the difference is intended, the finding
is the measured effect of the change.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from rlcockpit.config import Config, check, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.baseline import RATIO_METRICS, SHIFT_METRICS, Baseline
from rlcockpit.diagnostics.registry import register

MIN_BASE = 5  # baseline values needed in the window
_LABELS = {"kl/token_mean": "KL", "kl/mean": "KL", "policy/approx_kl": "update size",
           "policy/clip_frac": "clip fraction", "policy/entropy": "entropy",
           "reward/std": "reward spread", "value/loss": "value loss",
           "grad/norm/actor": "actor gradient", "grad/norm/critic": "critic gradient",
           "response/length_mean": "response length", "reward/mean": "reward"}
_LABELS_ZH = {"kl/token_mean": "KL", "kl/mean": "KL", "policy/approx_kl": "更新幅度",
              "policy/clip_frac": "裁剪比例", "policy/entropy": "熵", "reward/std": "奖励离散度",
              "value/loss": "价值损失", "grad/norm/actor": "策略梯度", "grad/norm/critic": "价值梯度",
              "response/length_mean": "回答长度", "reward/mean": "奖励"}


@dataclass(frozen=True)
class BaselineConfig(Config):
    window: int = option(10, help="Baseline steps either side of the current step that form its "
                         "range.", range=(1, 10_000))
    recent: int = option(5, help="The run's last steps judged together (median; mean for the "
                         "reward).", range=(1, 1000))
    ratio_yellow: float = option(2.0, help="Yellow: this many times beyond the baseline's range.",
                                 range=(1.0, 1e9))
    ratio_orange: float = option(10.0, help="Orange: this many times beyond the baseline's range.",
                                 range=(1.0, 1e9))
    shift_yellow: float = option(5.0, help="Yellow: reward-mean shift in baseline noise units.",
                                 range=(0.0, 1e9))
    shift_orange: float = option(20.0, help="Orange: reward-mean shift in baseline noise units.",
                                 range=(0.0, 1e9))

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.ratio_orange >= self.ratio_yellow, "diagnostics.detectors.baseline.ratio_orange",
              self.ratio_orange, f"must be ≥ ratio_yellow ({self.ratio_yellow})")
        check(self.shift_orange >= self.shift_yellow, "diagnostics.detectors.baseline.shift_orange",
              self.shift_orange, f"must be ≥ shift_yellow ({self.shift_yellow})")


@register
class BaselineDetector(Detector):
    name = "baseline"
    family = "baseline"
    reads = (*RATIO_METRICS, *SHIFT_METRICS)
    patterns = ()
    signal = "baseline run"
    Config = BaselineConfig

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        return False  # it needs a baseline run (diagnostics.baseline), which no log carries

    def __init__(self, config: BaselineConfig | None = None) -> None:
        super().__init__(config)
        self.baseline: Baseline | None = None
        self._recent: dict[str, deque[tuple[int, float]]] = {}
        self._onset: dict[str, int] = {}

    def set_baseline(self, baseline: Baseline | None) -> None:
        self.baseline = baseline

    def update(self, view: StepView) -> list[Condition] | object:
        if self.baseline is None:
            return SKIPPED
        for m in (*RATIO_METRICS, *SHIFT_METRICS):
            v = view.finite(m)
            if v is not None:
                self._recent.setdefault(m, deque(maxlen=self.config.recent)).append((view.step, v))
        kl = "kl/token_mean" if "kl/token_mean" in self._recent else "kl/mean"
        out: list[Condition] = []
        for m in RATIO_METRICS:
            if m.startswith("kl/") and m != kl:
                continue
            out.extend(self._mark(m, view.step, self._ratio(m, view.step)))
        for m in SHIFT_METRICS:
            out.extend(self._mark(m, view.step, self._shift(m, view.step)))
        return out

    def _mark(self, m: str, step: int, cond: Condition | None) -> list[Condition]:
        if cond is None:
            self._onset.pop(m, None)
            return []
        onset = self._onset.setdefault(m, self._recent[m][0][0])
        ev = {**cond.evidence, "onset_step": onset}
        return [Condition(cond.severity, cond.message, ev, key=cond.key, message_zh=cond.message_zh)]

    def _ready(self, m: str, step: int) -> list[tuple[int, float]] | None:
        recent = self._recent.get(m)
        if not recent or len(recent) < self.config.recent or recent[-1][0] != step:
            return None
        return list(recent)

    def _ratio(self, m: str, step: int) -> Condition | None:
        cfg, base = self.config, self.baseline
        recent = self._ready(m, step)
        if recent is None or base is None:
            return None
        ref = base.window(m, step, cfg.window)
        if len(ref) < MIN_BASE:
            return None
        value = statistics.median(v for _, v in recent)
        lo, hi = min(ref), max(ref)
        if hi > 0 and value > hi * cfg.ratio_yellow:
            ratio, side = value / hi, "above"
        elif lo > 0 and value < lo / cfg.ratio_yellow:
            ratio, side = (lo / value if value > 0 else math.inf), "below"
        else:
            return None
        severity = "orange" if ratio >= cfg.ratio_orange else "yellow"
        label, label_zh = _LABELS[m], _LABELS_ZH[m]
        times = f"{ratio:.3g}×" if math.isfinite(ratio) else "far"
        msg = (f"{label} ({m}) {value:.3g} is {times} {side} the baseline run {base.label} "
               f"({lo:.3g}–{hi:.3g} at steps {max(step - cfg.window, 0)}–{step + cfg.window})")
        msg_zh = (f"{label_zh}（{m}）{value:.3g}，{'高于' if side == 'above' else '低于'}基线运行 "
                  f"{base.label} 同期范围（{lo:.3g}–{hi:.3g}）{times}")
        ev = {"metric": m, "value": value, "baseline_min": lo, "baseline_max": hi,
              "ratio": ratio if math.isfinite(ratio) else None, "side": side,
              "baseline": base.label, "recent_steps": [s for s, _ in recent],
              "threshold": cfg.ratio_orange if severity == "orange" else cfg.ratio_yellow,
              "signal": label}
        return Condition(severity, msg, ev, key=m, message_zh=msg_zh)

    def _shift(self, m: str, step: int) -> Condition | None:
        cfg, base = self.config, self.baseline
        recent = self._ready(m, step)
        if recent is None or base is None:
            return None
        ref = base.window(m, step, cfg.window)
        same = [v for v in (_at(base, m, s) for s, _ in recent) if v is not None]
        if len(ref) < MIN_BASE or len(same) < len(recent):
            return None
        noise = _step_noise(ref)
        if noise <= 0:
            return None
        mine = statistics.fmean(v for _, v in recent)
        theirs = statistics.fmean(same)
        z = (mine - theirs) / (noise * math.sqrt(2.0 / len(recent)))
        if abs(z) < cfg.shift_yellow:
            return None
        severity = "orange" if abs(z) >= cfg.shift_orange else "yellow"
        side = "above" if z > 0 else "below"
        msg = (f"reward ({m}) {mine:.3g} is {abs(z):.0f} noise units {side} the baseline run "
               f"{base.label} at the same steps ({theirs:.3g}; its step noise {noise:.2g})")
        msg_zh = (f"奖励（{m}）{mine:.3g}，{'高于' if z > 0 else '低于'}基线运行 {base.label} "
                  f"同期（{theirs:.3g}）{abs(z):.0f} 个噪声单位")
        ev = {"metric": m, "value": mine, "baseline_mean": theirs, "noise": noise, "z": z,
              "side": side, "baseline": base.label, "recent_steps": [s for s, _ in recent],
              "threshold": cfg.shift_orange if severity == "orange" else cfg.shift_yellow,
              "signal": "reward"}
        return Condition(severity, msg, ev, key=m, message_zh=msg_zh)


def _at(base: Baseline, m: str, step: int) -> float | None:
    found = base.window(m, step, 0)
    return found[0] if found else None


def _step_noise(values: Sequence[float]) -> float:
    """Per-step noise of a series: 1.4826 × median |consecutive difference| / √2 (a trend cancels)."""
    diffs = [abs(b - a) for a, b in zip(values, values[1:], strict=False)]
    return 1.4826 * statistics.median(diffs) / math.sqrt(2.0) if diffs else 0.0
