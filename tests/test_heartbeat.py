"""The stall detector's heartbeat, driven by the trainer-side heartbeat thread (001 Q25)."""

from __future__ import annotations

import time

import rlcockpit
from rlcockpit.diagnostics import DiagnosticsConfig
from rlcockpit.store import open_store
from rlcockpit.trainer.diagnosis import Diagnosis


class _Trainer:
    paused = False


def _diagnosis(tmp_path, heartbeat_s: float = 60.0):
    run = rlcockpit.init(project="p", store=f"sqlite:///{tmp_path}/hb.db")
    cfg = DiagnosticsConfig(detectors={"stall": {"heartbeat_s": heartbeat_s}},
                            policy={"console": False})
    return Diagnosis(cfg, telemetry=run), run


def test_silence_longer_than_the_limit_is_a_red_finding_once(tmp_path):
    diag, run = _diagnosis(tmp_path)
    t0 = time.time()
    diag.observe(1, {"reward/mean": 0.1, "kl/mean": 0.01}, wall_time=t0)
    assert diag.heartbeat(now=t0 + 30) == []  # within the limit
    (found,) = diag.heartbeat(now=t0 + 90)
    assert (found.detector, found.severity, found.evidence["key"]) == ("stall", "red", "heartbeat")
    assert "no training step for 90 s" in found.message
    assert diag.heartbeat(now=t0 + 120) == []  # raised once, not every beat
    run.close()
    stored = open_store(f"sqlite:///{tmp_path}/hb.db").reader().read_findings(run.run_id)
    assert [(f.detector, f.severity, f.status) for f in stored] == [("stall", "red", "raised")]


def test_a_paused_run_is_alive(tmp_path):
    diag, run = _diagnosis(tmp_path)
    t0 = time.time()
    diag.observe(1, {"reward/mean": 0.1}, wall_time=t0)
    assert diag.heartbeat(paused=True, now=t0 + 500) == []
    assert diag.heartbeat(now=t0 + 530) == []  # the pause counted as life
    run.close()


def test_the_thread_beats_while_the_trainer_hangs(tmp_path):
    diag, run = _diagnosis(tmp_path, heartbeat_s=0.2)
    diag.observe(1, {"reward/mean": 0.1}, wall_time=time.time())
    diag._start_heartbeat(_Trainer(), period_s=0.05)
    deadline = time.time() + 5
    while time.time() < deadline and not any(f.detector == "stall" for f in diag.findings):
        time.sleep(0.05)
    diag.close()
    run.close()
    assert any(f.detector == "stall" and f.severity == "red" for f in diag.findings)
