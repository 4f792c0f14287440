"""Prometheus exposition of RL metrics, findings and phase durations (issue 15, seed 000 §6).

Two producers feed one :class:`RLMetricsState`, rendered by one collector:

- **the server** (``rlcockpit serve``, ``/metrics``): :class:`StoreExporter` reads the store
  incrementally (latest value per metric, new findings, new phase records) at most every
  ``refresh_s`` and renders the cached state, so a scrape costs no store query most of the time;
- **a training process** (opt-in, ``ops.prometheus_port``): :class:`TrainerExporter` is fed by the
  trainer's step observer, finding sink and phase listener, and served by prometheus-client's own
  HTTP server on loopback.

Names (docs/ops.md): a catalog name becomes ``rlcockpit_`` + its segments joined by ``_``; a
template's ``<variable>`` becomes a label (``grad/norm/layer/<name>`` ->
``rlcockpit_grad_norm_layer{layer=...}``, ``dist/grad_norm/rank/<r>`` -> ``{rank=...}``); units go
to base units with the Prometheus suffix (``_s`` -> ``_seconds``, ``_gb`` -> ``_bytes``,
``_per_s`` -> ``_per_second``). Every series carries ``run``, ``rl_phase`` and ``rl_component``.
Only catalog names are exported and the number of series is capped (``max_series``), so no
per-sample value ever becomes a label. prometheus-client is imported only when an exporter is built.

This module holds the two exporters (the store read by the server, a trainer's own HTTP server) and
is the import point for the rest: the naming in :mod:`.prometheus_names`, the state and its
rendering in :mod:`.prometheus_state`.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Mapping
from typing import Any

from rlcockpit.integrations.prometheus_names import (
    DISTRIBUTION_EDGES,
    DISTRIBUTIONS,
    PHASE_BUCKETS,
    PREFIX,
    SEVERITIES,
    PromName,
    exported_families,
    prometheus_name,
    where,
)
from rlcockpit.integrations.prometheus_state import RLMetricsState, StateCollector, render
from rlcockpit.records import FindingRecord, PhaseRecord

__all__ = ["DISTRIBUTIONS", "DISTRIBUTION_EDGES", "PHASE_BUCKETS", "PREFIX", "SEVERITIES",
           "PromName", "RLMetricsState", "StoreExporter", "TrainerExporter", "exported_families",
           "prometheus_name", "render", "where"]

log = logging.getLogger("rlcockpit.integrations.prometheus")


# --------------------------------------------------------------------------- the server side


class StoreExporter:
    """``/metrics`` of ``rlcockpit serve``: the store read incrementally, at most every
    ``refresh_s``; the ``max_runs`` most recent runs (running runs first) are exported."""

    def __init__(self, *, refresh_s: float = 2.0, max_runs: int = 20, max_series: int = 20_000) -> None:
        if refresh_s < 0 or max_runs < 1:
            raise ValueError("refresh_s must be >= 0 and max_runs >= 1")
        self.refresh_s = refresh_s
        self.max_runs = max_runs
        self.state = RLMetricsState(max_series=max_series)
        self._cursor: dict[tuple[str, str], int | None] = {}
        self._seen_step: dict[str, int | None] = {}  # last complete step read, per run
        self._moved: dict[str, int] = {}  # runs.last_step at the last read
        self._refreshed = -math.inf
        self._lock = threading.Lock()

    def __call__(self, reader: Any) -> tuple[bytes, str]:
        """Refresh from ``reader`` when due, then render (the server's ``metrics`` hook)."""
        with self._lock:
            if time.monotonic() - self._refreshed >= self.refresh_s:
                self.refresh(reader)
                self._refreshed = time.monotonic()
        from prometheus_client import CONTENT_TYPE_LATEST

        return self.state.exposition(), CONTENT_TYPE_LATEST

    def refresh(self, reader: Any) -> None:
        runs = sorted(reader.list_runs(), key=lambda r: (r.status != "running", -r.started_at))
        runs = runs[: self.max_runs]
        self.state.forget_runs([r.run_id for r in runs])
        kept = {r.run_id for r in runs}
        self._seen_step = {k: v for k, v in self._seen_step.items() if k in kept}
        self._moved = {k: v for k, v in self._moved.items() if k in kept}
        self._cursor = {k: v for k, v in self._cursor.items() if k[0] in kept}
        for run in runs:
            self.state.set_run(run.run_id, step=run.last_step, status=run.status, name=run.name,
                               heartbeat_at=run.heartbeat_at)
            self._metrics(reader, run)
            for record in self._new_rows(reader, run.run_id, "findings"):
                if isinstance(record, FindingRecord) and record.status != "resolved":
                    self.state.observe_finding(run.run_id, record.severity, record.detector)
            for record in self._new_rows(reader, run.run_id, "phases"):
                if isinstance(record, PhaseRecord) and record.duration_s is not None \
                        and record.status == "finished":
                    self.state.observe_phase(run.run_id, record.phase, record.duration_s)

    def _metrics(self, reader: Any, run: Any) -> None:
        """Latest value per metric: the whole run once, then only the complete steps written since
        (``steps_after``); a run whose ``last_step`` did not move costs no query at all."""
        if run.last_step is None or self._moved.get(run.run_id) == run.last_step:
            return
        self._moved[run.run_id] = run.last_step
        if run.run_id not in self._seen_step:
            self.state.observe_metrics(run.run_id, {k: v for k, (_, v) in reader.latest(run.run_id).items()})
            self._seen_step[run.run_id] = reader.tail_start_ids(run.run_id).get("step")
        else:
            new = reader.steps_after(run.run_id, self._seen_step[run.run_id], limit=10_000)
            if new:
                for _, metrics in sorted(reader.step_metrics(run.run_id, new[0][0], new[-1][0]).items()):
                    self.state.observe_metrics(run.run_id, metrics)
                self._seen_step[run.run_id] = new[-1][0]
        self._distributions(reader, run)

    def _distributions(self, reader: Any, run: Any) -> None:
        if run.last_step is None:
            return
        for name in DISTRIBUTIONS:
            hists = reader.read_histograms(run.run_id, name, step_min=run.last_step - 1)
            if hists:
                self.state.observe_distribution(run.run_id, name, hists[-1].edges, hists[-1].counts)

    def _new_rows(self, reader: Any, run_id: str, kind: str) -> list[Any]:
        after = self._cursor.get((run_id, kind))
        out = []
        while True:
            rows = reader.rows_after(run_id, kind, after, limit=1000)
            if not rows:
                break
            after = rows[-1][0]
            out.extend(record for _, record in rows)
            if len(rows) < 1000:
                break
        self._cursor[(run_id, kind)] = after
        return out


# --------------------------------------------------------------------------- the trainer side


class TrainerExporter:
    """A training process's own ``/metrics`` (prometheus-client's HTTP server on ``host:port``).

    Fed by three callbacks the cli registers (:meth:`on_step`, :meth:`on_finding`,
    :meth:`on_phase`); each fails soft: telemetry never stops training."""

    def __init__(self, port: int, *, host: str = "127.0.0.1", rank: str = "0",
                 run_id: Any = None, max_series: int = 10_000) -> None:
        from prometheus_client import CollectorRegistry, start_http_server

        self.state = RLMetricsState(max_series=max_series, rank=rank)
        self._run_id = run_id if callable(run_id) else (lambda: run_id or "")
        self.errors = 0
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(StateCollector(self.state))
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:  # fail fast at set-up, with the fix
            from rlcockpit.errors import ConfigError

            raise ConfigError(f"cannot serve Prometheus metrics on {host}:{port} ({exc}); pick a "
                              "free port with ops.prometheus_port=PORT or 0 to switch it off",
                              details={"key": "ops.prometheus_port", "value": port}) from exc
        self.port = int(self._server.server_port)

    def on_step(self, step: int, metrics: Mapping[str, float]) -> None:
        try:
            run = self._run_id()
            self.state.observe_metrics(run, metrics)
            self.state.set_run(run, step=step)
        except Exception as exc:  # fail soft: never into the training loop
            self._failed(exc)

    def on_finding(self, finding: FindingRecord) -> None:
        try:
            if finding.status != "resolved":
                self.state.observe_finding(self._run_id(), finding.severity, finding.detector)
        except Exception as exc:
            self._failed(exc)

    def on_phase(self, phase: str, step: int, seconds: float, ok: bool) -> None:
        try:
            if ok:
                self.state.observe_phase(self._run_id(), phase, seconds)
        except Exception as exc:
            self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        self.errors += 1
        if self.errors == 1:
            log.warning("Prometheus exporter: %s (counted, training goes on)", exc)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

