"""Shared by benchmarks/trainer_speed.py and benchmarks/learning.py: run OUR trainer through the real
CLI (``python -m rlcockpit train``) in a fresh subprocess and read the run back from its store.

Only the project's own venv is needed here (stdlib + rlcockpit; torch is imported by the child).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


@dataclass(frozen=True)
class TrainRun:
    """One finished ``rlcockpit train`` subprocess."""

    store_uri: str
    run_id: str
    wall_s: float
    returncode: int
    stderr_tail: str


def example_config(algo: str) -> Path:
    return EXAMPLES / f"{algo}_tiny.yaml"


def load_train_config(config: Path | None, overrides: list[str]):
    """The validated TrainConfig exactly as ``rlcockpit train`` would build it (stdlib only)."""
    from rlcockpit.config import load_config
    from rlcockpit.trainer.config import TrainConfig

    return load_config(TrainConfig, config, overrides)


def thread_env(threads: int) -> dict[str, str]:
    """Child environment: offline HF, and the same BLAS/OpenMP thread count for every contender."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    if threads > 0:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return env


def run_train(config: Path | None, db: Path, overrides: list[str], *, threads: int = 0,
              timeout_s: float = 3600.0) -> TrainRun:
    """``python -m rlcockpit train [--config CONFIG] --store sqlite:///DB --quiet OVERRIDES...``."""
    uri = f"sqlite:///{db}"
    extra = [f"model.threads={threads}"] if threads > 0 else []
    cfg_args = ["--config", str(config)] if config is not None else []
    cmd = [sys.executable, "-m", "rlcockpit", "train", *cfg_args, "--store", uri,
           "--quiet", *overrides, *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=db.parent, env=thread_env(threads), capture_output=True,
                          text=True, timeout=timeout_s)
    wall = time.perf_counter() - t0
    tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
    run_id = only_run_id(uri) if proc.returncode == 0 else ""
    return TrainRun(uri, run_id, wall, proc.returncode, tail)


def only_run_id(uri: str) -> str:
    from rlcockpit.store import open_store

    reader = open_store(uri).reader()
    try:
        runs = reader.list_runs()
    finally:
        reader.close()
    if len(runs) != 1:
        raise RuntimeError(f"expected exactly one run in {uri}, found {len(runs)}")
    return runs[0].run_id


def read_series(uri: str, run_id: str, names: list[str]) -> dict:
    from rlcockpit.store import open_store

    reader = open_store(uri).reader()
    try:
        return reader.read_series(run_id, names)
    finally:
        reader.close()


def metric_names(uri: str, run_id: str) -> list[str]:
    from rlcockpit.store import open_store

    reader = open_store(uri).reader()
    try:
        return reader.metric_names(run_id)
    finally:
        reader.close()


def step_wall_times(uri: str, run_id: str) -> list[float]:
    """Seconds per training step from the phase records: from one ROLLOUT start to the next.

    The last step ends at the last phase record of that step (CHECKPOINT and EVAL excluded, so a
    final checkpoint or an evaluation does not count as training time).
    """
    from rlcockpit.store import open_store

    reader = open_store(uri).reader()
    try:
        phases = reader.read_phases(run_id)
    finally:
        reader.close()
    starts: dict[int, float] = {}
    ends: dict[int, float] = {}
    for p in phases:
        if p.phase == "ROLLOUT" and p.status == "started":
            starts.setdefault(p.step, p.wall_time)
        if p.phase not in ("CHECKPOINT", "EVAL", "INIT"):
            ends[p.step] = max(ends.get(p.step, 0.0), p.wall_time)
    steps = sorted(starts)
    out = [starts[b] - starts[a] for a, b in zip(steps, steps[1:], strict=False)]
    if steps:
        out.append(ends[steps[-1]] - starts[steps[-1]])
    return out


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def print_json_last(obj: dict) -> None:
    """The contract of every benchmark: the last stdout line is one JSON object."""
    sys.stdout.flush()
    print(json.dumps(obj, sort_keys=False), flush=True)
