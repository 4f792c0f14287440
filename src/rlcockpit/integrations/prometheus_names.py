"""Catalog names as Prometheus names (docs/ops.md): the family, its help, labels and unit scale.

A catalog name becomes ``rlcockpit_`` + its segments joined by ``_``; a template's ``<variable>``
becomes a label (``grad/norm/layer/<name>`` -> ``rlcockpit_grad_norm_layer{layer=...}``,
``dist/grad_norm/rank/<r>`` -> ``{rank=...}``); units go to base units with the Prometheus suffix
(``_s`` -> ``_seconds``, ``_gb`` -> ``_bytes``, ``_per_s`` -> ``_per_second``). Every series
carries ``rl_phase`` and ``rl_component`` (:func:`where`). Also the fixed bucket edges and the
family list docs/ops.md shows. Pure: no prometheus-client, no state;
:mod:`rlcockpit.integrations.prometheus` is the import point.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from rlcockpit.metrics.catalog import CATALOG, spec_for

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
