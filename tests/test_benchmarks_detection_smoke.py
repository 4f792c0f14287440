"""benchmarks/detection.py --quick runs end to end: a short healthy twin, a fault run resumed from the
twin's checkpoint, an onset-0 (config-level) fault, a new fault and a ramp; every stream replayed
offline (= live for the runs trained from step 1), twin-filtered detections, latency from the first
divergence, tables, and the headline JSON on the last line (peers switched off here: they live only in
.benchvenv-peers)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

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
    # a resumed run's findings: the twin's engine continued with its own steps = the stitched stream replayed
    detection, grid = _benchmark_modules()
    jobs = grid.make_jobs("calibration", None, True)
    infos = {j.key: grid.finished_run(j, tmp_path) for j in jobs}
    outcomes = {o.job.key: o for o in detection.build_outcomes(jobs, infos)}
    resumed = [j for j in jobs if j.fault and infos[j.key]["resumed_from"] is not None]
    assert len(resumed) == 3
    for job in resumed:
        twin, info = outcomes[job.twin], infos[job.key]
        stream = detection.stitched(detection.read_stream(info), detection.read_stream(twin.info), info["resumed_from"])
        full, _ = detection.replay(stream, outcomes[job.key].config)
        assert detection._sig(full) == detection._sig(outcomes[job.key].findings), job.key


def _benchmark_modules():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return importlib.import_module("detection"), importlib.import_module("_detection_grid")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


@pytest.mark.parametrize("split", ["calibration", "calibration-b", "calibration-c", "calibration-d", "evaluation"])
def test_every_fault_sees_several_variants_and_the_split_fits_the_budget(split):
    _, grid = _benchmark_modules()
    jobs = grid.make_jobs(split, None, False)
    faults_jobs = [j for j in jobs if j.fault]
    twins = {j.key: j for j in jobs if not j.fault and j.role == "twin"}
    baselines = {j.key: j for j in jobs if j.role == "baseline"}
    assert len(twins) == 20 and all(t.steps == 200 for t in twins.values()) and len(faults_jobs) == 16 * 5
    assert {j.seed for j in jobs if j.role == "twin"} == set(grid.SPLITS[split])
    # the baseline of each config: the calibration seed 0's healthy run, never a twin of this split's runs
    # (in the calibration split it is seed 0's own twin)
    if split == "calibration":
        assert not baselines and all(grid.baseline_key(c) in twins for c in grid.CONFIGS)
    else:
        assert sorted(baselines) == sorted(grid.baseline_key(c) for c in grid.CONFIGS)
        assert all(b.seed == grid.BASELINE_SEED not in grid.SPLITS[split] and b.steps == 200 for b in baselines.values())
    for name in {j.fault for j in faults_jobs}:
        mine = [j for j in faults_jobs if j.fault == name]
        assert {j.variant.onset_class for j in mine} == {"zero", "early", "late"}, name
        assert len({j.variant.config for j in mine}) >= 2, name
        assert len({(j.variant.shape, j.variant.magnitude) for j in mine}) >= 2, name
    for j in faults_jobs:
        twin = twins[j.twin]
        assert (twin.seed, twin.config) == (j.seed, j.variant.config) and twin.steps >= j.steps
        if j.variant.onset == 0:  # trained from step 1; a config-level live change is a step
            assert j.resume_step is None
            assert j.variant.shape == "step" or not grid.make_fault(j.fault, j.variant).live
        else:
            assert 10 <= j.variant.onset <= 30 or 105 <= j.variant.onset <= 125
            assert j.resume_step == j.variant.onset - 2 and j.resume_step in twin.checkpoints
    trained = sum(j.steps - (j.resume_step or 0) for j in jobs)
    assert trained <= 6_000 + 4 * 200  # ~50-60 min on 2 workers at ~1 s per step
    assert Counter(j.variant.shape for j in faults_jobs)["ramp"] >= 20


def test_the_evaluation_split_refuses_uncommitted_detector_changes(monkeypatch):
    detection, _ = _benchmark_modules()

    def fake_git(cmd, **kwargs):
        out = " M src/rlcockpit/diagnostics/detectors/kl_tiers.py" if "status" in cmd else "abc123"
        return subprocess.CompletedProcess(cmd, 0, stdout=out, stderr="")

    monkeypatch.setattr(detection.subprocess, "run", fake_git)
    with pytest.raises(SystemExit, match="refuses to run: src/rlcockpit/diagnostics/ has uncommitted changes"):
        detection.detector_commit("evaluation")
    assert detection.detector_commit("calibration") == ("abc123", True)
