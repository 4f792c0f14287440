"""Runs, their metric series, latest values, histograms, categories, run comparison and the
metric summaries of many runs (the runs table's summary columns, the sweep view)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query

from rlcockpit._version import __version__
from rlcockpit.records import to_dict
from rlcockpit.server.deps import Runs, Settings
from rlcockpit.server.errors import ParameterError
from rlcockpit.server.query import (
    I64_MAX,
    I64_MIN,
    check_cap,
    check_range,
    choices,
    csv,
    csv_of,
    expand_names,
)
from rlcockpit.server.responses import SafeJSONResponse, json_response
from rlcockpit.server.routes.base import read_router
from rlcockpit.server.serialize import lease_item, run_item, series_dict
from rlcockpit.server.summaries import STATS, BestMode, SummariesPublic, summarize_run

router = read_router("/api", "runs")

StepMin = Annotated[int | None, Query(ge=I64_MIN, le=I64_MAX, description="first step (inclusive)")]
StepMax = Annotated[int | None, Query(ge=I64_MIN, le=I64_MAX, description="last step (inclusive)")]
CATEGORY_PREFIX, CATEGORY_SUFFIX = "reward/category/", "/mean"


@router.get("/health", summary="Server status, version and the store it reads")
def health(settings: Settings) -> SafeJSONResponse:
    return json_response({"status": "ok", "version": __version__, "store": settings.store})


@router.get("/runs", summary="Every run in the store, newest first")
def list_runs(reader: Runs,
              config: Annotated[bool, Query(description="include each run's config (the runs "
                                                         "table's config columns and diff)")] = False,
              ) -> SafeJSONResponse:
    return json_response({"items": [run_item(r, config=config) for r in reader.list_runs()]})


@router.get("/runs/{run}", summary="One run: info and config, step range, metric and histogram "
                                   "names (with the keys an imported run logged them as), sample "
                                   "count, findings by severity, dropped records, the process "
                                   "writing it (its lease)")
def run_summary(run: str, reader: Runs) -> SafeJSONResponse:
    from rlcockpit.integrations.logged_keys import logged_keys

    s = reader.summary(run)
    return json_response({
        "run": to_dict(s.run), "steps": s.steps, "first_step": s.first_step,
        "last_step": s.last_step, "metric_names": list(s.metric_names),
        "logged_keys": logged_keys(s.metric_names, s.run.config),
        "histogram_names": reader.histogram_names(run), "samples": s.samples,
        "findings_by_severity": s.findings_by_severity, "dropped_total": s.dropped_total,
        "missing_steps": s.missing_steps,
        "metric_units": metric_units(s.metric_names), "lease": lease_item(reader.get_lease(run))})


def metric_units(names) -> dict[str, str]:
    """The catalog unit of each name that has one (docs/metrics.md): the charts' axis titles."""
    from rlcockpit.metrics.catalog import spec_for

    found = {n: spec_for(n) for n in names}
    return {n: spec.unit for n, spec in found.items() if spec is not None and spec.unit}


@router.get("/runs/{run}/series", summary="Metric curves, downsampled on the server (every "
                                          "bucket keeps its min and max, so spikes survive)")
def series(run: str, reader: Runs, settings: Settings,
           names: Annotated[str, Query(description="comma-separated metric names; a `*` "
                                                  "matches any text, e.g. reward/category/*; "
                                                  "empty: no curves")],
           step_min: StepMin = None, step_max: StepMax = None,
           max_points: Annotated[int | None, Query(ge=8, le=I64_MAX, description="points per curve at most "
                                                   "(None: every point)")] = 1000,
           ) -> SafeJSONResponse:
    check_range("step_min", step_min, "step_max", step_max)
    check_cap("max_points", max_points, settings.max_points)
    wanted = expand_names(csv(names), _metric_names(reader, run, names), limit=settings.max_names)
    found = reader.read_series(run, wanted, step_min=step_min, step_max=step_max,
                               max_points=max_points)
    return json_response({"series": {n: series_dict(s) for n, s in found.items()}})


@router.get("/runs/{run}/latest", summary="The most recent value of each metric")
def latest(run: str, reader: Runs, settings: Settings,
           names: Annotated[str | None, Query(description="comma-separated names (wildcards "
                                                         "allowed); all metrics when omitted")
                            ] = None) -> SafeJSONResponse:
    available = reader.metric_names(run)
    wanted = (available if names is None
              else expand_names(csv(names), available, limit=settings.max_names))
    values = reader.latest(run, wanted)
    info = reader.get_run(run)
    return json_response({"step": info.last_step, "values": {
        n: {"step": s, "value": v} for n, (s, v) in values.items()}})


@router.get("/runs/{run}/histograms", summary="One histogram's distributions over time")
def histograms(run: str, reader: Runs, settings: Settings,
               name: Annotated[str, Query(description="histogram name, e.g. reward/hist")],
               step_min: StepMin = None, step_max: StepMax = None,
               max_points: Annotated[int | None, Query(ge=2, le=I64_MAX, description="evenly spaced steps "
                                                       "at most")] = 200,
               ) -> SafeJSONResponse:
    check_range("step_min", step_min, "step_max", step_max)
    check_cap("max_points", max_points, settings.max_histogram_points)
    items = reader.read_histograms(run, name, step_min=step_min, step_max=step_max,
                                   max_points=max_points)
    return json_response({"name": name, "items": [
        {"step": h.step, "edges": list(h.edges), "counts": list(h.counts),
         "wall_time": h.wall_time} for h in items]})


@router.get("/runs/{run}/categories", summary="Prompt categories of the run (from the "
                                              "reward/category/<c>/mean metrics)")
def categories(run: str, reader: Runs) -> SafeJSONResponse:
    names = reader.metric_names(run)
    found = [n[len(CATEGORY_PREFIX):-len(CATEGORY_SUFFIX)] for n in names
             if n.startswith(CATEGORY_PREFIX) and n.endswith(CATEGORY_SUFFIX)]
    return json_response({"items": sorted(c for c in found if c and "/" not in c)})


@router.get("/compare", summary="The same metrics of several runs, for overlaying curves")
def compare(reader: Runs, settings: Settings,
            runs: Annotated[str, Query(pattern=r"[^,\s]", description="comma-separated run ids")],
            names: Annotated[str, Query(description="comma-separated metric names (wildcards "
                                                    "allowed); empty: no curves")],
            step_min: StepMin = None, step_max: StepMax = None,
            max_points: Annotated[int | None, Query(ge=8, le=I64_MAX)] = 500) -> SafeJSONResponse:
    run_ids = csv(runs)
    if not run_ids:
        raise ParameterError("runs", runs, "give one or more run ids separated by commas")
    check_range("step_min", step_min, "step_max", step_max)
    check_cap("max_points", max_points, settings.max_points)
    patterns = csv(names)
    out = {}
    for run in run_ids:
        wanted = expand_names(patterns, _metric_names(reader, run, names), limit=settings.max_names)
        found = reader.read_series(run, wanted, step_min=step_min, step_max=step_max,
                                   max_points=max_points)
        out[run] = {"series": {n: series_dict(s) for n, s in found.items()}}
    return json_response({"runs": out})


@router.get("/summaries", summary="Summaries of metrics over many runs: last, min, max and the "
                                   "value at the step where an eval metric is best",
            responses={200: {"model": SummariesPublic, "description": "by run id"}})
def summaries(reader: Runs, settings: Settings,
              names: Annotated[str, Query(description="comma-separated metric names (wildcards "
                                                      "allowed), e.g. reward/mean,eval/*")],
              stats: Annotated[str, Query(pattern=csv_of(STATS), description="comma-separated: "
                                          "last, min, max, at_best")] = "last,min,max",
              best: Annotated[str | None, Query(description="the metric whose best step `at_best` "
                                                           "reads (an eval metric)")] = "eval/reward/mean",
              best_mode: Annotated[BestMode, Query(description="best is its maximum (max) or "
                                                              "minimum (min)")] = "max",
              runs: Annotated[str | None, Query(description="comma-separated run ids; every run "
                                                           "when omitted")] = None,
              ) -> SafeJSONResponse:
    wanted = choices("stats", stats, STATS, "statistic") or ["last"]
    run_ids = csv(runs) if runs is not None else [r.run_id for r in reader.list_runs()]
    out = {}
    for run in run_ids:
        reader.get_run(run)  # 404 for an unknown run
        metric_names = expand_names(csv(names), _metric_names(reader, run, names), limit=settings.max_names)
        out[run] = summarize_run(reader, run, metric_names, wanted, best or None, best_mode)
    return json_response({"names": csv(names), "stats": wanted, "best": best or None,
                          "best_mode": best_mode, "runs": out})


def _metric_names(reader: Runs, run: str, names: str | None) -> list[str]:
    """The run's metric names, read only when a wildcard needs them."""
    return reader.metric_names(run) if names and "*" in names else []
