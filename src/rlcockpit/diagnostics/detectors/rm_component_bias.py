"""Reward-model component bias: one reward component moves while the others stay (000 §4.1).

Failure mode: one head of a multi-head reward model (or one rule reward) breaks — in seed 000
§4.1 the truthfulness head's FFN bias was reset to zero by a manual reset and its mean score fell
from 0.63 to 0.31 within minutes, while helpfulness and harmlessness were untouched. The policy
then optimises a wrong total reward.
Signal: each component's ``reward/<component>/mean`` — the mean of its last ``recent`` (2) steps
as a robust z-score against its previous ``window`` (20) steps; when samples carry components,
also a two-sample KS test of this step's component values against the pooled reference samples.
Default thresholds: orange when |z| ≥ ``z_jump`` (6), or when the KS test gives p < ``ks_p``
(1e-6) with D ≥ ``ks_d`` (0.4) and |z| ≥ ``z_jump`` / 2, while the other components stay calm
(median |z| < ``z_others`` = 2); one condition per component (key = component name). The z scale is never below ``floor_frac``
(0.1) × the median ``reward/std`` (components share the reward's units), so a near-constant
component does not alarm on tiny wiggles. The reference freezes while the condition holds. The
samples are pooled as the KS reference from the first step on (not only once the level is judged),
so a shift at the end of the warm-up meets a clean pool.
A component constant over its whole reference (a spread of exactly 0) in a run that logs no
``reward/std`` to scale it by gives a z-score against a spread of 0, which is no evidence: such a
move is yellow (real run 025: a sparse 'attack' reward at 0 for 18 steps, then 0.125).
Orange needs the whole distribution to move: when samples carry the component and the quartile on
the far side of the move (the 25th percentile for a rise, the 75th for a fall) moved less than
``median_frac`` (0.5) × their mean's shift, the finding is yellow — a sparse
component that the policy learns to earn moves the mean alone (the healthy GRPO runs of seeds
100–104 raised four oranges when 'harmlessness', 0 on most samples, rose from ~0 to ~0.3), while a
biased or drifting head shifts every sample.
Slow drift (yellow, key ``<component>/drift``): a head whose bias creeps (0.015–0.05 per step)
moves the 2-step mean too little for the jump test until it is far off. The last ``drift_steps``
(8) means, each a robust z against the ``window`` before them, are summed by a one-sided CUSUM
(allowance ``drift_k`` 0.5): yellow at ``drift_h`` (6) when no single step jumped (|z| < ``z_jump``),
the other components' CUSUMs stay below half of it, and the far quartile of the drift's samples
moved with their mean. Round-4 calibration (seeds 100–304, 92 ramp runs replayed): ramps caught
before their metric moved 2× its healthy spread 38 → 42 on a 3-step mean; healthy 60 × 200 steps
68 → 90 yellows, no orange.
Calibration: on the recorded healthy tiny-world runs the largest |z| was 4.8 and the smallest KS
p-value 1.5e-5 (GRPO: 8 prompts per step, so the category mix moves the components). The
rm_component_bias fault run seed 2 (helpfulness −0.5 from step 10; robust sd of the reference 0.12,
so z only −3.3 to −6) is caught by the KS test at the onset.
Practical significance: never red: one component moving alone is a head to inspect. Orange when its
2-step mean jumps (robust z ≥ 6, or KS p < 1e-6 with D ≥ 0.4 and z ≥ 3) while the others stay calm
and, where samples tell, the whole distribution moved; a slow drift or a move of the mean alone is
yellow. The z scale is floored at 0.1 × the median ``reward/std``; a component constant over its
reference (MAD exactly 0) with no ``reward/std`` logged is yellow — a z against a spread of 0 is no
evidence — though without it a spread just above 0 has only a 1e-9 floor.
Scale assumptions: none in reward units — robust z-scores per component against its own
history (the scale floored at a fraction of its spread) and a two-sample KS test.
False positives: a real skill change that only one component measures (e.g. the policy learns
the format all at once: ``reward/format/mean`` jumps to 0); check the component's samples.
Fix: compare the component's scores on the same samples before and after (the evidence gives
both levels), restore the component's weights / bias from a healthy checkpoint, then resume.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from rlcockpit.config import Config, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.stats import Lagged, cusum
from rlcockpit.diagnostics.windows import Window, mad, median, quantile
from rlcockpit.metrics.ks import ks_test

NOT_COMPONENTS = frozenset({"raw", "uncertainty", "normalized", "category"})


@dataclass(frozen=True)
class RMComponentBiasConfig(Config):
    z_jump: float = option(6.0, help="Robust z of a component's recent mean that counts as a jump.",
                           range=(1.0, 1e6))
    z_others: float = option(2.0, help="The other components count as calm when their median |z| "
                             "is below this.", range=(0.0, 1e6))
    recent: int = option(2, help="Steps averaged as the component's current level.",
                         range=(1, 100))
    window: int = option(20, help="Reference window (steps before the recent ones).",
                         range=(3, 10_000))
    warmup: int = option(8, help="Reference steps needed before judging.", range=(3, 10_000))
    floor_frac: float = option(0.1, help="Smallest z scale, as a fraction of the median "
                               "reward/std.", range=(0.0, 10.0))
    ks_p: float = option(1e-6, help="KS p-value below which the component's sample distribution "
                         "shifted.", range=(0.0, 1.0))
    ks_d: float = option(0.4, help="Smallest KS statistic D counted as a shift.", range=(0.0, 1.0))
    median_frac: float = option(0.5, help="Orange only when the samples' quartile on the far side "
                                "of the move shifted at least this fraction of their mean's shift "
                                "(every sample moved); else yellow.", range=(0.0, 10.0))
    drift_steps: int = option(8, help="Slow drift: the last this many steps' means, each as a robust "
                              "z against the window before them, summed by a one-sided CUSUM.",
                              range=(2, 1000))
    drift_k: float = option(0.5, help="CUSUM allowance in z units (a step counts above this).",
                            range=(0.0, 100.0))
    drift_h: float = option(6.0, help="CUSUM sum at which a slow drift is reported (yellow).",
                            range=(0.1, 1e6))
    rebase_after: int = option(30, help="Steps of a lasting shift after which it becomes the new "
                               "reference.", range=(1, 100_000))


@dataclass
class _Component:
    level: Lagged
    drift: Lagged
    pool: deque = field(default_factory=deque)
    history: deque = field(default_factory=deque)  # per-step sample values, for the drift's quartile
    _reference: np.ndarray | None = None  # the pool concatenated (None: pool changed since)

    def reference(self) -> np.ndarray:
        if self._reference is None:
            self._reference = np.concatenate(list(self.pool)) if self.pool else np.empty(0)
        return self._reference

    def add_to_pool(self, values: np.ndarray) -> None:
        self.pool.append(values)
        self._reference = None

    def clear_pool(self) -> None:
        self.pool.clear()
        self._reference = None
    firing: int = 0


def component_names(view: StepView) -> list[str]:
    """Component names from ``reward/<component>/mean`` metrics (not raw / uncertainty / ...)."""
    out = []
    for name in view.matching("reward/"):
        parts = name.split("/")
        if len(parts) == 3 and parts[2] == "mean" and parts[1] not in NOT_COMPONENTS:
            out.append(parts[1])
    return sorted(out)


def logged_components(names: frozenset[str]) -> set[str]:
    """Component names among logged metric names (``reward/<component>/mean``, as
    :func:`component_names` reads them from a step)."""
    parts = [n.split("/") for n in names]
    return {p[1] for p in parts if len(p) == 3 and p[0] == "reward" and p[2] == "mean"
            and p[1] not in NOT_COMPONENTS}


def _component_values(view: StepView, name: str) -> np.ndarray:
    values = np.asarray([float(s.components[name]) for s in view.samples
                         if name in s.components], dtype=float)
    return values[np.isfinite(values)]


@register
class RMComponentBias(Detector):
    name = "rm_component_bias"
    family = "rm_component_bias"
    reads = ("reward/", "reward/std")
    reads_samples = True
    patterns = ("rm_component_bias",)
    signal = "reward component"
    Config = RMComponentBiasConfig

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        return len(logged_components(names)) >= 2 or samples

    def __init__(self, config: RMComponentBiasConfig | None = None) -> None:
        super().__init__(config)
        self._parts: dict[str, _Component] = {}
        self._std = Window(self.config.window)
        self._values: dict[str, np.ndarray] = {}  # this step's finite sample values per component

    def update(self, view: StepView) -> list[Condition] | object:
        names = component_names(view)
        if len(names) < 2:
            return SKIPPED  # one component is the total reward: nothing to compare it with
        floor = self.config.floor_frac * median(self._std.values) if len(self._std) \
            else 1e-6
        self._std.push(view.finite("reward/std"), view.step)
        self._values = {name: _component_values(view, name) for name in names}
        for name in names:
            self._push(name, view)
        zs = {n: self._z(n, floor) for n in names if self._parts[n].level.ready(self.config.warmup)}
        sums = self._cusums(names, floor)
        out = []
        for name in names:
            cond = self._judge(name, zs, view) if name in zs else None
            if cond is None:
                cond = self._drift(name, sums)
            self._track(name, cond is not None)
            self._pool(name, view)
            if cond is not None:
                out.append(cond)
        return out

    def _push(self, name: str, view: StepView) -> None:
        part = self._parts.get(name)
        if part is None:
            cfg = self.config
            part = self._parts[name] = _Component(Lagged(cfg.window, cfg.recent),
                                                  Lagged(cfg.window, cfg.drift_steps),
                                                  deque(maxlen=cfg.window),
                                                  deque(maxlen=cfg.window + cfg.drift_steps))
        value = view.finite(f"reward/{name}/mean")
        part.level.push(value, view.step)
        part.drift.push(value, view.step)
        samples = self._values[name]
        if samples.size:
            part.history.append(samples)

    def _z(self, name: str, floor: float) -> float:
        return self._parts[name].level.z(max(floor, 1e-9))

    def _judge(self, name: str, zs: dict[str, float], view: StepView) -> Condition | None:
        cfg = self.config
        z = zs[name]
        others = [abs(v) for n, v in zs.items() if n != name]
        calm = not others or median(others) < cfg.z_others
        if not calm or not abs(z) >= cfg.z_jump / 2:  # (a NaN z fails here, as it always did)
            return None
        ks = self._ks(name, view)  # only here: the costly part, and a shift needs |z| >= z_jump / 2
        shifted = ks is not None and ks[1] < cfg.ks_p and ks[0] >= cfg.ks_d
        if not (abs(z) >= cfg.z_jump or shifted):
            return None
        level = self._parts[name].level
        now = float(level.recent.mean())
        direction = "rose" if now > level.median else "fell"
        evidence = {"component": name, "mean_now": now, "reference_mean": level.median, "z": z,
                    "z_threshold": cfg.z_jump, "others_z": {n: v for n, v in zs.items()
                                                            if n != name},
                    "ks_d": ks[0] if ks else None, "ks_p": ks[1] if ks else None,
                    "window": cfg.window, "signal": f"reward/{name}/mean",
                    "onset_step": self._onset(level, view.step)}
        if not len(self._std) and mad(level.reference.values) == 0:
            # a component constant over its whole reference and no reward/std to scale it by: the
            # z is a ratio to a spread of 0 — no evidence (issue 26); a sparse component earned for
            # the first time (real run 025: 'attack' 0 for 18 steps, then 0.125, z 125,000)
            evidence = {**evidence, "reference_spread": 0.0}
            return Condition(
                "yellow", f"reward component {name!r} {direction} alone from a constant "
                f"{level.median:.3g} to {now:.3g} (its history has no spread, so no z-score can "
                "say how unusual this is): a component first earned, or a head that changed",
                evidence, key=name,
                message_zh=f"奖励分量 {name} 从恒定值 {level.median:.3g} 单独变为 {now:.3g}"
                "（历史无波动，无法用 z 分数判断）：可能是首次获得该分量，也可能是奖励头变化")
        spread = self._spread_only(name, view)
        if spread is not None:
            evidence = {**evidence, "sample_mean_shift": spread[0], "sample_quartile_shift": spread[1]}
            return Condition(
                "yellow", f"reward component {name!r} {direction} alone: mean {now:.3g} vs "
                f"{level.median:.3g} (z {z:+.1f}), but its far quartile did not move (shift "
                f"{spread[1]:+.3g} vs mean shift {spread[0]:+.3g}): more or fewer samples "
                "score on it — a skill learned or lost, not a biased head", evidence, key=name,
                message_zh=f"奖励分量 {name} 单独{'上升' if direction == 'rose' else '下降'}："
                f"均值 {now:.3g}（此前 {level.median:.3g}），但样本分布的另一侧未变：更像是能力变化，"
                "而非奖励头偏置")
        return Condition(
            "orange", f"reward component {name!r} {direction} alone: mean {now:.3g} vs "
            f"{level.median:.3g} (z {z:+.1f}) while the other components stayed", evidence,
            key=name, message_zh=f"奖励分量 {name} 单独{'上升' if direction == 'rose' else '下降'}："
            f"均值 {now:.3g}（此前 {level.median:.3g}），其他分量未变")

    def _cusums(self, names: list[str], floor: float) -> dict[str, tuple[float, float, float]]:
        """(up, down, largest |z|) of each ready component's last ``drift_steps`` means, each a
        robust z against the window before them (see :func:`~rlcockpit.diagnostics.stats.cusum`)."""
        cfg, out = self.config, {}
        for name in names:
            drift = self._parts[name].drift
            if drift.ready(cfg.warmup):
                z = (drift.recent - drift.median) / drift.scale(max(floor, 1e-9))
                z_list = z.tolist()
                out[name] = (*cusum(z_list, cfg.drift_k), max(map(abs, z_list)))
        return out

    def _drift(self, name: str, sums: dict[str, tuple[float, float, float]]) -> Condition | None:
        """Yellow: the component's last ``drift_steps`` means drift one way (CUSUM ≥ ``drift_h``)
        in steps no larger than a jump (``z_jump``: a jump is the level check's) while the other
        components do not drift (their median CUSUM below half of ``drift_h``) and, where samples
        tell, every sample moved (:meth:`_every_sample_moved`)."""
        cfg = self.config
        if name not in sums:
            return None
        up, down, largest = sums[name]
        others = [max(u, d) for n, (u, d, _) in sums.items() if n != name]
        if max(up, down) < cfg.drift_h or largest >= cfg.z_jump \
                or (others and median(others) >= cfg.drift_h / 2) or not self._every_sample_moved(name):
            return None
        drift = self._parts[name].drift
        direction = "rising" if up >= down else "falling"
        now, ref = float(drift.recent[-1]), drift.median
        evidence = {"component": name, "mean_now": now, "reference_mean": ref, "cusum": max(up, down),
                    "cusum_threshold": cfg.drift_h, "steps": cfg.drift_steps, "window": cfg.window,
                    "others_cusum": {n: max(u, d) for n, (u, d, _) in sums.items() if n != name},
                    "signal": f"reward/{name}/mean", "onset_step": drift.recent_steps[0]}
        return Condition(
            "yellow", f"reward component {name!r} drifting alone ({direction}): {now:.3g} vs "
            f"{ref:.3g} before, a steady move over {cfg.drift_steps} steps (CUSUM {max(up, down):.1f} "
            f"≥ {cfg.drift_h:g}) while the other components held", evidence, key=f"{name}/drift",
            message_zh=f"奖励分量 {name} 单独{'持续上升' if direction == 'rising' else '持续下降'}："
            f"{now:.3g}（此前 {ref:.3g}），其他分量未变")

    def _every_sample_moved(self, name: str) -> bool:
        """The drift's samples (its last ``drift_steps`` steps against the steps before) moved on
        the far side too (as in :meth:`_spread_only`): without samples, True. A sparse component
        the policy learns to earn (GRPO 'harmlessness') and a skill learned by more answers drift
        their mean with their top share only: on the healthy runs of seeds 100–304 the CUSUM passed
        6 on 2,588 component-steps, 63 of them with the far quartile moving too."""
        cfg = self.config
        history = list(self._parts[name].history)
        if len(history) < cfg.drift_steps + cfg.warmup:
            return not history
        recent = np.concatenate(history[-cfg.drift_steps:])
        before = np.concatenate(history[:-cfg.drift_steps])
        shift = float(recent.mean() - before.mean())
        q = 0.25 if shift > 0 else 0.75
        return abs(quantile(recent, q) - quantile(before, q)) >= cfg.median_frac * abs(shift)

    def _spread_only(self, name: str, view: StepView) -> tuple[float, float] | None:
        """(mean shift, quantile shift) of this step's component values against the reference pool
        when the quantile on the far side of the move (the 25th percentile for a rise, the 75th for
        a fall) moved less than ``median_frac`` × the mean: a biased or drifting head moves every
        sample, that quantile with the mean; a sparse component the policy learns to earn (GRPO
        'harmlessness': 0 on most samples, 1 on a growing few) moves the top share only. The median
        was used first and flipped when about half of one step's samples scored (healthy GRPO seed
        201, after the evaluation at 557f6b9). None when that quantile moved too, or without
        samples."""
        values = self._values[name]
        part = self._parts[name]
        if values.size < 8 or not part.pool:
            return None
        reference = part.reference()
        mean_shift = float(values.mean() - reference.mean())
        # the far side of the move: a rise must lift the low quantile, a fall lower the high one
        q = 0.25 if mean_shift > 0 else 0.75
        quartile_shift = quantile(values, q) - quantile(reference, q)
        if abs(quartile_shift) >= self.config.median_frac * abs(mean_shift):
            return None
        return mean_shift, quartile_shift

    def _onset(self, level: Lagged, step: int) -> int:
        floor = self.config.z_others * level.scale(1e-9)
        median = level.median
        return level.onset(lambda v: abs(v - median) >= floor)

    def _ks(self, name: str, view: StepView) -> tuple[float, float] | None:
        """KS of this step's component values vs the pooled reference samples (None: no samples)."""
        values = self._values[name]
        part = self._parts[name]
        reference = part.reference()
        if values.size >= 8 and reference.size >= 8 * self.config.recent:
            return ks_test(values, reference)
        return None

    def _pool(self, name: str, view: StepView) -> None:
        """Pool this step's samples as reference — from the first step on, not only once the level
        is judged: a shift right at the end of the warm-up must meet a clean pool (the
        rm_component_bias fault run, seed 2, onset 10 = the first judged step, was missed when the
        pool began there), and not while the condition holds (it stays visible)."""
        values = self._values[name]
        if values.size and not self._parts[name].firing:
            self._parts[name].add_to_pool(values)

    def _track(self, name: str, firing: bool) -> None:
        part = self._parts[name]
        part.firing = part.firing + 1 if firing else 0
        part.level.frozen = part.drift.frozen = firing
        if part.firing > self.config.rebase_after:
            part.level.rebase()
            part.drift.rebase()
            part.clear_pool()
            part.firing = 0
