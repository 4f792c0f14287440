"""Training stall: reward and KL flat for a long time; a KL penalty that swamps the reward;
heartbeat lost (001 Q25).

Failure mode: "a stall is sneakier than a crash" (001 Q25): the run burns compute while nothing
learns — β so large the policy is pinned to the reference, a reward with no contrast, a learning
rate too low, a critic that predicts the same value everywhere. Or the trainer hangs and logs no
step at all.
Signal: over the last ``window`` steps, ``reward/mean`` shows no trend (Mann–Kendall p > 0.05)
and its level moved less than ``reward_sigmas`` noise standard deviations (median of the last
``k`` vs the first ``k``), *and* ``kl/mean`` is flat: relative range < ``kl_range``, or it
stayed below ``kl_floor`` (per sequence), or it is pinned near 0 — median below ``kl_low`` × its
scale (``_kl.KLScale``: the target, or the per-token comfort level, at least 0.05) without a
rising trend ("KL stuck near 0", 001 Q25; the k1 estimate of a pinned KL is noisy around 0, so its
range is not small). A healthy run's KL rises from 0 with a clear trend. Early sign (key
"kl_penalty", 001 Q25 / Q12): the per-token KL penalty β × ``kl/token_p99`` is at least
``penalty_share`` × ``reward/std`` for ``penalty_steps`` steps in a row *while the KL itself is
within its scale* (below ``penalty_kl_max`` × the target or comfort level, ``_kl.KLScale``) — the
−β·KL token rewards outweigh the task reward's contrast although the policy has not drifted, so
the returns (and the policy gradient) mostly say "go back to the reference", before any flat
window can show it. A reward with no spread at all (``reward/std`` = 0) has no contrast to
outweigh: that is ``levels``' no learning signal, not this key. What it reads is the state of the objective, not a change: β is context in
the evidence (its level before), never the trigger — an operator who raises β a little never
gets it; one who raises it until the penalty swamps the reward gets it, rightly.
Where the KL is a loss term (GRPO), the trainer logs ``kl/pull_share``: β × the mean
|∂KL_t/∂log π_t| over that plus the mean |A_t| — the share of the per-token gradient weight that
pulls back to the reference. It reads the objective directly, so it also sees a β that is too large
from the first step, where the KL never grew and β × KL p99 stays small: the same "kl_penalty" key
fires when the share is at least ``penalty_pull`` for ``penalty_steps`` steps in a row with the KL
in range.
Heartbeat: ``tick()`` with no new step for ``heartbeat_s`` seconds.
Default thresholds: window 50 steps, k 10, reward moved < 1 σ (the difference of two medians of
10 noisy values alone has a spread of ~0.56 σ), KL relative range < 0.2, or KL < 1e-3 nats per
sequence, or KL median < 0.1 × target with Mann–Kendall p > 0.05 → yellow (key "flat"). Measured
on the kl_coef_huge fault run (β = 10 from step 10): KL median ≈ 0.05, no trend. Once flagged, the reward must move clearly to clear
it (hysteresis: 2 σ, p < 0.005), so a stall does not flicker on and off with the noise.
KL penalty: β × KL p99 ≥ 1 × reward/std for 2 steps in a row, with the KL below 1.5× its
scale → orange from the first of them. Calibration (tests/fixtures/streams): healthy runs (β
fixed or adaptive) stay ≤ 0.4 (≤ 0.08 over their first 25 steps); on the kl_coef_huge fault runs
(β 0.05 → 10) it is 3.9–7.7 from the onset with the KL at 0.0–0.15 nats per sequence (target 1);
the lr_spike run reaches 1–6 too, but with its KL at 25–80× the target: a KL runaway, not a
penalty that pins the policy (``kl_tiers``).
Pull share ≥ 0.1 for 2 steps in a row, KL below 1.5× its scale → orange (key "kl_penalty").
Calibration (tiny GRPO, fixed and adaptive KL; seeds 100, 101, 203 and 400–404): healthy runs
never hold 2 steps in a row above 0.03 (single steps up to 0.26 in 200, where a minibatch's
advantages were nearly all 0); β = 10 from step 1 holds 0.10–0.47 and fires at step 2–3 in 14/14
runs; β = 1 from step 1 reaches 0.06–0.11 two steps running (2/14 fire: at β = 1 the KL still grows
like a healthy run's for the first 20 steps, and the reward climbs as fast).
No step for 600 s → red (key "heartbeat").
Practical significance: red only for the heartbeat — no step for ``heartbeat_s`` (600 s): nothing
arrives, an effect that persists; the bound is wall-clock seconds, not scaled to the step time
(raise it for slow steps). ``kl_penalty`` is orange (β × KL p99 ≥ 1 × ``reward/std``, or a pull
share ≥ 0.1, 2 steps, KL in range: ratios at any scale); ``flat`` is yellow. No z-score: the
reward's move is in its window std (floored at 1e-12: a reward constant for 50 steps is flat,
rightly), the KL's flatness a relative range and a ratio to its scale (≥ 0.05 nats/token).
Scale assumptions: the reward's movement in units of its own spread; the pull share is a ratio of
per-token gradient weights (no units); the KL's flatness relative
to its range and to its scale (``_kl.KLScale``: target or per-token comfort level); the 1e-3
per-sequence floor applies only to runs that log ``kl/mean``; the heartbeat is wall-clock
seconds (raise ``heartbeat_s`` for slow steps of a big model).
False positives: a run that has converged (reward at its ceiling: the KL still moves then); an
operator raising β on purpose to rein in a KL runaway (the finding says what it costs);
slow steps of a big model (raise ``heartbeat_s``; 0 turns the heartbeat off).
Fix: the "perturbation test" of 001 Q25: lower β or raise the learning rate for a while and watch
whether reward and KL react (KL penalty: undo the β change, or raise it in small steps); if not, check the reward's variance, the critic's value spread and
the data pipeline. Heartbeat: look at the trainer's process (hung rollout, dead worker).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlcockpit.config import Config, check, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.detectors._kl import TOKEN_FLOOR, KLReading, KLScale, has_kl, per_token
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.windows import Streak, Window, mann_kendall, median, relative_range


@dataclass(frozen=True)
class StallConfig(Config):
    window: int = option(50, help="Steps judged for flatness.", range=(10, 100000))
    k: int = option(10, help="Values whose median is the window's start / end level.",
                    range=(1, 10000))
    reward_sigmas: float = option(1.0, help="Flat when the reward level moved less than this × "
                                  "its standard deviation in the window.", range=(0.0, 1e6))
    p_min: float = option(0.05, help="... and its Mann–Kendall p-value is above this.",
                          range=(0.0, 1.0))
    kl_range: float = option(0.2, help="KL flat when (max − min) / mean over the window < this ...",
                             range=(0.0, 1e6))
    kl_floor: float = option(1e-3, help="... or when it stayed below this (nats per sequence).",
                             range=(0.0, 1e6))
    kl_low: float = option(0.1, help="... or when its median stays below this × target with no "
                           "rising trend (pinned to the reference).", range=(0.0, 1e6))
    target: float = option(0.0, help="KL target (nats per sequence) when kl/target is not logged; "
                           "0 = none: the run's per-token comfort level (_kl.KLScale).",
                           range=(0.0, 1e6))
    penalty_share: float = option(1.0, help="The KL penalty dominates when β × kl/token_p99 ≥ this "
                                  "× reward/std ...", range=(0.0, 1e6))
    penalty_pull: float = option(0.1, help="... or, where the KL is a loss term (GRPO, kl/pull_share "
                                 "logged), when the KL term holds at least this share of the per-token "
                                 "gradient weight ...", range=(0.0, 1.0))
    penalty_steps: int = option(2, help="... for this many steps in a row ...", range=(1, 100000))
    penalty_kl_max: float = option(1.5, help="... while the KL is below this × its target or "
                                   "comfort level (above it the KL itself ran away: kl_tiers).",
                                   range=(0.0, 1e6))
    penalty_window: int = option(10, help="Steps of kl/coef kept as context (its level before).",
                                 range=(1, 100000))
    heartbeat_s: float = option(600.0, help="Red when no step arrived for this many seconds "
                                "(0 = off).", range=(0.0, 1e9))

    def __post_init__(self) -> None:
        super().__post_init__()
        check(2 * self.k <= self.window, "k", self.k,
              f"must be at most window/2={self.window // 2}")


@register
class Stall(Detector):
    name = "stall"
    family = "stall"
    reads = ("reward/mean", "kl/mean", "kl/token_mean", "kl/target", "response/length_mean",
             "kl/coef", "kl/token_p99", "reward/std", "kl/pull_share")
    patterns = ("training_stall", "heartbeat_lost")
    signal = "reward/KL"
    Config = StallConfig

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        return "reward/mean" in names and bool({"kl/mean", "kl/token_mean"} & names)

    def __init__(self, config: StallConfig | None = None) -> None:
        super().__init__(config)
        self._reward = Window(self.config.window)
        self._kl = Window(self.config.window)
        self._flat = False
        self._coef = Window(self.config.penalty_window)  # β's recent level (context only)
        self._dominates = Streak()
        self._scale = KLScale(self.config.target)

    def update(self, view: StepView) -> list[Condition] | object:
        if view.get("reward/mean") is None or not has_kl(view):
            return SKIPPED
        reading = self._scale.read(view)
        found = [self._penalty(view, reading), self._flatness(view, reading)]
        return [c for c in found if c is not None]

    def _penalty(self, view: StepView, reading: KLReading | None) -> Condition | None:
        """The per-token KL penalty outweighs the reward's spread, KL in range (key kl_penalty)."""
        cfg = self.config
        coef, p99, spread = (view.finite(k) for k in ("kl/coef", "kl/token_p99", "reward/std"))
        before = median(self._coef.values) if len(self._coef) else None
        if coef is not None:
            self._coef.push(coef, view.step)
        # a reward without spread has nothing for the penalty to outweigh: that is levels' no_signal
        share = coef * p99 / spread if None not in (coef, p99, spread) and spread > 0 else None
        pull = view.finite("kl/pull_share")
        by_reward = share is not None and share >= cfg.penalty_share
        by_pull = pull is not None and pull >= cfg.penalty_pull
        dominates = (by_reward or by_pull) and _kl_in_range(view, reading, cfg.penalty_kl_max)
        held = self._dominates.update(dominates, view.step)
        if held < cfg.penalty_steps:
            return None
        evidence = {"kl_coef": coef, "kl_coef_before": before, "kl_token_p99": p99,
                    "penalty": None if None in (coef, p99) else coef * p99, "reward_std": spread,
                    "share": share, "share_threshold": cfg.penalty_share, "pull_share": pull,
                    "pull_threshold": cfg.penalty_pull,
                    **(reading.evidence() if reading else {}), "signal": "KL penalty",
                    "onset_step": self._dominates.onset}
        beta = f"β {coef:.3g}" if coef is not None else "β not logged"
        if by_reward:
            return Condition("orange", f"learning will stall: the KL penalty dominates the reward "
                             f"(β × KL p99 {coef * p99:.3g} per token vs reward std {spread:.3g} for "
                             f"{held} steps, the KL itself in range; {beta})", evidence,
                             key="kl_penalty",
                             message_zh=f"训练将停滞：KL 惩罚压倒了奖励（每 token 惩罚 "
                                        f"{coef * p99:.3g}，奖励标准差 {spread:.3g}，已连续 {held} 步；"
                                        f"{beta}）")
        return Condition("orange", f"learning will stall: the KL loss term pulls back to the reference "
                         f"with {pull:.0%} of the per-token gradient weight (healthy: a few %) for "
                         f"{held} steps, the KL itself in range; {beta}", evidence, key="kl_penalty",
                         message_zh=f"训练将停滞：KL 损失项把策略拉回参考模型，占每 token 梯度权重的 "
                                    f"{pull:.0%}（健康时仅几个百分点），已连续 {held} 步；{beta}")

    def _flatness(self, view: StepView, reading: KLReading | None) -> Condition | None:
        self._reward.push(view.finite("reward/mean"), view.step)
        if reading is not None:
            self._kl.push(reading.value, view.step)
        if not (self._reward.full and self._kl.full):
            return None
        cfg = self.config
        reward, kl = self._reward.values, self._kl.values
        moved = abs(median(reward[-cfg.k:]) - median(reward[:cfg.k]))
        sigma = max(float(reward.std()), 1e-12)
        p = mann_kendall(reward).p
        if reading is None:
            return None
        kl_flat, kl_evidence = self._kl_flat(kl, reading)
        # hysteresis: entering needs < reward_sigmas; leaving needs a clear move (2× / p/10)
        widen = 2.0 if self._flat else 1.0
        p_min = cfg.p_min / 10 if self._flat else cfg.p_min
        self._flat = moved < widen * cfg.reward_sigmas * sigma and p > p_min and kl_flat
        if not self._flat:
            return None
        evidence = {"reward_moved": moved, "reward_std": sigma, "reward_trend_p": p,
                    **kl_evidence, "window": cfg.window, "signal": "reward/KL",
                    "onset_step": int(self._reward.steps[0])}
        return Condition("yellow", f"reward and KL flat for {cfg.window} steps (reward moved "
                         f"{moved:.3g} = {moved / sigma:.2f}σ; KL median {kl_evidence['kl_median']:.3g}, "
                         f"no rise): training may be stalled", evidence, key="flat",
                         message_zh=f"奖励与 KL 在 {cfg.window} 步内几乎不变：训练可能僵死")

    def _kl_flat(self, kl: np.ndarray, reading: KLReading) -> tuple[bool, dict]:
        """Flat: a small relative range, or pinned far below its scale without a rise; per
        sequence also below the absolute ``kl_floor``."""
        cfg, target = self.config, reading.unit
        spread = relative_range(kl, eps=1e-12)
        med, trend = median(kl), mann_kendall(kl)
        pinned = med < cfg.kl_low * target and not (trend.z > 0 and trend.p <= cfg.p_min)
        tiny = reading.per == "sequence" and float(np.max(np.abs(kl))) < cfg.kl_floor
        flat = spread < cfg.kl_range or tiny or pinned
        return flat, {"kl_relative_range": spread, "kl_max": float(np.max(kl)),
                      "kl_median": med, "kl_trend_p": trend.p, "target": target,
                      "kl_per": reading.per, "target_basis": reading.basis}

    def tick(self, wall_time: float, last_step_wall: float | None) -> Condition | None:
        limit = self.config.heartbeat_s
        if not limit or last_step_wall is None or wall_time - last_step_wall <= limit:
            return None
        silent = wall_time - last_step_wall
        return Condition("red", f"no training step for {silent:.0f} s (limit {limit:.0f} s): "
                         "the trainer may be hung", {"silent_s": silent, "heartbeat_s": limit,
                                                     "signal": "heartbeat"},
                         key="heartbeat",
                         message_zh=f"已有 {silent:.0f} 秒没有新的训练步（上限 {limit:.0f} 秒）："
                                    "训练进程可能卡死")


def _kl_in_range(view: StepView, reading: KLReading | None, limit: float) -> bool:
    """The KL is below ``limit`` × its scale; before the run has a comfort level (no target, few
    steps), below ``limit`` × the per-token floor."""
    if reading is not None:
        return reading.ratio < limit
    token = per_token(view)
    return token is not None and token < limit * TOKEN_FLOOR
