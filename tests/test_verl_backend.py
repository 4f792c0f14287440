"""The verl tracking backend's logger (rlcockpit.integrations.verl.VerlLogger), driven with what
verl's Tracking hands every backend: the steps of a verl file-logger log (tests/fixtures, the
`{"step", "data"}` lines of verl/utils/tracking.py FileLogger) and the generation dumps verl's
_write_generations writes. verl itself pins transformers < 5.11, which the project's venv (TRL on
the latest transformers) cannot take: the plugin against verl 0.9.1's real Tracking class runs in
its own venv, benchmarks/verl_tracking.py (`make .benchvenv-verl/.installed`)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rlcockpit.control import ControlPlane
from rlcockpit.diagnostics import DiagnosticsConfig, PolicyConfig
from rlcockpit.diagnostics.coverage import NO_REFERENCE_STATUS
from rlcockpit.integrations.verl import RUN_ID_FILE, RunStopped, VerlLogger
from rlcockpit.integrations.verl_dumps import VALIDATION_ID_BASE
from rlcockpit.store import open_store
from rlcockpit.store.base import SampleQuery

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "verl_metrics.jsonl"
pytestmark = pytest.mark.timeout(180)


def _steps() -> list[tuple[int, dict]]:
    return [(row["step"], row["data"]) for row in map(json.loads, FIXTURE.read_text().splitlines())]


def _config(tmp_path: Path, kl: bool = True, total: int = 4) -> dict:
    return {"trainer": {"project_name": "p", "experiment_name": "e", "rollout_data_dir": str(tmp_path / "rollouts"),
                        "validation_data_dir": str(tmp_path / "val"), "default_local_dir": str(tmp_path / "ckpt")},
            "algorithm": {"use_kl_in_reward": False, "kl_ctrl": {"kl_coef": 0.001}},
            "actor_rollout_ref": {"actor": {"use_kl_loss": kl, "kl_loss_coef": 0.001,
                                            "optim": {"total_training_steps": total}}}}


def _dump(folder: Path, step: int, n: int = 4) -> None:
    """One step's dump as verl's _write_generations writes it (json.dumps per line, "w")."""
    folder.mkdir(exist_ok=True)
    with open(folder / f"{step}.jsonl", "w") as f:
        for i in range(n):
            f.write(json.dumps({"input": f"question {i // 2}", "output": f"answer {i}", "gts": "2",
                                "score": 0.25 * i, "step": step, "acc": float(i % 2)}, ensure_ascii=False) + "\n")


def test_every_step_its_samples_and_the_findings_are_live_and_the_run_finishes(tmp_path):
    uri = f"sqlite:///{tmp_path / 'verl.db'}"
    config = _config(tmp_path)
    policy = PolicyConfig(actions={"red": ("alert", "checkpoint")})  # the default also pauses the driver
    logger = VerlLogger("p", "e", config, store=uri, diagnostics=DiagnosticsConfig(policy=policy))
    steps = _steps()
    for step, data in steps:
        _dump(tmp_path / "rollouts", step)  # verl dumps the rollout before it logs the step
        if step == 3:
            _dump(tmp_path / "val", step, n=2)
        logger.log(data=data, step=step)
    reader = open_store(uri).reader()
    run_id = logger.run.run_id
    assert logger.run.flush(timeout=30)  # the writer thread writes within its flush interval
    assert reader.summary(run_id).samples == 4 * 3 + 2  # live: steps 1-3 and step 3's validation (4 waits)
    logger.finish(exit_code=0)
    summary = reader.summary(run_id)
    distinct = sorted({step for step, _ in steps})  # verl logs step 4's validation metrics apart
    assert summary.steps == len(distinct) == 4 and summary.samples == 4 * len(distinct) + 2
    assert {"policy/loss", "reward/mean", "kl/token_mean", "kl/mean", "policy/entropy"} <= set(summary.metric_names)
    assert "import/verl/training/global_step" in summary.metric_names  # kept, not dropped
    val = reader.query_samples(run_id, SampleQuery(step_min=3, step_max=3, include_token_arrays=False)).items
    assert sorted(s.sample_id for s in val if s.flags == ("validation",)) == [VALIDATION_ID_BASE, VALIDATION_ID_BASE + 1]
    assert next(s for s in val if s.sample_id == 1).components == {"acc": 1.0}
    findings = reader.read_findings(run_id)
    # the fixture's step 3 logs a NaN gradient norm: red, live, and the policy's checkpoint fails
    assert any(f.detector == "nonfinite" and f.step == 3 and f.severity == "red" for f in findings), findings
    checkpoint = [t for t in store_tickets(uri, run_id) if t.target == "checkpoint"]
    assert [t.status for t in checkpoint] == ["failed"] and "save_freq" in checkpoint[0].error
    run = reader.get_run(run_id)
    assert run.status == "finished" and run.config["verl"]["reference"] is True
    assert run.config["verl"]["config"]["trainer"]["rollout_data_dir"] == str(tmp_path / "rollouts")
    assert (tmp_path / "ckpt" / RUN_ID_FILE).read_text().strip() == run_id


def test_a_run_without_a_kl_term_declares_no_reference(tmp_path):
    uri = f"sqlite:///{tmp_path / 'verl.db'}"
    logger = VerlLogger("p", "e", _config(tmp_path, kl=False), store=uri, control=False)
    for step, data in _steps():
        logger.log(data={k: v for k, v in data.items() if "kl" not in k}, step=step)
    logger.finish(0)
    assert logger.engine.status["kl_zero"] == NO_REFERENCE_STATUS
    assert open_store(uri).reader().read_series(logger.run.run_id, ["kl/coef"])["kl/coef"].values == (0.0,) * 4


def test_pause_blocks_log_stop_raises_and_a_resumed_verl_run_continues_the_same_run(tmp_path):
    uri = f"sqlite:///{tmp_path / 'verl.db'}"
    store = open_store(uri)
    plane = ControlPlane.over(store.control(), store.reader())
    olga, alex = (plane.users.authenticate(plane.users.add(n, r)[1]) for n, r in (("olga", "operator"),
                                                                                   ("alex", "approver")))
    config = _config(tmp_path, total=1000)
    logger = VerlLogger("p", "e", config, store=uri, diagnostics=False)
    logger.link.cfg = type(logger.link.cfg)(poll_interval_s=0.05)
    done: dict = {}

    def train():
        try:
            for step in range(1, 1000):
                logger.log(data={"critic/score/mean": 0.1, "actor/pg_loss": 0.2}, step=step)
                done["step"] = step
                if step == 3:
                    done["pause"] = plane.tickets.command(olga, logger.run.run_id, "pause", "look")
                time.sleep(0.01)
        except RunStopped as exc:
            done["stopped"] = str(exc)

    thread = threading.Thread(target=train)
    thread.start()
    deadline = time.monotonic() + 60
    while "pause" not in done and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    assert done["step"] == 3 and thread.is_alive()  # the next log() (step 4) holds the driver
    stop = plane.tickets.command(olga, logger.run.run_id, "stop", "enough")
    plane.tickets.approve(alex, stop.ticket_id, "")
    thread.join(30)
    assert not thread.is_alive() and "stopped after step 4" in done["stopped"]
    reader = store.reader()
    assert reader.get_run(logger.run.run_id).status == "stopped" and reader.summary(logger.run.run_id).steps == 4
    assert [e.step for e in reader.read_events(logger.run.run_id) if e.kind == "paused"] == [4]
    (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").write_text("3")  # verl resumes from step 3
    again = VerlLogger("p", "e", config, store=uri, diagnostics=False)
    assert again.run.run_id == logger.run.run_id
    again.log(data={"critic/score/mean": 0.2}, step=4)
    again.finish(0)
    assert "run_resumed" in [e.kind for e in reader.read_events(logger.run.run_id)]
    assert reader.get_run(logger.run.run_id).status == "failed"  # finished at step 4 of 1000: cut short


def test_a_driver_that_dies_with_an_exception_leaves_the_run_failed(tmp_path):
    uri = f"sqlite:///{tmp_path / 'verl.db'}"
    script = f"""
from rlcockpit.integrations.verl import VerlLogger
logger = VerlLogger("p", "e", {{"trainer": {{}}}}, store={uri!r})
print(logger.run.run_id, flush=True)
logger.log(data={{"critic/score/mean": 0.5}}, step=1)
raise RuntimeError("CUDA out of memory")
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "CUDA out of memory" in proc.stderr
    run_id = proc.stdout.split()[-1]
    reader = open_store(uri).reader()
    assert reader.get_run(run_id).status == "failed" and reader.summary(run_id).steps == 1


def store_tickets(uri: str, run_id: str) -> list:
    return open_store(uri).control().list_tickets(run_id=run_id)


def test_the_entry_point_verl_loads_is_declared_and_never_breaks_an_import(caplog):
    """`import verl` loads group verl.plugins; without verl's tracking module the plugin stays off."""
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="verl.plugins") if e.name == "rlcockpit"]
    assert ep.value == "rlcockpit.integrations.verl_plugin"
    module = ep.load()
    import importlib.util

    if importlib.util.find_spec("verl") is None:  # the project's venv: verl lives in .benchvenv-verl
        assert module.INSTALLED is False and "the rlcockpit backend is off" in caplog.text
    else:
        assert module.INSTALLED is True
