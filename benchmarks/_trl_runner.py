"""One TRL training run on the tiny world, timed per rollout cycle; runs INSIDE a TRL venv.

benchmarks/trainer_speed.py starts this file in a fresh subprocess with the python of
``.benchvenv-trl`` (latest TRL: ``GRPOTrainer``) or ``.benchvenv-trl-ppo`` (TRL 1.12, the last
release that ships ``trl.experimental.ppo.PPOTrainer``). Both venvs hold the project too, so the
same prompts (tiny world train split) and the same reward (``rlcockpit.world.rewards.score``)
are used as by our trainer. The last stdout line is one JSON object:

    {"algo": "grpo", "trl_version": "1.16.0", "cycle_s": [...], "tokens": [...], ...}

``cycle_s[i]`` is the wall time of rollout cycle ``i`` (one batch of prompts generated, scored
and used for all its optimizer steps, i.e. what our trainer calls one step); ``tokens[i]`` the
generated response tokens of that cycle (up to and including EOS).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from types import SimpleNamespace

import torch
from torch import nn


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algo", choices=("grpo", "ppo"), required=True)
    p.add_argument("--model", required=True, help="HF checkpoint directory (the SFT warm start)")
    p.add_argument("--steps", type=int, required=True, help="rollout cycles to run")
    p.add_argument("--batch-size", type=int, required=True, help="prompts per rollout cycle")
    p.add_argument("--n-samples", type=int, default=1, help="completions per prompt")
    p.add_argument("--max-new-tokens", type=int, required=True)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--kl-coef", type=float, required=True)
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--epochs", type=int, default=1, help="passes over each rollout batch")
    p.add_argument("--minibatches", type=int, default=1, help="optimizer steps per epoch")
    p.add_argument("--clip-eps", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = leave as is)")
    return p.parse_args(argv)


def component_total(components: dict[str, float]) -> float:
    """Sum of the reward components; keys with a slash (flag/..., info/...) are not components.

    This is the tiny world's convention (rlcockpit.world.rewards) with every weight at 1.0, the
    default of our trainer's reward config.
    """
    return float(sum(v for k, v in components.items() if "/" not in k))


def world_prompts(tokenizer) -> list:
    from rlcockpit.world.prompts import load_prompts

    prompts = load_prompts("train")
    if not prompts:
        raise SystemExit("the tiny world's train split is empty")
    return prompts


class StepClock:
    """Wall-clock time at every optimizer step end (a transformers TrainerCallback)."""

    def __init__(self) -> None:
        self.start = 0.0
        self.step_ends: list[float] = []

    def on_train_begin(self, *args, **kwargs):
        self.start = time.perf_counter()

    def on_step_end(self, *args, **kwargs):
        self.step_ends.append(time.perf_counter())


def cycle_times(clock: StepClock, steps_per_cycle: int) -> list[float]:
    """Seconds per rollout cycle from the optimizer-step end times."""
    ends = clock.step_ends[steps_per_cycle - 1 :: steps_per_cycle]
    starts = [clock.start, *ends[:-1]]
    return [round(e - s, 6) for s, e in zip(starts, ends, strict=True)]


def as_callback(clock: StepClock):
    from transformers import TrainerCallback

    class _Cb(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            clock.on_train_begin()

        def on_step_end(self, args, state, control, **kw):
            clock.on_step_end()

    return _Cb()


# ---------------------------------------------------------------------------------------------
# GRPO (latest TRL): the reward is an ordinary reward function


class GrpoWorldReward:
    """``rlcockpit.world.rewards.score`` in TRL's reward-function signature.

    TRL passes every dataset column as a keyword list; ``meta_json`` carries the prompt's meta
    dict. It also counts the generated tokens per call (one call per rollout cycle).
    """

    __name__ = "tiny_world_score"

    def __init__(self) -> None:
        from rlcockpit.world.rewards import score

        self._score = score
        self.tokens: list[int] = []
        self.reward_means: list[float] = []

    def __call__(self, prompts, completions, completion_ids, meta_json, trainer_state=None, **kw):
        metas = [json.loads(m) for m in meta_json]
        step = int(getattr(trainer_state, "global_step", 0) or 0)
        totals = [component_total(c) for c in self._score(list(prompts), list(completions), metas, step)]
        self.tokens.append(sum(len(ids) for ids in completion_ids))
        self.reward_means.append(sum(totals) / len(totals))
        return totals


def run_grpo(args: argparse.Namespace) -> dict:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model)
    rows = [{"prompt": p.prompt, "meta_json": json.dumps(p.meta)} for p in world_prompts(tokenizer)]
    completions = args.batch_size * args.n_samples
    if completions % args.minibatches:
        raise SystemExit(f"batch {completions} is not divisible by minibatches {args.minibatches}")
    steps_per_cycle = args.minibatches * args.epochs
    with tempfile.TemporaryDirectory(prefix="trl-grpo-") as out:
        config = GRPOConfig(
            output_dir=out, report_to="none", save_strategy="no", logging_steps=1,
            use_cpu=True, bf16=False, fp16=False, seed=args.seed, disable_tqdm=True,
            dataloader_num_workers=0, learning_rate=args.lr, lr_scheduler_type="constant",
            warmup_steps=0, max_grad_norm=1.0,
            per_device_train_batch_size=completions // args.minibatches,
            steps_per_generation=args.minibatches, num_iterations=args.epochs,
            num_generations=args.n_samples, max_completion_length=args.max_new_tokens,
            temperature=args.temperature, top_p=args.top_p, beta=args.kl_coef,
            epsilon=args.clip_eps, max_steps=args.steps * steps_per_cycle,
        )
        reward = GrpoWorldReward()
        clock = StepClock()
        trainer = GRPOTrainer(
            model=model, reward_funcs=[reward], args=config,
            train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
            callbacks=[as_callback(clock)],
        )
        trainer.train()
    return {"cycle_s": cycle_times(clock, steps_per_cycle), "tokens": reward.tokens,
            "reward_mean": reward.reward_means, "steps_per_cycle": steps_per_cycle}


# ---------------------------------------------------------------------------------------------
# PPO (TRL 1.12, experimental): the reward must be a "reward model" module


class _IdsBackbone(nn.Module):
    """Hands the token ids through as the "last hidden state" (-1 where attention_mask is 0)."""

    def forward(self, input_ids, attention_mask, **kw):
        ids = torch.where(attention_mask.bool(), input_ids, torch.full_like(input_ids, -1))
        return SimpleNamespace(hidden_states=[ids.unsqueeze(-1).float()])


class FunctionRewardModel(nn.Module):
    """``rlcockpit.world.rewards.score`` shaped as the reward model TRL's PPOTrainer expects.

    TRL calls ``getattr(model, model.base_model_prefix)(input_ids=..., attention_mask=...)`` and
    then ``model.score(hidden_states[-1])``, reading the score at the last response token. Our
    backbone passes the ids through; ``score`` splits each row into the known prompt (longest
    token prefix that is a train prompt) and the response, scores the text with the world's rule
    reward and fills the row with that total, so any read position gives it.
    """

    base_model_prefix = "backbone"

    def __init__(self, tokenizer, prompts) -> None:
        super().__init__()
        from rlcockpit.world.rewards import score

        self.backbone = _IdsBackbone()
        self._score = score
        self._tokenizer = tokenizer
        self._by_ids = {tuple(tokenizer(p.prompt)["input_ids"]): p for p in prompts}
        self._max_prompt = max(len(k) for k in self._by_ids)
        self.tokens: list[int] = []
        self.reward_means: list[float] = []
        self.step = 0

    def _split(self, ids: list[int]):
        for n in range(min(len(ids), self._max_prompt), 0, -1):
            prompt = self._by_ids.get(tuple(ids[:n]))
            if prompt is not None:
                return prompt, ids[n:]
        raise ValueError("a rollout does not start with a known train prompt")

    def score(self, hidden: torch.Tensor) -> torch.Tensor:
        rows = [[int(t) for t in row.squeeze(-1).tolist() if t >= 0] for row in hidden]
        split = [self._split(r) for r in rows]
        texts = [self._tokenizer.decode(resp, skip_special_tokens=True) for _, resp in split]
        comps = self._score([p.prompt for p, _ in split], texts, [p.meta for p, _ in split], self.step)
        totals = torch.tensor([component_total(c) for c in comps], dtype=torch.float32)
        # Pad is masked out of the ids; the EOS that ends a response is counted like ours does.
        eos = 1 if self._tokenizer.eos_token_id == self._tokenizer.pad_token_id else 0
        self.tokens.append(sum(len(resp) + eos for _, resp in split))
        self.reward_means.append(float(totals.mean()))
        self.step += 1
        return totals.view(-1, 1, 1).expand(hidden.shape[0], hidden.shape[1], 1)


def run_ppo(args: argparse.Namespace, attach=None) -> dict:
    """``attach(trainer)``, if given, is called before ``trainer.train()`` (benchmarks/trl_ppo_watch.py
    attaches the cockpit there)."""
    from datasets import Dataset
    from transformers import (
        AutoModelForCausalLM,
        AutoModelForSequenceClassification,
        AutoTokenizer,
    )
    from trl.experimental.ppo import PPOConfig, PPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(args.model, padding_side="left")
    prompts = world_prompts(tokenizer)
    ids = [{"input_ids": tokenizer(p.prompt)["input_ids"]} for p in prompts]
    batch = args.batch_size * args.n_samples  # TRL PPO samples one completion per prompt
    if batch % args.minibatches:
        raise SystemExit(f"batch {batch} is not divisible by minibatches {args.minibatches}")
    policy = AutoModelForCausalLM.from_pretrained(args.model)
    ref = AutoModelForCausalLM.from_pretrained(args.model)
    value = AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=1)
    value.config.pad_token_id = tokenizer.pad_token_id
    reward = FunctionRewardModel(tokenizer, prompts)
    with tempfile.TemporaryDirectory(prefix="trl-ppo-") as out:
        config = PPOConfig(
            output_dir=out, report_to="none", save_strategy="no", logging_steps=1,
            use_cpu=True, bf16=False, fp16=False, seed=args.seed, disable_tqdm=True,
            dataloader_num_workers=0, learning_rate=args.lr, lr_scheduler_type="constant",
            per_device_train_batch_size=batch // args.minibatches,
            gradient_accumulation_steps=args.minibatches, num_mini_batches=args.minibatches,
            num_ppo_epochs=args.epochs, total_episodes=args.steps * batch,
            local_rollout_forward_batch_size=batch, response_length=args.max_new_tokens,
            temperature=args.temperature, kl_coef=args.kl_coef, cliprange=args.clip_eps,
            stop_token="eos", missing_eos_penalty=None, num_sample_generations=0,
        )
        clock = StepClock()
        trainer = PPOTrainer(
            args=config, processing_class=tokenizer, model=policy, ref_model=ref,
            reward_model=reward, value_model=value, train_dataset=Dataset.from_list(ids),
            eval_dataset=Dataset.from_list(ids[: batch]), callbacks=[as_callback(clock)],
        )
        if attach is not None:
            attach(trainer)
        trainer.train()
    # TRL's PPO calls on_step_end once per rollout cycle (its "update").
    return {"cycle_s": cycle_times(clock, 1), "tokens": reward.tokens,
            "reward_mean": reward.reward_means, "steps_per_cycle": 1}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import trl

    result = run_grpo(args) if args.algo == "grpo" else run_ppo(args)
    result.update(algo=args.algo, trl_version=trl.__version__, torch_threads=torch.get_num_threads())
    sys.stdout.flush()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
