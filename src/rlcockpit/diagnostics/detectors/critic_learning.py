"""A critic that does not learn: never updated, or no better than a constant (001 Q16, 000 §4.2).

Failure mode: a PPO critic whose value loss is never optimised — its learning rate is 0, the value
loss is left out of the objective (``vf_coef`` 0), its parameters are not in the optimiser, or
its steps are so small that nothing moves. The run goes on and its curves look calm: the value
loss is flat rather than exploding, so ``critic`` (divergence, over-fit, shift) says nothing. But
GAE advantages built on a critic that predicts nothing are the returns minus noise: the policy
gradient has the variance of a baseline-free REINFORCE and the run learns slowly or not at all.
Signal: two keys, each needs a critic (``value/loss`` logged).
``frozen`` — the critic is never updated: ``update/ratio/critic`` (‖Δθ‖/‖θ‖) exactly 0, or
``grad/norm/critic`` exactly 0, or ``optim/lr/critic`` exactly 0 while the actor's is not (both at 0
is a schedule's end: real run 010 decays both to 0 from step 101), on ``confirm`` (3) logged
steps in a row. Exact zeros only: a tiny but positive update is judged by the second key.
``not_learning`` — the explained variance ``value/explained_var`` (1 − Var(returns − values) /
Var(returns)) of the last ``window`` (20) steps has a median ≤ ``ev_max`` (0.01) and a mean ≤
``ev_max``: the critic explains under 1 % of the returns' variance, no better than predicting a
constant. That also covers a critic that is updated but cannot follow its targets: rewards 100×
too large for the value head (no reward normalisation) give returns of ~40 that the values reach
only slowly (0.03 → 4 in 40 steps), explained variance 0.0001–0.0014 throughout. Judged after
``warmup`` (25) steps of explained variance: a fresh value head starts at ~0 (the healthy
tiny-world PPO runs: the 20-step window ending at step 20 has max(median, mean) 0.006–0.040, the
one ending at step 25 0.047–0.075, later windows 0.05–0.22 (12 runs × 200 steps, seeds 0 and
600–604); the real verl PPO run 010, Qwen2.5-7B, 0.09–0.59, median 0.36).
Default thresholds: ``frozen`` orange after ``confirm`` (3) steps; ``not_learning`` yellow at
``ev_max`` (0.01) after ``warmup`` (25) steps, orange after ``persist`` (20) more.
Practical significance: both keys are stated in the quantity's own units, at any scale — an exact
zero update, and an explained variance at or below 0 (a critic worse than a constant predictor),
neither a ratio to the run's own history (explained variance ≤ 0.01: under 1 % of the returns'
variance explained). A frozen critic is orange at once (a failure present from
the start that makes the critic useless); ``not_learning`` is yellow, orange once it has held
``persist`` (20) more steps (the critic had 40 steps to explain anything and has not).
Scale assumptions: none — exact zeros and the explained variance, a fraction.
False positives: a critic deliberately frozen for a warm-up (e.g. training the actor alone for a
few steps): ``frozen`` resolves when the critic starts moving; a task whose returns are pure noise
(every reward independent of the response) has nothing to explain.
Fix: check ``optim.critic_lr`` > 0, ``ppo.vf_coef`` > 0 and that the value head's parameters are in
the critic's optimiser; raise the critic learning rate, or warm the critic up on the policy's own
rollouts before the actor trains (critic warm-up steps).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlcockpit.config import Config, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.windows import Streak, Window, median

_FROZEN_SIGNS = ("update/ratio/critic", "grad/norm/critic", "optim/lr/critic")


@dataclass(frozen=True)
class CriticLearningConfig(Config):
    confirm: int = option(3, help="Logged steps in a row of an exact-zero critic update before "
                          "`frozen` is reported.", range=(1, 10000))
    window: int = option(20, help="Steps of explained variance judged together.",
                         range=(3, 10000))
    warmup: int = option(25, help="Steps of explained variance before the first judgement (a "
                         "fresh value head starts at ~0).", range=(0, 100000))
    ev_max: float = option(0.01, help="`not_learning` when the window's median and mean explained "
                           "variance are at most this.", range=(-1e6, 1.0))
    persist: int = option(20, help="Steps `not_learning` must hold to become orange.",
                          range=(1, 100000))


@register
class CriticLearning(Detector):
    name = "critic_learning"
    family = "critic"
    reads = ("value/loss", "value/explained_var", *_FROZEN_SIGNS, "optim/lr/actor")
    patterns = ("critic_not_learning",)
    signal = "critic"
    Config = CriticLearningConfig

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        return "value/loss" in names

    def __init__(self, config: CriticLearningConfig | None = None) -> None:
        super().__init__(config)
        self._frozen = Streak()
        self._flat = Streak()
        self._ev = Window(self.config.window)
        self._seen = 0  # steps with an explained variance

    def update(self, view: StepView) -> list[Condition] | object:
        if view.get("value/loss") is None:
            return SKIPPED  # no critic (GRPO, RLOO) or it is not logged
        found = [self._frozen_check(view), self._learning_check(view)]
        return [c for c in found if c is not None]

    def _frozen_check(self, view: StepView) -> Condition | None:
        zeros = {name: view.finite(name) for name in _FROZEN_SIGNS}
        actor_lr = view.finite("optim/lr/actor")
        if zeros["optim/lr/critic"] == 0.0 and actor_lr is not None and actor_lr <= 0:
            zeros["optim/lr/critic"] = None  # both schedules at 0 (a decay's end): training stopped
        which = [name for name, value in zeros.items() if value == 0.0]
        held = self._frozen.update(bool(which), view.step)
        if held < self.config.confirm:
            return None
        evidence = {"zero": which, **{n.replace("/", "_"): v for n, v in zeros.items()},
                    "steps": held, "confirm": self.config.confirm, "signal": "critic update",
                    "onset_step": self._frozen.onset, "pattern": "critic_not_learning"}
        shown = ", ".join(f"{n} = 0" for n in which)
        return Condition(
            "orange", f"the critic is never updated ({shown} since step {self._frozen.onset}, "
            f"{held} steps): its values are noise, so the advantages are too", evidence,
            key="frozen",
            message_zh=f"Critic 从未被更新（自第 {self._frozen.onset} 步起 {held} 步：{shown}）："
                       "价值估计是噪声，优势估计也随之失真")

    def _learning_check(self, view: StepView) -> Condition | None:
        cfg = self.config
        ev = view.finite("value/explained_var")
        if ev is None:
            return None
        self._seen += 1
        self._ev.push(ev, view.step)
        judged = self._seen > cfg.warmup and len(self._ev) >= cfg.window
        med = median(self._ev.values) if judged else None
        mean = float(self._ev.values.mean()) if judged else None
        flat = med is not None and mean is not None and med <= cfg.ev_max and mean <= cfg.ev_max
        held = self._flat.update(flat, view.step)
        if not flat:
            return None
        severity = "orange" if held > cfg.persist else "yellow"
        evidence = {"explained_var_median": med, "explained_var_mean": mean,
                    "explained_var": ev, "window": cfg.window, "threshold": cfg.ev_max,
                    "steps": held, "persist": cfg.persist, "signal": "explained variance",
                    "onset_step": int(self._ev.steps[0]), "pattern": "critic_not_learning"}
        return Condition(
            severity, f"the critic is not learning: explained variance median {med:.3g} (mean "
            f"{mean:.3g}) over the last {cfg.window} steps, no better than a constant "
            f"prediction, after {self._seen} steps", evidence, key="not_learning",
            message_zh=f"Critic 没有在学习：最近 {cfg.window} 步解释方差中位数 {med:.3g}"
                       f"（均值 {mean:.3g}），不比常数预测更好")
