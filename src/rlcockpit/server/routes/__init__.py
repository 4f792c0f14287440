"""Every route of the API, one module per resource group (docs/server.md, docs/control.md).

Read routes (any viewer; always served): ``runs`` (runs, series, latest, histograms, categories,
compare, health), ``metric_names`` (every run's names and logged keys: the cross-run search),
``samples``, ``diagnostics`` (findings, incidents, snapshots, phases, events, checkpoints),
``library``, ``cost``, ``layouts`` and ``stream`` (the live tail as server-sent events). Control
routes (served when ``create_app`` is given a control plane): ``tickets`` (tickets and commands),
``params`` (a run's live parameters), ``audit`` (the audit log and ``/api/me``), ``review`` (the
review queue) and ``session`` (sign-in: a one-time code or an API token exchanged for an expiring
session, and sign-out).
"""

from __future__ import annotations

from rlcockpit.server.routes import (
    audit,
    cost,
    diagnostics,
    layouts,
    library,
    metric_names,
    params,
    review,
    runs,
    samples,
    session,
    stream,
    tickets,
)

READ_ROUTERS = (runs.router, samples.router, diagnostics.router, library.router, stream.router,
                cost.router, layouts.router, metric_names.router)
CONTROL_ROUTERS = (tickets.router, params.router, audit.router, review.router, session.router)
