"""Catalog entries of the RL quantities: what each step's rollout, scoring, advantages and update
compute (reward, kl, policy, value, advantage, response, rollout, gradients, optimiser) and the
per-sample histograms of them.

Data only; :mod:`rlcockpit.metrics.catalog` assembles the catalog from these lists. Standard
library only.
"""

from __future__ import annotations

from rlcockpit.metrics.catalog_spec import specs

REWARD = specs("reward", [
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

KL = specs("kl", [
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

POLICY = specs("policy", [
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

VALUE = specs("value", [
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

ADVANTAGE = specs("advantage", [
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

RESPONSE = specs("response", [
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

ROLLOUT = specs("rollout", [
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

GRADIENTS = specs("gradients", [
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

OPTIMISER = specs("optimiser", [
    ("optim/lr/actor", "learning rate", "none",
     "Actor learning rate at this step (schedule times any live scale)."),
    ("optim/lr/critic", "learning rate", "none",
     "Critic learning rate at this step (seed 000 §5: about 1/3 of the policy's when the critic "
     "overfits)."),
])

HISTOGRAMS = specs("histograms", [
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
