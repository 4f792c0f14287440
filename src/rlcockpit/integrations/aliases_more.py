"""Alias rows of OpenRLHF, DeepSpeed-Chat (step 3) and MiniMind (GRPO and PPO).

See :mod:`rlcockpit.integrations.aliases` for how the rows are used.
"""

from __future__ import annotations

from rlcockpit.integrations.aliases_row import Alias, Kept

ORIGINS = {
    "openrlhf": "OpenRLHF `openrlhf/trainer/`, printed as `✨ Global step N: {...}` and logged "
                "(`train/<k>`) by `ppo_trainer.py`",
    "deepspeed-chat": "DeepSpeedExamples `applications/DeepSpeed-Chat/training/"
                      "step3_rlhf_finetuning/main.py` (console lines and its TensorBoard scalars)",
    "minimind-grpo": "MiniMind `trainer/train_grpo.py` (`Logger` console line and `wandb.log`)",
    "minimind-ppo": "MiniMind `trainer/train_ppo.py` (`Logger` console line and `wandb.log`)",
}
_ACTOR = "`ray/ppo_actor.py` `training_step`"
_CRITIC = "`ray/ppo_critic.py` `training_step`"
_EXP = "`ppo_utils/experience_maker.py` (experience `info`)"
_ROLLOUT = "`ppo_trainer.py` `_compute_rollout_stats`"
_STEP = "`ppo_trainer.py` `train_step` / `fit`"
_EVAL = "`ppo_trainer.py` `compute_eval_metrics`"
_DS = "`main.py` (console)"
_DS_TB = "`main.py` (`writer.add_scalar`)"
_MM_GRPO = "`train_grpo.py` `grpo_train_epoch`"
_MM_PPO = "`train_ppo.py` `ppo_train_epoch`"

ROWS: tuple[Alias, ...] = (
    # --- OpenRLHF ------------------------------------------------------------------------
    Alias("openrlhf", "policy_loss", "policy/loss", _ACTOR),
    Alias("openrlhf", "actor_lr", "optim/lr/actor", _ACTOR),
    Alias("openrlhf", "actor_grad_norm", "grad/norm/actor", _ACTOR),
    Alias("openrlhf", "entropy_loss", "policy/entropy", _ACTOR, "the masked mean entropy, despite its name"),
    Alias("openrlhf", "ppo_clip_ratio", "policy/clip_frac", _ACTOR),
    Alias("openrlhf", "ppo_kl", "policy/approx_kl", _ACTOR, "k1 estimator (mean of old - new logprob)"),
    Alias("openrlhf", "critic_loss", "value/loss", _CRITIC),
    Alias("openrlhf", "values", "value/mean", _CRITIC, "the critic's values during its update"),
    Alias("openrlhf", "critic_lr", "optim/lr/critic", _CRITIC),
    Alias("openrlhf", "critic_grad_norm", "grad/norm/critic", _CRITIC),
    Alias("openrlhf", "reward", "reward/mean", _EXP),
    Alias("openrlhf", "return", "returns/mean", _EXP, "per-sample sum of the shaped token rewards"),
    Alias("openrlhf", "response_length", "response/length_mean", _EXP),
    Alias("openrlhf", "truncated", "response/truncated_frac", _EXP, "generation stopped by the length limit"),
    Alias("openrlhf", "kl", "kl/token_mean", _EXP, "per-sequence token mean of the KL vs the reference"),
    Alias("openrlhf", "rollout/reward_mean", "reward/mean", _ROLLOUT, "before dynamic batch splitting"),
    Alias("openrlhf", "rollout/reward_std", "reward/std", _ROLLOUT, "std over every sample of the step"),
    Alias("openrlhf", "rollout/response_length_mean", "response/length_mean", _ROLLOUT),
    Alias("openrlhf", "rollout/truncated_rate", "response/truncated_frac", _ROLLOUT),
    Alias("openrlhf", "timing/step_total", "time/step_s", _STEP,
          "sum of the step's timings (generation, experience, training, weight sync)"),
    Alias("openrlhf", "timing/generation", "time/rollout_s", _STEP),
    Alias("openrlhf", "timing/ppo_train", "time/update_s", _STEP, "actor and critic updates"),
    Alias("openrlhf", "eval_{component}_pass1", "eval/reward/category/{component}/mean", _EVAL,
          "mean reward of one eval data source over its samples (`pass1`)"),
    Alias("openrlhf", "eval/eval_{component}_pass1", "eval/reward/category/{component}/mean", _EVAL,
          "the same, as the TensorBoard / W&B loggers write it"),
    # --- DeepSpeed-Chat step 3 -----------------------------------------------------------
    Alias("deepspeed-chat", "act_loss", "policy/loss", _DS, "mean actor loss over the block's PPO iterations"),
    Alias("deepspeed-chat", "Actor Loss", "policy/loss", _DS, "later wording of `act_loss`"),
    Alias("deepspeed-chat", "cri_loss", "value/loss", _DS, "mean critic loss over the block's PPO iterations"),
    Alias("deepspeed-chat", "Critic Loss", "value/loss", _DS, "later wording of `cri_loss`"),
    Alias("deepspeed-chat", "average reward score", "reward/mean", _DS,
          "mean reward-model score of the block's experience (before the KL penalty)"),
    Alias("deepspeed-chat", "Average reward score", "reward/mean", _DS, "later wording"),
    Alias("deepspeed-chat", "ppo_ep", "ppo/epochs", _DS, "printed after the PPO loop: the number of PPO epochs"),
    Alias("deepspeed-chat", "PPO Epoch", "ppo/epochs", _DS, "later wording of `ppo_ep`"),
    Alias("deepspeed-chat", "e2e_latency_s", "time/step_s", "`utils/perf.py` `print_throughput_step3`",
          "`End-to-End => Latency`: training time plus generation time, an approximation (no "
          "reward / reference forward)"),
    Alias("deepspeed-chat", "reward", "reward/mean", _DS_TB, "the same average reward score"),
    Alias("deepspeed-chat", "actor_loss", "policy/loss", _DS_TB, "the LAST minibatch's actor loss, not the mean"),
    Alias("deepspeed-chat", "critic_loss", "value/loss", _DS_TB, "the LAST minibatch's critic loss"),
    # --- MiniMind GRPO -------------------------------------------------------------------
    Alias("minimind-grpo", "Reward", "reward/mean", _MM_GRPO),
    Alias("minimind-grpo", "Actor Loss", "policy/loss", _MM_GRPO, "includes the beta * KL term"),
    Alias("minimind-grpo", "Adv Mean", "advantage/mean", _MM_GRPO, "per sample, group-normalised"),
    Alias("minimind-grpo", "Adv Std", "advantage/whitened_std", _MM_GRPO,
          "std of the group-normalised advantages over the batch's samples"),
    Alias("minimind-grpo", "Avg Response Len", "response/length_mean", _MM_GRPO),
    Alias("minimind-grpo", "Learning Rate", "optim/lr/actor", _MM_GRPO),
    Alias("minimind-grpo", "reward", "reward/mean", _MM_GRPO, "the `wandb.log` name"),
    Alias("minimind-grpo", "policy_loss", "policy/loss", _MM_GRPO, "the `wandb.log` name"),
    Alias("minimind-grpo", "advantages_mean", "advantage/mean", _MM_GRPO, "the `wandb.log` name"),
    Alias("minimind-grpo", "advantages_std", "advantage/whitened_std", _MM_GRPO, "the `wandb.log` name"),
    Alias("minimind-grpo", "avg_response_len", "response/length_mean", _MM_GRPO, "the `wandb.log` name"),
    Alias("minimind-grpo", "learning_rate", "optim/lr/actor", _MM_GRPO, "the `wandb.log` name"),
    # --- MiniMind PPO --------------------------------------------------------------------
    Alias("minimind-ppo", "Reward", "reward/mean", _MM_PPO),
    Alias("minimind-ppo", "KL_ref", "kl/token_mean", _MM_PPO,
          "k3 estimator vs the reference, token mean, averaged over the minibatches"),
    Alias("minimind-ppo", "Approx KL", "policy/approx_kl", _MM_PPO, "k2 estimator (0.5 * logratio^2)"),
    Alias("minimind-ppo", "ClipFrac", "policy/clip_frac", _MM_PPO, "|ratio - 1| > epsilon, both sides"),
    Alias("minimind-ppo", "Critic Loss", "value/loss", _MM_PPO),
    Alias("minimind-ppo", "Avg Response Len", "response/length_mean", _MM_PPO),
    Alias("minimind-ppo", "Actor LR", "optim/lr/actor", _MM_PPO),
    Alias("minimind-ppo", "Critic LR", "optim/lr/critic", _MM_PPO),
    Alias("minimind-ppo", "reward", "reward/mean", _MM_PPO, "the `wandb.log` name"),
    Alias("minimind-ppo", "kl_ref", "kl/token_mean", _MM_PPO, "the `wandb.log` name"),
    Alias("minimind-ppo", "approx_kl", "policy/approx_kl", _MM_PPO, "the `wandb.log` name"),
    Alias("minimind-ppo", "clipfrac", "policy/clip_frac", _MM_PPO, "the `wandb.log` name"),
    Alias("minimind-ppo", "critic_loss", "value/loss", _MM_PPO, "the `wandb.log` name"),
    Alias("minimind-ppo", "avg_response_len", "response/length_mean", _MM_PPO, "the `wandb.log` name"),
    Alias("minimind-ppo", "actor_lr", "optim/lr/actor", _MM_PPO, "the `wandb.log` name"),
    Alias("minimind-ppo", "critic_lr", "optim/lr/critic", _MM_PPO, "the `wandb.log` name"),
)

KEPT: tuple[Kept, ...] = (
    Kept("openrlhf", "score", "the reward function's `scores` (used for dynamic filtering), not "
         "the reward the advantages are built from"),
    Kept("openrlhf", "group_reward_std", "the mean within-group std of the reward, not the batch std"),
    Kept("openrlhf", "vllm_kl", "log-prob gap between vLLM and the trainer (engine mismatch)"),
    Kept("openrlhf", "logprobs_diff", "mean of log pi - log pi_ref: a signed k1 estimate"),
    Kept("openrlhf", "total_length", "prompt plus response tokens"),
    Kept("openrlhf", "response_clip_ratio", "share of samples that hit the context window (prompt "
         "included), not the generation limit"),
    Kept("openrlhf", "timing/make_experience", "scoring, reference, values and advantages together"),
    Kept("openrlhf", "eval_<dataset>_pass<n>", "pass@n (n > 1): best of n samples, no catalog name"),
    Kept("deepspeed-chat", "unsuper_loss", "the unsupervised (pretraining-mix, ptx) loss; no catalog "
         "name (`Unsupervised Loss` in the later wording)"),
    Kept("deepspeed-chat", "EMA reward score", "an exponential moving average, not the step's reward"),
    Kept("deepspeed-chat", "actor_loss_sum", "a sum over the PPO iterations (also `critic_loss_sum`)"),
    Kept("minimind-grpo", "KL_ref", "log pi_ref - log pi averaged over tokens: the NEGATIVE of the "
         "k1 estimate, near 0 or below; not the KL the detectors read (`kl_ref` in wandb)"),
    Kept("minimind-grpo", "Aux Loss", "the MoE load-balancing loss"),
)
