"""ROLLOUT's sampler against transformers' ``generate`` on the tiny world's model (docs/trainer.md,
"Generation"): the same prompts, the same sampling semantics (temperature, top-p, EOS), and for
``generate`` the exact old logprobs recomputed by one forward pass over (prompt, response), which
our loop records while it samples.

    .venv/bin/python benchmarks/generation.py [--batch 32] [--max-new-tokens 24] [--repeats 5]

Prints one JSON line: median seconds per batch of each, and their ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=0.95)
    args = ap.parse_args()

    import torch

    from rlcockpit.metrics.rl import logprobs_from_logits
    from rlcockpit.trainer.data import load_prompt_items, tokenize_items
    from rlcockpit.trainer.models import load_causal_lm, load_tokenizer, resolve_model_path
    from rlcockpit.trainer.rollout import RolloutBatch, generate, left_pad, response_logits

    torch.set_num_threads(args.threads)
    path = resolve_model_path("tiny")
    model, tok = load_causal_lm(path), load_tokenizer(path)
    items, _ = tokenize_items(load_prompt_items("tiny", "train"), tok, 64)
    ids, mask = left_pad([it.token_ids for it in items[: args.batch]], tok.pad_token_id)
    eos, pad = tok.eos_token_id, tok.pad_token_id

    def ours(seed: int) -> int:
        batch = generate(model, ids, mask, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                         top_p=args.top_p, eos_id=eos, pad_id=pad, generator=torch.Generator().manual_seed(seed))
        return int(batch.response_mask.sum())

    @torch.no_grad()
    def hf(seed: int) -> int:
        torch.manual_seed(seed)
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=args.temperature,
                             top_p=args.top_p, top_k=0, max_new_tokens=args.max_new_tokens, eos_token_id=eos,
                             pad_token_id=pad)
        resp = out[:, ids.shape[1]:]
        # response mask: up to and including the first EOS (what our batches hold)
        after_eos = (resp == eos).long().cumsum(-1) - (resp == eos).long()
        rmask = (after_eos == 0).float()
        batch = RolloutBatch(ids, mask, torch.where(rmask > 0, resp, pad), rmask, truncated=rmask.sum(-1) == resp.shape[1])
        logprobs_from_logits(response_logits(model, batch, args.temperature), batch.response_ids)  # old logprobs
        return int(rmask.sum())

    results = {}
    for name, fn in (("loop", ours), ("hf_generate", hf)):
        fn(0)  # warm-up
        times, tokens = [], []
        for r in range(args.repeats):
            t0 = time.perf_counter()
            tokens.append(fn(r + 1))
            times.append(time.perf_counter() - t0)
        results[name] = {"s_per_batch": round(statistics.median(times), 4),
                         "tokens_per_s": round(statistics.median(tokens) / statistics.median(times), 1)}
    results["hf_over_loop"] = round(results["hf_generate"]["s_per_batch"] / results["loop"]["s_per_batch"], 2)
    print(json.dumps({"batch": args.batch, "max_new_tokens": args.max_new_tokens, "threads": args.threads,
                      **results}))


if __name__ == "__main__":
    main()
