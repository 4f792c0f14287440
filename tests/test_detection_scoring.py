"""The detection benchmark's ramp scoring (benchmarks/detection.py, issue 26 point 5): a ramp's
latency counts from the first step its driven metric left two healthy spreads."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _detection():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location("detection_bench", ROOT / "benchmarks" / "detection.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["detection_bench"] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def _ramp(moved, caught, start=10):
    return {"shape": "ramp", "scored": (start, start + 30), "moved_2x": None if moved is None else start + moved,
            "latency_from_2x": None if caught is None or moved is None else caught - moved}


def test_ramp_latency_target_median_and_share_within_ten_steps_per_speed():
    bench = _detection()
    ramps = [_ramp(2, 3), _ramp(2, 2), _ramp(5, 6), _ramp(5, 20), _ramp(9, 7), _ramp(None, 4)]
    out = bench.ramp_latency_target(ramps)
    every = out["all"]
    # five ramps left two spreads; latencies 1, 0, 1, 15, -2 -> median 1; 4 of 5 within 10 steps
    assert every["ramps"] == 5 and every["caught"] == 5 and every["median_latency"] == 1
    assert every["within_10"] == "4/5" and every["target_met"] is False  # 80 % < 90 %
    fast = out["moved 2x within 3 steps"]
    assert fast["ramps"] == 2 and fast["median_latency"] == 0.5 and fast["target_met"] is True
    assert out["in 4-7 steps"]["within_10"] == "1/2"


def test_a_ramp_never_caught_counts_against_the_share():
    bench = _detection()
    out = bench.ramp_latency_target([_ramp(3, 4), _ramp(3, None)])["all"]
    assert out["ramps"] == 2 and out["caught"] == 1 and out["within_10"] == "1/2"
    assert out["target_met"] is False


def test_a_twin_finding_cancels_the_fault_runs_only_when_it_comes_within_five_steps():
    bench = _detection()
    assert bench.coincides(125, [128]) and bench.coincides(125, [120])
    # the KL tier a fault crossed 3 steps into its ramp is not the healthy twin's chance crossing 23 steps later
    assert not bench.coincides(125, [148]) and not bench.coincides(125, [])


def test_the_ramp_latency_from_the_3_step_mean_scores_only_ramps_that_really_moved():
    bench = _detection()
    moved_by_chance = {**_ramp(25, None), "moved_2x_3step": None, "latency_from_2x_3step": None}
    real = {**_ramp(5, 7), "moved_2x_3step": 16, "latency_from_2x_3step": 1}
    one_step = bench.ramp_latency_target([moved_by_chance, real])["all"]
    assert one_step["ramps"] == 2 and one_step["within_10"] == "1/2"
    three = bench.ramp_latency_target([moved_by_chance, real], "moved_2x_3step", "latency_from_2x_3step")["all"]
    assert three["ramps"] == 1 and three["within_10"] == "1/1" and three["median_latency"] == 1
