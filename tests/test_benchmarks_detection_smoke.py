"""benchmarks/detection.py --quick runs end to end: a short healthy twin, a fault run resumed from the
twin's checkpoint, an onset-0 (config-level) fault, a new fault and a ramp; every stream replayed
offline (= live for the runs trained from step 1), twin-filtered detections, latency from the first
divergence, tables, and the headline JSON on the last line (peers switched off here: they live only in
.benchvenv-peers)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KEYS = ["healthy-ppo-s0", "lr_spike-s0", "nan_reward-s0", "ref_prompt_template-s0", "rm_bias_drift-s0"]


def _run(cmd: list[str], cwd: Path) -> tuple[str, dict, str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    *body, last = proc.stdout.strip().splitlines()
    return "\n".join(body), json.loads(last), proc.stderr


def test_detection_quick_scores_fault_runs_against_their_twin(tmp_path):
    cmd = [sys.executable, str(ROOT / "benchmarks" / "detection.py"), "--quick", "--out", str(tmp_path),
           "--peers-python", ""]
    text, head, _ = _run(cmd, tmp_path)
    assert head["quick"] is True and head["split"] == "calibration" and head["runs_failed"] == []
    assert len(head["frozen_commit"]) == 40
    assert head["step_faults_caught"].endswith("/3") and head["ramps_caught"].endswith("/1")
    assert head["healthy"]["runs"] == 1 and head["healthy"]["steps"] == 12
    assert head["healthy"]["red"] == head["healthy"]["black"] == 0
    assert head["offline_matches_live"] == "2/2"  # the twin and the onset-0 run: replay = live
    assert head["divergence_before_fault"] == []  # resumed runs equal their twin until the fault
    assert head["median_latency_from_divergence"] is not None and head["median_latency_from_divergence"] <= 3
    assert all(v.startswith("not run") for v in head["peers_status"].values())
    assert "Split **calibration**" in text and "thresholds frozen at commit" in text
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert "nonfinite" in rows["nan_reward"] and "onset 0 (zero)" in rows["nan_reward"]
    assert "twin 1-4 + own" in rows["lr_spike"] and "| 6 |" in rows["lr_spike"]  # diverges at its onset
    assert "ramp 4" in rows["rm_bias_drift"] and "whole run, offline = live" in rows["nan_reward"]
    assert sorted(p.stem for p in tmp_path.glob("*.db")) == KEYS
    # --reuse: nothing is trained again and the scores are the same (everything is scored offline)
    _, head2, log = _run(cmd + ["--reuse"], tmp_path)
    for key in ("step_faults_caught", "ramps_caught", "median_latency_from_divergence", "healthy",
                "offline_matches_live"):
        assert head2[key] == head[key], key
    assert "reusing 5 finished runs" in log and "[1/" not in log
