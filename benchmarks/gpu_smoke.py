"""GPU smoke benchmark: 20 PPO and 20 GRPO steps of a random ~0.5 B-parameter Qwen2-architecture
model on one accelerator, with the whole cockpit on (telemetry to SQLite, every detector).

    .venv/bin/python benchmarks/gpu_smoke.py                # on a machine with one NVIDIA GPU
    .venv/bin/python benchmarks/gpu_smoke.py --device cpu --size tiny --steps 2   # the same path, tiny

The model is built locally (rlcockpit.world.architectures: Qwen2 shapes, 0.54 B parameters with the
tiny world's ChatML tokenizer, random weights), the prompts are the tiny world's as chat messages,
rewarded by its rule rewards; bf16 autocast with fp32 master weights, gradient checkpointing,
micro-batches from the free memory. Without a CUDA device it prints a skip line and exits 0.

The LAST stdout line is one JSON object: per algorithm the median seconds per step (steps 2..N),
tokens/s, the peak GPU memory (allocated, GB), the telemetry share of the step (DIAGNOSE + HOTFIX:
metrics, histograms, samples, detectors, the store commit, over the step's wall time), the OOM
retries, and whether every detector ran (none errored, none left waiting).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SIZES = {
    # Qwen2 shapes (Qwen2.5-0.5B: hidden 896, 14 heads, 2 KV heads, MLP 4864), 36 layers: with the tiny
    # world's 1 k vocabulary (no 136 M-parameter embedding) that is 0.54 B parameters
    "0.5b": dict(hidden=896, layers=36, heads=14, kv_heads=2, intermediate=4864, max_positions=4096),
    "tiny": dict(hidden=32, layers=2, heads=4, kv_heads=2, intermediate=64, max_positions=512),
}
ALGOS = {
    "ppo": ["algo=ppo", "rollout.batch_size=32", "ppo.minibatch_size=16"],
    "grpo": ["algo=grpo", "rollout.batch_size=8", "rollout.n_samples=4", "ppo.minibatch_size=16",
             "kl.estimator=k3"],
}


def skip(reason: str) -> None:
    print(json.dumps({"benchmark": "gpu_smoke", "skipped": reason}))
    sys.exit(0)


def chat_prompts(path: Path, n: int) -> Path:
    """The tiny world's training prompts as one-turn chats (their meta keeps the rule rewards working)."""
    from rlcockpit.trainer.data import load_prompt_items

    items = load_prompt_items("tiny", "train")[:n]
    rows = [{"messages": [{"role": "user", "content": it.prompt}], "prompt_id": it.prompt_id,
             "category": it.category, "meta": dict(it.meta)} for it in items]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def run_algo(algo: str, model_dir: Path, data: Path, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    from rlcockpit.config import load_config
    from rlcockpit.trainer.config import TrainConfig
    from rlcockpit.trainer.trainer import Trainer

    store = f"sqlite:///{work / f'{algo}.db'}"
    overrides = [
        f"model.path={model_dir}", f"data.source={data}", f"telemetry.store={store}", f"train.steps={args.steps}",
        f"model.device={args.device}", f"model.dtype={args.dtype}", "model.gradient_checkpointing=true",
        f"rollout.max_new_tokens={args.max_new_tokens}", "data.max_prompt_tokens=256", "eval.every=0",
        "checkpoint.every=0", "checkpoint.at_end=false", f"checkpoint.dir={work / 'ckpt'}",
        "optim.actor_lr=1e-6", "optim.critic_lr=1e-5", "diagnostics.enabled=true", *ALGOS[algo],
    ]
    cfg = load_config(TrainConfig, None, overrides)
    trainer = Trainer(cfg)
    walls: list[float] = []
    trainer.add_observer(lambda step, metrics: walls.append(time.perf_counter()))
    result = trainer.run()
    return summarise(trainer, result, walls, store)


def summarise(trainer: Any, result: Any, walls: list[float], store: str) -> dict[str, Any]:
    from rlcockpit.store import open_store

    reader = open_store(store).reader()
    try:
        names = [n for n in reader.metric_names(result.run_id)
                 if n.startswith(("time/", "perf/tokens_per_s", "sys/gpu_mem"))]
        series = {n: dict(zip(s.steps, s.values, strict=True))
                  for n, s in reader.read_series(result.run_id, names).items()}
        oom = reader.read_events(result.run_id, kinds=["oom_retry"])
    finally:
        reader.close()
    steps = sorted(series.get("perf/tokens_per_s", {}))[1:] or sorted(series.get("perf/tokens_per_s", {}))
    phases = [n for n in series if n.startswith("time/") and n != "time/init_s"]
    step_s = [sum(series[p].get(s, 0.0) for p in phases) for s in steps]
    cockpit_s = [series.get("time/diagnose_s", {}).get(s, 0.0) + series.get("time/hotfix_s", {}).get(s, 0.0)
                 for s in steps]
    engine = trainer.diagnosis.engine
    statuses = dict(engine.status)
    peaks = [v for n, s in series.items() if n.startswith("sys/gpu_mem_peak_gb/") for v in s.values()]
    return {
        "status": result.status, "steps": result.step,
        "s_per_step": round(statistics.median(step_s), 3),
        "wall_s_per_step": round(statistics.median([b - a for a, b in zip(walls, walls[1:], strict=False)]), 3)
        if len(walls) > 2 else None,
        "tokens_per_s": round(statistics.median(series["perf/tokens_per_s"][s] for s in steps), 1),
        "peak_gpu_mem_gb": round(max(peaks), 2) if peaks else None,
        "telemetry_share": round(statistics.median(c / t for c, t in zip(cockpit_s, step_s, strict=True) if t > 0), 4),
        "oom_retries": len(oom),
        "detectors": len(statuses),
        "detector_errors": sorted(engine.errors),
        "detectors_waiting": sorted(n for n, s in statuses.items() if s == "waiting"),
        "every_detector_ran": not engine.errors and all(s != "waiting" for s in statuses.values()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--device", default="cuda", help='"cuda" (default) or "cpu" (with --size tiny: the path, tiny)')
    ap.add_argument("--size", choices=sorted(SIZES), default="0.5b")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32"))
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--algos", default="ppo,grpo")
    ap.add_argument("--work", default="", help="where the model, prompts and stores go (default: a temp dir)")
    args = ap.parse_args()

    import torch

    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            skip(f"no CUDA device (torch {torch.__version__}, cuda build {torch.version.cuda})")
        if torch.cuda.device_count() < 1:
            skip("no CUDA device visible")
    from rlcockpit.trainer.models import quiet_transformers
    from rlcockpit.world.architectures import ArchSize, count_parameters, save_random_model

    quiet_transformers()
    work = Path(args.work or tempfile.mkdtemp(prefix="rlcockpit-gpu-smoke-"))
    work.mkdir(parents=True, exist_ok=True)
    size = ArchSize(**SIZES[args.size])
    t0 = time.perf_counter()
    model_dir = save_random_model(work / "qwen2", "qwen2", size, seed=0)
    data = chat_prompts(work / "prompts.jsonl", 256)
    out: dict[str, Any] = {"benchmark": "gpu_smoke", "device": torch.cuda.get_device_name(0)
                           if args.device.startswith("cuda") else "cpu", "model": "qwen2 (random)",
                           "params": count_parameters("qwen2", size), "dtype": args.dtype,
                           "max_new_tokens": args.max_new_tokens, "build_s": round(time.perf_counter() - t0, 1)}
    for algo in args.algos.split(","):
        out[algo] = run_algo(algo, model_dir, data, work, args)
        print(f"{algo}: {json.dumps(out[algo])}", flush=True)
    out["ok"] = all(out[a]["status"] == "finished" and out[a]["every_detector_ran"] for a in args.algos.split(","))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
