"""TRL's GRPOTrainer on the tiny world, watched and steered by the cockpit (CPU, about a minute).

The tiny world's SFT model and its train prompts, the world's rule reward split into one TRL reward
function per component (correctness, format, harmlessness, helpfulness: the cockpit shows each
one's score per completion). Adding the cockpit is the two marked lines. Try

    pip install -e ".[trl]"                      # TRL, with torch pinned first (see the Makefile)
    python examples/trl_grpo.py --store sqlite:///trl.db --steps 40
    rlcockpit serve --store sqlite:///trl.db     # watch it live; change the learning rate, beta or
                                                 # temperature by ticket, pause, stop (docs/control.md)
"""

from __future__ import annotations

import argparse
import json
import tempfile

from rlcockpit.control import ControlConfig
from rlcockpit.integrations.trl import watch  # (1) the cockpit

COMPONENTS = ("correctness", "format", "harmlessness", "helpfulness")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", default="sqlite:///rlcockpit.db")
    p.add_argument("--steps", type=int, default=40, help="optimizer steps")
    p.add_argument("--prompts", type=int, default=4, help="prompts per step")
    p.add_argument("--generations", type=int, default=4, help="completions per prompt (the GRPO group)")
    p.add_argument("--max-completion-length", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--beta", type=float, default=0.04)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--output-dir", default=None, help="TRL's output_dir (default: a temporary folder)")
    p.add_argument("--effect-steps", type=int, default=10, help="steps after a change to measure its effect")
    p.add_argument("--poll-interval", type=float, default=0.5, help="while paused, seconds between looks")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def world_reward(component: str):
    """One TRL reward function: a component of the tiny world's rule reward."""
    from rlcockpit.world.rewards import score

    def reward(prompts, completions, meta_json, trainer_state=None, **kwargs):
        metas = [json.loads(m) for m in meta_json]
        step = int(getattr(trainer_state, "global_step", 0) or 0)
        return [float(s[component]) for s in score(list(prompts), list(completions), metas, step)]

    reward.__name__ = component
    return reward


def build_trainer(args: argparse.Namespace, output_dir: str):
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from rlcockpit.world import SFT_CHECKPOINT
    from rlcockpit.world.prompts import load_prompts

    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(SFT_CHECKPOINT)
    model = AutoModelForCausalLM.from_pretrained(SFT_CHECKPOINT)
    rows = [{"prompt": p.prompt, "category": p.category, "meta_json": json.dumps(p.meta)}
            for p in load_prompts("train")]
    config = GRPOConfig(
        output_dir=output_dir, report_to="none", save_strategy="no", logging_steps=1, use_cpu=True,
        bf16=False, seed=args.seed, disable_tqdm=True, dataloader_num_workers=0, learning_rate=args.lr,
        lr_scheduler_type="constant", per_device_train_batch_size=args.prompts * args.generations,
        num_generations=args.generations, max_completion_length=args.max_completion_length,
        temperature=args.temperature, beta=args.beta, max_steps=args.steps)
    return GRPOTrainer(model=model, reward_funcs=[world_reward(c) for c in COMPONENTS], args=config,
                       train_dataset=Dataset.from_list(rows), processing_class=tokenizer)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="trl-grpo-") as tmp:
        trainer = build_trainer(args, args.output_dir or tmp)
        cockpit = watch(trainer, store=args.store, project="examples", name="trl-grpo",  # (2) the cockpit
                        control=ControlConfig(effect_steps=args.effect_steps, poll_interval_s=args.poll_interval))
        trainer.train()
        print(f"run {cockpit.run.run_id}: {trainer.state.global_step} steps logged to {args.store}")


if __name__ == "__main__":
    main()
