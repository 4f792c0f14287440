"""rlcockpit from an ordinary PyTorch training script (runs in about a second on a CPU).

A toy policy-gradient loop: for each prompt category the policy picks one of four canned
responses; the reward says which one is right. Every step logs scalar metrics, a reward histogram
and every sample (with per-token logprobs), then commits the step. Look at the result with

    python examples/plain_pytorch_loop.py --store sqlite:///toy.db
    rlcockpit runs --store sqlite:///toy.db
"""

from __future__ import annotations

import argparse

import torch

import rlcockpit

CATEGORIES = ["math", "knowledge", "safety", "chat"]
RESPONSES = ["4", "Paris", "I can't help with that.", "Hello!"]  # the right one: same index


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="sqlite:///rlcockpit.db")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    logits = torch.zeros(len(CATEGORIES), len(RESPONSES), requires_grad=True)
    ref_logprobs = torch.log_softmax(logits.detach().clone(), dim=-1)
    optimizer = torch.optim.Adam([logits], lr=0.1)

    config = {"lr": 0.1, "batch": args.batch, "steps": args.steps}
    with rlcockpit.init(project="examples", name="plain-pytorch", store=args.store,
                        config=config) as run:
        for step in range(args.steps):
            category = torch.randint(len(CATEGORIES), (args.batch,))
            dist = torch.distributions.Categorical(logits=logits[category])
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
        print(f"run {run.run_id}: {args.steps} steps logged to {args.store}")


if __name__ == "__main__":
    main()
