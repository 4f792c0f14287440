"""Structured logs (seed 000 §6: Loki + LogQL, lines labelled ``rl_phase`` / ``rl_component`` /
``rl_status``), docs/ops.md.

- :class:`JsonFormatter`: one JSON object per line: ``ts``, ``level``, ``logger``, ``msg`` and
  the RL fields ``rl_phase``, ``rl_component``, ``rl_status``, ``run``, ``step`` (from the
  record's ``extra``; the logger name gives ``rl_component`` when none is given).
- :class:`LokiHandler`: pushes the same lines to Loki's push API (``/loki/api/v1/push``) from a
  background thread, batched; the stream labels are the low-cardinality fields only (``job``,
  ``run``, ``rl_phase``, ``rl_component``, ``rl_status``, ``level``), the step stays in the line.
  A failed push is counted and dropped: logging never blocks or breaks training.
- :func:`configure`: installs them on the ``rlcockpit`` logger (the cli's ``--log-format json``).
- :class:`TrainerLogLines`: the trainer's phase / step / finding lines (fed by the cli's hooks).
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from rlcockpit.records import FindingRecord

RL_FIELDS = ("rl_phase", "rl_component", "rl_status", "run", "step")
LABEL_FIELDS = ("run", "rl_phase", "rl_component", "rl_status")
_COMPONENT_OF_LOGGER = {"rlcockpit.trainer": "trainer", "rlcockpit.server": "server",
                        "rlcockpit.diagnostics": "diagnostics", "rlcockpit.telemetry": "telemetry",
                        "rlcockpit.control": "control", "rlcockpit.integrations": "integrations",
                        "uvicorn": "server"}
_STD_ATTRS = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


def rl_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The line's fields: message, level, logger, the RL fields and any other ``extra``."""
    out: dict[str, Any] = {"ts": round(record.created, 6), "level": record.levelname.lower(),
                           "logger": record.name, "msg": record.getMessage()}
    for key, value in record.__dict__.items():
        if key not in _STD_ATTRS and not key.startswith("_"):
            out[key] = value
    if "rl_component" not in out:
        out["rl_component"] = next((c for prefix, c in _COMPONENT_OF_LOGGER.items()
                                    if record.name.startswith(prefix)), "rlcockpit")
    out.setdefault("rl_status", "failed" if record.levelno >= logging.ERROR
                   else "abnormal" if record.levelno >= logging.WARNING else "ok")
    if record.exc_info:
        out["exc"] = logging.Formatter().formatException(record.exc_info)
    return out


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(rl_fields(record), ensure_ascii=False, default=str)


class LokiHandler(logging.Handler):
    """Batched push to Loki; ``close()`` flushes what is queued."""

    def __init__(self, url: str, *, job: str = "rlcockpit", flush_s: float = 1.0,
                 batch: int = 500, max_queue: int = 10_000, timeout_s: float = 5.0) -> None:
        super().__init__()
        if not url.startswith(("http://", "https://")):
            from rlcockpit.errors import ConfigError

            raise ConfigError(f"Loki URL {url!r} is not http(s); give its base URL, e.g. "
                              "http://127.0.0.1:3100", details={"key": "ops.loki_url", "value": url})
        self.endpoint = url.rstrip("/") + "/loki/api/v1/push"
        self.job, self.flush_s, self.batch, self.timeout_s = job, flush_s, batch, timeout_s
        self.pushed = self.failed = self.dropped = 0
        self._queue: queue.Queue = queue.Queue(maxsize=max_queue)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rlcockpit-loki", daemon=True)
        self._thread.start()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields = rl_fields(record)
            self._queue.put_nowait((time.time_ns(), fields))
        except queue.Full:
            self.dropped += 1
        except Exception:  # never raise from logging
            self.dropped += 1

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._stop.wait(self.flush_s)
            self.flush_queue()

    def flush_queue(self) -> None:
        items = []
        while True:
            try:
                items.append(self._queue.get_nowait())
            except queue.Empty:
                break
        for start in range(0, len(items), self.batch):
            self._push(items[start:start + self.batch])

    def _push(self, items: list[tuple[int, dict[str, Any]]]) -> None:
        streams: dict[tuple[tuple[str, str], ...], list[list[str]]] = {}
        for ts, fields in items:
            labels = {"job": self.job, "level": str(fields.get("level", "info"))}
            labels.update({k: str(fields[k]) for k in LABEL_FIELDS if fields.get(k) not in (None, "")})
            line = json.dumps(fields, ensure_ascii=False, default=str)
            streams.setdefault(tuple(sorted(labels.items())), []).append([str(ts), line])
        body = json.dumps({"streams": [{"stream": dict(k), "values": v} for k, v in streams.items()]})
        request = urllib.request.Request(self.endpoint, data=body.encode("utf-8"), method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s):
                self.pushed += len(items)
        except (urllib.error.URLError, OSError, ValueError):
            self.failed += len(items)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.flush_queue()
        super().close()


def configure(log_format: str = "console", *, loki_url: str = "", level: int = logging.INFO,
              stream: Any = None) -> list[logging.Handler]:
    """Install the JSON formatter (``log_format="json"``) and the Loki push on the ``rlcockpit``
    logger; returns the handlers (close them at the end). ``console`` with no Loki: no change."""
    logger = logging.getLogger("rlcockpit")
    sinks: list[logging.Handler] = []
    if log_format == "json":
        console = logging.StreamHandler(stream)
        console.setFormatter(JsonFormatter())
        sinks.append(console)
    if loki_url:
        sinks.append(LokiHandler(loki_url))
    if not sinks:
        return []
    # the caller's thread only enqueues the record; formatting and writing happen on a listener
    # thread (a trainer logs a line per phase)
    handler = QueuedHandlers(sinks)
    logger.setLevel(level)
    logger.propagate = False  # one line per record, not one per handler up the tree
    logger.addHandler(handler)
    return [handler]


class QueuedHandlers(logging.handlers.QueueHandler):
    """A QueueHandler whose listener thread feeds ``sinks``; ``close()`` drains and closes them."""

    def __init__(self, sinks: list[logging.Handler]) -> None:
        super().__init__(queue.SimpleQueue())
        self.sinks = sinks
        self.listener = logging.handlers.QueueListener(self.queue, *sinks, respect_handler_level=True)
        self.listener.start()

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        return record  # keep the record's extra fields: the sinks format it themselves

    def close(self) -> None:
        if self.listener is not None:
            self.listener.stop()  # drains the queue
            self.listener = None
            for sink in self.sinks:
                sink.close()
        super().close()


def unconfigure(handlers: list[logging.Handler]) -> None:
    """Undo :func:`configure`: remove and close the handlers (flushes the Loki queue)."""
    logger = logging.getLogger("rlcockpit")
    for h in handlers:
        logger.removeHandler(h)
        h.close()
    if not any(isinstance(h, QueuedHandlers) for h in logger.handlers):
        logger.propagate = True


class TrainerLogLines:
    """The trainer's log lines (cli hooks): one per phase, one per step, one per finding."""

    def __init__(self, run_id: Any, logger: logging.Logger | None = None) -> None:
        self._run_id = run_id if callable(run_id) else (lambda: run_id)
        self.log = logger or logging.getLogger("rlcockpit.trainer.ops")

    def on_phase(self, phase: str, step: int, seconds: float, ok: bool) -> None:
        component = {"ROLLOUT": "actor", "SCORE": "reward_model", "UPDATE": "actor",
                     "ADVANTAGE": "critic", "EVAL": "actor"}.get(phase, "trainer")
        self.log.log(logging.INFO if ok else logging.ERROR, "phase %s %s in %.3f s", phase,
                     "finished" if ok else "failed", seconds,
                     extra={"rl_phase": phase.lower(), "rl_component": component,
                            "rl_status": "ok" if ok else "failed", "run": self._run_id(),
                            "step": step, "duration_s": round(seconds, 6)})

    def on_step(self, step: int, metrics: Mapping[str, float]) -> None:
        keep = {k: metrics[k] for k in ("reward/mean", "kl/mean", "policy/entropy", "perf/tokens_per_s",
                                        "cost/tokens_generated") if k in metrics}
        self.log.info("step %d", step, extra={"rl_phase": "step", "rl_component": "trainer",
                                              "rl_status": "ok", "run": self._run_id(), "step": step,
                                              "metrics": keep})

    def on_finding(self, f: FindingRecord) -> None:
        from rlcockpit.integrations.alertmanager import DETECTOR_WHERE

        phase, component = DETECTOR_WHERE.get(f.detector, ("diagnose", "trainer"))
        level = logging.ERROR if f.severity in ("red", "black") else logging.WARNING
        self.log.log(level, "%s %s: %s", f.severity.upper(), f.detector, f.message,
                     extra={"rl_phase": phase, "rl_component": component, "rl_status": "abnormal",
                            "run": self._run_id(), "step": f.step, "severity": f.severity,
                            "detector": f.detector, "incident": f.incident})
