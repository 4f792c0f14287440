"""Findings, incidents with their snapshots, snapshots, phases, events and checkpoints."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Query

from rlcockpit.diagnostics.incidents import Incident, group
from rlcockpit.records import SEVERITIES, PhaseRecord, SnapshotRecord, to_dict
from rlcockpit.server.deps import Diagnostics
from rlcockpit.server.query import I64_MAX, I64_MIN, choices, csv, csv_of
from rlcockpit.server.responses import SafeJSONResponse, json_response
from rlcockpit.server.routes.base import read_router

router = read_router("/api/runs/{run}", "diagnostics")

Limit = Annotated[int, Query(ge=0, le=100_000, description="most recent items at most")]


@router.get("/findings", summary="Diagnostic findings (with their incident and status)")
def findings(run: str, reader: Diagnostics,
             step_min: Annotated[int | None, Query(ge=I64_MIN, le=I64_MAX, description="first step")
                                 ] = None,
             severities: Annotated[str | None, Query(pattern=csv_of(SEVERITIES),
                                                     description="comma-separated tiers, e.g. "
                                                                 "red,black")] = None,
             incident: Annotated[str | None, Query(description="one incident's findings")] = None,
             ) -> SafeJSONResponse:
    tiers = choices("severities", severities, SEVERITIES, "tier") or None
    found = reader.read_findings(run, step_min=step_min, severities=tiers, incident=incident)
    return json_response({"items": [to_dict(f) for f in found]})


@router.get("/incidents", summary="Findings grouped into incidents, newest first, each with "
                                  "its first-moving signal and its snapshots")
def incidents(run: str, reader: Diagnostics) -> SafeJSONResponse:
    grouped = group(reader.read_findings(run))
    by_incident: dict[str, list[dict]] = {}
    for snap in reader.read_snapshots(run):
        by_incident.setdefault(snap.incident, []).append(
            {"snapshot_id": snap.snapshot_id, "step": snap.step, "kind": snap.kind})
    return json_response({"items": [_incident(inc, by_incident.get(inc.incident, []))
                                    for inc in grouped]})


@router.get("/snapshots", summary="Diagnostic snapshots (without payloads)")
def snapshots(run: str, reader: Diagnostics) -> SafeJSONResponse:
    return json_response({"items": [_snapshot(s) for s in reader.read_snapshots(run)]})


@router.get("/snapshots/{snapshot_id}", summary="One snapshot with its payload (gradient "
                                                "histograms, heatmaps, batch, last samples...)")
def snapshot(run: str, snapshot_id: Annotated[int, Path(ge=I64_MIN, le=I64_MAX)], reader: Diagnostics
             ) -> SafeJSONResponse:
    snap = reader.get_snapshot(run, snapshot_id)
    return json_response({**_snapshot(snap), "payload": dict(snap.payload)})


@router.get("/phases", summary="Recent phase records and the current phase with its progress")
def phases(run: str, reader: Diagnostics, limit: Limit = 50) -> SafeJSONResponse:
    found = reader.read_phases(run, limit=max(limit, 1))
    items = found[-limit:] if limit else []
    return json_response({"items": [to_dict(p) for p in items], "current": current_phase(found)})


@router.get("/events", summary="Run events (checkpoints, config changes, warnings...)")
def events(run: str, reader: Diagnostics,
           kinds: Annotated[str | None, Query(description="comma-separated event kinds")] = None,
           limit: Limit = 100) -> SafeJSONResponse:
    found = reader.read_events(run, kinds=csv(kinds) or None, limit=limit)
    return json_response({"items": [to_dict(e) for e in found]})


@router.get("/checkpoints", summary="Checkpoints written by the trainer")
def checkpoints(run: str, reader: Diagnostics) -> SafeJSONResponse:
    return json_response({"items": [to_dict(c) for c in reader.read_checkpoints(run)]})


def current_phase(records: list[PhaseRecord]) -> dict[str, Any] | None:
    """The phase of the newest record, when it started, and how far it got (1.0 once
    finished)."""
    if not records:
        return None
    last = records[-1]
    started = next((p.wall_time for p in reversed(records)
                    if p.phase == last.phase and p.step == last.step and p.status == "started"),
                   last.wall_time)
    progress = 1.0 if last.status == "finished" else (last.progress or 0.0)
    return {"phase": last.phase, "step": last.step, "status": last.status,
            "progress": progress, "started_at": started}


def _snapshot(s: SnapshotRecord) -> dict[str, Any]:
    return {"snapshot_id": s.snapshot_id, "step": s.step, "kind": s.kind,
            "incident": s.incident, "wall_time": s.wall_time}


def _incident(inc: Incident, snaps: list[dict]) -> dict[str, Any]:
    return {"incident": inc.incident, "severity": inc.severity, "first_step": inc.first_step,
            "last_step": inc.last_step, "detectors": list(inc.detectors),
            "patterns": list(inc.patterns), "summary": inc.summary,
            "summary_zh": inc.summary_zh, "resolved": inc.resolved,
            "findings": [to_dict(f) for f in inc.findings], "snapshots": snaps}
