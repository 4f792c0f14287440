"""The step's catalog metrics (DESIGN.md §4), computed once per step from whole tensors.

Every name produced here is a catalog name (``rlcockpit.metrics.catalog``); docs/trainer.md lists
which of them the trainer logs and when. Values are plain floats; NaN is allowed (the store keeps
it) and means "not measurable this step" (e.g. explained variance with constant returns).
"""

from __future__ import annotations

import math
import os
import resource
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from rlcockpit.metrics.rl import (
    explained_variance,
    masked_max,
    masked_mean,
    masked_quantile,
    masked_var,
    perplexity,
    sequence_sum,
)
from rlcockpit.metrics.stats import length_stats, repetition_rate
from rlcockpit.trainer.live import LIVE_SPECS, LiveParams
from rlcockpit.trainer.step import StepState

# Every metric the trainer logs, as catalog names (templates keep their <placeholder>). The smoke
# tests check that a real run logs exactly these; docs/trainer.md lists them all.
LOGGED_METRICS: dict[str, str] = {
    "reward/mean": "every step", "reward/std": "every step", "reward/min": "every step",
    "reward/max": "every step", "reward/raw/mean": "every step", "reward/normalized/mean": "every step",
    "reward/<component>/mean": "every step, per component the reward function returns",
    "reward/category/<category>/mean": "every step, per prompt category in the batch",
    "reward/nonfinite_total": "every step", "reward/frac_zero_std_groups": "GRPO",
    "update/skipped_total": "every step",
    "reward/scale": "every step (live)",
    "reward/uncertainty/mean": "every step, when the reward function returns info/uncertainty (reward model)",
    "reward/gated_frac": "every step, with a reward model (info/gated)",
    "reward/fallback_frac": "every step, with a reward model (info/fallback)",
    "reward/rule_rate": "every step, with a reward model (info/rule_fired)",
    "reward/rm_rule_disagreement": "every step, with a reward model (info/disagree)",
    "reward/fusion_alpha": "every step, with a reward model (info/fusion_alpha)",
    "reward/fusion_beta": "every step, with a reward model (info/fusion_beta)",
    "kl/mean": "every step", "kl/token_mean": "every step", "kl/token_max": "every step",
    "kl/token_p99": "every step", "kl/coef": "every step (live / adaptive)", "kl/target": "every step (live; the adaptive controller's target)",
    "kl/pull_share": "GRPO with kl.coef > 0",
    "kl/cycle_delta": "from the second step",
    "policy/entropy": "every step", "policy/entropy_uniform": "every step (log of the actor's vocabulary size)",
    "policy/approx_kl": "every step", "policy/clip_frac": "every step",
    "policy/ratio_mean": "every step", "policy/ratio_max": "every step", "policy/loss": "every step",
    "policy/clip_eps": "every step (live / adaptive)", "policy/entropy_coef": "every step (live)",
    "ppo/epochs": "every step (live)",
    "value/loss": "PPO", "value/mean": "PPO", "value/std": "PPO", "value/explained_var": "PPO",
    "value/clip_frac": "PPO", "value/clip_range": "PPO with ppo.value_clip > 0 (live)",
    "advantage/mean": "every step", "advantage/std": "every step", "advantage/abs_median": "every step",
    "advantage/whitened_std": "every step", "returns/mean": "PPO",
    "response/length_mean": "every step", "response/length_std": "every step", "response/length_max": "every step",
    "response/truncated_frac": "every step", "response/eos_frac": "every step",
    "response/repetition_rate": "every step", "response/ppl": "every step",
    "rollout/temperature": "every step (live)", "rollout/top_p": "every step (live)",
    "rollout/max_new_tokens": "every step (live)",
    "grad/norm/actor": "every step", "grad/norm/critic": "PPO",
    "grad/norm/layer/<name>": "every step, per actor layer group: embedding, block_<i>, head",
    "grad/clip/actor": "every step (live)", "grad/clip/embedding": "every step (live)",
    "grad/clip/critic": "PPO (live)", "update/ratio/actor": "every step", "update/ratio/critic": "PPO",
    "optim/lr/actor": "every step (live x schedule)", "optim/lr/critic": "PPO (live x schedule)",
    "time/<phase>_s": "every step, per phase that ran (init, rollout, score, advantage, update, eval, "
                      "diagnose, hotfix, paused, checkpoint)",
    "perf/tokens_per_s": "every step", "perf/samples_per_s": "every step", "sys/rss_gb": "every step",
    "sys/gpu_mem_gb": "every step on CUDA (allocated at the step's end)",
    "sys/gpu_mem_reserved_gb": "every step on CUDA (the step's peak reserved)",
    "sys/gpu_mem_peak_gb/<phase>": "every step on CUDA, per phase that ran (peak allocated within it)",
    "cost/tokens_generated": "every step", "cost/tokens_trained": "every step",
    "cost/prompt_tokens": "every step", "cost/usd_per_step": "every step when cost.price_per_hour > 0",
    "eval/reward/mean": "at step 0 and every eval.every steps",
    "eval/reward/category/<category>/mean": "at evaluation steps", "eval/accuracy/<category>": "at evaluation "
    "steps, when the reward function returns info/correct",
    "reward/hist": "histogram, every step", "response/length/hist": "histogram, every step",
    "advantage/hist": "histogram, every step", "value/hist": "histogram, PPO",
    "dist/world_size": "data parallel: once, at the start (step 0, or the step a resumed run continues)",
    "dist/step_s/rank/<r>": "data parallel: every step, per rank",
    "dist/time/<phase>_s/rank/<r>": "data parallel: every step, per rank, for rollout, score, advantage, update",
    "dist/grad_norm/rank/<r>": "data parallel: every step, per rank (before the all-reduce and clipping)",
    "dist/rss_gb/rank/<r>": "data parallel: every step, per rank",
    "dist/heartbeat_age_s/rank/<r>": "data parallel: every step, per rank (by rank 0's clock)",
    "dist/param_hash_mismatch": "data parallel: every distributed.hash_every steps",
    "dist/param_hash_checked": "data parallel: 1 at the steps the parameter hashes are compared",
}

# the phases whose time each rank reports (dist/time/<phase>_s/rank/<r>)
RANK_PHASES = ("ROLLOUT", "SCORE", "ADVANTAGE", "UPDATE")


def _mean(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else math.nan


# what a reward model reports per sample (info/<key>, rewards.rm_reward) -> the step's catalog metric
RM_INFO_METRICS = {
    "uncertainty": "reward/uncertainty/mean", "gated": "reward/gated_frac",
    "fallback": "reward/fallback_frac", "rule_fired": "reward/rule_rate",
    "disagree": "reward/rm_rule_disagreement", "fusion_alpha": "reward/fusion_alpha",
    "fusion_beta": "reward/fusion_beta",
}


def reward_metrics(state: StepState, reward_scale: float) -> dict[str, float]:
    scored, rewards = state.scored, state.rewards
    finite = np.isfinite(rewards)
    kept = rewards[finite]
    out = {
        "reward/mean": _mean(rewards),
        "reward/std": float(kept.std()) if kept.size else math.nan,
        "reward/min": float(kept.min()) if kept.size else math.nan,
        "reward/max": float(kept.max()) if kept.size else math.nan,
        "reward/raw/mean": _mean(scored.totals),
        "reward/normalized/mean": float(state.shaped[torch.as_tensor(finite)].mean()) if kept.size else math.nan,
    }
    for name, values in scored.components.items():
        out[f"reward/{name}/mean"] = _mean(values)
    for key, name in RM_INFO_METRICS.items():
        if key in scored.info:
            out[name] = _mean(scored.info[key])
    if "rm_score" in scored.info:  # a reward model: raw = its score before gating, fallback, fusion
        out["reward/raw/mean"] = _mean(scored.info["rm_score"])
    categories = np.asarray([it.category for it in state.items])
    for cat in sorted(set(categories.tolist())):
        out[f"reward/category/{cat}/mean"] = _mean(rewards[categories == cat])
    return out


def kl_metrics(state: StepState) -> dict[str, float]:
    mask = state.mask
    kl = state.token_kl
    return {
        "kl/mean": float(sequence_sum(kl, mask).mean()),
        "kl/token_mean": float(masked_mean(kl, mask)),
        "kl/token_max": masked_max(kl, mask),
        "kl/token_p99": masked_quantile(kl, mask, 0.99),
    }


def response_metrics(state: StepState) -> dict[str, float]:
    mask = state.mask
    lengths = mask.sum(-1).numpy()
    ls = length_stats(lengths)
    truncated = float(state.batch.truncated.float().mean())
    ids = state.batch.response_ids.tolist()
    token_lists = [row[: int(n)] for row, n in zip(ids, lengths, strict=True)]
    return {
        "response/length_mean": ls["mean"], "response/length_std": ls["std"], "response/length_max": ls["max"],
        "response/truncated_frac": truncated, "response/eos_frac": 1.0 - truncated,
        "response/repetition_rate": repetition_rate(token_lists, n=3),
        "response/ppl": perplexity(state.old_logprobs, mask),
    }


def entropy_uniform(model: torch.nn.Module) -> float:
    """log(V) in nats, V the width of the actor's logits (its output embedding, else config.vocab_size): the
    entropy of a uniform next-token distribution, so ``policy/entropy`` can be judged at any vocabulary size."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    width = getattr(head, "out_features", None) or getattr(getattr(model, "config", None), "vocab_size", None)
    return math.log(width) if width and width > 1 else math.nan


def advantage_metrics(state: StepState) -> dict[str, float]:
    mask = state.update_mask
    if not bool((mask != 0).any()):
        return {}
    raw = state.raw_advantages
    out = {
        "advantage/mean": float(masked_mean(state.advantages, mask)),
        "advantage/std": math.sqrt(float(masked_var(raw, mask))),
        "advantage/abs_median": masked_quantile(raw.abs(), mask, 0.5),
        "advantage/whitened_std": math.sqrt(float(masked_var(state.advantages, mask))),
    }
    if state.returns is not None:
        out["returns/mean"] = float(masked_mean(state.returns, mask))
    return out


def value_metrics(state: StepState) -> dict[str, float]:
    if state.values_real is None:
        return {}
    mask = state.update_mask if bool((state.update_mask != 0).any()) else state.mask
    return {
        "value/mean": float(masked_mean(state.values_real, mask)),
        "value/std": math.sqrt(float(masked_var(state.values_real, mask))),
        "value/explained_var": explained_variance(state.values_real, state.returns, mask),
    }


def live_metrics(live: LiveParams, *, kl_coef: float, clip_eps: float, actor_lr: float,
                 critic_lr: float | None, has_critic: bool, adaptive_kl: bool) -> dict[str, float]:
    """The live parameters, logged every step so a change shows on the charts (effective values for the
    ones a controller or schedule moves)."""
    values = live.as_dict()
    out = {LIVE_SPECS[k].metric: float(v) for k, v in values.items()}
    out.update({"kl/coef": kl_coef, "policy/clip_eps": clip_eps, "optim/lr/actor": actor_lr})
    if has_critic and critic_lr is not None:
        out["optim/lr/critic"] = critic_lr
    else:
        for name in ("optim/lr/critic", "value/clip_range", "grad/clip/critic"):
            out.pop(name, None)
    # kl/target is logged with a fixed beta too: it is the level the KL detectors judge against
    # (diagnostics/detectors/_kl.py); only the adaptive controller (adaptive_kl) moves beta towards it.
    if has_critic and live.value_clip <= 0:
        out.pop("value/clip_range", None)  # the catalog: empty when clipping is disabled
    return out


def system_metrics(durations: Mapping[str, float], samples: int, tokens: int, wall_s: float) -> dict[str, float]:
    out = {f"time/{phase.lower()}_s": float(d) for phase, d in durations.items()}
    if wall_s > 0:
        out["perf/tokens_per_s"] = tokens / wall_s
        out["perf/samples_per_s"] = samples / wall_s
    out["sys/rss_gb"] = rss_gb()
    return out


def cost_metrics(generated: int, ppo_epochs: int, prompt_tokens: int, wall_s: float,
                 cost: Any) -> dict[str, float]:
    """The cost ledger's inputs (seed 004, docs/cost.md): tokens generated (response tokens,
    EOS included), tokens trained (each generated token once per PPO epoch), prompt tokens, and
    the step's price when ``cost.price_per_hour`` is set."""
    out = {"cost/tokens_generated": float(generated),
           "cost/tokens_trained": float(generated * ppo_epochs),
           "cost/prompt_tokens": float(prompt_tokens)}
    if cost.price_per_hour > 0:
        out["cost/usd_per_step"] = wall_s / 3600.0 * cost.accelerators * cost.price_per_hour
    return out


def model_size(actor: Any, critic: Any) -> dict[str, int]:
    """Parameter counts N of the models (the cost ledger's FLOPs, docs/cost.md); embeddings
    included, as in the 2N / 6N rule of thumb; and how many of them train (fewer with LoRA)."""
    out = {"actor_params": int(sum(p.numel() for p in actor.parameters())),
           "actor_trainable_params": int(sum(p.numel() for p in actor.parameters() if p.requires_grad))}
    if critic is not None:
        out["critic_params"] = int(sum(p.numel() for p in critic.parameters()))
        out["critic_trainable_params"] = int(sum(p.numel() for p in critic.parameters() if p.requires_grad))
    return out


def rank_metrics(reports: list[Mapping[str, Any]], heartbeat_ages: Mapping[int, float]) -> dict[str, float]:
    """Data parallel: the per-rank metrics from each rank's report (``Trainer._rank_report``, in rank
    order) and the heartbeat ages rank 0 read; the parameter-hash check when the reports carry hashes."""
    out: dict[str, float] = {}
    for r, rep in enumerate(reports):
        out[f"dist/step_s/rank/{r}"] = float(rep["step_s"])
        for phase in RANK_PHASES:
            if phase in rep["time"]:
                out[f"dist/time/{phase.lower()}_s/rank/{r}"] = float(rep["time"][phase])
        out[f"dist/grad_norm/rank/{r}"] = float(rep["grad_norm"])
        out[f"dist/rss_gb/rank/{r}"] = float(rep["rss_gb"])
        if r in heartbeat_ages:
            out[f"dist/heartbeat_age_s/rank/{r}"] = float(heartbeat_ages[r])
    hashes = [rep.get("hash") for rep in reports]
    if all(h is not None for h in hashes):
        out["dist/param_hash_mismatch"] = float(sum(h != hashes[0] for h in hashes))
        out["dist/param_hash_checked"] = 1.0
    return out


def rss_gb() -> float:
    """Current resident memory (Linux /proc), else the peak from getrusage."""
    try:
        with open("/proc/self/statm") as fh:
            pages = int(fh.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 1e9
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # KiB on Linux
