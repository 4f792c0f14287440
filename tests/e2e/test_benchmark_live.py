"""benchmarks/ui.py part 2 (benchmarks/_ui_browser.py) runs: a step logged on a live run is timed
until it is drawn on the dashboard's reward chart in Chromium. In a subprocess: this worker's
Playwright session (the browser fixture) cannot host a second sync session."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def run_part2(trials: int) -> tuple[dict, str]:
    proc = subprocess.run([sys.executable, "_ui_browser.py", str(trials)], cwd=BENCH,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stdout


def test_live_step_reaches_the_chart_and_is_timed():
    out, stdout = run_part2(3)
    assert out["status"] == "ok" and out["trials"] == 3
    # each latency is wall clock from run.log to the chart's render: positive and bounded by the
    # trial's own 30 s wait; the 2 s target is reported, not asserted (shared, loaded machine)
    assert 0 < out["min_s"] <= out["median_s"] <= out["max_s"] < 30
    assert out["target_s"] == 2.0 and out["meets_target"] == (out["max_s"] <= 2.0)
    assert "live step -> dashboard chart (Chromium, 3 steps)" in stdout
    assert run_part2(0)[0] == {"status": "skipped (--live-trials 0)"}
