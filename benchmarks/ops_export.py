"""What the ops stack costs a training step (issue 15 target: "exporting costs the trainer nothing
measurable"), side by side in one process.

Tiny-world PPO runs ``--steps`` steps per round, once plain and once with the whole ops stack on
(the trainer's own /metrics served by prometheus-client and scraped every ``--scrape-s`` seconds
by a client thread, JSON log lines for every phase / step / finding, OpenTelemetry spans to the
SDK's in-memory exporter), alternating for ``--rounds`` rounds. Two measures, as in
benchmarks/trl_callback.py:

- ``hook_share``: the time the training thread spends inside the ops hooks (step observers, phase
  listeners, finding sinks; wrapped and timed) over the step time of the same runs — precise and
  immune to the machine's other load, blind to the exporter's and the scraper's threads;
- ``ab_overhead``: median step time with the ops stack / without - 1 (end to end; noisy on a
  shared machine).

    python benchmarks/ops_export.py [--steps 20] [--rounds 2] [--scrape-s 0.5]

Last stdout line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from _common import free_port

FAST = ["rollout.batch_size=8", "ppo.minibatch_size=4", "rollout.max_new_tokens=16", "ppo.epochs=1",
        "eval.every=0", "checkpoint.every=0", "checkpoint.at_end=false", "optim.warmup_steps=0",
        "model.threads=1", "telemetry.log_samples=true"]


class Timed:
    """Wraps a hook; adds the time spent in it to a shared counter once the trainer is past its
    warm-up steps (the same steps the step times are taken over; INIT's one-time imports excluded)."""

    def __init__(self, fn: Any, spent: list[float], trainer: Any) -> None:
        self.fn, self.spent, self.trainer = fn, spent, trainer

    def __call__(self, *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return self.fn(*args)
        finally:
            if self.trainer.step >= 2:
                self.spent[0] += time.perf_counter() - t0


def one_round(tmp: Path, steps: int, ops: bool, scrape_s: float, full: bool = True) -> dict[str, Any]:
    from rlcockpit.cli._support.ops import close_all, wire_trainer
    from rlcockpit.config import load_config
    from rlcockpit.trainer.config import TrainConfig
    from rlcockpit.trainer.trainer import Trainer

    port = free_port()
    extra = [f"ops.prometheus_port={port}", *(["ops.log_format=json"] if full else [])] if ops else []
    cfg = load_config(TrainConfig, None, [f"telemetry.store=sqlite:///{tmp / f'ops-{ops}-{time.time_ns()}.db'}",
                                          f"checkpoint.dir={tmp / 'ckpt'}", f"train.steps={steps}", *FAST, *extra])
    quiet = open(os.devnull, "w")  # noqa: SIM115  (the JSON lines go nowhere: no terminal cost)
    saved, sys.stderr = sys.stderr, quiet
    trainer = Trainer(cfg)
    spent = [0.0]
    closers: list[Any] = []
    stop = threading.Event()
    scrapes = [0]
    if ops:
        closers = wire_trainer(trainer, cfg)
    if ops and full:
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from rlcockpit.integrations.tracing import TrainerTracer

        tracer = TrainerTracer(lambda: trainer.telemetry.run_id, exporter=InMemorySpanExporter(), prompt_every=5)
        trainer.add_phase_listener(tracer.on_phase)
        closers.append(tracer.close)
    if ops:
        trainer.observers[:] = [Timed(fn, spent, trainer) for fn in trainer.observers]
        trainer.phase_listeners[:] = [Timed(fn, spent, trainer) for fn in trainer.phase_listeners]
        trainer.diagnosis.sinks[:] = [Timed(fn, spent, trainer) for fn in trainer.diagnosis.sinks]

        def scrape() -> None:
            while not stop.wait(scrape_s):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
                    scrapes[0] += 1
                except OSError:
                    pass

        threading.Thread(target=scrape, daemon=True).start()
    step_times: list[float] = []
    last = [time.perf_counter()]

    def on_step(step: int, metrics: dict) -> None:
        now = time.perf_counter()
        if step > 0:
            step_times.append(now - last[0])
        last[0] = now

    trainer.add_observer(on_step)
    try:
        trainer.run()
    finally:
        stop.set()
        close_all(closers)
        sys.stderr = saved
        quiet.close()
    body = step_times[2:]  # the first steps warm up
    return {"ops": ops, "median_step_s": statistics.median(body), "steps": len(body),
            "hook_s": spent[0], "total_step_s": sum(body), "scrapes": scrapes[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--scrape-s", type=float, default=0.5)
    parser.add_argument("--stack", choices=("full", "prometheus"), default="full",
                        help="full: /metrics + JSON logs + traces; prometheus: /metrics only")
    args = parser.parse_args()
    logging.getLogger("rlcockpit").setLevel(logging.WARNING)
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for ops in ((False, True) if r % 2 == 0 else (True, False)):
                res = one_round(Path(tmp), args.steps, ops, args.scrape_s, full=args.stack == "full")
                print(json.dumps(res), flush=True)
                rounds.append(res)
    on = [r for r in rounds if r["ops"]]
    off = [r for r in rounds if not r["ops"]]
    share = sum(r["hook_s"] for r in on) / sum(r["total_step_s"] for r in on)
    ab = statistics.median(r["median_step_s"] for r in on) / statistics.median(r["median_step_s"] for r in off) - 1
    print(json.dumps({"hook_share": share, "ab_overhead": ab,
                      "median_step_s_off": statistics.median(r["median_step_s"] for r in off),
                      "median_step_s_on": statistics.median(r["median_step_s"] for r in on),
                      "scrapes": sum(r["scrapes"] for r in on), "steps": args.steps, "rounds": args.rounds,
                      "stack": args.stack}))


if __name__ == "__main__":
    main()
