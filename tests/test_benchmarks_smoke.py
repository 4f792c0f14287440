"""The benchmark scripts run end to end in ``--quick`` mode with only the project's own venv.

Trackers that are not installed here (MLflow, W&B live only in the benchmark venv) must be
reported as "not installed", never crash the run, and the last stdout line must be one JSON object
with the headline numbers that ``make bench-telemetry`` / ``make bench-store`` users read.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _run(script: str, *args: str, tmp_path: Path) -> tuple[dict, str]:
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), "--quick", *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    head = json.loads(lines[-1])  # the LAST line is the machine-readable result
    assert isinstance(head, dict)
    return head, proc.stdout


def _tracker_status_matches_install(status: str, module: str) -> None:
    if _installed(module):
        assert status == "ok", status
    else:
        assert status.startswith("not installed"), status


def test_telemetry_benchmark_quick_reports_every_variant(tmp_path):
    head, stdout = _run("telemetry.py", "--ppo-step-s", "2.0", tmp_path=tmp_path)
    for key in ("rlcockpit_fg_ms", "best_tracker_fg_ms", "fg_speedup_vs_best_tracker",
                "rlcockpit_steps_per_s", "raw_sqlite_steps_per_s", "throughput_vs_raw",
                "overhead_pct_of_ppo_step", "targets", "variants"):
        assert key in head, key
    variants = head["variants"]
    assert set(variants) == {"rlcockpit", "tensorboard", "mlflow", "wandb", "raw_sqlite"}
    _tracker_status_matches_install(variants["mlflow"]["status"], "mlflow")
    _tracker_status_matches_install(variants["wandb"]["status"], "wandb")
    # Our own SDK and the raw-SQLite limit always run and measure something real.
    assert variants["rlcockpit"]["status"] == "ok"
    assert variants["raw_sqlite"]["status"] == "ok"
    assert head["rlcockpit_fg_ms"] > 0 and head["raw_sqlite_steps_per_s"] > 0
    assert head["rlcockpit_dropped"] == 0
    ratio = head["rlcockpit_steps_per_s"] / head["raw_sqlite_steps_per_s"]
    assert abs(head["throughput_vs_raw"] - ratio) <= 1e-3 * max(1.0, ratio)
    # --ppo-step-s is honoured: overhead = foreground ms / step ms.
    assert head["ppo_step_s"] == 2.0
    assert abs(head["overhead_pct_of_ppo_step"] - head["rlcockpit_fg_ms"] / 2000 * 100) < 1e-3
    assert set(head["targets"].values()) <= {"pass", "fail", "n/a"}
    assert "Targets" in stdout  # the human-readable table precedes the JSON line


def test_store_benchmark_quick_times_the_three_queries(tmp_path):
    head, stdout = _run("store_queries.py", tmp_path=tmp_path)
    for key in ("curve_ms", "page_ms", "histogram_ms", "targets", "mlflow_curve_ms",
                "tensorboard_curve_ms", "status", "scaled", "fixture"):
        assert key in head, key
    assert head["fixture"]["quick"] is True
    assert head["fixture"]["samples"] == head["fixture"]["steps"] * 10
    for query in ("curve", "page", "histogram"):
        assert head["status"][f"rlcockpit/{query}"] == "ok"
        assert head[f"{query}_ms"] > 0
    assert set(head["targets"]) == {"curve_le_50ms", "page_le_100ms", "histogram_le_200ms"}
    assert set(head["targets"].values()) <= {"pass", "fail"}
    _tracker_status_matches_install(head["status"]["mlflow/curve"], "mlflow")
    tb_ok = _installed("tensorboard") and (_installed("torch") or _installed("tensorboardX"))
    assert (head["status"]["tensorboard/curve"] == "ok") == tb_ok
    assert "Store queries" in stdout


def test_benchmark_flags_are_validated(tmp_path):
    proc = subprocess.run([sys.executable, str(BENCH / "telemetry.py"), "--variants", "nope"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown variant" in proc.stderr
