"""Too many PPO epochs: the KL grows too much within one sample-update cycle (001 Q23).

Failure mode: training many epochs on one batch over-fits that old data and pushes the policy
off-policy; the KL climbs within every cycle in a saw-tooth (001 Q23).
Signal: ``policy/approx_kl`` (KL between the rollout policy and the updated policy after all
epochs, per token) and ``kl/cycle_delta`` (growth of ``kl/mean`` from one cycle to the next),
the latter as the median over ``window`` cycles (the typical KL growth per cycle; single deltas are
noisy) relative to the KL target (``kl/target`` or the config's ``target``).
Default thresholds: approx KL > 0.02 per token (001 Q23: "ΔKL < 0.02"; also the usual PPO
``target_kl``) for ``steps`` (2) consecutive steps → orange (key "approx_kl"); median cycle delta
over 10 cycles > 0.25 × target → orange (key "cycle_delta").
Key "approx_jump": the median approx KL of the last 3 steps ≥ 8× its level over the 20 steps
before (at least 10 known: their median, or their noise 1.4826 × MAD when larger — verl logs a
signed k1 estimate whose median is ~2e-6 and swings reach 1e-4, real runs 012/023) → orange — relative to the run's own level, which depends on the
model, the learning rate and the epochs (tiny PPO: 2e-4; tiny GRPO: 1e-3 with single steps up to
9e-3, so a 3-step median is used). Calibration seed 0: 6 PPO epochs instead of 2 from step 121
move it 2e-4 → 7e-3 (×35) while the 0.02 bound is never reached; a learning rate ×3 moves it ≈ ×9.
Practical significance: orange at most, never red. ``approx_kl`` is a bound in the quantity's own
units — > 0.02 nats per token between the rollout and the updated policy (PPO's usual ``target_kl``)
for 2 steps — at any model size; ``approx_jump`` (a 3-step median ≥ 8× its own level) and
``cycle_delta`` (off by default) are relative. The jump's level is the larger of the median and
1.4826 × MAD of 20 steps; a level ≤ 0 (exact zeros) is not judged. A jump is orange only once the
approx KL reaches ``jump_floor`` (0.002 nats per token, a tenth of the usual ``target_kl``), yellow
below it: a healthy tiny PPO twin (unseen-faults seed 702, step 16) went 1.4e-4 → 1.1e-3 early in
training — 8× a near-zero level, yet a policy that barely moves; the too-many-epochs fault reaches
7e-3.
Scale assumptions: approx KL is per token (old vs new policy: any model size); the cycle growth
is per sequence, relative to the target (rlcockpit's trainer logs ``kl/target``; without one the
cycle check is not judged).
Measured on healthy tiny-world runs (3 runs × 120 steps): approx KL at most 6e-4 (PPO) / 6e-3
(GRPO); single cycle deltas swing ±0.5–1.8 nats per sequence, their 10-cycle mean at most 0.12.
The cycle-growth check is off by default (``cycle_ratio`` 0): on 200-step healthy GRPO runs the
KL swings 0.4 ↔ 2 nats from step to step, and no robust form of the per-cycle growth separated
them from a drift (``kl_trend`` judges a steady rise; the seed's "ΔKL < 0.02 per cycle" is the
approx-KL check). When switched on, the cycle growth is the *median* of the last 10 deltas, at
least 70% of them positive: their
mean telescopes to (KL now − KL 10 steps ago) / 10, and one KL spike of a healthy adaptive-KL GRPO
run (calibration seed 0, step 187: 0.4 → 5.1 → 1.3) made it 0.42; a GRPO KL swinging 0.4 ↔ 2
from step to step has a median delta up to 0.35 on 10 values, with half of them negative.
False positives: a learning rate far too high moves the policy as much within one cycle (the
message names both causes; ``update_ratio`` and ``gradients`` tell them apart); a KL target set
far below the KL the task needs.
Fix: fewer PPO epochs, a larger rollout batch ("more food"), a lower actor learning rate, or an
early stop of the epochs when approx KL exceeds the limit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlcockpit.config import Config, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.stats import Lagged
from rlcockpit.diagnostics.windows import Streak, Window, median


@dataclass(frozen=True)
class PPOEpochKLConfig(Config):
    approx_kl_max: float = option(0.02, help="Orange when policy/approx_kl exceeds this ...",
                                  range=(1e-9, 1e6))
    steps: int = option(2, help="... for this many consecutive steps.", range=(1, 1000))
    cycle_ratio: float = option(0.0, help="Orange when the median kl/cycle_delta exceeds this × "
                                "the KL target (0 = off, the default; 0.25 was the old default).",
                                range=(0.0, 1e6))
    window: int = option(10, help="Cycles whose median kl/cycle_delta is judged.", range=(1, 1000))
    jump_ratio: float = option(8.0, help="Orange when the median approx KL of the last "
                               "`jump_recent` steps is this × its median before ...",
                               range=(1.0, 1e9))
    jump_recent: int = option(3, help="... (steps taken as the current level) ...", range=(1, 100))
    jump_history: int = option(20, help="... over this many steps before them ...",
                               range=(3, 100000))
    jump_min_history: int = option(10, help="... once that many are known.", range=(3, 100000))
    jump_floor: float = option(0.002, help="A jump is orange only when the approx KL reaches this "
                               "(nats per token; a tenth of PPO's usual target_kl 0.02), yellow "
                               "below: a policy moving 8× further than a near-zero level may still "
                               "move very little.", range=(0.0, 1e6))
    rising_share: float = option(0.7, help="... and at least this share of them must be positive "
                                 "(the KL grows cycle after cycle, not a noisy KL swinging).",
                                 range=(0.0, 1.0))
    target: float = option(0.0, help="KL target (nats per sequence) when kl/target is not logged "
                           "(0 = none: the cycle check needs a target).",
                           range=(0.0, 1e6))


@register
class PPOEpochKL(Detector):
    name = "ppo_epoch_kl"
    family = "ppo"
    reads = ("policy/approx_kl", "kl/cycle_delta", "kl/target", "ppo/epochs")
    patterns = ("too_many_ppo_epochs",)
    signal = "PPO-cycle KL"
    Config = PPOEpochKLConfig

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        return bool({"policy/approx_kl", "kl/cycle_delta"} & names)

    def __init__(self, config: PPOEpochKLConfig | None = None) -> None:
        super().__init__(config)
        self._approx = Streak()
        self._deltas = Window(self.config.window)
        self._recent = Lagged(self.config.jump_history, self.config.jump_recent)

    def update(self, view: StepView) -> list[Condition] | object:
        approx, delta = view.get("policy/approx_kl"), view.get("kl/cycle_delta")
        if approx is None and delta is None:
            return SKIPPED
        found = [self._approx_kl(view), self._jump(view), self._cycle(view)]
        return [c for c in found if c is not None]

    def _jump(self, view: StepView) -> Condition | None:
        """approx KL per update far above its own recent level (key "approx_jump")."""
        cfg = self.config
        lagged = self._recent
        lagged.push(view.finite("policy/approx_kl"), view.step)
        if not lagged.ready(cfg.jump_min_history):
            return None
        # the level is the median or, for a signed k1 estimate swinging around 0 (verl's
        # actor/ppo_kl: median 2e-6, swings of 1e-4), its noise: a swing is not a jump
        level = max(lagged.median, lagged.scale(0.0))
        if level <= 0:
            return None
        now = median(lagged.recent)
        ratio = now / level
        lagged.frozen = ratio >= cfg.jump_ratio  # the level before the jump stays the reference
        if ratio < cfg.jump_ratio:
            return None
        evidence = {"approx_kl": now, "reference": level, "ratio": ratio,
                    "threshold": cfg.jump_ratio, "floor": cfg.jump_floor,
                    "epochs": view.finite("ppo/epochs"),
                    "signal": "PPO-cycle KL",
                    "onset_step": lagged.onset(lambda v: v >= cfg.jump_ratio * level)}
        return Condition("orange" if now >= cfg.jump_floor else "yellow",
                         f"the policy moves {ratio:.0f}× further per update than before "
                         f"(approx KL {now:.2g} vs {level:.2g}): too many PPO epochs, or a "
                         "learning rate too high", evidence, key="approx_jump",
                         message_zh=f"每次更新策略移动的幅度为此前的 {ratio:.0f} 倍（近似 KL "
                                    f"{now:.2g}，此前 {level:.2g}）：PPO epoch 过多或学习率过高")

    def _approx_kl(self, view: StepView) -> Condition | None:
        cfg = self.config
        value = view.finite("policy/approx_kl")
        held = self._approx.update(value is not None and value > cfg.approx_kl_max, view.step)
        if held < cfg.steps:
            return None
        epochs = view.finite("ppo/epochs")
        evidence = {"approx_kl": value, "threshold": cfg.approx_kl_max, "steps": held,
                    "epochs": epochs, "signal": "PPO-cycle KL", "onset_step": self._approx.onset}
        return Condition("orange", f"approx KL per update cycle {value:.3g} > "
                         f"{cfg.approx_kl_max:g} for {held} steps: the policy moves too far per "
                         "batch (too many PPO epochs, or a learning rate too high)", evidence,
                         key="approx_kl",
                         message_zh=f"单个更新周期内的近似 KL {value:.3g} 连续 {held} 步超过 "
                                    f"{cfg.approx_kl_max:g}：PPO epoch 过多或学习率过高")

    def _cycle(self, view: StepView) -> Condition | None:
        cfg = self.config
        if not self._deltas.push(view.finite("kl/cycle_delta"), view.step) or \
                not self._deltas.full:
            return None
        target = view.finite("kl/target") or cfg.target
        if not target or not cfg.cycle_ratio:
            return None  # off, or a per-sequence growth means nothing without the run's KL scale
        # the median, not the mean: the mean of consecutive differences telescopes to
        # (KL now - KL 10 steps ago) / 10, so one noisy KL spike alone would fire it
        mean = median(self._deltas.values)
        rising = float(np.mean(self._deltas.values > 0))
        if mean <= cfg.cycle_ratio * target or rising < cfg.rising_share:
            return None
        evidence = {"cycle_delta_mean": mean, "threshold": cfg.cycle_ratio * target,
                    "target": target, "window": cfg.window, "epochs": view.finite("ppo/epochs"),
                    "signal": "PPO-cycle KL", "onset_step": self._first_big(cfg.cycle_ratio * target)}
        return Condition("orange", f"KL grows {mean:.3g} per cycle (median of {cfg.window}), "
                         f"above {cfg.cycle_ratio:g}× target {target:g}: too many PPO epochs (or a "
                         "learning rate too high)",
                         evidence, key="cycle_delta",
                         message_zh=f"每个采样-更新周期 KL 增长 {mean:.3g}，超过目标值的 "
                                    f"{cfg.cycle_ratio:g} 倍：PPO epoch 过多或学习率过高")

    def _first_big(self, limit: float) -> int:
        """The first step of the window whose own delta exceeded the limit (where growth began)."""
        big = np.nonzero(self._deltas.values > limit)[0]
        return int(self._deltas.steps[big[0] if len(big) else 0])
