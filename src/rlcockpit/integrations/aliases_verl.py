"""Alias rows of verl and NeMo-RL (Ray-based PPO / GRPO trainers that log through a tracker).

See :mod:`rlcockpit.integrations.aliases` for how the rows are used.
"""

from __future__ import annotations

from rlcockpit.integrations.aliases_row import Alias, Kept

ORIGINS = {
    "verl": "verl `verl/trainer/ppo/` and `verl/workers/`, through `verl/utils/tracking.py`",
    "nemo-rl": "NeMo-RL `nemo_rl/algorithms/grpo.py` (`logger.log_metrics(..., prefix='train')`, "
               "`timing/train`, `validation`), loss metrics from `algorithms/loss/loss_functions.py`",
}
_DATA = "`metric_utils.py` `compute_data_metrics`"
_TIME = "`metric_utils.py` `compute_timing_metrics`"
_THROUGHPUT = "`metric_utils.py` `compute_throughout_metrics`"
_ACTOR = "`workers/actor/dp_actor.py` `update_policy`"
_CRITIC = "`workers/critic/dp_critic.py` `update_critic`"
_WORKER = "`workers/fsdp_workers.py` `update_actor` / `update_critic`"
_KL = "`ray_trainer.py` `apply_kl_penalty`"
_VAL = "`ray_trainer.py` `_validate` / `metric_utils.py` `process_validation_metrics`"
_NEMO = "`grpo.py` `grpo_train` (metrics dict)"
_NEMO_LOSS = "`loss_functions.py` `ClippedPGLossFn`"
_NEMO_ROLLOUT = "`experience/rollouts.py` (rollout metrics)"
_NEMO_TIME = "`grpo.py` `timer.time(...)`"

ROWS: tuple[Alias, ...] = (
    # --- verl ----------------------------------------------------------------------------
    Alias("verl", "actor/pg_loss", "policy/loss", _ACTOR),
    Alias("verl", "actor/entropy", "policy/entropy", _ACTOR),
    Alias("verl", "actor/entropy_loss", "policy/entropy", _ACTOR,
          "older verl: despite the name it IS the masked mean token entropy (the actor loss "
          "subtracts entropy_coeff times it); newer verl logs the same value as `actor/entropy`"),
    Alias("verl", "actor/ppo_kl", "policy/approx_kl", _ACTOR, "k1 estimator (old - new logprob)"),
    Alias("verl", "actor/pg_clipfrac", "policy/clip_frac", _ACTOR),
    Alias("verl", "actor/grad_norm", "grad/norm/actor", _ACTOR),
    Alias("verl", "actor/kl_loss", "kl/token_mean", _ACTOR, "GRPO-style KL loss, aggregated by loss_agg_mode"),
    Alias("verl", "actor/kl_coef", "kl/coef", _ACTOR, "KL-loss coefficient"),
    Alias("verl", "actor/reward_kl_penalty", "kl/token_mean", _KL,
          "KL-in-reward variant: token KL averaged per sequence, then over the batch"),
    Alias("verl", "actor/reward_kl_penalty_coeff", "kl/coef", _KL, "KL-in-reward variant"),
    Alias("verl", "actor/lr", "optim/lr/actor", _WORKER),
    Alias("verl", "critic/vf_loss", "value/loss", _CRITIC),
    Alias("verl", "critic/vf_clipfrac", "value/clip_frac", _CRITIC),
    Alias("verl", "critic/grad_norm", "grad/norm/critic", _CRITIC),
    Alias("verl", "critic/lr", "optim/lr/critic", _WORKER),
    Alias("verl", "critic/vf_explained_var", "value/explained_var", _DATA),
    Alias("verl", "critic/values/mean", "value/mean", _DATA),
    Alias("verl", "critic/values/max", "value/max", _DATA),
    Alias("verl", "critic/values/min", "value/min", _DATA),
    Alias("verl", "critic/vpred_mean", "value/mean", _CRITIC,
          "the critic's predictions during the update (mean over minibatches), not at rollout; "
          "used when `critic/values/mean` is absent"),
    Alias("verl", "critic/score/mean", "reward/mean", _DATA,
          "sequence score before the in-reward KL penalty (`critic/rewards/*` is after it)"),
    Alias("verl", "critic/score/max", "reward/max", _DATA),
    Alias("verl", "critic/score/min", "reward/min", _DATA),
    Alias("verl", "critic/advantages/mean", "advantage/mean", _DATA, "after whitening"),
    Alias("verl", "critic/advantages/max", "advantage/max", _DATA),
    Alias("verl", "critic/advantages/min", "advantage/min", _DATA),
    Alias("verl", "critic/returns/mean", "returns/mean", _DATA),
    Alias("verl", "critic/returns/max", "returns/max", _DATA),
    Alias("verl", "critic/returns/min", "returns/min", _DATA),
    Alias("verl", "response_length/mean", "response/length_mean", _DATA),
    Alias("verl", "response_length/max", "response/length_max", _DATA),
    Alias("verl", "response_length/min", "response/length_min", _DATA),
    Alias("verl", "response_length/clip_ratio", "response/truncated_frac", _DATA,
          "share of responses whose length equals max_response_length"),
    Alias("verl", "prompt_length/mean", "prompt/length_mean", _DATA),
    Alias("verl", "prompt_length/max", "prompt/length_max", _DATA),
    Alias("verl", "prompt_length/min", "prompt/length_min", _DATA),
    Alias("verl", "prompt_length/clip_ratio", "prompt/clip_frac", _DATA,
          "share of prompts whose length equals max_prompt_length"),
    Alias("verl", "timing_s/gen", "time/rollout_s", _TIME),
    Alias("verl", "timing_s/adv", "time/advantage_s", _TIME),
    Alias("verl", "timing_s/step", "time/step_s", _TIME),
    Alias("verl", "timing_s/testing", "time/eval_s", _TIME, "validation"),
    Alias("verl", "timing_s/{phase}", "time/{phase}_s", _TIME,
          "every other phase keeps verl's name (`reward`, `old_log_prob`, `ref`, `values`, "
          "`update_actor`, `update_critic`, `save_checkpoint`...)"),
    Alias("verl", "timing_per_token_ms/{phase}", "time/{phase}_ms_per_token", _TIME,
          "`gen` per response token, the others per prompt + response token"),
    Alias("verl", "perf/time_per_step", "time/step_s", _THROUGHPUT,
          "the same number as `timing_s/step`; used when that is absent"),
    Alias("verl", "perf/total_num_tokens", "perf/total_tokens", _THROUGHPUT),
    Alias("verl", "perf/throughput", "perf/tokens_per_s_per_gpu", _THROUGHPUT,
          "total tokens / (step time x GPUs)"),
    Alias("verl", "perf/max_memory_allocated_gb", "sys/gpu_mem_gb", _WORKER, "peak allocated memory"),
    Alias("verl", "perf/max_memory_reserved_gb", "sys/gpu_mem_reserved_gb", _WORKER, "peak reserved memory"),
    Alias("verl", "val-core/{dataset}/reward/mean@{n}", "eval/reward/category/{dataset}/mean", _VAL,
          "mean validation reward of one data source over its n samples per prompt; the data "
          "source's slashes become `_` (`openai/gsm8k` -> `openai_gsm8k`)"),
    Alias("verl", "val-aux/{dataset}/reward/mean@{n}", "eval/reward/category/{dataset}/mean", _VAL),
    Alias("verl", "val-core/{dataset}/acc/mean@{n}", "eval/accuracy/{dataset}", _VAL,
          "the reward function's `acc` extra info, averaged"),
    Alias("verl", "val/test_score/{dataset}", "eval/reward/category/{dataset}/mean", _VAL,
          "older verl name of the per-data-source validation reward"),
    # --- NeMo-RL (keys as logged under train/; the prefix is matched away) --------------------
    Alias("nemo-rl", "reward", "reward/mean", _NEMO),
    Alias("nemo-rl", "loss", "policy/loss", _NEMO_LOSS, "clipped surrogate plus the KL term"),
    Alias("nemo-rl", "grad_norm", "grad/norm/actor", _NEMO),
    Alias("nemo-rl", "lr", "optim/lr/actor", _NEMO),
    Alias("nemo-rl", "kl_penalty", "kl/token_mean", _NEMO_LOSS,
          "the KL term divided by its coefficient: KL to the reference, aggregated like the loss"),
    Alias("nemo-rl", "approx_entropy", "policy/entropy", _NEMO_LOSS,
          "estimated from the sampled tokens, -E[(pi/pi_gen) log pi], not from the full logits"),
    Alias("nemo-rl", "probs_ratio", "policy/ratio_mean", _NEMO_LOSS),
    Alias("nemo-rl", "probs_ratio_max", "policy/ratio_max", _NEMO_LOSS, "infinite ratios left out"),
    Alias("nemo-rl", "advantages/mean", "advantage/mean", _NEMO),
    Alias("nemo-rl", "advantages/max", "advantage/max", _NEMO),
    Alias("nemo-rl", "advantages/min", "advantage/min", _NEMO),
    Alias("nemo-rl", "mean_gen_tokens_per_sample", "response/length_mean", _NEMO_ROLLOUT),
    Alias("nemo-rl", "max_gen_tokens_per_sample", "response/length_max", _NEMO_ROLLOUT),
    Alias("nemo-rl", "truncation_rate", "response/truncated_frac", _NEMO_ROLLOUT),
    Alias("nemo-rl", "natural_termination_rate", "response/eos_frac", _NEMO_ROLLOUT,
          "ended by the model (EOS or a stop string), not cut"),
    Alias("nemo-rl", "mean_prompt_length", "prompt/length_mean", _NEMO),
    Alias("nemo-rl", "total_num_tokens", "perf/total_tokens", _NEMO, "summed input lengths of the step"),
    Alias("nemo-rl", "timing/train/total_step_time", "time/step_s", _NEMO_TIME),
    Alias("nemo-rl", "timing/train/generation", "time/rollout_s", _NEMO_TIME),
    Alias("nemo-rl", "timing/train/policy_training", "time/update_s", _NEMO_TIME),
    Alias("nemo-rl", "timing/train/advantage_calculation", "time/advantage_s", _NEMO_TIME),
    Alias("nemo-rl", "timing/validation/total_validation_time", "time/eval_s", _NEMO_TIME),
    Alias("nemo-rl", "validation/accuracy", "eval/reward/mean", "`grpo.py` `validate`",
          "named accuracy, it is the mean validation reward"),
)

KEPT: tuple[Kept, ...] = (
    Kept("verl", "critic/rewards/mean", "the score minus the in-reward KL penalty (also `/max`, `/min`)"),
    Kept("verl", "actor/pg_clipfrac_lower", "share of tokens cut by the dual-clip lower bound only"),
    Kept("verl", "actor/token_kl/mean", "verl forks for on-policy distillation: a log-ratio to the "
         "teacher, negative from step 1, not the KL to the reference model"),
    Kept("verl", "perf/cpu_memory_used_gb", "the machine's used memory (psutil), not the trainer's RSS"),
    Kept("verl", "global_seqlen/mean", "sequence-balancing statistics of the batch (also /min, "
         "/max, /minmax_diff, /balanced_*)"),
    Kept("verl", "training/global_step", "the step itself (and `training/epoch` the epoch)"),
    Kept("verl", "val-core/<dataset>/reward/best@<n>/mean", "best-of-n and majority-vote "
         "validation scores have no catalog name (`maj@<n>`, `std@<n>` neither)"),
    Kept("nemo-rl", "gen_kl_error", "KL between the generation engine's and the trainer's "
         "log-probs (an engine mismatch), not the KL to the reference"),
    Kept("nemo-rl", "token_mult_prob_error", "the engine / trainer probability mismatch"),
    Kept("nemo-rl", "timing/train/reward_calculation", "only the reward, while rlcockpit's score "
         "phase also holds the reference and value passes"),
)
