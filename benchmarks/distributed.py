"""Data parallel on this machine: the scaling efficiency of 2 ranks vs 1, and what the telemetry of
a step costs per rank — measured on real runs, then simulated for 64 logical ranks.

1. The real CLI twice with the same global work (``examples/ppo_tiny.yaml``: 32 prompts a step,
   one shared store): ``rlcockpit train --nproc 1`` and ``--nproc 2`` (torchrun, gloo). A step's
   time is the sum of rank 0's phase times (``time/<phase>_s``, steps after the first);
   speedup = T1 / T2, efficiency = speedup / 2 (strong scaling: the same 32 prompts split in two).
   The telemetry part of a step is DIAGNOSE on rank 0 (the gather of every rank's step, the
   global metrics, every sample written): its growth from 1 to 2 ranks is the gather's cost,
   including the wait for the other rank to reach it.
2. Rank 0's side at 64 ranks, simulated in this process: 64 step states of ``--samples`` samples
   with ``--tokens``-token responses (the shapes a rank sends), pickled (the bytes each rank
   sends to rank 0) and merged into one step (``trainer.distributed.merge_states``); the per-rank
   metric rows rank 0 writes (9 per rank).

The 2 cores of this machine are shared by the two ranks (and anything else running): the
efficiency measures this box, not a cluster. Prints a table, then as the LAST line one JSON object.
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_info, print_json_last_line  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("rollout", "score", "advantage", "update", "diagnose", "hotfix")
PER_RANK_METRICS = 9  # step, 4 phase times, grad norm, rss, heartbeat age (+ the hash every N steps)


def run(nproc: int, workdir: Path, overrides: list[str]) -> dict[str, float]:
    """One ``rlcockpit train --nproc N``; median step time and DIAGNOSE time of rank 0."""
    uri = f"sqlite:///{workdir / f'n{nproc}.db'}"
    cmd = [sys.executable, "-m", "rlcockpit", "train", "--quiet", "--nproc", str(nproc), "--config",
           str(ROOT / "examples" / "ppo_tiny.yaml"), "--store", uri, f"checkpoint.dir={workdir / f'ckpt{nproc}'}",
           "checkpoint.at_end=false", "eval.every=0", "model.threads=1", *overrides]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"rlcockpit train --nproc {nproc} failed:\n{proc.stderr[-3000:]}")
    from rlcockpit.store import open_store

    reader = open_store(uri).reader()
    try:
        (r,) = reader.list_runs()
        series = reader.read_series(r.run_id, [f"time/{p}_s" for p in PHASES])
    finally:
        reader.close()
    steps = sorted(set(series["time/update_s"].steps))[1:]  # the first step warms up
    by_step = {n: dict(zip(s.steps, s.values, strict=True)) for n, s in series.items()}
    step_s = [sum(by_step[f"time/{p}_s"].get(k, 0.0) for p in PHASES) for k in steps]
    return {"step_s": statistics.median(step_s), "diagnose_s": statistics.median(by_step["time/diagnose_s"][k]
                                                                                   for k in steps),
            "wall_s": time.perf_counter() - t0}


def fake_state(rank: int, samples: int, tokens: int, prompt_tokens: int):
    """A rank's step state with real shapes (random values): what it sends to rank 0."""
    import numpy as np
    import torch

    from rlcockpit.rewards import ScoredBatch
    from rlcockpit.trainer.data import PromptItem
    from rlcockpit.trainer.rollout import RolloutBatch
    from rlcockpit.trainer.step import StepState

    g = torch.Generator().manual_seed(rank)
    n, r = samples, tokens

    def floats() -> torch.Tensor:
        return torch.randn(n, r, generator=g)

    batch = RolloutBatch(torch.randint(0, 50_000, (n, prompt_tokens), generator=g),
                         torch.ones(n, prompt_tokens, dtype=torch.long),
                         torch.randint(0, 50_000, (n, r), generator=g), torch.ones(n, r),
                         torch.zeros(n, dtype=torch.bool), floats())
    items = [PromptItem(f"p{rank}-{i}", "math", "x" * 4 * prompt_tokens, {"answer": "42"}) for i in range(n)]
    rewards = np.random.default_rng(rank).normal(size=n)
    return StepState(step=1, items=items, group_ids=list(range(n)), batch=batch, responses=["y" * 4 * r] * n,
                     old_logprobs=batch.logprobs, ref_logprobs=floats(), token_kl=floats(), values=floats(),
                     values_real=floats(), scored=ScoredBatch(rewards, {"correctness": rewards}),
                     rewards=rewards, shaped=torch.as_tensor(rewards, dtype=torch.float32),
                     update_mask=torch.ones(n, r), advantages=floats(), raw_advantages=floats(), returns=floats(),
                     value_targets=floats())


def simulate(world: int, samples: int, tokens: int, prompt_tokens: int) -> dict[str, float]:
    from rlcockpit.trainer.distributed import merge_states

    states = [fake_state(r, samples, tokens, prompt_tokens) for r in range(world)]
    t0 = time.perf_counter()
    sent = [pickle.dumps(s) for s in states]
    pickle_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    merged = merge_states([pickle.loads(b) for b in sent])
    merge_s = time.perf_counter() - t0
    return {"ranks": world, "bytes_per_rank": statistics.mean(len(b) for b in sent),
            "bytes_into_rank0": sum(len(b) for b in sent), "pickle_s_per_rank": pickle_s / world,
            "unpickle_merge_s_rank0": merge_s, "samples_rank0_writes": merged.size,
            "per_rank_metric_rows": PER_RANK_METRICS * world}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 steps of 8 prompts, 8-token responses; 4 simulated ranks")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--world", type=int, default=64, help="simulated ranks")
    ap.add_argument("--samples", type=int, default=16, help="simulated samples per rank")
    ap.add_argument("--tokens", type=int, default=1024, help="simulated response tokens")
    args = ap.parse_args()
    overrides = [f"train.steps={3 if args.quick else args.steps}"]
    if args.quick:
        overrides += ["rollout.batch_size=8", "ppo.minibatch_size=8", "rollout.max_new_tokens=8"]
        args.world, args.tokens = 4, 64
    with tempfile.TemporaryDirectory(prefix="rlcockpit-bench-dist-") as tmp:
        one, two = run(1, Path(tmp), overrides), run(2, Path(tmp), overrides)
    speedup = one["step_s"] / two["step_s"]
    sim = simulate(args.world, args.samples, args.tokens, prompt_tokens=256 if not args.quick else 16)
    print(f"{'ranks':>6} {'s/step':>8} {'DIAGNOSE s':>11}")
    for n, r in ((1, one), (2, two)):
        print(f"{n:>6} {r['step_s']:>8.3f} {r['diagnose_s']:>11.4f}")
    print(f"speedup {speedup:.2f}x, efficiency {speedup / 2:.0%} (2 ranks on {machine_info()['cpus']} cores)")
    print(f"telemetry per step on rank 0: DIAGNOSE {one['diagnose_s']:.4f} s (1 rank) -> {two['diagnose_s']:.4f} s "
          f"(2 ranks: + the gather, waits included)")
    print(f"simulated {sim['ranks']} ranks x {args.samples} samples x {args.tokens} tokens: "
          f"{sim['bytes_per_rank'] / 1e6:.2f} MB sent per rank, {sim['bytes_into_rank0'] / 1e6:.1f} MB into rank 0, "
          f"unpickle + merge {sim['unpickle_merge_s_rank0']:.2f} s, {sim['samples_rank0_writes']} samples and "
          f"{sim['per_rank_metric_rows']} per-rank metric rows written by rank 0")
    print_json_last_line({"step_s_1": one["step_s"], "step_s_2": two["step_s"], "speedup": speedup,
                          "efficiency": speedup / 2, "diagnose_s_1": one["diagnose_s"],
                          "diagnose_s_2": two["diagnose_s"], "simulated": sim, "machine": machine_info()})


if __name__ == "__main__":
    main()
