"""An OpenRLHF PPO run's logging, run by tests/test_openrlhf_real.py in .venv-verl (openrlhf from
PyPI, --no-deps: it pins flash-attn 2.8.3 and deepspeed, so its trainer cannot be imported on a
CPU; its logging module can).

Real OpenRLHF code: ``openrlhf.utils.logging_utils.init_logger`` (the handler and format of every
console line) and ``TensorboardLogger`` (``train/<name>`` scalars, the ``train/generated_samples``
text), called as ``PPOTrainer.save_logs_and_checkpoints`` calls it. The two console lines a step
are copied from ``openrlhf/trainer/ppo_trainer.py`` (0.11.2): ``train_step``'s
``logger.info(f"Sample: {sample0}")`` and ``fit``'s ``logger.info(f"✨ Global step {global_step}:
{log_status}")``, ``log_status`` being the status without ``generated_samples``.

    python openrlhf_real_driver.py TENSORBOARD_DIR STEPS
"""

from __future__ import annotations

import argparse
import math
from types import SimpleNamespace

from openrlhf.utils.logging_utils import TensorboardLogger, init_logger

logger = init_logger("openrlhf.trainer.ppo_trainer")  # ppo_trainer.py: logger = init_logger(__name__)


def status_of(step: int) -> dict:
    """The status dict of one step, with OpenRLHF's names (ppo_train, _compute_rollout_stats)."""
    return {"policy_loss": 0.5 - 0.01 * step, "entropy_loss": 1.2 - 0.02 * step, "actor_lr": 5e-7,
            "actor_grad_norm": 0.8, "ppo_clip_ratio": 0.01, "ppo_kl": math.nan if step == 3 else 1e-4,
            "vllm_kl": 2e-4, "kl": 1e-3 * step, "reward": 0.1 * step, "score": 0.1 * step,
            "return": 0.09 * step, "response_length": 100.0 + step, "total_length": 164.0 + step,
            "truncated": math.inf if step == 4 else 0.0, "group_reward_std": 0.2,
            "rollout/reward_mean": 0.1 * step, "timing/make_experience": 1.0, "timing/ppo_train": 2.0,
            "timing/broadcast": 0.1, "timing/generation": 3.0}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("tensorboard_dir")
    p.add_argument("steps", type=int)
    args = p.parse_args()
    train_args = SimpleNamespace(logger=SimpleNamespace(tensorboard_dir=args.tensorboard_dir,
                                                        wandb=SimpleNamespace(run_name="ppo_real")))
    board = TensorboardLogger(train_args)
    for global_step in range(1, args.steps + 1):
        sample0 = [f"<|user|> what is {global_step} + 1? <|assistant|> {global_step + 1}\nbecause 'it is'",
                   0.25 * global_step]
        logger.info(f"Sample: {sample0}")
        status = status_of(global_step)
        status["timing/step_total"] = sum(v for k, v in status.items() if k.startswith("timing/"))
        status["generated_samples"] = sample0
        log_status = {k: v for k, v in status.items() if k not in ["generated_samples"]}
        logger.info(f"✨ Global step {global_step}: {log_status}")
        board.log_train(global_step, status)  # save_logs_and_checkpoints, logging_steps = 1
    board.close()


if __name__ == "__main__":
    main()
