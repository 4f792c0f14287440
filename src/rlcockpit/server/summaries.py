"""Per-run summaries of metrics: the runs table's summary columns and the sweep view
(``GET /api/summaries``, docs/server.md).

For each run and metric: ``last`` (the latest value and its step), ``min`` and ``max`` over the
whole run, and ``at_best`` — the metric's value at the step where the ``best`` metric (an eval
metric such as ``eval/reward/mean``) has its maximum (or minimum, ``best_mode="min"``; the first
such step on ties). Reads stay small however long a run is: ``min`` / ``max`` and the best step
come from a curve downsampled to :data:`SCAN_POINTS` points, exact because the downsampling keeps
each bucket's minimum and maximum row (store/downsample.py, from the writer's rollups); ``last``
is the store's latest value; ``at_best`` reads that one step. Non-finite values are left out of
``min`` / ``max`` and are ``None`` elsewhere.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from rlcockpit.store.base import RunReader, Series

STATS = ("last", "min", "max", "at_best")
SCAN_POINTS = 64
BestMode = Literal["max", "min"]


class MetricSummary(BaseModel):
    """One metric of one run; only the statistics asked for are present."""

    last: float | None = Field(None, description="the latest value (null when not finite)")
    last_step: int | None = Field(None, description="the step of `last`")
    min: float | None = Field(None, description="the smallest finite value of the run")
    max: float | None = Field(None, description="the largest finite value of the run")
    at_best: float | None = Field(None, description="the value at `best_step` (null when the "
                                                    "metric has no value at that step)")


class RunMetricSummaries(BaseModel):
    best_step: int | None = Field(description="the step where the `best` metric is best "
                                              "(null: the run did not log it, or not asked)")
    best_value: float | None = Field(description="the `best` metric's value at `best_step`")
    metrics: dict[str, MetricSummary]


class SummariesPublic(BaseModel):
    """``GET /api/summaries``: the runs asked for (every run by default), by run id."""

    names: list[str]
    stats: list[str]
    best: str | None
    best_mode: BestMode
    runs: dict[str, RunMetricSummaries]


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def best_point(series: Series | None, mode: BestMode) -> tuple[int | None, float | None]:
    """(step, value) of the curve's largest (``mode="max"``) or smallest finite value; the first
    step on ties; (None, None) for a curve without finite values."""
    best: tuple[int | None, float | None] = (None, None)
    if series is None:
        return best
    for step, value in zip(series.steps, series.values, strict=True):
        v = _finite(value)
        if v is None:
            continue
        if best[1] is None or (v > best[1] if mode == "max" else v < best[1]):
            best = (step, v)
    return best


def summarize_run(reader: RunReader, run_id: str, names: Sequence[str], stats: Sequence[str],
                  best: str | None, best_mode: BestMode = "max") -> dict:
    """The summaries of ``names`` in one run (a :class:`RunMetricSummaries` as a dict)."""
    extremes = "min" in stats or "max" in stats
    latest = reader.latest(run_id, list(names)) if "last" in stats and names else {}
    curves = reader.read_series(run_id, list(names), max_points=SCAN_POINTS) if extremes and names else {}
    best_step = best_value = None
    if "at_best" in stats and best:
        scan = reader.read_series(run_id, [best], max_points=SCAN_POINTS).get(best)
        best_step, best_value = best_point(scan, best_mode)
    at = (reader.read_series(run_id, list(names), step_min=best_step, step_max=best_step)
          if best_step is not None and names else {})
    metrics = {}
    for name in names:
        m: dict = {}
        if "last" in stats:
            step, value = latest.get(name, (None, None))
            m.update(last=_finite(value), last_step=step)
        if extremes:
            values = [v for v in (curves[name].values if name in curves else ()) if _finite(v) is not None]
            if "min" in stats:
                m["min"] = min(values) if values else None
            if "max" in stats:
                m["max"] = max(values) if values else None
        if "at_best" in stats:
            here = at.get(name)
            m["at_best"] = next((_finite(v) for v in here.values if _finite(v) is not None), None) if here else None
        metrics[name] = m
    return {"best_step": best_step, "best_value": best_value, "metrics": metrics}
