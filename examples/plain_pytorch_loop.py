"""rlcockpit from an ordinary PyTorch training script (runs in about a second on a CPU).

A toy policy-gradient loop: for each prompt category the policy picks one of four canned
responses; the reward says which one is right. Every step logs scalar metrics, a reward histogram
and every sample (with per-token logprobs), then commits the step. At the boundary after each step
the loop takes the approved tickets: a change of the learning rate or of the sampling temperature,
a checkpoint; pause / resume / stop work too (docs/integrations.md). Look at the result with

    python examples/plain_pytorch_loop.py --store sqlite:///toy.db
    rlcockpit runs --store sqlite:///toy.db
    rlcockpit serve --store sqlite:///toy.db      # and steer it: rlcockpit ticket --help
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

import rlcockpit
from rlcockpit.control import ControlConfig

CATEGORIES = ["math", "knowledge", "safety", "chat"]
RESPONSES = ["4", "Paris", "I can't help with that.", "Hello!"]  # the right one: same index
LIVE = {  # what an operator may change by ticket while the loop runs
    "lr": rlcockpit.LiveParam(0.1, lo=1e-4, hi=1.0, help="Adam learning rate", metric="optim/lr/actor"),
    "temperature": rlcockpit.LiveParam(1.0, lo=0.05, hi=5.0, help="sampling temperature"),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="sqlite:///rlcockpit.db")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--checkpoint-dir", default="checkpoints/plain-loop")
    parser.add_argument("--effect-steps", type=int, default=10,
                        help="steps after a change at which its effect is measured")
    parser.add_argument("--poll-interval", type=float, default=0.5,
                        help="while paused, seconds between looks at the store")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    logits = torch.zeros(len(CATEGORIES), len(RESPONSES), requires_grad=True)
    ref_logprobs = torch.log_softmax(logits.detach().clone(), dim=-1)
    optimizer = torch.optim.Adam([logits], lr=LIVE["lr"].value)
    temperature = LIVE["temperature"].value

    config = {"lr": LIVE["lr"].value, "batch": args.batch, "steps": args.steps}
    control = ControlConfig(effect_steps=args.effect_steps, poll_interval_s=args.poll_interval)
    with rlcockpit.init(project="examples", name="plain-pytorch", store=args.store, config=config,
                        live_params=LIVE, control=control) as run:
        for step in range(args.steps):
            category = torch.randint(len(CATEGORIES), (args.batch,))
            dist = torch.distributions.Categorical(logits=logits[category] / temperature)
            choice = dist.sample()
            reward = (choice == category).float() - 0.1 * torch.rand(args.batch)
            logprob = dist.log_prob(choice)
            loss = -((reward - reward.mean()) * logprob).mean()  # REINFORCE with a mean baseline
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

            ref = ref_logprobs[category, choice]
            token_kl = (logprob.detach() - ref)  # one "token" per response in this toy
            run.log(step, {
                "reward/mean": reward.mean().item(),
                "reward/std": reward.std().item(),
                "policy/loss": loss.item(),
                "policy/entropy": dist.entropy().mean().item(),
                "kl/mean": token_kl.mean().item(),
                "optim/lr/actor": optimizer.param_groups[0]["lr"],
            })
            run.log_histogram(step, "reward/hist", reward, bins=16)
            run.log_samples(step, [
                {"sample_id": i, "prompt": f"a {CATEGORIES[c]} question",
                 "response": RESPONSES[a], "reward": float(r), "category": CATEGORIES[c],
                 "prompt_id": f"{CATEGORIES[c]}-0", "length": 1, "tokens": [RESPONSES[a]],
                 "logprobs": [float(lp)], "ref_logprobs": [float(rl)],
                 "token_kl": [float(k)], "kl_sum": float(k), "kl_max": float(k)}
                for i, (c, a, r, lp, rl, k) in enumerate(zip(
                    category.tolist(), choice.tolist(), reward.tolist(), logprob.tolist(),
                    ref.tolist(), token_kl.tolist(), strict=True))])
            run.commit(step)

            # the step boundary: approved tickets (a pause blocks here until resumed)
            for change in run.pending_changes(step):
                if change.name == "lr":
                    for group in optimizer.param_groups:
                        group["lr"] = change.value
                    change.applied()
                elif change.name == "temperature":
                    temperature = change.value
                    change.applied()
                elif change.name == "checkpoint":
                    path = Path(args.checkpoint_dir) / f"step-{step}.pt"
                    path.parent.mkdir(parents=True, exist_ok=True)
                    torch.save({"logits": logits.detach(), "optimizer": optimizer.state_dict(),
                                "step": step}, path)
                    change.applied(checkpoint=str(path))
                else:
                    change.failed(f"this toy loop cannot {change.kind} {change.name}")
            if run.stop_requested:
                break
        print(f"run {run.run_id}: {step + 1} steps logged to {args.store}")


if __name__ == "__main__":
    main()
