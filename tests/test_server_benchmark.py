"""benchmarks/ui.py part 1 runs end to end in quick mode and reports its JSON headline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(600)
def test_ui_api_benchmark_quick(tmp_path):
    out = subprocess.run([sys.executable, "ui.py", "--quick", "--cache-dir", str(tmp_path)],
                         cwd=REPO / "benchmarks", capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    head = json.loads(out.stdout.strip().splitlines()[-1])
    assert head["benchmark"] == "ui_api" and head["steps"] == 2000 and head["metrics"] == 90
    assert set(head["calls_ms"]) == {"runs", "run", "series", "latest", "reward_hist",
                                     "length_hist", "samples", "findings", "phases"}
    assert head["total_ms"] > 0 and head["parallel_ms"] > 0 and head["target_ms"] == 300.0
    assert "series" in out.stdout and "total" in out.stdout
    assert list(tmp_path.glob("ui_*.db.complete"))  # the fixture is cached for the next run
    dash = head["dashboard"]  # part 3, in Chromium (issue 16)
    assert "skipped" in dash or (dash["first_chart_ms"] > 0 and dash["panel_runs"] == 2
                                 and dash["panels_timed"] == 4 and dash["section_charts"] > 0)
