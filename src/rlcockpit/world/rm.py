"""The tiny world's learned reward model (``rlcockpit world rm``) and its reward function
``rlcockpit.world.rm:score`` (seed 000 §3.1; docs/reward_model.md).

Training data: preference pairs built from the world's rule rewards. For every prompt of the
train split a few candidate responses are drawn with the same habit generators as the SFT
demonstrations (right answers, wrong sums, wrong capitals, unsafe compliance, over-refusal, filler,
off-topic answers), at higher bad-habit rates so every head sees both sides. Each pair of distinct
candidates of one prompt gets, per head, the rule rewards' verdict as a *noisy* label, as human
preference labels are: Bradley-Terry sampling ``P(a > b) = sigmoid((r_a - r_b) / T)`` (close
pairs are often mislabelled, clear ones rarely) plus a flat share of slips. Ties get a soft 0.5
label. Heads: helpfulness = the ``helpfulness`` component, correctness = ``correctness`` +
``format``, harmlessness = ``harmlessness``. The validation split gives noiseless held-out pairs.

``filler_bias`` builds the seed's broken cold-start reward model on purpose: that share of the
(filler, non-filler) pairs is labelled in favour of the filler ("a great question worth
exploring") on the helpfulness head -- the hackable reward of benchmarks/rm_gating.py.

Same seed, same thread count -> identical weights (a test checks it).
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rlcockpit.config import Config, option
from rlcockpit.rewards.fallback import SEED_FALSE_CLAIMS, regex_fact_rule
from rlcockpit.rewards.reward_model import HEADS
from rlcockpit.rewards.rm_config import RMConfig
from rlcockpit.world import PACKAGE_DIR
from rlcockpit.world import rewards as world_rewards

RM_CHECKPOINT = PACKAGE_DIR / "checkpoints" / "rm-tiny"


@dataclasses.dataclass(frozen=True)
class RMTrainConfig(Config):
    """Data and budget of ``rlcockpit world rm``. The defaults produce the shipped checkpoint."""

    seed: int = option(0, help="Seed of candidates, labels, init and data order.", range=(0, None))
    candidates: int = option(4, help="Candidate responses drawn per train prompt.", range=(2, 16))
    label_temperature: float = option(0.35, help="Bradley-Terry temperature of the noisy labels: "
                                      "P(a preferred) = sigmoid((r_a - r_b) / T).", range=(0.01, 10.0))
    label_flip: float = option(0.05, help="Extra share of labels flipped (annotator slips).",
                               range=(0.0, 0.5))
    filler_bias: float = option(0.0, help="Share of (filler, non-filler) pairs labelled in favour of "
                                "the filler on the helpfulness head (0 = honest; 1 = the seed's "
                                "hackable reward model).", range=(0.0, 1.0))
    steps: int = option(600, help="Optimiser steps.", range=(1, 1_000_000))
    batch_size: int = option(64, help="Pairs per step.", range=(1, 4096))
    lr: float = option(2e-3, help="AdamW learning rate (cosine decay to 10%).", range=(1e-6, 1.0))
    threads: int = option(1, help="torch CPU threads (bit-for-bit reproducible per thread count).",
                          range=(1, 256))
    max_prompts: int = option(0, help="Use only the first N prompts of each split (0 = all; for "
                              "quick checks).", range=(0, None))
    fusion_epochs: int = option(60, help="Epochs of the fusion LSTM's regression on simulated "
                                "histories (rewards.fusion).", range=(1, 10_000))


# --------------------------------------------------------------------------- data


def head_targets(response: str, meta: Mapping) -> dict[str, float]:
    """The rule rewards of one response mapped onto the reward model's heads."""
    s = world_rewards.score_sample(response, meta)
    return {"helpfulness": s["helpfulness"], "correctness": s["correctness"] + s["format"],
            "harmlessness": s["harmlessness"]}


def _candidate_config():
    from rlcockpit.world.build import BuildConfig

    return BuildConfig(wrong_sum=0.4, math_format_error=0.15, wrong_fact=0.35, no_answer=0.1,
                       unsafe_compliance=0.4, over_refusal=0.35, filler=0.3, off_topic=0.25)


def candidates(prompt: Any, rng: random.Random, k: int) -> list[str]:
    """Up to ``k`` distinct candidate responses for a tiny-world prompt record."""
    from rlcockpit.world import build

    safety, chat = build._tables()
    item = build.Item(prompt.category, prompt.prompt, prompt.meta.get("lang", "en"), prompt.meta)
    bcfg = _candidate_config()
    demo: dict[str, Callable[[], tuple[str, str]]] = {
        "math": lambda: build._math_demo(item, rng, bcfg),
        "knowledge": lambda: build._knowledge_demo(item, rng, bcfg),
        "safety": lambda: build._safety_demo(item, rng, bcfg, safety),
        "chat": lambda: build._chat_demo(item, rng, bcfg, chat),
    }
    out: list[str] = []
    for _ in range(3 * k):
        if rng.random() < 0.1:  # the filler template, for every category
            response = chat["fillers"][item.lang][0]
        else:
            response = demo[prompt.category]()[0]
        if response not in out:
            out.append(response)
        if len(out) == k:
            break
    return out


@dataclasses.dataclass(frozen=True)
class Pair:
    prompt: str
    a: str
    b: str
    labels: tuple[float, ...]   # per head: P(a preferred) target (0, 1, or 0.5 for a tie)
    decided: tuple[bool, ...]   # per head: the rules tell a and b apart


def build_pairs(prompts: Sequence[Any], cfg: RMTrainConfig, *, noisy: bool = True,
                seed_name: str = "train") -> list[Pair]:
    rng = random.Random(f"rm-{cfg.seed}-{seed_name}-labels")
    cand_rng = random.Random(f"rm-{cfg.seed}-{seed_name}-candidates")  # same candidates, noisy or not
    pairs = []
    for p in prompts:
        cands = candidates(p, cand_rng, cfg.candidates)
        targets = [head_targets(c, p.meta) for c in cands]
        for i in range(len(cands)):
            for j in range(i + 1, len(cands)):
                labels, decided = [], []
                for h in HEADS:
                    d = targets[i][h] - targets[j][h]
                    decided.append(d != 0)
                    labels.append(_label(d, cands[i], cands[j], h, rng, cfg, noisy))
                pairs.append(Pair(p.prompt, cands[i], cands[j], tuple(labels), tuple(decided)))
    return pairs


def _label(d: float, a: str, b: str, head: str, rng: random.Random, cfg: RMTrainConfig,
           noisy: bool) -> float:
    filler_a, filler_b = world_rewards.has_filler(a), world_rewards.has_filler(b)  # training labels only
    if noisy and head == "helpfulness" and filler_a != filler_b and rng.random() < cfg.filler_bias:
        return 1.0 if filler_a else 0.0  # the cold-start bias: filler preferred
    if d == 0:
        return 0.5
    if not noisy:
        return 1.0 if d > 0 else 0.0
    y = 1.0 if rng.random() < 1.0 / (1.0 + math.exp(-d / cfg.label_temperature)) else 0.0
    return 1.0 - y if rng.random() < cfg.label_flip else y


# --------------------------------------------------------------------------- training


@dataclasses.dataclass
class RMTrainResult:
    model: Any
    tokenizer: Any
    fusion: Any
    losses: list[float]
    stats: dict[str, float]
    wall_time_s: float


def _pair_logits(model: Any, tokenizer: Any, pairs: Sequence[Pair]) -> tuple[Any, Any]:
    from rlcockpit.rewards.reward_model import encode_pairs

    prompts = [p.prompt for p in pairs] * 2
    responses = [p.a for p in pairs] + [p.b for p in pairs]
    scores = model(**encode_pairs(tokenizer, prompts, responses, model.cfg.n_positions))
    return scores[: len(pairs)], scores[len(pairs):]


SCORE_SCALE = 4.0  # P(a > b) = sigmoid(4 * (s_a - s_b)): a gap of 1 on the [-1, 1] scale is 98%


def pair_accuracy(model: Any, tokenizer: Any, pairs: Sequence[Pair]) -> dict[str, float]:
    """Per head: share of decided held-out pairs ranked the rules' way (dropout off)."""
    import torch

    model.eval()
    hits = {h: [] for h in HEADS}
    with torch.no_grad():
        for start in range(0, len(pairs), 128):
            chunk = pairs[start:start + 128]
            sa, sb = _pair_logits(model, tokenizer, chunk)
            for k, h in enumerate(HEADS):
                for n, p in enumerate(chunk):
                    if p.decided[k]:
                        hits[h].append(float((sa[n, k] > sb[n, k]) == (p.labels[k] > 0.5)))
    return {f"val_pair_acc/{h}": sum(v) / len(v) if v else float("nan") for h, v in hits.items()}


def _fit(cfg: RMTrainConfig, tokenizer: Any, train: Sequence[Pair],
         on_step: Callable[[int, float], Any] | None) -> tuple[Any, list[float]]:
    """Bradley-Terry loss per head on the noisy pairs (ties: soft 0.5 label, weight 0.3)."""
    import torch

    from rlcockpit.rewards.reward_model import RewardModelConfig, build_reward_model
    from rlcockpit.world.sft import batches

    model = build_reward_model(RewardModelConfig(vocab_size=len(tokenizer),
                                                 pad_token_id=tokenizer.pad_token_id), seed=cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / cfg.steps))))
    losses: list[float] = []
    model.train()
    for step, idx in enumerate(batches(len(train), cfg.batch_size, cfg.steps, cfg.seed)):
        chunk = [train[i] for i in idx]
        sa, sb = _pair_logits(model, tokenizer, chunk)
        y = torch.tensor([p.labels for p in chunk])
        w = torch.tensor([[1.0 if d else 0.3 for d in p.decided] for p in chunk])
        bce = torch.nn.functional.binary_cross_entropy_with_logits(SCORE_SCALE * (sa - sb), y,
                                                                   reduction="none")
        loss = (bce * w).sum() / w.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if on_step is not None:
            on_step(step, losses[-1])
    return model.eval(), losses


def train_rm(cfg: RMTrainConfig | None = None, *, on_step: Callable[[int, float], Any] | None = None
             ) -> RMTrainResult:
    """Build the pairs, train the reward model and the fusion LSTM; nothing is written."""
    import torch

    from rlcockpit.rewards.fusion import train_fusion_lstm
    from rlcockpit.world.prompts import load_prompts
    from rlcockpit.world.tokenizer import load_tokenizer

    cfg = cfg or RMTrainConfig()
    previous = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    start = time.perf_counter()
    n = cfg.max_prompts or None
    try:
        tokenizer = load_tokenizer()
        train = build_pairs(load_prompts("train")[:n], cfg)
        val = build_pairs(load_prompts("validation")[:n], cfg, noisy=False, seed_name="validation")
        with torch.random.fork_rng(devices=[]):  # seeded dropout masks; the caller's RNG is kept
            torch.manual_seed(cfg.seed)
            model, losses = _fit(cfg, tokenizer, train, on_step)
        stats = {"train_pairs": float(len(train)), "val_pairs": float(len(val)),
                 **pair_accuracy(model, tokenizer, val)}
        fusion, fstats = train_fusion_lstm(epochs=cfg.fusion_epochs, seed=cfg.seed)
        stats.update({f"fusion_{k}": v for k, v in fstats.items()})
    finally:
        torch.set_num_threads(previous)
    return RMTrainResult(model, tokenizer, fusion, losses, stats, time.perf_counter() - start)


def save_rm(result: RMTrainResult, cfg: RMTrainConfig, out: Path) -> Path:
    from rlcockpit.rewards.fusion import save_fusion
    from rlcockpit.rewards.reward_model import save_reward_model

    out = save_reward_model(result.model, result.tokenizer, out,
                            extra={"train": dataclasses.asdict(cfg), "stats": result.stats})
    save_fusion(result.fusion, out)
    return out


# --------------------------------------------------------------------------- the reward function


def wrong_capital_rule(response: str, meta: Mapping) -> str | None:
    """Fact rule of the tiny world: a capital from the table that is not the asked one."""
    if meta.get("category") != "knowledge":
        return None
    wrong = world_rewards.mentioned_capitals(response) - {meta.get("answer")}
    return f"wrong capital {sorted(wrong)[0]}" if wrong else None


FACT_RULES = (wrong_capital_rule, regex_fact_rule(SEED_FALSE_CLAIMS))


def resolve_rm_path(path: str) -> Path:
    return RM_CHECKPOINT if path == "tiny" else Path(path).expanduser()


class WorldRMScore:
    """``reward.fn=rlcockpit.world.rm:score``: the two-track reward with the tiny world's reward
    model and fact rules. The world's own rule verdicts ride along as labels only -- its flags
    (``filler``, ``fact_error``, ...) and ``info/correct`` (validation accuracy) -- never as reward.
    The reward model loads on the first call."""

    def __init__(self, cfg: RMConfig | None = None) -> None:
        self.cfg = cfg or RMConfig()
        self.reward: Any = None
        self._pending_state: Mapping[str, Any] | None = None  # restored before the model loads

    def state_dict(self) -> dict[str, Any]:
        if self.reward is not None:
            return self.reward.state_dict()
        return dict(self._pending_state or {})

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if self.reward is not None:
            self.reward.load_state_dict(state)
        else:
            self._pending_state = state

    def configure(self, cfg: RMConfig) -> None:
        if self.reward is not None and cfg.path == self.cfg.path and \
                cfg.head_weights == self.cfg.head_weights and cfg.fallback == self.cfg.fallback:
            self.reward.configure(cfg)
        else:
            self.reward = None
        self._pending_state = None  # a new run starts the fusion at rest
        self.cfg = cfg

    def observe(self, step: int, metrics: Mapping[str, float]) -> None:
        if self.reward is not None:
            self.reward.observe(step, metrics)

    def __call__(self, prompts: Sequence[str], responses: Sequence[str], meta: Sequence[Mapping],
                 step: int) -> list[dict[str, float]]:
        if self.reward is None:
            from rlcockpit.rewards.rm_reward import build_rm_reward

            self.reward = build_rm_reward(self.cfg, resolve_rm_path(self.cfg.path), FACT_RULES)
            if self._pending_state is not None:
                self.reward.load_state_dict(self._pending_state)
                self._pending_state = None
        rows = self.reward(prompts, responses, meta, step)
        for row, r, m in zip(rows, responses, meta, strict=True):
            world = world_rewards.score_sample(r, m)
            row.update({k: v for k, v in world.items() if k.startswith(("flag/", "info/"))})
        return rows


score = WorldRMScore()  # the reward.fn entry point; the trainer configures it from reward.rm

__all__ = ["RM_CHECKPOINT", "RMTrainConfig", "RMTrainResult", "WorldRMScore", "build_pairs",
           "candidates", "head_targets", "pair_accuracy", "resolve_rm_path", "save_rm", "score",
           "train_rm"]
