"""benchmarks/detection.py --quick runs end to end: real fault runs and a healthy run, live findings
and the offline replay, tables, and the headline JSON on the last line (peers switched off here: they
live only in .benchvenv-peers)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_detection_quick_reports_detection_latency_and_quiet_healthy_run(tmp_path):
    cmd = [sys.executable, str(ROOT / "benchmarks" / "detection.py"), "--quick", "--out", str(tmp_path),
           "--peers-python", ""]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    head = json.loads(lines[-1])
    assert head["quick"] is True and head["failed_runs"] == []
    assert head["faults_detected"].endswith("/2") and head["healthy_runs"] == 1
    assert head["healthy_red_or_black"] == 0
    assert head["offline_matches_live"] == "3/3"  # the offline replay finds exactly what the live engine found
    assert "nan_reward" not in head["missed"]  # NaN rewards are caught at the onset
    assert head["median_latency_steps"] is not None and head["median_latency_steps"] <= 3
    assert all(v.startswith("not run") for v in head["peers_status"].values())
    text = "\n".join(lines[:-1])
    assert "### Per fault" in text and "| nan_reward | 0 | nonfinite" in text and "healthy-ppo-s0" in text
    assert sorted(p.name for p in tmp_path.glob("*.db")) == ["healthy-ppo-s0.db", "lr_spike-s0.db", "nan_reward-s0.db"]
    # --reuse --rescore: no training; the stored runs are scored by their offline replay, and say so
    again = subprocess.run(cmd + ["--reuse", "--rescore"], capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    *body, last = again.stdout.strip().splitlines()
    head2 = json.loads(last)
    assert head2["rescored_offline"] == ["healthy-ppo-s0", "lr_spike-s0", "nan_reward-s0"]
    assert head2["offline_matches_live"] == "0/0" and "3 runs reused from an earlier --out" in "\n".join(body)
    assert "| nan_reward | 0 | nonfinite" in "\n".join(body) and "re-scored offline" in "\n".join(body)
    assert (head2["faults_detected"], head2["healthy_red_or_black"]) == (head["faults_detected"], 0)
