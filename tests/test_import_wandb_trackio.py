"""A W&B run-history CSV export and a Trackio project database, each imported as one run.

tests/fixtures/wandb/history.csv has the columns of ``run.history().to_csv()`` (``_step``,
``_runtime``, ``_timestamp``, the logged keys, empty cells, a media cell); the Trackio database is
built from tests/fixtures/trackio/project.sql, Trackio's ``metrics`` / ``configs`` schema with two
runs.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import sqlite3
from pathlib import Path

import pytest

from rlcockpit.cli import main
from rlcockpit.integrations.importers import detect_format, read_paths
from rlcockpit.store import open_store

FIXTURES = Path(__file__).resolve().parent / "fixtures"
HISTORY = FIXTURES / "wandb" / "history.csv"


def trackio_db(tmp_path: Path) -> Path:
    db = tmp_path / "my-project.db"
    conn = sqlite3.connect(db)
    conn.executescript((FIXTURES / "trackio" / "project.sql").read_text())
    conn.close()
    return db


def run_cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def stored(uri: str, run_id: str) -> tuple[dict[str, dict[int, float]], object]:
    reader = open_store(uri, create=False).reader()
    try:
        names = reader.metric_names(run_id)
        got = {n: dict(zip(s.steps, s.values, strict=True))
               for n, s in reader.read_series(run_id, names).items()}
        return got, reader.get_run(run_id)
    finally:
        reader.close()


# --- W&B history CSV ---------------------------------------------------------------------------

def test_wandb_history_csv_becomes_a_run_with_its_own_clock(tmp_path):
    uri = f"sqlite:///{tmp_path / 's.db'}"
    code, out, err = run_cli("import", "--store", uri, "--run-id", "w", str(HISTORY))
    assert code == 0, err
    assert "[trl-grpo]" in out and "from wall times logged with the records" in out
    got, run = stored(uri, "w")
    assert got["reward/mean"] == {0: 0.25, 1: 0.3, 3: 0.35}  # row 2 logged nothing but the clock
    assert got["grad/norm/actor"][3] == math.inf and 3 not in got["policy/loss"]  # empty cell
    assert got["kl/token_mean"][1] == 0.0012
    # _timestamp is each point's wall time; the run began at _timestamp - _runtime
    assert run.started_at == pytest.approx(1717430412.31 - 14.52)
    assert run.ended_at == pytest.approx(1717430450.4)
    assert run.config["import"]["skipped_values"] == {"train/completions": 1}  # the media cell
    assert not [n for n in got if n.endswith(("_runtime", "_timestamp"))]


def test_wandb_csv_without_a_step_column_is_refused(tmp_path):
    bad = tmp_path / "export.csv"
    bad.write_text("Step,my-run - train/loss\n1,0.5\n")
    code, _, err = run_cli("import", "--store", f"sqlite:///{tmp_path / 'x.db'}", str(bad))
    assert code == 2 and "without a _step column" in err and "--step-key" in err
    assert not (tmp_path / "x.db").exists()
    code, _, err = run_cli("import", "--store", f"sqlite:///{tmp_path / 'x.db'}", "--step-key", "Step",
                           str(bad))
    assert code == 0, err


def test_doctor_import_of_a_wandb_history(tmp_path):
    code, out, err = run_cli("doctor", "--store", f"sqlite:///{tmp_path / 'd.db'}", "--json",
                             "--import", str(HISTORY))
    report = json.loads(out)
    assert code == report["exit_code"] and report["steps"] == 3
    assert report["import"]["timing"]["synthetic"] is False
    ran = {c["detector"] for c in report["coverage"]["detectors"] if c["state"] == "ran"}
    assert "nonfinite" in ran  # grad_norm went to inf at step 3


# --- Trackio -----------------------------------------------------------------------------------

def test_a_trackio_database_with_two_runs_asks_which_and_names_them(tmp_path):
    db = trackio_db(tmp_path)
    assert detect_format(db) == "trackio"
    code, _, err = run_cli("import", "--store", f"sqlite:///{tmp_path / 's.db'}", str(db))
    assert code == 2
    assert "holds 2 runs (brave-sunset-0, calm-forest-1)" in err and "--source-run" in err
    assert not (tmp_path / "s.db").exists()
    code, _, err = run_cli("import", "--store", f"sqlite:///{tmp_path / 's.db'}", str(db),
                           "--source-run", "no-such-run")
    assert code == 2 and "has no run 'no-such-run'" in err


def test_a_trackio_run_keeps_its_values_and_timestamps(tmp_path):
    db = trackio_db(tmp_path)
    uri = f"sqlite:///{tmp_path / 's.db'}"
    code, out, err = run_cli("import", "--store", uri, "--run-id", "t", str(db),
                             "--source-run", "brave-sunset-0")
    assert code == 0, err
    got, run = stored(uri, "t")
    assert got["reward/mean"] == {1: 0.25, 2: 0.3, 3: 0.35}
    assert math.isnan(got["grad/norm/actor"][2]) and got["policy/loss"][3] == math.inf
    assert run.config["import"]["files"][0]["run"] == "brave-sunset-0"
    from datetime import datetime

    assert run.ended_at == pytest.approx(datetime.fromisoformat("2025-06-03T10:00:37.7").timestamp())
    assert "train/completions" in run.config["import"]["skipped_values"]  # a table value


def test_source_run_without_a_trackio_file_is_refused(tmp_path):
    with pytest.raises(Exception, match="--source-run chooses a run inside a Trackio"):
        read_paths([HISTORY], source_run="x")


def test_doctor_import_of_a_trackio_run(tmp_path):
    db = trackio_db(tmp_path)
    code, out, err = run_cli("doctor", "--store", f"sqlite:///{tmp_path / 'd.db'}", "--json",
                             "--import", str(db), "--source-run", "calm-forest-1")
    report = json.loads(out)
    assert code == report["exit_code"] and report["steps"] == 1
    assert "1 steps" in err


def test_a_damaged_trackio_database_fails_cleanly(tmp_path):
    db = trackio_db(tmp_path)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE metrics SET metrics = '{\"train/loss\": ' WHERE step = 2")
    conn.commit()
    conn.close()
    code, _, err = run_cli("import", "--store", f"sqlite:///{tmp_path / 's.db'}", str(db),
                           "--source-run", "brave-sunset-0")
    assert code == 2 and "row 2" in err and "not valid JSON" in err and "Traceback" not in err
    assert not (tmp_path / "s.db").exists()
