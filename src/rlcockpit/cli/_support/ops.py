"""Wiring of the ops stack (docs/ops.md) into a training run: the composition root's part.

The trainer only offers hooks (step observers, finding sinks, phase listeners); this module
connects them to the integrations the run's ``ops`` config asks for. Set-up errors (a port in
use, a bad URL) fail fast before the first step; at run time every channel fails soft.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

log = logging.getLogger("rlcockpit.cli._support.ops")


def wire_trainer(trainer: Any, cfg: Any) -> list[Callable[[], Any]]:
    """Connect what ``cfg.ops`` enables to ``trainer``; returns the closers (call them at the end)."""
    ops = cfg.ops
    closers: list[Callable[[], Any]] = []

    def run_id() -> str:
        return trainer.telemetry.run_id if trainer.telemetry is not None else ""

    if ops.log_format == "json" or ops.loki_url:
        from rlcockpit.integrations.logs import TrainerLogLines, configure, unconfigure

        handlers = configure(ops.log_format, loki_url=ops.loki_url)
        closers.append(lambda: unconfigure(handlers))
        lines = TrainerLogLines(run_id)
        trainer.add_phase_listener(lines.on_phase)
        trainer.add_observer(lines.on_step)
        trainer.diagnosis.add_sink(lines.on_finding)
    if ops.prometheus_port:
        from rlcockpit.integrations.prometheus import TrainerExporter

        exporter = TrainerExporter(ops.prometheus_port, host=ops.prometheus_host,
                                   rank=os.environ.get("RANK", "0"), run_id=run_id)
        trainer.add_observer(exporter.on_step)
        trainer.diagnosis.add_sink(exporter.on_finding)
        trainer.add_phase_listener(exporter.on_phase)
        closers.append(exporter.close)
        log.info("Prometheus metrics of this run: http://%s:%d/metrics", ops.prometheus_host,
                 exporter.port)
    if ops.alertmanager_url:
        from rlcockpit.integrations.alertmanager import AlertmanagerSink

        sink = AlertmanagerSink(ops.alertmanager_url, run_id=run_id, project=cfg.project,
                                min_severity=ops.alertmanager_min_severity,
                                cockpit_url=ops.cockpit_url,
                                resolve_after_s=ops.alert_resolve_after_s)
        trainer.diagnosis.add_sink(sink)
        closers.append(sink.close)
    if ops.otlp_endpoint:
        from rlcockpit.integrations.tracing import TrainerTracer

        tracer = TrainerTracer(run_id, endpoint=ops.otlp_endpoint,
                               prompt_every=ops.trace_prompt_every)
        trainer.add_phase_listener(tracer.on_phase)
        closers.append(tracer.close)
    return closers


def close_all(closers: list[Callable[[], Any]]) -> None:
    for close in reversed(closers):
        try:
            close()
        except Exception as exc:  # the run is over; report, do not mask its result
            log.warning("closing %r failed: %s", close, exc)
