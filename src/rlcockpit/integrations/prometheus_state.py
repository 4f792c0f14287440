"""What a Prometheus exporter holds and how it is rendered (docs/ops.md).

:class:`RLMetricsState` keeps, per run, the latest value per catalog metric, finding counts by
severity and detector, phase-duration histograms and the advantage distribution, bounded by
``max_series``. It renders two ways that parse to the same samples: prometheus-client metric
families (``families()``, :func:`render`) and the text exposition format written directly
(``exposition()``, cached until the next change). prometheus-client is imported only when families
are built. :mod:`rlcockpit.integrations.prometheus` is the import point.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlcockpit.integrations.prometheus_names import (
    DISTRIBUTION_EDGES,
    DISTRIBUTIONS,
    PHASE_BUCKETS,
    PREFIX,
    SEVERITIES,
    PromName,
    prometheus_name,
)


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


class StateCollector:
    """A prometheus-client collector that yields one state's families at every collect."""

    def __init__(self, state: RLMetricsState) -> None:
        self.state = state

    def collect(self) -> Iterator[Any]:
        yield from self.state.families()


def render(state: RLMetricsState) -> tuple[bytes, str]:
    """The exposition text of ``state`` (a fresh registry each time: no global default)."""
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(StateCollector(state))
    return generate_latest(registry), CONTENT_TYPE_LATEST
