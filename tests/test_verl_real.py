"""The rlcockpit verl backend inside verl's own ``Tracking`` class (verl from PyPI, in .venv-verl):
the driver (tests/verl_real_driver.py) runs there in a subprocess, the store is read here.

verl pins transformers < 5.11, which the project's venv (the latest TRL) cannot take, so verl lives
in a venv of its own that `make test` builds first (`make .venv-verl/.installed`; what it holds
and why: tests/requirements-verl-real.txt). Without that venv these tests skip, saying how to make
it. tests/test_verl_backend.py drives the same logger without verl, in the fast tier.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from rlcockpit.store import open_store
from rlcockpit.store.base import SampleQuery

REPO = Path(__file__).resolve().parents[1]
VENV_PYTHON = REPO / ".venv-verl" / "bin" / "python"
DRIVER = Path(__file__).resolve().parent / "verl_real_driver.py"
VERL_VERSION = "0.9.1"  # benchmarks/requirements-verl.txt; the Makefile installs that pin
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
if not VENV_PYTHON.exists():
    pytestmark.append(pytest.mark.skip(reason=(
        f"{VENV_PYTHON.parent.parent} is missing: `make .venv-verl/.installed` builds it (verl {VERL_VERSION} "
        "with the few packages its Tracking imports on a CPU; `make test` builds it first)")))


def _driver(tmp_path: Path, steps: int, *extra: str, diagnostics: str = "off") -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "RLCOCKPIT_STORE": f"sqlite:///{tmp_path / 'verl.db'}", "RLCOCKPIT_DIAGNOSTICS": diagnostics,
           "VERL_USE_EXTERNAL_MODULES": "", "RAY_DEDUP_LOGS": "0", "PYTHONUNBUFFERED": "1"}
    env.pop("PYTHONPATH", None)  # .venv-verl has rlcockpit installed (-e .): its entry point is what verl loads
    proc = subprocess.Popen([str(VENV_PYTHON), str(DRIVER), str(tmp_path), str(steps), *extra], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = _wait_line(proc, "RUN ")
    assert line.split()[1] == VERL_VERSION, line
    return proc, line.split()[3]


def _wait_line(proc: subprocess.Popen, want: str, timeout: float = 180.0) -> str:
    deadline, seen = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        seen.append(line)
        if line.startswith(want) or f" {want}" in line:
            return line.strip()
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError(f"no {want!r} from the verl driver; its output:\n{''.join(seen)}{proc.stdout.read()}")


def _steps_when(reader, run_id: str, n: int, timeout: float = 30.0) -> tuple[int, ...]:
    """The stored steps of policy/loss once there are ``n`` (the writer thread flushes every second)."""
    deadline = time.monotonic() + timeout
    while True:
        steps = tuple(reader.read_series(run_id, ["policy/loss"])["policy/loss"].steps)
        if len(steps) >= n or time.monotonic() > deadline:
            return steps
        time.sleep(0.2)


def test_verl_tracking_with_the_rlcockpit_backend_is_live_and_finishes(tmp_path):
    proc, run_id = _driver(tmp_path, 6, "--hold-after", "3")
    _wait_line(proc, "HOLDING 3")
    reader = open_store(f"sqlite:///{tmp_path / 'verl.db'}").reader()
    assert _steps_when(reader, run_id, 3) == (1, 2, 3)  # live: the driver is still in its loop
    assert reader.get_run(run_id).status == "running"
    proc.stdin.write("go\n")
    proc.stdin.flush()
    _wait_line(proc, "FINISHED")
    assert proc.wait(timeout=60) == 0

    run = reader.get_run(run_id)
    assert run.status == "finished"
    assert run.config["verl"]["version"] == VERL_VERSION and run.config["verl"]["project"] == "real"
    assert run.config["verl"]["config"]["trainer"]["rollout_data_dir"] == str(tmp_path / "rollouts")
    assert run.config["verl"]["reference"] is True and run.config["verl"]["total_training_steps"] == 6
    names = set(reader.summary(run_id).metric_names)
    # verl's names through the `verl` alias table, kl/mean derived from the per-token KL
    assert {"policy/loss", "policy/entropy", "policy/approx_kl", "kl/token_mean", "kl/coef", "grad/norm/actor",
            "optim/lr/actor", "reward/mean", "response/length_mean", "time/rollout_s", "kl/mean"} <= names
    series = reader.read_series(run_id, ["reward/mean", "kl/mean", "policy/loss"])
    assert series["policy/loss"].steps == tuple(range(1, 7))
    assert dict(zip(series["reward/mean"].steps, series["reward/mean"].values, strict=True))[3] == pytest.approx(0.3)
    assert dict(zip(series["kl/mean"].steps, series["kl/mean"].values, strict=True))[2] == pytest.approx(0.004 * 22)
    page = reader.query_samples(run_id, SampleQuery(limit=100, include_token_arrays=False))
    assert len(page.items) == 6 * 4  # every dump verl's own _write_generations wrote, each once
    one = {(s.step, s.response): s for s in page.items}[(5, "a5-3")]
    assert one.prompt == "q5-1" and one.reward == 0.75 and one.components == {"acc": 1.0}


def test_a_verl_driver_killed_outright_leaves_its_steps_and_reads_as_crashed(tmp_path):
    proc, run_id = _driver(tmp_path, 6, "--hold-after", "3")
    _wait_line(proc, "HOLDING 3")
    uri = f"sqlite:///{tmp_path / 'verl.db'}"
    assert _steps_when(open_store(uri).reader(), run_id, 3) == (1, 2, 3)
    os.kill(proc.pid, signal.SIGKILL)  # no finally, no atexit: what a torn-down Ray actor gets
    proc.wait(timeout=30)
    killed_at = time.time()
    reader = open_store(uri).reader()
    assert reader.get_run(run_id).status == "running"  # nothing closed it; its heartbeat is recent
    lease = reader.get_lease(run_id)
    assert lease is not None and lease.holder.pid == proc.pid  # no one renews it: stale at expires_at
    assert lease.expires_at - lease.renewed_at == pytest.approx(45.0)
    quick = open_store(f"{uri}?stale_after_s=1").reader()  # the store's stale_after_s (default 120 s)
    deadline = time.monotonic() + 30
    while quick.get_run(run_id).status == "running" and time.monotonic() < deadline:
        time.sleep(0.25)
    assert quick.get_run(run_id).status == "crashed", time.time() - killed_at
    assert _steps_when(reader, run_id, 3) == (1, 2, 3)  # every step logged before the kill is kept
