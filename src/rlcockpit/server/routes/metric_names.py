"""Every run's metric names with the keys they were logged as: the cross-run metric search of the
runs page (issue 29, docs/server.md "Runs and metrics", docs/ui.md "Search")."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query

from rlcockpit.integrations.logged_keys import logged_keys
from rlcockpit.server.deps import Runs
from rlcockpit.server.query import csv
from rlcockpit.server.responses import SafeJSONResponse, json_response
from rlcockpit.server.routes.base import read_router

router = read_router("/api", "runs")


@router.get("/metric_names", summary="The metric names of every run (or of the runs asked for), "
                                      "with the keys an imported run logged them as")
def metric_names(reader: Runs,
                 runs: Annotated[str | None, Query(description="comma-separated run ids; "
                                                               "empty: every run")] = None,
                 ) -> SafeJSONResponse:
    wanted = set(csv(runs)) if runs else None
    items = []
    for info in reader.list_runs():  # newest first
        if wanted is not None and info.run_id not in wanted:
            continue
        names = reader.metric_names(info.run_id)
        items.append({"run_id": info.run_id, "project": info.project, "name": info.name,
                      "status": info.status, "metric_names": names,
                      "logged_keys": logged_keys(names, info.config)})
    return json_response({"items": items})
