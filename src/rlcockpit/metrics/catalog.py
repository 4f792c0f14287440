"""The metric catalog: every canonical metric name, its unit, meaning and healthy trend.

This is the only place metric names are defined (DESIGN.md §4). Names are slash-separated,
lowercase, stat suffix last; templated names write their variable part in angle brackets
(``reward/category/<category>/mean``) and :func:`spec_for` matches concrete names against them.
``python -m rlcockpit.metrics.catalog`` prints the Markdown reference; ``docs/metrics.md`` is that
output and a test fails when the two differ. Standard library only.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

TRENDS = ("up", "down", "flat", "band", "none")

TREND_MEANING = {
    "up": "higher is healthier; a sustained fall is the warning",
    "down": "lower is healthier; a rise or spike is the warning",
    "flat": "healthy when steady; jumps or drifts are the warning",
    "band": "healthy inside a range; both too low and too high are warnings",
    "none": "a setting or context value; no healthy direction (charted so changes are visible)",
}

GROUPS = (
    "reward", "kl", "policy", "value", "advantage", "response", "rollout", "gradients",
    "optimiser", "system", "evaluation", "distributed", "histograms",
)


@dataclass(frozen=True)
class MetricSpec:
    """One catalog entry. ``trend`` is the healthy direction (see :data:`TREND_MEANING`)."""

    name: str
    unit: str
    help: str
    trend: str
    group: str

    def __post_init__(self) -> None:
        if self.trend not in TRENDS:
            raise ValueError(f"{self.name}: trend {self.trend!r} is not one of {TRENDS}")
        if self.group not in GROUPS:
            raise ValueError(f"{self.name}: group {self.group!r} is not one of {GROUPS}")
        if self.name != self.name.lower() or self.name.startswith("/") or "//" in self.name:
            raise ValueError(f"metric name {self.name!r} must be lowercase and slash-separated")

    @property
    def is_template(self) -> bool:
        return "<" in self.name


def _specs(group: str, rows: list[tuple[str, str, str, str]]) -> list[MetricSpec]:
    return [MetricSpec(name, unit, help_text, trend, group) for name, unit, trend, help_text in rows]


_REWARD = _specs("reward", [
    ("reward/mean", "reward", "up",
     "Mean final reward of this step's rollout samples (after gating, fallback, fusion and "
     "reward/scale; before running normalisation). Healthy: rises, then plateaus; a fast rise "
     "together with rising kl/mean and falling policy/entropy suggests reward hacking."),
    ("reward/std", "reward", "band",
     "Standard deviation of the final reward across the step's samples. Healthy: clearly above 0 "
     "(the batch still separates good from bad) and without spikes; seed 000 §4.1 saw a reward "
     "collapse as std jumping from < 0.05 to 0.18."),
    ("reward/min", "reward", "none",
     "Smallest final reward in the step. Context for reward/mean; a sudden drop points to a "
     "broken sample or reward component."),
    ("reward/max", "reward", "none",
     "Largest final reward in the step. A max far above the rest often marks the first "
     "reward-hacking samples; open them in the sample explorer."),
    ("reward/raw/mean", "reward", "up",
     "Mean reward-model score before gating, fallback, fusion and scaling. Healthy: follows "
     "reward/mean; a gap that opens means gating or fallback is doing the work."),
    ("reward/<component>/mean", "reward", "up",
     "Mean sub-score of one reward component (e.g. helpfulness, truthfulness, harmlessness, or "
     "a rule reward) over the step's samples. Healthy: components rise together; one component "
     "moving alone exposes a biased head (seed 000 §4.1)."),
    ("reward/category/<category>/mean", "reward", "up",
     "Mean final reward of the step's samples whose prompt is in <category> (math, knowledge, "
     "safety, chat, ...). Healthy: every category improves; one category falling while the "
     "total rises is a trade-off to look at."),
    ("reward/uncertainty/mean", "score std", "down",
     "Mean reward-model uncertainty: the std of repeated MC-dropout scores of each sample "
     "(seed 000 §3.1), averaged over samples. Healthy: low and steady, below the gate (0.15)."),
    ("reward/gated_frac", "fraction", "down",
     "Share of samples whose reward-model score was down-weighted because its uncertainty "
     "exceeded the gate (seed 000 §3.1). Healthy: small (< 0.1); seed 000 saw 0.3 before fixes."),
    ("reward/fallback_frac", "fraction", "down",
     "Share of samples scored by the rule fallback instead of the reward model (high "
     "uncertainty or a rule fired). Healthy: small and steady; a rise means the reward model "
     "is losing confidence on the current outputs."),
    ("reward/rule_rate", "fraction", "down",
     "Share of samples on which a rule of the fallback scorer fired (fact error, template / "
     "filler answer, off topic; seed 000 §3.1). One of the fusion LSTM's inputs. Healthy: small; "
     "a rise means the policy is learning what the rules forbid -- often reward hacking."),
    ("reward/rm_rule_disagreement", "fraction", "down",
     "Share of samples on which a fallback rule fired although the reward model scores them "
     "above the step's median (the model pays what a rule forbids). Healthy: small and steady; "
     "a rise means the reward model is being exploited or has drifted."),
    ("reward/fusion_alpha", "weight", "none",
     "Weight alpha of the reward-model score in final = alpha * rm + beta * rule, predicted each "
     "step by the fusion LSTM from the last 10 steps (seed 000 §3.1). 0.8 at rest."),
    ("reward/fusion_beta", "weight", "none",
     "Weight beta of the rule judgment in the fusion (1 - alpha). The seed's LSTM raised it from "
     "0.2 to 0.6 when the entropy collapsed: a rise means the rules are taking over."),
    ("reward/frac_zero_std_groups", "fraction", "down",
     "GRPO: share of prompt groups whose samples all got the same reward, so their "
     "group-normalised advantages are 0 and they teach nothing. Healthy: well below 0.5; near "
     "1 means prompts are too easy or too hard for the policy."),
    ("reward/nonfinite_total", "samples", "flat",
     "Running count of samples dropped because their reward was NaN or inf. Healthy: stays 0; "
     "any increase points to a broken reward function or reward model."),
    ("reward/scale", "multiplier", "none",
     "Live parameter: the factor applied to rewards before advantages (seed 000 §4.3: raising it "
     "to 2.0 without re-tuning clipping caused a KL blow-up). Logged each step."),
    ("reward/normalized/mean", "std units", "flat",
     "Mean reward after running normalisation (r - mu) / (sigma + 1e-8) with the running mean "
     "and std of all rewards so far (seed 000 §4.2). Healthy: near 0; a steady climb means "
     "rewards improve faster than the running statistics follow."),
])

_KL = _specs("kl", [
    ("kl/mean", "nats", "band",
     "Sum over response tokens of the token KL vs the reference model, averaged over samples "
     "(k1 estimator log pi - log pi_ref unless configured). Healthy: near kl/target, e.g. "
     "0.5-3 for chat (seed 002 §1.1); a sustained climb is drift or reward hacking."),
    ("kl/token_mean", "nats", "band",
     "Mean token KL vs the reference over all valid response tokens of the step. Healthy: small "
     "and steady; compare with kl/mean to tell longer answers from per-token drift."),
    ("kl/token_max", "nats", "down",
     "Largest single-token KL vs the reference in the step. A spike here with a calm kl/mean is "
     "a token-level KL spike (orange tier): the batch is saved for review. Healthy: a few nats "
     "at most, without spikes."),
    ("kl/token_p99", "nats", "down",
     "99th percentile of the token KL vs the reference over valid response tokens. Healthy: "
     "steady; a rising tail precedes a rising kl/mean."),
    ("kl/coef", "beta", "none",
     "KL penalty coefficient beta in r_t = -beta * KL_t (+ sequence reward on the last token). "
     "Live parameter; moved by the adaptive controller (Ziegler et al. 2019) toward kl/target."),
    ("kl/target", "nats", "none",
     "Target sequence KL: the adaptive KL controller moves beta toward it; with a fixed beta it is "
     "the level the KL detectors judge against. The warning line on the KL chart. Live parameter."),
    ("kl/ref_sync_every", "steps", "none",
     "Period N of an intended reference update: the run mixes the actor into the reference model "
     "every N steps (TRL sync_ref_model, ref_model_sync_steps). A KL drop right after step kN is "
     "that update, not a reference synced by mistake (kl_zero)."),
    ("kl/pull_share", "fraction", "down",
     "Where the KL is a loss term (GRPO): beta x mean |d KL_t / d log pi_t| over that + mean |A_t|, "
     "the share of the per-token gradient weight that pulls back to the reference. Healthy: a few "
     "percent; above 0.5 the penalty outweighs the advantages and the policy cannot move."),
    ("kl/cycle_delta", "nats", "flat",
     "KL growth over one PPO cycle: kl/mean at this step minus kl/mean at the previous step. "
     "Healthy: around 0; a run of positive values is a steady drift from the reference."),
])

_POLICY = _specs("policy", [
    ("policy/entropy", "nats", "band",
     "Masked mean over response tokens of the actor's token entropy, computed from the logits "
     "(logsumexp form) during the update. Healthy: slow decline; a cliff (> 0.5 in 100 steps) is "
     "entropy collapse, a rise is the policy turning random."),
    ("policy/entropy_uniform", "nats", "none",
     "Entropy of a uniform distribution over the actor's vocabulary, log(vocabulary size): the "
     "largest value policy/entropy can take (6.93 for 1,024 tokens, 11.9 for 151,936). A setting "
     "logged every step so detectors can judge policy/entropy in units that hold at any scale; "
     "an entropy near it means the policy samples noise."),
    ("policy/approx_kl", "nats", "band",
     "KL(old || new) between the rollout policy and the updated policy, k3 estimator "
     "(ratio - 1) - log ratio averaged over valid tokens. Healthy: about 0.001-0.02 per update; "
     "higher means the step is too large (lower the learning rate or epochs)."),
    ("policy/clip_frac", "fraction", "band",
     "Share of valid tokens whose ratio pi_new / pi_old left [1 - eps, 1 + eps]. Healthy: about "
     "0.05-0.2; near 0 the clip never acts, above 0.3 updates are too aggressive."),
    ("policy/ratio_mean", "ratio", "flat",
     "Mean importance ratio pi_new / pi_old over valid tokens. Healthy: close to 1.0 "
     "(seed 003 §4.2: 0.8-1.2 with clipping)."),
    ("policy/ratio_max", "ratio", "down",
     "Largest importance ratio over valid tokens. Healthy: a small multiple of 1; seed 003 saw "
     "ratios above 5 just before the loss went NaN."),
    ("policy/loss", "loss", "flat",
     "Clipped surrogate loss: masked mean of max(-A * r, -A * clip(r, 1 - eps, 1 + eps)). Its "
     "level says little; healthy means no spikes and no NaN."),
    ("policy/clip_eps", "epsilon", "none",
     "Clip epsilon in use (live parameter; adaptive from the entropy slope, seed 000 §3.2: "
     "eps = base * (1 + 2 tanh(10 * slope)), clamped)."),
    ("policy/entropy_coef", "coefficient", "none",
     "Live parameter: weight of the entropy bonus in the actor loss (seed 003 §4.3: ~0.01; too "
     "large makes outputs random)."),
    ("ppo/epochs", "epochs", "none",
     "Live parameter: passes over each rollout batch in UPDATE (seed 003 §5.4: 2-4; more drifts "
     "the policy from the sampling distribution)."),
])

_VALUE = _specs("value", [
    ("value/loss", "loss", "down",
     "Clipped value loss 0.5 * mean max((v - R)^2, (v_old + clip(v - v_old, -c, c) - R)^2) over "
     "valid tokens. Healthy: falls then settles; very low with flat reward means the critic "
     "overfits (seed 000 §4.2)."),
    ("value/mean", "return", "none",
     "Mean critic value over valid response tokens at rollout time. Should track returns/mean."),
    ("value/std", "return", "none",
     "Std of critic values over valid response tokens. Near 0 means the critic predicts a "
     "constant."),
    ("value/explained_var", "fraction", "up",
     "1 - Var[R - V] / Var[R] over valid tokens: how much of the return variance the critic "
     "explains. Healthy: rising toward 1; below 0 the critic is worse than a constant."),
    ("value/clip_frac", "fraction", "down",
     "Share of valid tokens where |v - v_old| exceeded the value clip range. Healthy: small."),
    ("value/max", "return", "none",
     "Largest critic value over the step's valid response tokens at rollout time. Context for "
     "value/mean; values far outside the returns' range mean the critic extrapolates."),
    ("value/min", "return", "none",
     "Smallest critic value over the step's valid response tokens at rollout time. Context for "
     "value/mean and value/max."),
    ("value/clip_range", "return", "none",
     "Live parameter: value clip range c of the clipped value loss (empty when disabled)."),
])

_ADVANTAGE = _specs("advantage", [
    ("advantage/mean", "advantage", "flat",
     "Mean advantage over valid tokens (GAE for PPO, group-normalised for GRPO), after "
     "whitening. Healthy: near 0; mostly negative values mean the critic sits too high."),
    ("advantage/std", "advantage", "band",
     "Std of the advantages over valid tokens before whitening. Healthy: steady; near 0 the "
     "policy gets no signal, spikes come from reward outliers."),
    ("advantage/abs_median", "advantage", "band",
     "Median of |advantage| over valid tokens before whitening. Seed 000 §4.2: a fall from 0.31 "
     "to 0.08 was the critic-overfit signal; healthy stays steady."),
    ("advantage/whitened_std", "advantage", "flat",
     "Std of the advantages after whitening. Healthy: 1 (0 when every advantage is equal)."),
    ("advantage/max", "advantage", "none",
     "Largest advantage over the step's valid tokens (after whitening where the trainer whitens). "
     "Context for advantage/mean; a far outlier points to one sample dominating the update."),
    ("advantage/min", "advantage", "none",
     "Smallest advantage over the step's valid tokens (after whitening where the trainer "
     "whitens). Context for advantage/mean and advantage/max."),
    ("returns/mean", "return", "up",
     "Mean GAE return (advantage + value) over valid tokens: the critic's target. Healthy: "
     "follows reward/mean upward."),
    ("returns/max", "return", "none",
     "Largest return over the step's valid tokens. Context for returns/mean (a return far above "
     "the rest is a reward outlier)."),
    ("returns/min", "return", "none",
     "Smallest return over the step's valid tokens. Context for returns/mean and returns/max."),
])

_RESPONSE = _specs("response", [
    ("response/length_mean", "tokens", "band",
     "Mean number of generated response tokens per sample. Healthy: steady or slowly changing; "
     "sudden growth (> mean + 3 std) is an early collapse signal (seed 002 §1.3)."),
    ("response/length_std", "tokens", "band",
     "Std of response lengths in the step. Healthy: steady; a collapse to 0 means every answer "
     "has the same shape."),
    ("response/length_min", "tokens", "none",
     "Shortest response in the step; 0 or 1 means some samples answered nothing (look at them "
     "in the sample explorer)."),
    ("response/length_max", "tokens", "none",
     "Longest response in the step; equal to rollout/max_new_tokens when something ran on."),
    ("response/truncated_frac", "fraction", "down",
     "Share of responses cut at max_new_tokens without an end-of-sequence token. Healthy: small; "
     "a rise means run-on or looping outputs."),
    ("response/eos_frac", "fraction", "up",
     "Share of responses that ended with an end-of-sequence token. Healthy: near 1."),
    ("response/repetition_rate", "fraction", "down",
     "Mean over responses of the share of token 3-grams that repeat an earlier 3-gram of the same "
     "response. Healthy: low and steady; a rise is degenerate, looping text."),
    ("response/ppl", "perplexity", "band",
     "exp(-mean token logprob) over all valid response tokens under the rollout policy. "
     "Healthy: slowly falling; a sudden drop is more dangerous than a rise: the model repeats "
     "one confident pattern (seed 002 §1.2)."),
])

_ROLLOUT = _specs("rollout", [
    ("rollout/temperature", "temperature", "none",
     "Live parameter: sampling temperature of ROLLOUT (seed 003 §5.3 uses 0.7)."),
    ("rollout/top_p", "probability", "none",
     "Live parameter: nucleus sampling threshold of ROLLOUT (1.0 = off)."),
    ("rollout/max_new_tokens", "tokens", "none",
     "Live parameter: response length limit of ROLLOUT; see response/truncated_frac."),
    ("prompt/length_mean", "tokens", "none",
     "Mean prompt length in tokens over the step's samples. Context: longer prompts cost prefill "
     "time and can crowd the response out of the context window."),
    ("prompt/length_max", "tokens", "none",
     "Longest prompt of the step in tokens; equal to the trainer's prompt limit when prompts were "
     "cut (see prompt/clip_frac)."),
    ("prompt/length_min", "tokens", "none",
     "Shortest prompt of the step in tokens. Context for prompt/length_mean."),
    ("prompt/clip_frac", "fraction", "down",
     "Share of the step's prompts whose length equals the trainer's prompt limit (cut to fit, or "
     "exactly that long). Healthy: near 0; a cut prompt may have lost the question itself."),
])

_GRADIENTS = _specs("gradients", [
    ("grad/norm/actor", "L2 norm", "flat",
     "Global L2 norm of the actor gradient before clipping, per optimiser step (averaged over "
     "the step's minibatches). Healthy: steady; spikes precede KL blow-ups."),
    ("grad/norm/critic", "L2 norm", "flat",
     "Global L2 norm of the critic gradient before clipping. Healthy: steady."),
    ("grad/norm/layer/<name>", "L2 norm", "flat",
     "L2 norm of the gradient of one layer group <name> (embedding, block i, head). Seed 000 "
     "§4.3: an embedding gradient norm of 12.7 (normal < 2.0) located a KL blow-up. Healthy: "
     "each layer steady and of the same order as its neighbours."),
    ("grad/clip/actor", "L2 norm", "none",
     "Live parameter: max gradient norm of the actor (clip_grad_norm_), default 1.0."),
    ("grad/clip/embedding", "L2 norm", "none",
     "Live parameter: separate max gradient norm for the embedding layer (seed 000 §4.3: 3.0 "
     "for embeddings, 1.0 for the rest)."),
    ("grad/clip/critic", "L2 norm", "none",
     "Live parameter: max gradient norm of the critic (clip_grad_norm_ before each critic "
     "optimiser step)."),
    ("update/skipped_total", "steps", "flat",
     "Running count of optimizer steps skipped because a loss or gradient norm was NaN or inf "
     "(the trainer's built-in guard drops those gradients and goes on). Healthy: stays 0."),
    ("update/ratio/actor", "ratio", "band",
     "||delta theta|| / ||theta|| of the actor parameters over the step's updates. Healthy: "
     "around 1e-4 to 1e-2; larger means the learning rate is too high."),
    ("update/ratio/critic", "ratio", "band",
     "||delta theta|| / ||theta|| of the critic parameters over the step's updates. Healthy: "
     "small and steady, like update/ratio/actor."),
])

_OPTIMISER = _specs("optimiser", [
    ("optim/lr/actor", "learning rate", "none",
     "Actor learning rate at this step (schedule times any live scale)."),
    ("optim/lr/critic", "learning rate", "none",
     "Critic learning rate at this step (seed 000 §5: about 1/3 of the policy's when the critic "
     "overfits)."),
])

_SYSTEM = _specs("system", [
    ("time/<phase>_s", "seconds", "down",
     "Wall time of one trainer phase (rollout, score, advantage, update, eval, diagnose, "
     "hotfix) in this step. Healthy: steady; a jump in rollout time is often memory pressure."),
    ("time/step_s", "seconds", "down",
     "Wall time of the whole step (all phases, waits included), as the trainer measured it. The "
     "rate and time axes of imported runs are built from it when the log carries no clock. "
     "Healthy: steady; a creeping rise is often longer responses or memory pressure."),
    ("time/<phase>_ms_per_token", "ms/token", "down",
     "Milliseconds per token of one phase: the phase's wall time over the tokens it processed "
     "(verl: response tokens for generation, prompt + response tokens for the others). Healthy: "
     "steady; a rise at constant lengths means the phase itself got slower."),
    ("perf/total_tokens", "tokens", "none",
     "Tokens (prompt + response, padding excluded) of all the step's samples: the work of the "
     "step. Divided by time/step_s it gives the step's token throughput."),
    ("perf/tokens_per_s_per_gpu", "tokens/s/GPU", "up",
     "perf/total_tokens over (time/step_s x number of GPUs): throughput normalised per "
     "accelerator (verl's perf/throughput). Healthy: steady across steps and runs of one setup."),
    ("perf/mfu/<role>", "fraction", "up",
     "Model FLOPs utilisation of one worker role (actor, critic...) in its update: estimated "
     "FLOPs per second over the accelerators' promised peak. Healthy: steady; low values mean "
     "the update waits on memory, communication or small batches."),
    ("perf/tokens_per_s", "tokens/s", "up",
     "Response tokens processed per second of the step's wall time: generated once plus "
     "trained once per PPO epoch. Healthy: steady; time/<phase>_s shows where a fall comes "
     "from."),
    ("perf/samples_per_s", "samples/s", "up",
     "Rollout samples of the step divided by the step's wall time. Healthy: steady."),
    ("sys/rss_gb", "GB", "flat",
     "Resident memory of the trainer process. Healthy: flat; steady growth is a leak."),
    ("sys/gpu_mem_gb", "GB", "flat",
     "GPU memory allocated by torch (0 on CPU). Healthy: flat below the device size."),
    ("sys/gpu_mem_reserved_gb", "GB", "flat",
     "Peak GPU memory reserved by the torch caching allocator (allocated plus cached blocks). "
     "Healthy: flat below the device size; growing far above sys/gpu_mem_gb is fragmentation."),
    ("sys/gpu_mem_peak_gb/<phase>", "GB", "flat",
     "Peak GPU memory allocated by torch within one trainer phase of the step (rollout, score, "
     "update, ...; CUDA only). Healthy: flat below the device size; the phase nearest the limit "
     "is where micro-batches, gradient checkpointing or LoRA save the most."),
    ("sys/gpu_util", "fraction", "up",
     "GPU utilisation averaged over the step (0 on CPU). Healthy: high during rollout and "
     "update; low values mean the GPU waits on data or the host."),
    ("cost/usd_per_step", "USD", "down",
     "Estimated cost of the step: wall time times accelerators times the configured hourly "
     "price (cost.price_per_hour; docs/cost.md). Healthy: flat or falling; a rise usually "
     "follows longer responses or slower phases."),
    ("cost/tokens_generated", "tokens", "none",
     "Response tokens sampled in the step (EOS included, padding excluded): the cost ledger's "
     "2N FLOPs per token (seed 004 §1). Falls when a sampling schedule lowers "
     "rollout.n_samples."),
    ("cost/tokens_trained", "tokens", "none",
     "Response tokens the update trained on: tokens_generated times ppo.epochs (6N FLOPs per "
     "token in the ledger)."),
    ("cost/prompt_tokens", "tokens", "none",
     "Prompt tokens of the step's samples (each prompt counted once per sample): prefill work "
     "the ledger reports next to the generated tokens."),
    ("telemetry/dropped_total", "records", "flat",
     "Running count of telemetry records dropped (full queue or store error). Telemetry never "
     "blocks training, so it counts what it lost. Healthy: stays 0."),
    ("telemetry/missing_steps", "steps", "flat",
     "Steps the run logged that are not in the store: kept in the telemetry spool while the store "
     "could not be written, or lost when the spool was full too (docs/telemetry.md). Healthy: 0; "
     "back to 0 once the spool is replayed or a resumed run logged the steps again."),
])

_EVALUATION = _specs("evaluation", [
    ("eval/reward/mean", "reward", "up",
     "Mean reward on the fixed validation prompts with a fixed sampling seed. Healthy: rises "
     "with reward/mean; a gap that opens is overfitting to the training prompts."),
    ("eval/reward/category/<category>/mean", "reward", "up",
     "Mean validation reward of the prompts in <category>. Healthy: rises with "
     "reward/category/<category>/mean; a falling category is a regression."),
    ("eval/accuracy/<category>", "fraction", "up",
     "Share of validation prompts in <category> answered correctly by its rule check (mean of "
     "the info/correct verdict, e.g. the exact math answer). Healthy: rises."),
])

_DISTRIBUTED = _specs("distributed", [
    # Data-parallel runs (docs/distributed.md): rank 0 gathers every rank's numbers each step and
    # writes them once, as ordinary metrics of the one run; a single-process run logs none.
    ("dist/world_size", "ranks", "none",
     "Number of data-parallel ranks (processes) of the run. Logged once at the start; 1 or absent "
     "for a single-process run."),
    ("dist/step_s/rank/<r>", "seconds", "flat",
     "Wall time of the whole step on rank <r>. Collectives make every rank wait for the slowest, so "
     "the ranks' step times agree even when one rank is slow: dist/time/<phase>_s/rank/<r> shows "
     "which rank and phase hold the others back. Healthy: steady and equal across ranks."),
    ("dist/time/<phase>_s/rank/<r>", "seconds", "flat",
     "Rank <r>'s own duration of one phase (rollout, score, advantage, update) in this step, "
     "waits at collectives included. Healthy: ranks within a few tens of percent of each other; one "
     "rank persistently slower in a phase is a straggler (the others' wait then shows in the next "
     "phase that holds a collective)."),
    ("dist/grad_norm/rank/<r>", "L2 norm", "flat",
     "Rank <r>'s local actor gradient norm before the all-reduce and before clipping (its own shard "
     "of the batch). Healthy: ranks of the same order (their shards differ, so not equal); one rank "
     "far above or below the others has bad data, diverged parameters or bad hardware (001 Q14)."),
    ("dist/rss_gb/rank/<r>", "GB", "flat",
     "Resident memory of rank <r>'s process. Healthy: flat and similar across ranks; one rank "
     "growing alone is a leak on that rank (its data shard, its own buffers)."),
    ("dist/heartbeat_age_s/rank/<r>", "seconds", "down",
     "Seconds since rank <r>'s last heartbeat as seen by rank 0's monitor when it logs the step. "
     "Healthy: below a few step times; a growing age means the rank is hung or dead."),
    ("dist/param_hash_mismatch", "ranks", "flat",
     "Number of ranks whose parameter hash differs from rank 0's, logged at the steps where the "
     "hashes are compared (every distributed.hash_every steps). Healthy: 0; any other value means "
     "the ranks no longer train the same model (001 Q13)."),
    ("dist/param_hash_checked", "flag", "none",
     "1 at the steps where the ranks' parameter hashes were compared (every "
     "distributed.hash_every steps), absent otherwise: tells a step without a check from a "
     "check that found no mismatch."),
])

_HISTOGRAMS = _specs("histograms", [
    ("reward/hist", "reward", "up",
     "Histogram over time of the final reward of each sample in the step (NaN / inf not "
     "counted). Healthy: the mass moves right; a second mode far right is the first sign of "
     "reward hacking, a spike at one value is a saturated or broken reward."),
    ("response/length/hist", "tokens", "band",
     "Histogram over time of response lengths in the step. Healthy: a stable shape; mass piling "
     "up at max_new_tokens means run-on outputs, at 1-2 tokens an empty-answer collapse."),
    ("advantage/hist", "advantage", "flat",
     "Histogram over time of each sample's mean advantage over its valid tokens. Healthy: "
     "centred near 0 with both signs; one-sided mass means a biased critic (seed 003 §6.2)."),
    ("value/hist", "return", "none",
     "Histogram over time of the critic value at each sample's first response token (the "
     "critic's estimate of the whole response). Should follow reward/hist."),
])

CATALOG: dict[str, MetricSpec] = {
    spec.name: spec
    for spec in (*_REWARD, *_KL, *_POLICY, *_VALUE, *_ADVANTAGE, *_RESPONSE, *_ROLLOUT,
                 *_GRADIENTS, *_OPTIMISER, *_SYSTEM, *_EVALUATION, *_DISTRIBUTED, *_HISTOGRAMS)
}

# What a template's <variable> may stand for: rank ids are integers, layer names may contain
# dots and slashes, everything else is one path segment.
_PLACEHOLDER = {"r": r"\d+", "name": r".+"}


def _template_regex(name: str) -> re.Pattern[str]:
    parts = re.split(r"<([a-z_]+)>", name)
    pattern = "".join(
        re.escape(part) if i % 2 == 0 else f"(?:{_PLACEHOLDER.get(part, r'[^/]+')})"
        for i, part in enumerate(parts)
    )
    return re.compile(pattern)


_TEMPLATES = [(_template_regex(s.name), s) for s in CATALOG.values() if s.is_template]


def spec_for(name: str) -> MetricSpec | None:
    """The spec of a concrete (or templated) name; ``None`` for a name the catalog lacks."""
    spec = CATALOG.get(name)
    if spec is not None:
        return spec
    for regex, template in _TEMPLATES:
        if regex.fullmatch(name):
            return template
    return None


def is_catalog_name(name: str) -> bool:
    return spec_for(name) is not None


def _escape_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def catalog_markdown() -> str:
    """The Markdown reference of every metric, grouped; ``docs/metrics.md`` is this text."""
    lines = [
        "# Metric catalog",
        "",
        "Generated by `python -m rlcockpit.metrics.catalog` from `src/rlcockpit/metrics/catalog.py`;",
        "do not edit by hand. One integer step axis (the PPO iteration). Names in angle brackets",
        "are templates: `<category>` is a prompt category, `<component>` a reward component,",
        "`<phase>` a trainer phase, `<name>` a layer group, `<r>` a data-parallel rank.",
        "",
        "Healthy trend:",
        "",
        *[f"- `{trend}`: {meaning}" for trend, meaning in TREND_MEANING.items()],
    ]
    for group in GROUPS:
        lines += ["", f"## {group}", "", "| name | unit | healthy | meaning |",
                  "| --- | --- | --- | --- |"]
        lines += [
            f"| `{s.name}` | {s.unit} | {s.trend} | {_escape_cell(s.help)} |"
            for s in CATALOG.values() if s.group == group
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    sys.stdout.write(catalog_markdown())


if __name__ == "__main__":
    main()
