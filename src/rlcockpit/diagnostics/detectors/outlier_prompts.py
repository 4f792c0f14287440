"""Outlier prompts: some prompts consistently receive extreme rewards (001 Q20).

Failure mode: a prompt whose answers the reward model always over-pays (it resembles a high-score
training example, or triggers a shortcut) hijacks PPO toward whatever pleases it; a prompt always
under-paid (a blind spot, a word the reward model dislikes, or a prompt too hard to answer) teaches
the policy to fear that topic (001 Q20). Either way the prompt is a stress point of the reward.
Signal: per step, each sample's reward as a z-score against that step's rewards — centre the
median, scale max(1.4826 · MAD, standard deviation) so discrete rewards with a zero MAD do not
make every miss extreme — averaged per prompt (``prompt_id``, or the prompt text) within the
step; per prompt, the number of steps it appeared in and how many of them were extreme.
Default thresholds: yellow when a prompt appeared in ≥ ``min_appearances`` (3) steps and its
step-mean |z| was ≥ ``z_extreme`` (3) with the same sign in ≥ ``consistency`` (0.8) of them;
key "high" or "low". Steps with fewer than ``min_samples`` (8) samples are not judged.
The evidence lists up to ``max_listed`` (10) prompts with their text, appearances and mean reward.
Practical significance: yellow only — a prompt paid extremely high or low on ≥ 80% of at least 3
appearances is a stress point of the reward to read, not a consequence for the run. The per-step z
divides by max(1.4826 · MAD, std): a binary or sparse reward whose MAD is 0 falls back to its
standard deviation, and a step whose rewards are all equal gives z = 0 (no evidence).
Scale assumptions: none in reward units — a prompt's mean reward as a z-score against the
step's own spread.
False positives: a genuinely impossible or trivially easy prompt (check whether the answers are
actually bad / good); with tiny batches every z is noisy (raise ``min_appearances``).
Fix: read the prompt and its answers; for a high outlier add the prompt and its answers as
adversarial negatives to the reward model's data (or drop the prompt); for a low outlier collect
good answers with high labels and recalibrate the reward model (001 Q20).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from rlcockpit.config import Config, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.windows import MAD_TO_SIGMA, mad, median


@dataclass(frozen=True)
class OutlierPromptsConfig(Config):
    z_extreme: float = option(3.0, help="|z| of a prompt's step-mean reward that counts as "
                              "extreme.", range=(0.5, 1e6))
    min_appearances: int = option(3, help="Steps a prompt must have appeared in.",
                                  range=(1, 100_000))
    consistency: float = option(0.8, help="Share of its appearances that were extreme with the "
                                "same sign.", range=(0.0, 1.0))
    min_samples: int = option(8, help="Steps with fewer samples are not judged.",
                              range=(2, 1_000_000))
    max_listed: int = option(10, help="Prompts listed in the evidence.", range=(1, 1000))
    max_prompts: int = option(200_000, help="Prompts remembered (the oldest are forgotten "
                              "beyond).", range=(100, 100_000_000))


@dataclass
class _Prompt:
    text: str
    seen: int = 0
    high: int = 0
    low: int = 0
    z_sum: float = 0.0
    reward_sum: float = 0.0
    first_extreme: int | None = None


def step_z(rewards: np.ndarray) -> np.ndarray:
    """Each reward's z against the step: (r − median) / max(1.4826 · MAD, std)."""
    scale = max(MAD_TO_SIGMA * mad(rewards), float(rewards.std()), 1e-12)
    return (rewards - median(rewards)) / scale


@register
class OutlierPrompts(Detector):
    name = "outlier_prompts"
    family = "outlier_prompts"
    reads = ()
    reads_samples = True
    patterns = ("outlier_prompts",)
    signal = "prompt reward"
    Config = OutlierPromptsConfig

    def __init__(self, config: OutlierPromptsConfig | None = None) -> None:
        super().__init__(config)
        self._prompts: dict[str, _Prompt] = {}
        self._candidates: set[str] = set()  # prompts with an extreme step: the only ones to check

    def update(self, view: StepView) -> list[Condition] | object:
        scored = [s for s in view.samples if np.isfinite(s.reward)]
        if not scored:
            return SKIPPED
        if len(scored) < self.config.min_samples:
            return []
        self._absorb(scored, view.step)
        return [c for c in (self._condition("high"), self._condition("low")) if c is not None]

    def _absorb(self, scored: list, step: int) -> None:
        cfg = self.config
        zs = step_z(np.asarray([s.reward for s in scored], dtype=float))
        grouped: dict[str, list[int]] = defaultdict(list)
        for i, s in enumerate(scored):
            grouped[s.prompt_id or s.prompt].append(i)
        for pid, idx in grouped.items():
            entry = self._prompts.get(pid)
            if entry is None:
                entry = self._prompts[pid] = _Prompt(scored[idx[0]].prompt[:300])
            z = float(np.mean(zs[idx]))
            entry.seen += 1
            entry.z_sum += z
            entry.reward_sum += float(np.mean([scored[i].reward for i in idx]))
            if abs(z) >= cfg.z_extreme:
                entry.high += z > 0
                entry.low += z < 0
                entry.first_extreme = entry.first_extreme if entry.first_extreme is not None \
                    else step
                self._candidates.add(pid)
        if len(self._prompts) > cfg.max_prompts:
            for pid in list(self._prompts)[: len(self._prompts) // 2]:
                del self._prompts[pid]  # dicts keep insertion order: the oldest go first
                self._candidates.discard(pid)

    def _outliers(self, side: str) -> list[tuple[str, _Prompt]]:
        cfg = self.config
        found = []
        for pid in self._candidates:
            p = self._prompts[pid]
            count = p.high if side == "high" else p.low
            if p.seen >= cfg.min_appearances and count >= cfg.consistency * p.seen:
                found.append((pid, p))
        found.sort(key=lambda item: (-abs(item[1].z_sum / item[1].seen), item[0]))
        return found

    def _condition(self, side: str) -> Condition | None:
        found = self._outliers(side)
        if not found:
            return None
        cfg = self.config
        listed = [{"prompt_id": pid, "prompt": p.text, "appearances": p.seen,
                   "extreme": p.high if side == "high" else p.low,
                   "mean_z": p.z_sum / p.seen, "mean_reward": p.reward_sum / p.seen}
                  for pid, p in found[: cfg.max_listed]]
        onset = min(p.first_extreme for _, p in found if p.first_extreme is not None)
        evidence = {"prompts": listed, "count": len(found), "z_threshold": cfg.z_extreme,
                    "min_appearances": cfg.min_appearances, "signal": "prompt reward",
                    "onset_step": onset}
        word = "high" if side == "high" else "low"
        return Condition("yellow", f"{len(found)} prompt(s) consistently get extremely {word} "
                         f"rewards, e.g. {listed[0]['prompt_id']!r} (mean z "
                         f"{listed[0]['mean_z']:+.1f} over {listed[0]['appearances']} steps)",
                         evidence, key=side,
                         message_zh=f"{len(found)} 个提示持续获得极{'高' if side == 'high' else '低'}"
                         f"奖励，例如 {listed[0]['prompt_id']}")
