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
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlcockpit.metrics.catalog import CATALOG, spec_for
from rlcockpit.records import FindingRecord, PhaseRecord

log = logging.getLogger("rlcockpit.integrations.prometheus")

PREFIX = "rlcockpit"
# phases last from milliseconds (ADVANTAGE on the tiny world) to many minutes (ROLLOUT at 30 B)
PHASE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                 120.0, 300.0, 600.0, 1800.0, math.inf)
SEVERITIES = ("info", "yellow", "orange", "red", "black")
# the advantage distribution of the latest step on fixed edges (whitened advantages: std units),
# for Grafana's heatmap (seed 000 §6 "advantage distribution heatmap"); from the stored
# advantage/hist, so only the server exports it
DISTRIBUTION_EDGES = (-3.0, -2.0, -1.5, -1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, math.inf)
DISTRIBUTIONS = {"advantage/hist": "advantage_distribution"}
# catalog names not exported: per-step histograms are histogram records, not scalars
_SKIP_GROUPS = ("histograms",)
_TEMPLATE_LABEL = {"r": "rank", "name": "layer", "phase": "rl_phase"}

# first path segment -> (rl_phase, rl_component): where in the loop a metric is measured and which
# model or part of the system it describes (the seed's rl_phase / rl_component labels)
_WHERE: dict[str, tuple[str, str]] = {
    "reward": ("score", "reward_model"), "kl": ("score", "reference"),
    "policy": ("update", "actor"), "value": ("update", "critic"),
    "advantage": ("advantage", "advantage"), "returns": ("advantage", "critic"),
    "response": ("rollout", "actor"), "rollout": ("rollout", "actor"),
    "grad": ("update", "actor"), "update": ("update", "actor"), "optim": ("update", "actor"),
    "time": ("step", "trainer"), "perf": ("step", "trainer"), "sys": ("step", "system"),
    "cost": ("step", "trainer"), "telemetry": ("step", "telemetry"), "eval": ("eval", "actor"),
    "dist": ("update", "trainer"),
}


@dataclass(frozen=True)
class PromName:
    """How one catalog name is exported: family name, its help, the template's labels, a scale."""

    family: str
    help: str
    labels: tuple[tuple[str, str], ...]
    scale: float = 1.0


_NAME_CACHE: dict[str, PromName | None] = {}


def prometheus_name(name: str) -> PromName | None:
    """The export of a concrete catalog name; None for a name the catalog lacks (not exported)."""
    if name in _NAME_CACHE:
        return _NAME_CACHE[name]
    spec = spec_for(name)
    out = None
    if spec is not None and spec.group not in _SKIP_GROUPS:
        labels = _template_values(spec.name, name)
        family, scale = _unit_suffix(_family_base(spec.name))
        phase, component = where(name)
        if name.endswith("/critic"):
            component = "critic"
        labels = {"rl_phase": phase, "rl_component": component, **labels}
        out = PromName(f"{PREFIX}_{family}", f"{spec.help} [{spec.unit}] ({spec.name})",
                       tuple(sorted(labels.items())), scale)
    if len(_NAME_CACHE) < 100_000:
        _NAME_CACHE[name] = out
    return out


def _family_base(catalog_name: str) -> str:
    """``grad/norm/layer/<name>`` -> ``grad_norm_layer``; a template whose fixed part is itself a
    catalog name keeps its variable's name (``reward/<component>/mean`` -> ``reward_component_mean``,
    since ``reward/mean`` exists)."""
    base = re.sub(r"/?<[a-z_]+>", "", catalog_name)
    if "<" in catalog_name and base in CATALOG:
        base = re.sub(r"<([a-z_]+)>", r"\1", catalog_name)
    return re.sub(r"[^a-z0-9_]", "_", base.replace("/", "_"))


def where(name: str) -> tuple[str, str]:
    """(rl_phase, rl_component) of a metric name."""
    return _WHERE.get(name.split("/", 1)[0], ("step", "trainer"))


def _template_values(template: str, name: str) -> dict[str, str]:
    parts = re.split(r"<([a-z_]+)>", template)
    pattern = "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>.+?)" for i, p in enumerate(parts))
    match = re.fullmatch(pattern, name)
    if match is None:
        return {}
    values = {_TEMPLATE_LABEL.get(k, k): v for k, v in match.groupdict().items()}
    if "rl_phase" in values:
        values["rl_phase"] = values["rl_phase"].lower()
    return values


def _unit_suffix(family: str) -> tuple[str, float]:
    if family.endswith("_per_s"):
        return family[:-len("_per_s")] + "_per_second", 1.0
    if family.endswith("_s"):
        return family[:-2] + "_seconds", 1.0
    if family.endswith("_gb"):
        return family[:-3] + "_bytes", 1e9
    return family, 1.0


# --------------------------------------------------------------------------- the state


@dataclass
class _PhaseHistogram:
    buckets: list[int] = field(default_factory=lambda: [0] * len(PHASE_BUCKETS))
    count: int = 0
    total: float = 0.0

    def observe(self, seconds: float) -> None:
        for i, edge in enumerate(PHASE_BUCKETS):
            if seconds <= edge:
                self.buckets[i] += 1
        self.count += 1
        self.total += seconds


class RLMetricsState:
    """What is exported, per run: latest value per catalog metric, finding counts by severity
    and detector, phase-duration histograms. Thread-safe; bounded by ``max_series``."""

    def __init__(self, *, max_series: int = 10_000, rank: str | None = None) -> None:
        self.max_series = max_series
        self.rank = rank  # the trainer's rank label (None: no rank label, e.g. the server)
        self.dropped_series = 0
        self._lock = threading.Lock()
        self._gauges: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[PromName, float]] = {}
        self._findings: dict[tuple[str, str, str], int] = {}
        self._phases: dict[tuple[str, str], _PhaseHistogram] = {}
        self._runs: dict[str, dict[str, Any]] = {}
        # per run and tier, every tier present from 0: increase() sees the first finding
        self._tiers: dict[str, dict[str, int]] = {}
        self._prefix: dict[tuple[str, tuple[tuple[str, str], ...]], str] = {}
        self._dists: dict[tuple[str, str], list[float]] = {}  # (run, family) -> cumulative counts
        self._version = 0  # bumped by every change; exposition() re-renders only after one
        self._cache: tuple[int, bytes] | None = None

    def _series(self) -> int:
        return len(self._gauges) + len(self._findings) + len(self._phases) * len(PHASE_BUCKETS)

    def set_run(self, run: str, *, step: int | None, status: str = "running", name: str = "",
                heartbeat_at: float | None = None) -> None:
        with self._lock:
            self._version += 1
            self._runs[run] = {"step": step, "status": status, "name": name,
                               "heartbeat_at": heartbeat_at}
            self._tiers.setdefault(run, dict.fromkeys(SEVERITIES, 0))

    def observe_metrics(self, run: str, metrics: Mapping[str, float]) -> None:
        with self._lock:
            self._version += 1
            for name, value in metrics.items():
                export = prometheus_name(name)
                if export is None or value is None:
                    continue
                labels = (("run", run), *export.labels)
                if self.rank is not None:
                    labels = (*labels, ("rank", self.rank))
                key = (export.family, labels)
                if key not in self._gauges and self._series() >= self.max_series:
                    self.dropped_series += 1
                    continue
                self._gauges[key] = (export, float(value) * export.scale)
                if key not in self._prefix:
                    self._prefix[key] = export.family + _label_text(labels)

    def observe_finding(self, run: str, severity: str, detector: str) -> None:
        with self._lock:
            self._version += 1
            tiers = self._tiers.setdefault(run, dict.fromkeys(SEVERITIES, 0))
            tiers[severity] = tiers.get(severity, 0) + 1
            key = (run, severity, detector)
            if key not in self._findings and self._series() >= self.max_series:
                self.dropped_series += 1
                return
            self._findings[key] = self._findings.get(key, 0) + 1

    def observe_phase(self, run: str, phase: str, seconds: float) -> None:
        if not math.isfinite(seconds) or seconds < 0:
            return
        with self._lock:
            self._version += 1
            key = (run, phase.lower())
            hist = self._phases.get(key)
            if hist is None:
                if self._series() + len(PHASE_BUCKETS) > self.max_series:
                    self.dropped_series += 1
                    return
                hist = self._phases[key] = _PhaseHistogram()
            hist.observe(seconds)

    def observe_distribution(self, run: str, name: str, edges: Sequence[float],
                             counts: Sequence[float]) -> None:
        """The latest histogram of ``name`` re-binned onto :data:`DISTRIBUTION_EDGES` (each stored
        bin counted in the bucket that holds its centre), cumulative like Prometheus buckets."""
        family = DISTRIBUTIONS.get(name)
        if family is None or len(edges) != len(counts) + 1:
            return
        per = [0.0] * len(DISTRIBUTION_EDGES)
        for lo, hi, c in zip(edges[:-1], edges[1:], counts, strict=True):
            centre = (lo + hi) / 2
            per[next(i for i, e in enumerate(DISTRIBUTION_EDGES) if centre <= e)] += c
        cumulative = [sum(per[: i + 1]) for i in range(len(per))]
        with self._lock:
            self._version += 1
            self._dists[(run, family)] = cumulative

    def forget_runs(self, keep: Sequence[str]) -> None:
        """Drop the series of runs no longer exported (bounded over the server's lifetime)."""
        kept = set(keep)
        with self._lock:
            self._version += 1
            self._gauges = {k: v for k, v in self._gauges.items() if k[1][0][1] in kept}
            self._findings = {k: v for k, v in self._findings.items() if k[0] in kept}
            self._phases = {k: v for k, v in self._phases.items() if k[0] in kept}
            self._runs = {k: v for k, v in self._runs.items() if k in kept}
            self._tiers = {k: v for k, v in self._tiers.items() if k in kept}
            self._dists = {k: v for k, v in self._dists.items() if k[0] in kept}
            self._prefix = {k: v for k, v in self._prefix.items() if k in self._gauges}

    def families(self) -> list[Any]:
        """The metric families to expose (prometheus-client objects)."""
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        with self._lock:
            gauges = list(self._gauges.items())
            findings = list(self._findings.items())
            phases = [(k, list(h.buckets), h.total) for k, h in self._phases.items()]
            runs = list(self._runs.items())
            tiers = [(run, dict(t)) for run, t in self._tiers.items()]
            dists = list(self._dists.items())
            dropped = self.dropped_series
        out: dict[str, Any] = {}
        for (family, labels), (export, value) in gauges:
            fam = out.get(family)
            if fam is None:
                fam = out[family] = GaugeMetricFamily(family, export.help,
                                                      labels=[k for k, _ in labels])
            fam.add_metric([v for _, v in labels], value)
        rank = [("rank", self.rank)] if self.rank is not None else []
        fam = CounterMetricFamily(f"{PREFIX}_findings", "Findings raised by the diagnostics, by "
                                  "severity tier and detector (docs/detectors.md).",
                                  labels=["run", "severity", "detector", *(k for k, _ in rank)])
        for (run, severity, detector), count in findings:
            fam.add_metric([run, severity, detector, *(v for _, v in rank)], count)
        out[fam.name] = fam
        fam = CounterMetricFamily(f"{PREFIX}_run_findings", "Findings per run and severity tier, "
                                  "every tier exported from 0 (the alerting rules' increase()).",
                                  labels=["run", "severity", *(k for k, _ in rank)])
        for run, counts in tiers:
            for severity, count in counts.items():
                fam.add_metric([run, severity, *(v for _, v in rank)], count)
        out["tiers"] = fam
        fam = HistogramMetricFamily(f"{PREFIX}_phase_duration_seconds", "Duration of one phase "
                                    "of the phase machine (DESIGN.md §3).",
                                    labels=["run", "rl_phase", *(k for k, _ in rank)])
        for (run, phase), buckets, total in phases:
            le = [("+Inf" if math.isinf(e) else repr(e), c) for e, c in zip(PHASE_BUCKETS, buckets, strict=True)]
            fam.add_metric([run, phase, *(v for _, v in rank)], le, total)
        out[fam.name] = fam
        for (run, family), cumulative in dists:
            name = f"{PREFIX}_{family}_bucket"
            fam = out.get(name) or GaugeMetricFamily(name, _DIST_HELP, labels=["run", "le"])
            out[name] = fam
            for edge, c in zip(DISTRIBUTION_EDGES, cumulative, strict=True):
                fam.add_metric([run, _le(edge)], c)
        out.update(_run_families(runs, GaugeMetricFamily))
        out["dropped"] = GaugeMetricFamily(f"{PREFIX}_exporter_dropped_series", "Series not "
                                           "exported because max_series was reached.", value=dropped)
        return list(out.values())


    def exposition(self) -> bytes:
        """The text exposition format 0.0.4, rendered from the state directly (the server's
        /metrics; label strings cached per series, the text cached until the next change).
        Parses to the same samples as prometheus-client's ``generate_latest`` over
        :meth:`families` (a test holds the two equal)."""
        with self._lock:
            if self._cache is not None and self._cache[0] == self._version:
                return self._cache[1]
            text = self._text()
            self._cache = (self._version, text)
            return text

    def _text(self) -> bytes:
        fmt = _number
        out: list[str] = []
        rows: dict[str, list[str]] = {}
        helps: dict[str, str] = {}
        for key, (export, value) in self._gauges.items():
            rows.setdefault(export.family, []).append(f"{self._prefix[key]} {fmt(value)}")
            helps[export.family] = export.help
        for family, lines in rows.items():
            out += [f"# HELP {family} {_help_text(helps[family])}", f"# TYPE {family} gauge", *lines]
        rank = [("rank", self.rank)] if self.rank is not None else []
        name = f"{PREFIX}_findings_total"
        out += [f"# HELP {name} Findings raised by the diagnostics, by severity tier and detector "
                "(docs/detectors.md).", f"# TYPE {name} counter"]
        out += [f"{name}{_label_text([('run', r), ('severity', s), ('detector', d), *rank])} {fmt(n)}"
                for (r, s, d), n in self._findings.items()]
        name = f"{PREFIX}_run_findings_total"
        out += [f"# HELP {name} Findings per run and severity tier, every tier exported from 0 (the "
                "alerting rules' increase()).", f"# TYPE {name} counter"]
        out += [f"{name}{_label_text([('run', r), ('severity', s), *rank])} {fmt(n)}"
                for r, tiers in self._tiers.items() for s, n in tiers.items()]
        name = f"{PREFIX}_phase_duration_seconds"
        out += [f"# HELP {name} Duration of one phase of the phase machine (DESIGN.md §3).",
                f"# TYPE {name} histogram"]
        for (r, phase), h in self._phases.items():
            labels = [("run", r), ("rl_phase", phase), *rank]
            out += [f"{name}_bucket{_label_text([*labels, ('le', _le(e))])} {fmt(c)}"
                    for e, c in zip(PHASE_BUCKETS, h.buckets, strict=True)]
            out += [f"{name}_count{_label_text(labels)} {fmt(h.count)}",
                    f"{name}_sum{_label_text(labels)} {fmt(h.total)}"]
        families = sorted({f for _, f in self._dists})
        for family in families:
            name = f"{PREFIX}_{family}_bucket"
            out += [f"# HELP {name} {_DIST_HELP}", f"# TYPE {name} gauge"]
            out += [f"{name}{_label_text([('run', r), ('le', _le(e))])} {fmt(c)}"
                    for (r, f), cum in self._dists.items() if f == family
                    for e, c in zip(DISTRIBUTION_EDGES, cum, strict=True)]
        out += _run_lines(list(self._runs.items()), fmt)
        out += [f"# HELP {PREFIX}_exporter_dropped_series Series not exported because max_series "
                "was reached.", f"# TYPE {PREFIX}_exporter_dropped_series gauge",
                f"{PREFIX}_exporter_dropped_series {fmt(self.dropped_series)}"]
        return ("\n".join(out) + "\n").encode("utf-8")


_DIST_HELP = ("Samples of the latest step's advantage histogram (advantage/hist) at or below le, "
              "on fixed edges in std units: Grafana's heatmap.")


def _number(value: float) -> str:
    """A sample value as the text format writes it (Python's repr parses in Prometheus)."""
    value = float(value)
    if math.isfinite(value):
        return repr(value)
    return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")


def _le(edge: float) -> str:
    return "+Inf" if math.isinf(edge) else repr(edge)


def _label_text(labels: Sequence[tuple[str, str]]) -> str:
    if not labels:
        return ""
    body = ",".join(f'{k}="{_label_value(v)}"' for k, v in labels)
    return "{" + body + "}"


def _label_value(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _help_text(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _run_lines(runs: list[tuple[str, dict[str, Any]]], fmt: Any) -> list[str]:
    info, step, beat = (f"{PREFIX}_run_info", f"{PREFIX}_run_last_step",
                        f"{PREFIX}_run_heartbeat_timestamp_seconds")
    out = [f"# HELP {info} One series per exported run (value 1).", f"# TYPE {info} gauge"]
    out += [f"{info}{_label_text([('run', r), ('name', d['name']), ('status', d['status'])])} 1.0"
            for r, d in runs]
    out += [f"# HELP {step} Last committed step of the run.", f"# TYPE {step} gauge"]
    out += [f"{step}{_label_text([('run', r)])} {fmt(float(d['step']))}" for r, d in runs
            if d["step"] is not None]
    out += [f"# HELP {beat} Unix time of the run's last heartbeat (stale while it is hung or "
            "dead).", f"# TYPE {beat} gauge"]
    out += [f"{beat}{_label_text([('run', r)])} {fmt(float(d['heartbeat_at']))}" for r, d in runs
            if d["heartbeat_at"]]
    return out


def _run_families(runs: list[tuple[str, dict[str, Any]]], gauge: Any) -> dict[str, Any]:
    info = gauge(f"{PREFIX}_run_info", "One series per exported run (value 1).",
                 labels=["run", "name", "status"])
    step = gauge(f"{PREFIX}_run_last_step", "Last committed step of the run.", labels=["run"])
    beat = gauge(f"{PREFIX}_run_heartbeat_timestamp_seconds", "Unix time of the run's last "
                 "heartbeat (stale while it is hung or dead).", labels=["run"])
    for run, r in runs:
        info.add_metric([run, r["name"], r["status"]], 1.0)
        if r["step"] is not None:
            step.add_metric([run], float(r["step"]))
        if r["heartbeat_at"]:
            beat.add_metric([run], float(r["heartbeat_at"]))
    return {info.name: info, step.name: step, beat.name: beat}


class _Collector:
    def __init__(self, state: RLMetricsState) -> None:
        self.state = state

    def collect(self) -> Iterator[Any]:
        yield from self.state.families()


def render(state: RLMetricsState) -> tuple[bytes, str]:
    """The exposition text of ``state`` (a fresh registry each time: no global default)."""
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(state))
    return generate_latest(registry), CONTENT_TYPE_LATEST


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
        self.registry.register(_Collector(self.state))
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


def exported_families() -> list[str]:
    """Every family name the catalog can produce (docs/ops.md lists them)."""
    names = {prometheus_name(_example(s.name)) for s in CATALOG.values()}
    fams = {n.family for n in names if n is not None}
    fams |= {f"{PREFIX}_{f}_bucket" for f in DISTRIBUTIONS.values()}
    fams |= {f"{PREFIX}_findings_total", f"{PREFIX}_run_findings_total",
             f"{PREFIX}_phase_duration_seconds", f"{PREFIX}_run_info",
             f"{PREFIX}_run_last_step", f"{PREFIX}_run_heartbeat_timestamp_seconds",
             f"{PREFIX}_exporter_dropped_series"}
    return sorted(fams)


def _example(template: str) -> str:
    return re.sub(r"<r>", "0", re.sub(r"<[a-z_]+>", "x", template))
