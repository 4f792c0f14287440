"""A small but complete run for the server tests, written with the telemetry SDK."""

from __future__ import annotations

import math
import socket
import threading
import time
from pathlib import Path

import uvicorn

import rlcockpit
from rlcockpit.records import SampleRecord

LOCAL = "http://127.0.0.1"  # the Host the server answers by default (DNS-rebinding guard)
RUN = "run-a"
OTHER = "run-b"
STEPS = 30
PER_STEP = 4
CATEGORIES = ("math", "chat")


def samples_of(step: int) -> list[SampleRecord]:
    out = []
    for sid in range(PER_STEP):
        n = 3 + sid
        out.append(SampleRecord(
            step=step, sample_id=sid, prompt=f"prompt {step}-{sid}",
            response=("The ANSWER is " if sid % 2 else "no idea ") + str(step),
            reward=math.inf if (step, sid) == (4, 3) else round(sid * 0.5 - 0.5, 3),
            category=CATEGORIES[sid % 2], flags=("truncated",) if sid == 3 else (),
            length=n, tokens=tuple(f"t{i}" for i in range(n)),
            logprobs=tuple(-0.5 for _ in range(n)), ref_logprobs=tuple(-0.25 for _ in range(n)),
            token_kl=tuple(0.25 for _ in range(n))))
    return out


def metrics_of(step: int) -> dict[str, float]:
    return {"reward/mean": 0.1 * step + (5.0 if step == 17 else 0.0),
            "kl/mean": math.nan if step == 5 else 0.01 * step,
            "policy/entropy": 2.0 - 0.01 * step,
            "reward/category/math/mean": 0.2, "reward/category/chat/mean": 0.4}


def build_store(tmp_path: Path) -> str:
    """Two runs: RUN with metrics, histograms, samples, phases, events, findings, a snapshot
    and a checkpoint; OTHER with reward/mean only. Returns the store URI."""
    uri = f"sqlite:///{tmp_path / 'server.db'}"
    with rlcockpit.init(project="p", name="a", store=uri, run_id=RUN, config={"lr": 1e-5}) as run:
        for step in range(STEPS):
            run.phase(step, "ROLLOUT", "started")
            run.log(step, metrics_of(step))
            run.log_histogram(step, "reward/hist", [0.1 * step, 0.2, 0.3], bins=4)
            run.log_samples(step, samples_of(step))
            run.phase(step, "ROLLOUT", "finished", duration_s=0.1)
        run.phase(STEPS - 1, "UPDATE", "started")
        run.phase(STEPS - 1, "UPDATE", "running", progress=0.5)
        run.finding(step=12, detector="kl_growth", severity="yellow", message="KL above target",
                    evidence={"onset_step": 10, "signal": "kl/mean"}, incident="inc-1",
                    patterns=("kl_explosion",))
        run.finding(step=16, detector="grad_spike", severity="red", message="grad norm spike",
                    evidence={"onset_step": 16, "signal": "grad/norm/actor"}, incident="inc-1")
        run.snapshot(16, "diagnostic", {"grad_norm_hist": {"edges": [0, 1], "counts": [3],
                                                           "steps": [16]}}, incident="inc-1")
        run.event(10, "checkpoint", {"path": "ckpt-10"})
        run.event(11, "config_change", {"kl.coef": 0.05})
        run.checkpoint(10, "ckpt-10")
    with rlcockpit.init(project="p", name="b", store=uri, run_id=OTHER) as run:
        for step in range(10):
            run.log(step, {"reward/mean": -0.1 * step})
    return uri


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerThread:
    """uvicorn in a background thread (the same server `rlcockpit serve` runs)."""

    def __init__(self, app, host: str = "127.0.0.1") -> None:
        self.port = free_port()
        config = uvicorn.Config(app, host=host, port=self.port, log_level="warning",
                                lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)
