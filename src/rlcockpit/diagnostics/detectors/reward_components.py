"""Reward components in a short complete log: one earned instead of another.

Failure mode: a few rows pasted from an issue in which the task's reward component falls while
another one (the format) rises: the policy earns its reward from the format instead of the task
(an open-r1 GRPO log: accuracy reward 0.16 → 0.12 → 0.06 while the format reward went 0.48 →
0.55 → 0.86). The log is too short for ``rm_component_bias``'s 8-step reference, so every
history-based check stays silent on exactly the logs users paste when they ask for help.
Signal: each component's ``reward/<component>/mean`` (as ``rm_component_bias`` names them), judged
once, when the log is known to be complete (``finish``: ``rlcockpit doctor`` on an import or on a
finished or failed run) and only when it has fewer than ``short_steps`` (10) logged steps (at
least 3) — never while a run is live. Key ``tradeoff/<component>``: the component fell at every
logged step to at most ``1 − fall_frac`` of its first value (a fall ≥ 50 %, from a positive first
value), by at least ``min_move`` (0.05) reward units or ``std_frac`` (0.1) × the median
``reward/std``, whichever is larger, while another component rose at every step by at least as
much.
Default thresholds: yellow; the evidence names both components and their values. Calibration: in
2,508 windows of 3, 5 and 9 steps cut from the 40 healthy tiny-world runs of seeds 600–604 and
800–804 (200 steps each) the rule fired in 27 (1.1 %). A component exactly 0 on every step was
tried as "a reward that never pays" and dropped: the tiny world's format component, a penalty that
is 0 on most steps, made it fire on 11 % of those windows — zeros alone cannot tell an idle
penalty from a dead reward.
Practical significance: yellow only — a fall of half the component's own first value and at least
0.05 reward units (or a tenth of the reward spread), monotone, against a monotone rise of another
component by as much: no z-score over a history of 3 rows. A short log shows the state, not its
persistence.
Scale assumptions: none — ratios to the component's own first value and a floor in reward units
scaled by ``reward/std`` where it is logged.
False positives: a short log whose task reward falls by chance while the format is being learned
(the format rising fast is normal early in GRPO); read the completions.
Fix: weigh the task reward up or the format reward down, or gate the format reward on a correct
answer; check the task reward's answer extraction on a few logged completions.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from rlcockpit.config import Config, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.detectors.rm_component_bias import component_names, logged_components
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.windows import median


@dataclass(frozen=True)
class RewardComponentsConfig(Config):
    min_steps: int = option(3, help="Logged steps a complete log needs before it is judged.",
                            range=(3, 1_000_000))
    short_steps: int = option(10, help="Trade-offs are judged in complete logs shorter than this "
                              "(longer ones are rm_component_bias's).", range=(3, 1_000_000))
    fall_frac: float = option(0.5, help="The falling component lost at least this share of its "
                              "first value.", range=(0.0, 1.0))
    min_move: float = option(0.05, help="Smallest fall (and rise), in reward units.",
                             range=(0.0, 1e9))
    std_frac: float = option(0.1, help="... or this fraction of the median reward/std, when "
                             "larger.", range=(0.0, 100.0))


def _monotone(values: Sequence[float], sign: int) -> bool:
    return all(sign * (b - a) > 0 for a, b in zip(values, values[1:], strict=False))


@register
class RewardComponents(Detector):
    name = "reward_components"
    family = "rm_component_bias"
    reads = ("reward/", "reward/std")
    patterns = ("reward_hacking",)
    signal = "reward components"
    Config = RewardComponentsConfig

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        return bool(logged_components(names))

    def __init__(self, config: RewardComponentsConfig | None = None) -> None:
        super().__init__(config)
        self._values: dict[str, list[float]] = defaultdict(list)
        self._steps: dict[str, list[int]] = defaultdict(list)
        self._std: list[float] = []
        self._seen = 0

    def update(self, view: StepView) -> list[Condition] | object:
        names = component_names(view)
        if not names:
            return SKIPPED  # no reward components logged
        self._seen += 1
        for name in names:
            value = view.finite(f"reward/{name}/mean")
            if value is not None:
                self._values[name].append(value)
                self._steps[name].append(view.step)
        std = view.finite("reward/std")
        if std is not None:
            self._std.append(std)
        return []  # judged on the whole log only (finish)

    def finish(self) -> list[Condition] | None:
        cfg = self.config
        judged = {n: v for n, v in self._values.items() if len(v) >= cfg.min_steps}
        if not judged:
            return None
        if self._seen >= cfg.short_steps:
            return None  # rm_component_bias judges longer logs against their history
        return [c for name in sorted(judged) if (c := self._tradeoff(name, judged)) is not None]

    def _floor(self) -> float:
        std = median(self._std) if self._std else 0.0
        return max(self.config.min_move, self.config.std_frac * std)

    def _tradeoff(self, name: str, judged: dict[str, list[float]]) -> Condition | None:
        cfg = self.config
        values = judged[name]
        first, last = values[0], values[-1]
        fall = first - last
        if len(values) < 3 or first <= 0 or last > (1.0 - cfg.fall_frac) * first \
                or fall < self._floor() or not _monotone(values, -1):
            return None
        risers = {n: v[-1] - v[0] for n, v in judged.items()
                  if n != name and len(v) >= 3 and _monotone(v, +1) and v[-1] - v[0] >= fall}
        if not risers:
            return None
        other = max(risers, key=risers.get)
        rose = judged[other]
        steps = self._steps[name]
        evidence = {"component": name, "values": values, "rising": other, "rising_values": rose,
                    "fall": fall, "rise": risers[other], "steps": len(values),
                    "signal": f"reward/{name}/mean", "onset_step": steps[0]}
        return Condition(
            "yellow", f"reward component {name!r} fell at every step of this {len(values)}-step "
            f"log ({first:.3g} → {last:.3g}) while {other!r} rose ({rose[0]:.3g} → {rose[-1]:.3g}): "
            f"the reward is being earned from {other!r} instead", evidence,
            key=f"tradeoff/{name}",
            message_zh=f"奖励分量 {name} 在这段 {len(values)} 步日志中逐步下降（{first:.3g} → "
                       f"{last:.3g}），而 {other} 上升（{rose[0]:.3g} → {rose[-1]:.3g}）："
                       f"奖励正从 {other} 而不是 {name} 获得")
