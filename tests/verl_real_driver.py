"""A verl driver's logging, run by tests/test_verl_real.py in .venv-verl (verl installed from
PyPI): verl's real ``Tracking(project_name, experiment_name, default_backend=["console",
"rlcockpit"], config=...)``, its ``log(data, step)`` once a step with verl's metric names, and its
rollout dumps written by verl's own ``RayPPOTrainer._write_generations`` on a background thread
(as ``_dump_generations`` does). The store comes from ``RLCOCKPIT_STORE``.

    python verl_real_driver.py WORKDIR STEPS [--hold-after N]

``--hold-after N``: after step N print ``HOLDING N`` and wait for a line on stdin (the test reads
the live run meanwhile, then sends a line to go on, or kills the process).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np


def verl_write_generations():
    """verl's ``RayPPOTrainer._write_generations`` (a staticmethod of verl/trainer/ppo/ray_trainer.py),
    compiled from the installed file's own source: importing that module needs torchtitan,
    datasets, peft, ... which .venv-verl leaves out (tests/requirements-verl-real.txt)."""
    path = Path(importlib.util.find_spec("verl").submodule_search_locations[0]) / "trainer" / "ppo" / "ray_trainer.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef) and node.name == "_write_generations":
            node.decorator_list = []
            namespace = {"os": os, "json": json}
            exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), namespace)
            return namespace["_write_generations"]
    raise SystemExit(f"no _write_generations in {path}: verl's dump code moved")


def metrics(step: int) -> dict:
    """One step as verl's metric_utils / dp_actor name it, reduced with numpy as verl does."""
    return {"actor/pg_loss": np.float64(0.5 - 0.01 * step), "actor/entropy": np.float64(1.2 - 0.01 * step),
            "actor/ppo_kl": 0.001, "actor/kl_loss": 0.002 * step, "actor/kl_coef": 0.001,
            "actor/grad_norm": np.float32(0.75), "actor/lr": 1e-6,
            "critic/score/mean": np.float64(0.1 * step), "response_length/mean": 20.0 + step,
            "timing_s/gen": 1.5, "training/global_step": step, "training/epoch": 0}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("workdir", type=Path)
    p.add_argument("steps", type=int)
    p.add_argument("--hold-after", type=int, default=None)
    args = p.parse_args()
    import verl
    from verl.utils.tracking import Tracking

    write_generations = verl_write_generations()
    rollouts = args.workdir / "rollouts"
    config = {"trainer": {"project_name": "real", "experiment_name": "verl", "rollout_data_dir": str(rollouts),
                          "default_local_dir": str(args.workdir / "ckpt"), "total_training_steps": args.steps},
              "actor_rollout_ref": {"actor": {"use_kl_loss": True, "kl_loss_coef": 0.001}}}
    tracker = Tracking(project_name="real", experiment_name="verl", default_backend=["console", "rlcockpit"],
                       config=config)
    print(f"VERL {verl.__version__} RUN {tracker.logger['rlcockpit'].run.run_id}", flush=True)
    dumps = ThreadPoolExecutor(max_workers=1)  # RayPPOTrainer._dump_executor
    for step in range(1, args.steps + 1):
        n = 4
        dumps.submit(write_generations, [f"q{step}-{i // 2}" for i in range(n)], [f"a{step}-{i}" for i in range(n)],
                     ["2"] * n, [0.25 * i for i in range(n)], {"acc": [float(i % 2) for i in range(n)]},
                     str(rollouts), step)
        tracker.log(data=metrics(step), step=step)
        if step == args.hold_after:
            dumps.shutdown(wait=True)
            dumps = ThreadPoolExecutor(max_workers=1)
            print(f"HOLDING {step}", flush=True)
            sys.stdin.readline()
    dumps.shutdown(wait=True)
    tracker.finish(exit_code=0)
    print("FINISHED", flush=True)


if __name__ == "__main__":
    main()
