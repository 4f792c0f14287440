"""OpenRLHF's own logging code (openrlhf 0.11.2 from PyPI, in .venv-verl) followed live by
`rlcockpit wrap` and imported from its TensorBoard directory.

The driver (tests/openrlhf_real_driver.py) runs OpenRLHF's real ``init_logger`` (every console
line's handler and format) and ``TensorboardLogger`` (``train/<name>`` scalars and the
``train/generated_samples`` text), called as its ``PPOTrainer`` calls them; its trainer itself
needs flash-attn and deepspeed, so the package is installed ``--no-deps`` with only what its
logging module imports (tests/requirements-verl-real.txt). Without that venv these tests skip,
saying how to make it.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlcockpit.store import open_store
from rlcockpit.store.base import SampleQuery

REPO = Path(__file__).resolve().parents[1]
VENV_PYTHON = REPO / ".venv-verl" / "bin" / "python"
DRIVER = Path(__file__).resolve().parent / "openrlhf_real_driver.py"
STEPS = 5
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
if not VENV_PYTHON.exists():
    pytestmark.append(pytest.mark.skip(reason=(
        f"{VENV_PYTHON.parent.parent} is missing: `make .venv-verl/.installed` builds it (openrlhf 0.11.2's "
        "logging module with the few packages it imports on a CPU; `make test` builds it first)")))

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _series(reader, run_id: str, name: str) -> dict[int, float]:
    s = reader.read_series(run_id, [name])[name]
    return dict(zip(s.steps, s.values, strict=True))


def _check_run(reader, run_id: str) -> None:
    names = set(reader.summary(run_id).metric_names)
    # OpenRLHF's names through the `openrlhf` alias table
    assert {"policy/loss", "grad/norm/actor", "policy/clip_frac", "kl/token_mean", "reward/mean", "returns/mean",
            "response/length_mean", "response/truncated_frac", "time/step_s"} <= names, names
    assert _series(reader, run_id, "policy/loss") == pytest.approx({s: 0.5 - 0.01 * s for s in range(1, STEPS + 1)})
    assert _series(reader, run_id, "reward/mean")[4] == pytest.approx(0.4)
    assert _series(reader, run_id, "kl/token_mean")[3] == pytest.approx(0.003)
    page = reader.query_samples(run_id, SampleQuery(limit=100, include_token_arrays=False))
    by_step = {s.step: s for s in page.items}
    assert sorted(by_step) == list(range(1, STEPS + 1)) and len(page.items) == STEPS  # one a step, once
    assert by_step[2].response.startswith("<|user|> what is 2 + 1? <|assistant|> 3") and by_step[2].reward == 0.5
    assert "because 'it is'" in by_step[2].response  # the quote inside the logged text survives


def test_openrlhf_console_through_wrap_is_followed_live_with_nan_and_inf(tmp_path):
    uri, log, tb = f"sqlite:///{tmp_path / 'o.db'}", tmp_path / "ppo.log", tmp_path / "tb"
    cmd = [sys.executable, "-m", "rlcockpit", "wrap", "--store", uri, "--log", str(log), "--poll-interval", "0.05",
           "--", str(VENV_PYTHON), str(DRIVER), str(tb), str(STEPS)]
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("✨ Global step") + done.stderr.count("✨ Global step") == STEPS  # teed to the terminal
    reader = open_store(uri).reader()
    (run,) = reader.list_runs()
    assert run.status == "finished"
    _check_run(reader, run.run_id)
    # ppo_kl is `nan` at step 3 and truncated `inf` at step 4 in the printed dict (not Python literals)
    ppo_kl = _series(reader, run.run_id, "policy/approx_kl")
    assert math.isnan(ppo_kl[3]) and ppo_kl[2] == pytest.approx(1e-4)
    assert _series(reader, run.run_id, "response/truncated_frac")[4] == math.inf


def test_openrlhf_tensorboard_directory_imports_scalars_and_generated_samples(tmp_path):
    tb = tmp_path / "tb"
    subprocess.run([str(VENV_PYTHON), str(DRIVER), str(tb), str(STEPS)], env=ENV, check=True, capture_output=True,
                   timeout=240)
    assert list(tb.rglob("events.out.tfevents.*")), "TensorboardLogger wrote no event file"
    uri = f"sqlite:///{tmp_path / 't.db'}"
    done = subprocess.run([sys.executable, "-m", "rlcockpit", "import", str(tb), "--store", uri], env=ENV,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    reader = open_store(uri).reader()
    (run,) = reader.list_runs()
    _check_run(reader, run.run_id)
