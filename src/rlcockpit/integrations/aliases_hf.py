"""Alias rows of the trainers built on the Hugging Face ``Trainer``: TRL (GRPO, PPO) and ms-swift.

See :mod:`rlcockpit.integrations.aliases` for how the rows are used; each row names where the key
is logged and, when the foreign quantity is not exactly the catalog one, how it differs.
"""

from __future__ import annotations

from rlcockpit.integrations.aliases_row import Alias, Kept

ORIGINS = {
    "trl-grpo": "TRL 1.16 `trl/trainer/grpo_trainer.py`, logged through transformers `Trainer.log`",
    "trl-ppo": "TRL 1.12 `trl/experimental/ppo/ppo_trainer.py` (`train`), through `Trainer.log`",
    "ms-swift": "ms-swift `swift/rlhf_trainers/grpo_trainer.py` (GRPO on TRL's trainer), printed and "
                "appended to `logging.jsonl` by `swift/trainers/patcher.py`",
}
_GRPO_GEN = "`_generate` / `_generate_and_score_completions`"
_GRPO_LOSS = "`_compute_loss`"
_HF = "transformers `Trainer` (`_maybe_log_save_evaluate`)"
_PPO = "`PPOTrainer.train`"
_SWIFT = "`grpo_trainer.py` `_log_metrics` inputs"
_SWIFT_LOSS = "`grpo_trainer.py` `_compute_loss` / `_update_metrics`"

ROWS: tuple[Alias, ...] = (
    # --- TRL GRPOTrainer -------------------------------------------------------------------
    Alias("trl-grpo", "reward", "reward/mean", _GRPO_GEN, "mean of the weighted sum of reward functions"),
    Alias("trl-grpo", "reward_std", "reward/std", _GRPO_GEN,
          "std over the batch in TRL 1.x; older releases logged the mean within-group std"),
    Alias("trl-grpo", "frac_reward_zero_std", "reward/frac_zero_std_groups", _GRPO_GEN),
    Alias("trl-grpo", "rewards/{component}/mean", "reward/{component}/mean", _GRPO_GEN,
          "one per reward function, named after the function"),
    Alias("trl-grpo", "rewards/{component}", "reward/{component}/mean", _GRPO_GEN,
          "older TRL (0.14-0.15): the same per-function mean, logged without `/mean`"),
    Alias("trl-grpo", "kl", "kl/token_mean", _GRPO_LOSS,
          "k3 estimator vs the reference, mean over completion tokens (older TRL averaged per "
          "sequence first)"),
    Alias("trl-grpo", "entropy", "policy/entropy", _GRPO_LOSS),
    Alias("trl-grpo", "clip_ratio/region_mean", "policy/clip_frac", _GRPO_LOSS,
          "only tokens where the clip is active (ratio out of range on the advantage's side)"),
    Alias("trl-grpo", "clip_ratio", "policy/clip_frac", _GRPO_LOSS, "older TRL and the Liger loss"),
    Alias("trl-grpo", "completions/mean_length", "response/length_mean", _GRPO_GEN),
    Alias("trl-grpo", "completion_length", "response/length_mean", _GRPO_GEN,
          "older TRL (0.14-0.15) name of `completions/mean_length`"),
    Alias("trl-grpo", "completions/max_length", "response/length_max", _GRPO_GEN),
    Alias("trl-grpo", "completions/min_length", "response/length_min", _GRPO_GEN),
    Alias("trl-grpo", "completions/clipped_ratio", "response/truncated_frac", _GRPO_GEN,
          "share of completions that hit the length limit without EOS"),
    Alias("trl-grpo", "policy_loss", "policy/loss", _GRPO_LOSS, "the loss before the entropy bonus (newer TRL)"),
    Alias("trl-grpo", "loss", "policy/loss", _HF,
          "the total loss (surrogate + beta * KL); GRPO has no critic. Used when `policy_loss` is absent"),
    Alias("trl-grpo", "entropy_coef", "policy/entropy_coef", _GRPO_LOSS),
    Alias("trl-grpo", "grad_norm", "grad/norm/actor", _HF),
    Alias("trl-grpo", "learning_rate", "optim/lr/actor", _HF),
    Alias("trl-grpo", "step_time", "time/step_s", "`GRPOTrainer.training_step`",
          "wall time of one optimizer step (generation and scoring included: they run inside "
          "`training_step`), averaged over the steps since the last log"),
    Alias("trl-grpo", "eval_reward", "eval/reward/mean", _HF),
    # --- TRL PPOTrainer (experimental PPO) ---------------------------------------------------
    Alias("trl-ppo", "objective/kl", "kl/mean", _PPO, "sum of token KL per sequence, averaged"),
    Alias("trl-ppo", "objective/scores", "reward/mean", _PPO, "reward-model score before the KL penalty"),
    Alias("trl-ppo", "policy/entropy_avg", "policy/entropy", _PPO),
    Alias("trl-ppo", "policy/approxkl_avg", "policy/approx_kl", _PPO, "k2 estimator (0.5 * logratio^2)"),
    Alias("trl-ppo", "policy/clipfrac_avg", "policy/clip_frac", _PPO),
    Alias("trl-ppo", "loss/policy_avg", "policy/loss", _PPO),
    Alias("trl-ppo", "loss/value_avg", "value/loss", _PPO),
    Alias("trl-ppo", "val/clipfrac_avg", "value/clip_frac", _PPO),
    Alias("trl-ppo", "val/ratio", "policy/ratio_mean", _PPO),
    Alias("trl-ppo", "lr", "optim/lr/actor", _PPO),
    Alias("trl-ppo", "eps", "perf/samples_per_s", _PPO, "episodes (prompt + completion) per second"),
    # --- ms-swift GRPO -----------------------------------------------------------------------
    Alias("ms-swift", "reward", "reward/mean", _SWIFT, "mean over prompt groups of the group mean reward"),
    Alias("ms-swift", "frac_reward_zero_std", "reward/frac_zero_std_groups", _SWIFT),
    Alias("ms-swift", "rewards/{component}/mean", "reward/{component}/mean", _SWIFT,
          "one per reward function (NaN-aware mean)"),
    Alias("ms-swift", "kl", "kl/token_mean", _SWIFT_LOSS, "k3 estimator vs the reference, token mean"),
    Alias("ms-swift", "entropy/mean", "policy/entropy", _SWIFT_LOSS,
          "mean over completions of each completion's mean token entropy (`log_entropy`)"),
    Alias("ms-swift", "clip_ratio/region_mean", "policy/clip_frac", _SWIFT_LOSS),
    Alias("ms-swift", "completions/mean_length", "response/length_mean", _SWIFT),
    Alias("ms-swift", "completions/max_length", "response/length_max", _SWIFT),
    Alias("ms-swift", "completions/min_length", "response/length_min", _SWIFT),
    Alias("ms-swift", "completions/clipped_ratio", "response/truncated_frac", _SWIFT,
          "share of completions truncated at the length limit"),
    Alias("ms-swift", "loss", "policy/loss", _HF, "the total GRPO loss (surrogate + beta * KL)"),
    Alias("ms-swift", "grad_norm", "grad/norm/actor", _HF),
    Alias("ms-swift", "learning_rate", "optim/lr/actor", _HF),
    Alias("ms-swift", "memory(GiB)", "sys/gpu_mem_reserved_gb", "`patcher.py` `add_train_message`",
          "peak reserved GPU memory so far (GiB), a running maximum"),
)

KEPT: tuple[Kept, ...] = (
    Kept("trl-ppo", "objective/entropy", "a per-sequence sum of -logprob, not the mean token entropy"),
    Kept("trl-ppo", "objective/rlhf_reward", "the score minus the KL penalty"),
    Kept("trl-grpo", "num_tokens", "a running total of tokens seen, not a per-step count"),
    Kept("ms-swift", "reward_std", "with the default `scale_rewards='group'` the mean within-group "
         "std, not the batch std (`reward/std`); the batch std only with `scale_rewards='batch'`"),
    Kept("ms-swift", "train_speed(s/it)", "seconds per step averaged since the start, not the "
         "step's own time (`train_speed(iter/s)` in older releases is its inverse)"),
    Kept("ms-swift", "remaining_time", "an estimate of the time left; `elapsed_time` is read as "
         "the run clock"),
)

# Keys that tell a source apart although they are no metric: ms-swift adds them to every log.
MARKERS = {"ms-swift": ("global_step/max_steps", "elapsed_time", "remaining_time", "percentage",
                        "train_speed(iter/s)", "train_speed(s/it)", "memory(GiB)")}
