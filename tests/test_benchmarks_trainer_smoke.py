"""The trainer benchmarks run end to end in --quick mode with only the project's venv.

benchmarks/learning.py and benchmarks/trainer_speed.py are what a user runs to check two claims of
the README (the tiny policy learns; our trainer is not slower than TRL). Here each runs for real
(the real CLI trains a few tiny steps) and must end its output with one JSON object holding the
headline keys. TRL is never installed in the project venv, so trainer_speed must report it as
"not installed" instead of crashing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
CATEGORIES = ("math", "knowledge", "safety", "chat")

pytestmark = pytest.mark.slow


def run_benchmark(script: str, *args: str, cwd: Path) -> tuple[dict, str]:
    proc = subprocess.run([sys.executable, str(BENCH / script), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, f"{script} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    lines = proc.stdout.strip().splitlines()
    assert lines, f"{script} printed nothing"
    return json.loads(lines[-1]), proc.stdout


def test_learning_quick_reports_start_and_end_accuracy_per_category(tmp_path):
    head, out = run_benchmark("learning.py", "--quick", "--threads", "1", cwd=tmp_path)
    assert head["algo"] == "ppo" and head["quick"] is True
    assert (head["eval_step_start"], head["eval_step_end"]) == (0, 2)
    for c in CATEGORIES:
        for key in (f"{c}_accuracy_start", f"{c}_accuracy_end"):
            assert 0.0 <= head[key] <= 1.0, (key, head[key])
        gain = 100 * (head[f"{c}_accuracy_end"] - head[f"{c}_accuracy_start"])
        assert head[f"{c}_gain_points"] == pytest.approx(gain, abs=0.06)
    assert head["math_target_met"] == (head["math_gain_points"] >= 15)
    assert head["wall_time_s"] > 0 and isinstance(head["within_10_min"], bool)
    assert "Learning on the tiny world" in out and "math" in out  # the table came before the JSON


def test_trainer_speed_quick_times_ours_and_reports_missing_trl(tmp_path):
    missing = str(tmp_path / "no-trl-venv" / "bin" / "python")  # .venv has TRL now (the [trl] extra)
    head, out = run_benchmark("trainer_speed.py", "--quick", "--threads", "1",
                              "--trl-python", missing, "--trl-ppo-python", missing, cwd=tmp_path)
    for algo in ("ppo", "grpo"):
        assert head[f"ours_{algo}_s_per_step"] > 0
        assert head[f"ours_{algo}_tokens_per_s"] > 0
        assert head[f"trl_{algo}_status"] == "not installed"
        assert head[f"trl_{algo}_s_per_step"] is None and head[f"{algo}_speed_ratio"] is None
        assert "rollout" in head[f"ours_{algo}_phase_s"]
    assert head["workload"]["grpo"]["n_samples"] >= 2
    assert "Trainer speed" in out
