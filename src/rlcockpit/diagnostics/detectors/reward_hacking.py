"""Reward hacking: the reward jumps while the policy drifts, or one template takes over (001 Q2, Q7).

Failure mode: the policy finds a pattern the reward model over-pays — the seed's "this is a great
question, worth exploring" filler (000 §3.1), a repeated phrase, an over-long answer — and PPO
piles probability onto it: the reward jumps while quality falls.
Signal, key "jump": ``reward/mean`` — the mean of its last ``recent`` (3) steps as a robust
z-score against the ``window`` (20) steps before — together with the co-moving signals that
mark a drifting policy: ``kl/mean`` up, ``policy/entropy`` down, ``response/length_mean`` up
(each a robust z of the same recent-vs-window form).
Signal, key "template" (samples): character ``ngram``s (6 characters with a letter; the first
``max_chars`` characters of at most ``max_samples`` (128) responses) whose share of this step's
responses rose above their share in the reference steps and in the run's first steps, and the
share of responses containing at least one of them (a template often comes in variants, e.g. the
English and the Chinese filler); and distinct-3 (Li et al. 2016, character trigrams over the
batch) against its reference median.
Signal, key "paid" (samples): responses the reward pays more than any response of the reference
steps — a reward above the largest sample reward of the last ``window`` steps (steps with such
responses are left out of it) by ``paid_gap`` × their median per-step reward spread, pooled over
the last ``recent`` steps. A reward model that over-pays a pattern shows it on the first few
hacked samples, long before they are common enough to move the mean or a template share: in the
kl_coef_zero_with_hackable_reward fault runs the filler is 1–4 of 32 responses per step for 15
steps after the onset (reward z ≤ 1.4, template share ≤ 13%), but each one is paid 2.5 where no
response got more than 1.0 before.
Signal, key "phrase" (samples): within each step, the responses the reward singles out — above
the step's 90th percentile by ``phrase_gap`` (0.5) × the step's reward standard deviation —
pooled over the last ``window`` steps: ≥ ``phrase_min`` (3) of them, to ≥ 3 prompts, share a
character n-gram (as for "paid") that at most ``phrase_rest`` (5%) of the other responses of those
steps contain → yellow. It needs no earlier steps, so it sees a reward model that pays a template
from the first step (at onset 0 the "paid" rule's reference already holds the over-paid answers).
Calibration: in 40 healthy tiny-world runs (200 steps each) no step ever had a response above its
90th percentile (the rewards are 1, 0, −0.5, −1); a continuous reward singles out ~3% of the
responses by chance, which then have to share a phrase the others lack.
Default thresholds: "jump" when the reward's z ≥ ``z_jump`` (4) after ``warmup`` (10) steps (the z
scale at least 5% of the reward's level and 10% of the largest per-step reward spread of the
reference: a sparse reward's means of 0 then 0.02 are no jump):
yellow alone, orange with one co-moving signal (|z| ≥ ``z_co`` = 3), red with two or more; no
jump is reported when ``reward/std`` grew ≥ ``scale_ratio`` (5)× as well (a reward scale change,
the ``reward_scale`` detector's finding).
"paid" after ``paid_warmup`` (5) reference steps: ≥ ``paid_min`` (2) over-paid responses to ≥ 2
prompts in the last 3 steps → yellow (the reward model pays something it never paid before: an
observation of the reward, not yet a hack); orange when the policy exploits it — the over-paid
responses per step grew ≥ ``paid_growth`` (2)× from their first 3 steps to the last 3 — and at
least half of them share a character n-gram (to ≥ 2 prompts and, in a mix, ≥ 2 categories: a
template the reward over-pays). On the recorded kl_coef_zero_with_hackable_reward seed-1 run:
yellow at +2, orange at +5 (1, 0, 1 filler answers per step, then 1, 1, 2). Skipped when the step's reward spread grew ``scale_ratio``× (a scale change).
Calibration: on the recorded healthy runs (PPO and GRPO, 25–120 steps) no response ever got a
reward above the largest of the steps before (the tiny world's rewards are bounded), so the rule
never fired; a reward model with a continuous score that keeps improving would make new maxima,
hence the gap of 1 reward std and the two responses.
"template" orange when ≥ ``share_min`` (0.3) of the responses contain a risen n-gram — one whose
share grew by ≥ max(``share_rise`` = 0.15, 3 × its reference standard deviation) — for
``template_steps`` (2) steps, or when distinct-3 falls below ``distinct_ratio`` (0.4) × its
reference median for ``template_steps`` steps. Runs where every answer legitimately shares a
format (a "<think>" prefix, a boxed answer) keep those n-grams' shares high in the reference too.
A risen n-gram counts only when it is a piece of a phrase (letters on both sides of a space, or
CJK characters: a single common word such as " with " rose from 5% to 38% of a healthy GRPO run's
answers) and appears in the answers to ≥ ``min_prompts`` (3) prompts and,
when the step mixes prompt categories, in more than one category: an answer's content (a number,
a capital) stays with its prompt; a template crosses tasks. On the healthy GRPO run (4 answers
per prompt) content n-grams alone covered up to 78% of a step's answers.
Practical significance: "jump" — the reward's 3-step mean jumps (robust z ≥ 4) — is yellow alone,
orange with one or two of KL up, entropy down, length up (|z| ≥ 3), and red with two of them only
once the jump has held 3 steps: a combination of z-scores is no consequence in its own units, a
reward that stays up while the policy moves away from the reference is. "template" and an exploited "paid" are orange, "paid" and "phrase" yellow. The reward's
z scale is floored at 5% of its level and 10% of the largest reference ``reward/std``; a co-mover's
only at 5% of its own median (≥ 1e-9): a KL near 0 has no guard.
Scale assumptions: none in reward units — robust z-scores against the run's own history, the
z scale floored at 5% of the reward level and 10% of its largest per-step spread; template
shares are fractions of the responses; "paid" in units of the reward's own spread.
False positives: a genuine breakthrough (a reward jump with the KL rising a little): read the
example responses in the evidence; a prompt set switching to one task (the template rises with
it).
Fix: open the samples of the jump step (001 Q2), raise the KL coefficient β, add the template to
the reward's rule fallback / penalise it, retrain or recalibrate the reward model on the hacked
samples, and roll back to the checkpoint before the onset on red.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlcockpit.config import Config, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.detectors._hacking_text import (  # noqa: F401 (re-exported)
    PaidWatch,
    PhraseWatch,
    TemplateWatch,
    distinct_3,
    is_phrase,
    ngram_shares,
    top_samples,
)
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.stats import Lagged
from rlcockpit.diagnostics.windows import Streak

# (metric, label, direction): the co-moving signals of a drifting policy (001 Q2, Q7).
CO_MOVERS = (("kl/mean", "KL", 1.0), ("policy/entropy", "entropy", -1.0),
             ("response/length_mean", "length", 1.0))


@dataclass(frozen=True)
class RewardHackingConfig(Config):
    z_jump: float = option(4.0, help="Robust z of the recent reward mean that counts as a jump.",
                           range=(1.0, 1e6))
    z_co: float = option(3.0, help="|z| of KL / entropy / length that counts as moving with it.",
                         range=(0.5, 1e6))
    recent: int = option(3, help="Steps averaged as the current level.", range=(1, 100))
    window: int = option(20, help="Reference window (steps before the recent ones).",
                         range=(3, 10_000))
    warmup: int = option(10, help="Reference steps needed before judging.", range=(3, 10_000))
    scale_ratio: float = option(5.0, help="No jump is reported when reward/std also grew this "
                                "many times (a reward scale change: the reward_scale detector's "
                                "finding).", range=(1.0, 1e6))
    spread_floor: float = option(0.1, help="Smallest z scale of the reward mean, as a fraction of "
                                 "the largest reward/std of the reference steps.", range=(0.0, 1e6))
    rel_floor: float = option(0.05, help="Smallest z scale as a fraction of the reference "
                              "median's magnitude.", range=(0.0, 10.0))
    ngram: int = option(6, help="Characters per n-gram of the template check.", range=(2, 64))
    share_min: float = option(0.3, help="Template: smallest share of responses containing one "
                              "of the risen n-grams.", range=(0.0, 1.0))
    share_rise: float = option(0.15, help="Template: an n-gram has risen when its share grew by "
                               "this much (and by 3 reference standard deviations).",
                               range=(0.0, 1.0))
    distinct_ratio: float = option(0.4, help="Template: distinct-3 below this × its reference "
                                   "median counts as a collapse.", range=(0.0, 1.0))
    min_prompts: int = option(3, help="Template: a risen n-gram must appear in the answers to at "
                              "least this many prompts.", range=(1, 1_000_000))
    template_steps: int = option(2, help="Steps in a row the template check must hold.",
                                 range=(1, 1000))
    max_samples: int = option(128, help="Responses read per step (the first ones).",
                              range=(4, 1_000_000))
    max_chars: int = option(400, help="Characters read per response.", range=(8, 1_000_000))
    paid_gap: float = option(1.0, help="Paid: a response is over-paid when its reward exceeds the "
                             "reference steps' largest by this × their median reward spread.",
                             range=(0.0, 1e6))
    paid_min: int = option(2, help="Paid: over-paid responses (to different prompts) needed in "
                           "the last `recent` steps.", range=(1, 1_000_000))
    paid_growth: float = option(2.0, help="Paid: orange when the over-paid answers per step grew "
                                "this many times since they first appeared (the policy exploits "
                                "the pattern) and half of them share an n-gram.", range=(1.0, 1e6))
    paid_warmup: int = option(5, help="Paid: reference steps needed before judging.",
                              range=(1, 10_000))
    phrase_gap: float = option(0.5, help="Phrase: a response is singled out when its reward "
                               "exceeds its step's 90th percentile by this × the step's reward "
                               "standard deviation.", range=(0.0, 1e6))
    phrase_min: int = option(3, help="Phrase: singled-out responses sharing the phrase (to "
                             "different prompts) needed within `window` steps.",
                             range=(2, 1_000_000))
    phrase_rest: float = option(0.05, help="Phrase: largest share of the other responses of the "
                                "same steps that may contain the phrase.", range=(0.0, 1.0))


@register
class RewardHacking(Detector):
    name = "reward_hacking"
    family = "reward_hacking"
    reads = ("reward/mean", "reward/std", "kl/mean", "policy/entropy", "response/length_mean")
    reads_samples = True
    patterns = ("reward_hacking", "template_takeover")
    signal = "reward"
    Config = RewardHackingConfig

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        return "reward/mean" in names or samples

    def __init__(self, config: RewardHackingConfig | None = None) -> None:
        super().__init__(config)
        cfg = self.config
        self._reward = Lagged(cfg.window, cfg.recent)
        self._jumps = Streak()
        self._std = Lagged(cfg.window, cfg.recent)
        self._co = {name: Lagged(cfg.window, cfg.recent) for name, _, _ in CO_MOVERS}
        self._template = TemplateWatch(cfg)
        self._paid = PaidWatch(cfg)
        self._phrase = PhraseWatch(cfg)

    def update(self, view: StepView) -> list[Condition] | object:
        if view.get("reward/mean") is None and not view.samples:
            return SKIPPED
        out = []
        jump = self._jump(view)
        if jump is not None:
            out.append(jump)
        template = self._template.update(view)
        if template is not None:
            out.append(template)
        paid = self._paid.update(view, self._rescaled())
        if paid is not None:
            out.append(paid)
        phrase = self._phrase.update(view)
        if phrase is not None and paid is None:
            out.append(phrase)
        return out

    # ------------------------------------------------------------------ reward jump

    def _floor(self, lagged: Lagged) -> float:
        return max(self.config.rel_floor * abs(lagged.median), 1e-9)

    def _reward_floor(self) -> float:
        """The reward mean's z scale is at least ``rel_floor`` × its level and ``spread_floor``
        × the largest per-step reward spread of the reference: with a sparse reward (real run
        016: mean 0 on 84 of 100 steps, 0.06–0.13 on the others) a mean of 0.02 is no jump."""
        spread = float(np.max(self._std.reference.values)) if len(self._std.reference) else 0.0
        return max(self._floor(self._reward), self.config.spread_floor * spread)

    def _jump(self, view: StepView) -> Condition | None:
        cfg = self.config
        self._reward.push(view.finite("reward/mean"), view.step)
        self._std.push(view.finite("reward/std"), view.step)
        for name, lagged in self._co.items():
            lagged.push(view.finite(name), view.step)
        if not self._reward.ready(cfg.warmup):
            return None
        z = self._reward.z(self._reward_floor())
        jumped = not (z < cfg.z_jump or self._rescaled())
        held = self._jumps.update(jumped, view.step)
        if not jumped:
            return None
        moving = self._co_moving()
        # two co-movers make it red only once the jump has held 3 steps: a composite of z-scores
        # is not a consequence in its own units, a jump that stays with KL and entropy is
        severity = ("yellow", "orange", "red" if held >= 3 else "orange")[min(len(moving), 2)]
        ref = self._reward.median
        now = float(self._reward.recent.mean())
        scale = self._reward.scale(self._reward_floor())
        labels = ", ".join(f"{label} {'up' if sign > 0 else 'down'}" for label, sign in moving)
        evidence = {"reward_now": now, "reward_reference": ref, "z": z, "z_threshold": cfg.z_jump,
                    "co_moving": {label: zc for (label, _), zc in moving.items()},
                    "levels": {label: float(self._co[name].recent.mean())
                               for name, label, _ in CO_MOVERS if len(self._co[name].recent)},
                    "window": cfg.window, "recent": cfg.recent, "signal": "reward",
                    "onset_step": self._reward.onset(lambda v: v - ref >= 2.0 * scale),
                    "top_samples": top_samples(view.samples)}
        with_what = f" with {labels}" if moving else \
            " (KL, entropy and length within their recent range)"
        return Condition(severity, f"reward jumped to {now:.3g} from {ref:.3g} (z {z:+.1f})"
                         f"{with_what}: check the samples for reward hacking", evidence,
                         key="jump", message_zh=f"奖励从 {ref:.3g} 跃升到 {now:.3g}（z {z:+.1f}），"
                         f"同时变化的信号 {len(moving)} 个：检查样本是否存在奖励黑客")

    def _rescaled(self) -> bool:
        """True when the rewards' spread grew with the mean: a scale change, not a hack."""
        if not self._std.ready(self.config.warmup) or self._std.median <= 0:
            return False
        return float(self._std.recent.mean()) >= self.config.scale_ratio * self._std.median

    def _co_moving(self) -> dict[tuple[str, float], float]:
        moving = {}
        for name, label, sign in CO_MOVERS:
            lagged = self._co[name]
            if not lagged.ready(self.config.warmup):
                continue
            zc = lagged.z(self._floor(lagged))
            if sign * zc >= self.config.z_co:
                moving[(label, sign)] = zc
        return moving
