"""The rlcockpit verl backend and follow mode against the real trainers' own logging code, in
.benchvenv-verl (verl 0.9.1 pins transformers < 5.11: not in the project's venv; OpenRLHF 0.11.2
needs flash-attn and deepspeed, so only its logging module is installed, --no-deps):

    make .benchvenv-verl/.installed
    .benchvenv-verl/bin/pip install --no-deps openrlhf==0.11.2
    .benchvenv-verl/bin/python benchmarks/verl_tracking.py            # prints one JSON line

Checks, each raising AssertionError when it fails:

1. ``import verl`` loads the entry point: ``"rlcockpit"`` is in ``Tracking.supported_backend``.
2. verl's real ``Tracking(project_name=..., experiment_name=..., default_backend=["console",
   "rlcockpit", "file"], config=...)`` logs steps: the store has every step under catalog names,
   the samples of the dumps written by verl's own ``RayPPOTrainer._write_generations`` on a
   background thread (whole files only), a nonfinite finding at the NaN step, and
   ``Tracking.finish(exit_code=0)`` closes the run ``finished``.
3. verl's ``file`` backend, resumed (a second ``Tracking`` reopens its JSONL with ``"wb"``), while
   ``rlcockpit import --follow`` follows it: every step once.
4. OpenRLHF's own logger (``openrlhf.utils.logging_utils.init_logger``: the ``✨ Global step``
   lines) and ``TensorboardLogger`` (scalars ``train/<k>`` and the ``train/generated_samples``
   text) followed live. ``--write-fixtures DIR`` keeps the files it wrote there.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace


def _metrics(step: int) -> dict:
    return {"actor/pg_loss": math.nan if step == 4 else 0.1, "actor/entropy": 1.2 - 0.01 * step,
            "actor/ppo_kl": 0.001, "actor/kl_loss": 0.002 * step, "actor/kl_coef": 0.001,
            "critic/score/mean": 0.1 * step, "response_length/mean": 20.0, "training/global_step": step}


def check_tracking(tmp: Path) -> dict:
    import verl
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.utils.tracking import Tracking

    from rlcockpit.store import open_store
    from rlcockpit.store.base import SampleQuery

    assert "rlcockpit" in Tracking.supported_backend, "the verl.plugins entry point was not loaded"
    uri = f"sqlite:///{tmp / 'verl.db'}"
    os.environ["RLCOCKPIT_STORE"], os.environ["VERL_FILE_LOGGER_PATH"] = uri, str(tmp / "verl.jsonl")
    policy = tmp / "diagnostics.yaml"  # the NaN step's red finding would pause the driver (the default)
    policy.write_text("policy:\n  actions:\n    red: [alert]\n", encoding="utf-8")
    os.environ["RLCOCKPIT_DIAGNOSTICS"] = str(policy)
    rollouts = tmp / "rollouts"
    config = {"trainer": {"rollout_data_dir": str(rollouts), "default_local_dir": str(tmp / "ckpt")},
              "actor_rollout_ref": {"actor": {"use_kl_loss": True, "kl_loss_coef": 0.001,
                                              "optim": {"total_training_steps": 6}}}}
    tracker = Tracking(project_name="bench", experiment_name="verl", default_backend=["console", "rlcockpit", "file"],
                       config=config)
    dumps = ThreadPoolExecutor(max_workers=1)  # as RayPPOTrainer._dump_generations
    for step in range(1, 7):
        n = 4
        dumps.submit(RayPPOTrainer._write_generations, [f"q{i // 2}" for i in range(n)], [f"a{i}" for i in range(n)],
                     ["2"] * n, [0.25 * i for i in range(n)], {"acc": [float(i % 2) for i in range(n)]},
                     str(rollouts), step)
        tracker.log(data=_metrics(step), step=step)
    dumps.shutdown(wait=True)
    tracker.finish(exit_code=0)
    ours = tracker.logger["rlcockpit"]
    reader = open_store(uri).reader()
    run_id = ours.run.run_id
    summary = reader.summary(run_id)
    assert summary.steps == 6 and summary.samples == 24, summary
    assert {"policy/loss", "reward/mean", "kl/token_mean", "kl/mean"} <= set(summary.metric_names)
    assert reader.get_run(run_id).status == "finished"
    assert any(f.detector == "nonfinite" and f.step == 4 for f in reader.read_findings(run_id))
    sample = reader.query_samples(run_id, SampleQuery(step_min=2, step_max=2, limit=2)).items[1]
    assert sample.components == {"acc": 1.0} and sample.response == "a1"
    return {"verl": verl.__version__, "run_id": run_id, "steps": summary.steps, "samples": summary.samples}


def check_file_logger_resume(tmp: Path) -> dict:
    from verl.utils.tracking import Tracking

    from rlcockpit.integrations.follow import FollowOptions, start_follow
    from rlcockpit.store import open_store

    path = tmp / "resume.jsonl"
    os.environ["VERL_FILE_LOGGER_PATH"] = str(path)
    uri = f"sqlite:///{tmp / 'follow.db'}"
    first = Tracking(project_name="bench", experiment_name="resume", default_backend=["file"])
    for step in range(1, 6):
        first.log(data=_metrics(step) | {"actor/pg_loss": 0.1}, step=step)
    follower = start_follow([path], store=uri, options=FollowOptions(diagnostics=False, settle_s=0.01))
    follower.poll()
    first.finish()
    second = Tracking(project_name="bench", experiment_name="resume", default_backend=["file"])  # "wb"
    for step in range(3, 10):  # resumed from the checkpoint of step 2
        second.log(data=_metrics(step) | {"actor/pg_loss": 0.2}, step=step)
    follower.poll()
    follower.close("finished")
    second.finish()
    series = open_store(uri).reader().read_series(follower.run.run_id, ["policy/loss"])["policy/loss"]
    assert series.steps == tuple(range(1, 10)), series.steps
    assert dict(zip(series.steps, series.values, strict=True))[3] == 0.2  # the resumed run's values
    return {"steps": len(series.steps)}


def check_openrlhf(tmp: Path, keep: Path | None) -> dict:
    from openrlhf.utils.logging_utils import TensorboardLogger, init_logger

    from rlcockpit.integrations.follow import FollowOptions, start_follow
    from rlcockpit.store import open_store

    console = tmp / "openrlhf" / "train.log"
    console.parent.mkdir(parents=True)
    logger = init_logger("openrlhf.trainer.ppo_trainer")
    handler = __import__("logging").FileHandler(console)
    handler.setFormatter(logger.handlers[0].formatter)
    logger.addHandler(handler)
    args = SimpleNamespace(logger=SimpleNamespace(tensorboard_dir=str(tmp / "openrlhf" / "tb"),
                                                  wandb=SimpleNamespace(run_name="ppo")))
    board = TensorboardLogger(args)
    uri = f"sqlite:///{tmp / 'openrlhf.db'}"
    follower = start_follow([console, Path(args.logger.tensorboard_dir)], store=uri,
                            options=FollowOptions(diagnostics=False, settle_s=0.01))
    for step in range(1, 5):
        sample0 = [f"question {step} answer {step}", 0.25 * step]
        logger.info(f"Sample: {sample0}")
        status = {"policy_loss": 0.01 * step, "kl": 1e-4 * step, "reward": 0.1 * step, "response_length": 30.0,
                  "entropy_loss": 1.0, "ppo_kl": math.nan if step == 3 else 1e-4}
        logger.info(f"✨ Global step {step}: {status}")
        board.log_train(step, {**status, "generated_samples": sample0})
        board.writer.flush()
        follower.poll()
    board.close()
    follower.poll()
    follower.close("finished")
    reader = open_store(uri).reader()
    summary = reader.summary(follower.run.run_id)
    assert summary.steps == 4 and summary.samples == 4, summary  # one sample a step, from both files once
    assert {"policy/loss", "reward/mean", "kl/token_mean"} <= set(summary.metric_names)
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        shutil.copy(console, keep / "train.log")
        for event in Path(args.logger.tensorboard_dir).rglob("events.out.tfevents.*"):
            shutil.copy(event, keep / event.name)
    return {"steps": summary.steps, "samples": summary.samples}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write-fixtures", type=Path, default=None, help="keep OpenRLHF's files here")
    args = p.parse_args()
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="verl-tracking-") as tmp:
        root = Path(tmp)
        (root / "a").mkdir()
        (root / "b").mkdir()
        (root / "c").mkdir()
        result = {"benchmark": "verl_tracking", "tracking": check_tracking(root / "a"),
                  "file_logger_resume": check_file_logger_resume(root / "b"),
                  "openrlhf": check_openrlhf(root / "c", args.write_fixtures)}
    result["seconds"] = round(time.monotonic() - start, 1)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    sys.exit(main())
