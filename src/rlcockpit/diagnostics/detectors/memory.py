"""Memory growing steadily or spiking (001 Q21).

Failure mode: a leak (tensors kept in the graph, an experience buffer that never drops, a model
copied at checkpoint time) grows the memory step after step until the run dies with OOM; a spike
usually follows a jump in sequence length (the KV cache grows with it, 001 Q21).
Signal: ``sys/rss_gb`` and ``sys/gpu_mem_gb`` over the last ``window`` steps: the Theil–Sen slope
(robust to single spikes) projected over the window, with a Mann–Kendall test for a real rise;
the latest value against the window's median for spikes.
Default thresholds: growth when the projected rise over 50 steps exceeds max(10% of the median,
0.05 GB) with p < 0.01 → yellow (key "growth/<metric>"); spike when the value exceeds 1.5× the
window median (and by ≥ 0.1 GB) → orange (key "spike/<metric>"). Healthy tiny-world runs: RSS
0.53–0.56 GB, flat.
Practical significance: never red — memory matters as the headroom to an OOM, which this detector
does not know. A spike ≥ 1.5× the window median and ≥ 0.1 GB above it is orange; growth > 10% of the
median (and 0.05 GB) over 50 steps with a significant trend is yellow. No z-score: ratios to the
median with GB floors, so allocator noise over a flat history is no finding.
Scale assumptions: growth and spikes relative to the metric's own median; the GB floors (0.05,
0.1) only keep allocator noise out and are small at any device size.
False positives: caches filling once at the start (allocator warm-up; the window starts after
``min_steps``); a deliberate increase of the batch size or max length.
Fix: look at the response-length distribution first (001 Q21); then memory summaries for kept
tensors; detach logged tensors; bound the buffers.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlcockpit.config import Config, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.windows import Window, band_exit, mann_kendall, median, theil_sen

_METRICS = ("sys/rss_gb", "sys/gpu_mem_gb")


@dataclass(frozen=True)
class MemoryConfig(Config):
    window: int = option(50, help="Steps judged for growth and as the spike reference.",
                         range=(5, 100000))
    min_steps: int = option(5, help="Steps skipped at the start (allocator warm-up).",
                            range=(0, 100000))
    growth_frac: float = option(0.1, help="Yellow when the projected rise over the window exceeds "
                                "this fraction of the median ...", range=(0.0, 1e6))
    growth_gb: float = option(0.05, help="... and this many GB.", range=(0.0, 1e6))
    p_max: float = option(0.01, help="Mann–Kendall p-value below which the rise is real.",
                          range=(1e-12, 0.5))
    spike_ratio: float = option(1.5, help="Orange when the value exceeds this × window median ...",
                                range=(1.0, 1e6))
    spike_gb: float = option(0.1, help="... and the median by this many GB.", range=(0.0, 1e6))


@register
class Memory(Detector):
    name = "memory"
    family = "system"
    reads = _METRICS
    patterns = ("memory_growth",)
    signal = "memory"
    Config = MemoryConfig

    def __init__(self, config: MemoryConfig | None = None) -> None:
        super().__init__(config)
        self._windows = {m: Window(self.config.window) for m in _METRICS}
        self._seen = dict.fromkeys(_METRICS, 0)

    def update(self, view: StepView) -> list[Condition] | object:
        if all(view.get(m) is None for m in _METRICS):
            return SKIPPED
        found = []
        for metric in _METRICS:
            value = view.finite(metric)
            if value is None:
                continue
            self._seen[metric] += 1
            if self._seen[metric] <= self.config.min_steps:
                continue
            found.append(self._spike(metric, value, view.step))
            self._windows[metric].push(value, view.step)
            found.append(self._growth(metric))
        return [c for c in found if c is not None]

    def _spike(self, metric: str, value: float, step: int) -> Condition | None:
        cfg = self.config
        window = self._windows[metric]
        if len(window) < 5:
            return None
        med = median(window.values)
        if value <= cfg.spike_ratio * med or value - med < cfg.spike_gb:
            return None
        evidence = {"metric": metric, "value_gb": value, "median_gb": med,
                    "ratio": value / med if med else None, "signal": "memory",
                    "onset_step": step}
        return Condition("orange", f"{metric} spiked to {value:.2f} GB (median {med:.2f} GB)",
                         evidence, key=f"spike/{metric}",
                         message_zh=f"{metric} 突增至 {value:.2f} GB（中位数 {med:.2f} GB）")

    def _growth(self, metric: str) -> Condition | None:
        cfg = self.config
        window = self._windows[metric]
        if not window.full:
            return None
        values = window.values
        med = median(values)
        rise = theil_sen(values) * (len(values) - 1)
        if rise <= max(cfg.growth_frac * med, cfg.growth_gb):
            return None
        p = mann_kendall(values).p
        if p >= cfg.p_max:
            return None
        evidence = {"metric": metric, "rise_gb": rise, "median_gb": med, "p_value": p,
                    "window": cfg.window, "signal": "memory",
                    "onset_step": band_exit(values, window.steps, med) or int(window.steps[-1])}
        return Condition("yellow", f"{metric} growing steadily: +{rise:.2f} GB over "
                         f"{cfg.window} steps (now {values[-1]:.2f} GB)", evidence,
                         key=f"growth/{metric}",
                         message_zh=f"{metric} 持续增长：{cfg.window} 步内增加 {rise:.2f} GB")
