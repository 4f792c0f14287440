"""Findings to a Prometheus Alertmanager (API v2, ``POST /api/v2/alerts``), docs/ops.md.

Alertmanager does the routing, grouping, inhibition and silencing; rlcockpit only sends each
finding as an alert whose labels make that possible:

- ``alertname="RLFinding"``, ``severity`` (yellow / orange / red / black), ``detector``,
  ``run``, ``project``, ``incident`` (findings of one incident group together), ``rl_phase`` and
  ``rl_component`` (where the detector looks), ``source="rlcockpit"``;
- annotations: ``summary`` (the message), ``step``, ``patterns`` (failure-library ids),
  ``evidence`` (compact JSON); ``generatorURL`` links the run in the cockpit when
  ``cockpit_url`` is set.

A raised or escalated finding fires until ``endsAt`` = now + ``resolve_after_s`` (Alertmanager
then resolves it by itself unless it is sent again); a ``resolved`` finding is sent with
``endsAt`` = now. Delivery is on a background thread with retries (the generic webhook's
pattern): the training loop never waits on the network and never sees an exception; what could
not be delivered is counted.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from typing import Any

from rlcockpit.records import SEVERITIES, FindingRecord

log = logging.getLogger("rlcockpit.integrations.alertmanager")
_STOP = object()

# detector -> (rl_phase, rl_component) of what it watches; others: ("diagnose", "trainer")
DETECTOR_WHERE = {
    "kl_tiers": ("score", "reference"), "kl_token_spike": ("score", "reference"),
    "kl_trend": ("score", "reference"), "kl_zero": ("score", "reference"),
    "ppo_epoch_kl": ("update", "actor"), "entropy": ("update", "actor"),
    "clip_band": ("update", "actor"), "update_ratio": ("update", "actor"),
    "gradients": ("update", "actor"), "critic": ("update", "critic"),
    "reward_hacking": ("score", "reward_model"), "reward_oscillation": ("score", "reward_model"),
    "reward_scale": ("score", "reward_model"), "reward_shape": ("score", "reward_model"),
    "rm_component_bias": ("score", "reward_model"), "rm_staleness": ("score", "reward_model"),
    "category_imbalance": ("score", "reward_model"), "outlier_prompts": ("score", "reward_model"),
    "length_hacking": ("rollout", "actor"), "degeneration": ("rollout", "actor"),
    "nonfinite": ("update", "trainer"), "memory": ("step", "system"), "stall": ("step", "trainer"),
}


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def alert_for(f: FindingRecord, *, run_id: str, project: str = "", cockpit_url: str = "",
              resolve_after_s: float = 3600.0, now: float | None = None) -> dict[str, Any]:
    """The Alertmanager v2 alert (postableAlert) of one finding."""
    now = time.time() if now is None else now
    phase, component = DETECTOR_WHERE.get(f.detector, ("diagnose", "trainer"))
    labels = {"alertname": "RLFinding", "source": "rlcockpit", "severity": f.severity,
              "detector": f.detector, "run": run_id, "rl_phase": phase, "rl_component": component}
    if project:
        labels["project"] = project
    if f.incident:
        labels["incident"] = f.incident
    evidence = json.dumps(dict(f.evidence), default=str, ensure_ascii=False)
    annotations = {"summary": f.message, "step": str(f.step), "status": f.status,
                   "patterns": ",".join(f.patterns), "evidence": evidence[:2000]}
    started = f.wall_time or now
    alert: dict[str, Any] = {
        "labels": labels, "annotations": annotations, "startsAt": _iso(started),
        "endsAt": _iso(now if f.status == "resolved" else now + resolve_after_s)}
    if cockpit_url:
        alert["generatorURL"] = f"{cockpit_url.rstrip('/')}/#/runs/{run_id}/alerts"
    return alert


class AlertmanagerSink:
    """``sink(finding)`` queues the finding's alert; a thread POSTs it to ``url``/api/v2/alerts.

    ``run_id`` may be a callable (the trainer's run id is known only after INIT)."""

    def __init__(self, url: str, *, run_id: Any = "", project: str = "", min_severity: str = "yellow",
                 cockpit_url: str = "", resolve_after_s: float = 3600.0, timeout_s: float = 5.0,
                 retries: int = 3, backoff_s: float = 1.0, max_queue: int = 1000) -> None:
        from rlcockpit.errors import ConfigError

        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"Alertmanager URL {url!r} is not http(s); give its base URL, e.g. "
                              "http://127.0.0.1:9093", details={"key": "ops.alertmanager_url", "value": url})
        if min_severity not in SEVERITIES:
            raise ConfigError(f"min_severity {min_severity!r} is not one of {SEVERITIES}",
                              details={"key": "ops.alertmanager_min_severity", "value": min_severity})
        self.endpoint = url.rstrip("/") + "/api/v2/alerts"
        self._run_id = run_id if callable(run_id) else (lambda: run_id)
        self.project = project
        self.min_rank = SEVERITIES.index(min_severity)
        self.cockpit_url = cockpit_url
        self.resolve_after_s = resolve_after_s
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self.delivered = self.failed = self.dropped = 0
        self._queue: queue.Queue = queue.Queue(maxsize=max_queue)
        self._thread = threading.Thread(target=self._loop, name="rlcockpit-alertmanager", daemon=True)
        self._thread.start()

    def __call__(self, f: FindingRecord, *, run: str | None = None, project: str | None = None) -> bool:
        """Queue one finding (below ``min_severity``: ignored). Never raises. ``run`` / ``project``
        override the sink's own (the server forwards findings of many runs)."""
        try:
            if f.severity not in SEVERITIES or SEVERITIES.index(f.severity) < self.min_rank:
                return False
            alert = alert_for(f, run_id=run if run is not None else self._run_id(),
                              project=self.project if project is None else project,
                              cockpit_url=self.cockpit_url, resolve_after_s=self.resolve_after_s)
            self._queue.put_nowait(alert)
            return True
        except queue.Full:
            self.dropped += 1
        except Exception as exc:  # fail soft: a finding that cannot be turned into an alert
            self.dropped += 1
            log.warning("Alertmanager: could not queue a finding: %s", exc)
        return False

    def close(self, timeout: float = 10.0) -> None:
        """Deliver what is queued (bounded by ``timeout``), then stop the thread."""
        try:
            self._queue.put(_STOP, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            batch = [item]
            while len(batch) < 100:  # findings of one step go in one request
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    self._deliver(batch)
                    return
                batch.append(nxt)
            self._deliver(batch)

    def _deliver(self, alerts: list[dict[str, Any]]) -> None:
        body = json.dumps(alerts, ensure_ascii=False).encode("utf-8")
        error = None
        for attempt in range(1 + self.retries):
            error = self._post(body)
            if error is None:
                self.delivered += len(alerts)
                return
            if attempt < self.retries:
                time.sleep(self.backoff_s * (2 ** attempt))
        self.failed += len(alerts)
        log.warning("Alertmanager %s: giving up on %d alert(s) after %d attempts (%s)",
                    self.endpoint, len(alerts), 1 + self.retries, error)

    def _post(self, body: bytes) -> str | None:
        request = urllib.request.Request(self.endpoint, data=body, method="POST", headers={
            "Content-Type": "application/json", "User-Agent": "rlcockpit-alertmanager"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                status = response.status
        except urllib.error.HTTPError as exc:
            return f"HTTP {exc.code}: {exc.read()[:200]!r}"
        except (urllib.error.URLError, OSError, ValueError) as exc:
            return f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
        return None if 200 <= status < 300 else f"HTTP {status}"


class StoreForwarder:
    """``rlcockpit serve --alertmanager-url``: every finding written to the store from now on, by
    any producer (rlcockpit's trainer, the TRL callback, follow mode, ``rlcockpit doctor``), goes
    to Alertmanager. A daemon thread polls the store every ``poll_s`` (new findings only, by row
    id cursor per run); history present at start is not re-sent."""

    def __init__(self, reader: Any, sink: AlertmanagerSink, *, poll_s: float = 2.0) -> None:
        self.reader, self.sink, self.poll_s = reader, sink, poll_s
        self.forwarded = 0
        self._cursor: dict[str, int | None] = {}
        self._stop = threading.Event()
        self._start_cursors()
        self._thread = threading.Thread(target=self._loop, name="rlcockpit-am-forward", daemon=True)
        self._thread.start()

    def _start_cursors(self) -> None:
        for run in self.reader.list_runs():
            self._cursor[run.run_id] = self.reader.tail_start_ids(run.run_id).get("findings")

    def poll(self) -> int:
        """One pass over the runs; returns how many findings were forwarded."""
        sent = 0
        for run in self.reader.list_runs():
            after = self._cursor.get(run.run_id)
            while True:
                rows = self.reader.rows_after(run.run_id, "findings", after, limit=500)
                for _, finding in rows:
                    sent += bool(self.sink(finding, run=run.run_id, project=run.project))
                if rows:
                    after = rows[-1][0]
                if len(rows) < 500:
                    break
            self._cursor[run.run_id] = after
        self.forwarded += sent
        return sent

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.poll()
            except Exception as exc:  # fail soft: the cockpit keeps serving
                log.warning("forwarding findings to Alertmanager: %s", exc)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sink.close()
