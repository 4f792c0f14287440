"""The cost ledger of a run (seed 004, docs/cost.md): what the cockpit's cost panel shows."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query

from rlcockpit.metrics.cost import ledger_for_run
from rlcockpit.server.deps import Reader
from rlcockpit.server.responses import SafeJSONResponse, json_response
from rlcockpit.server.routes.base import read_router

router = read_router("/api", "cost")


@router.get("/runs/{run}/cost", summary="The run's cost ledger: tokens generated and trained, "
                                        "FLOPs, time per phase, accelerator-hours and money, ETA "
                                        "and projected total, the sampling schedule's savings")
def run_cost(run: str, reader: Reader,
             steps: Annotated[int, Query(ge=0, le=10_000, description="how many of the last "
                                                                      "steps to list")] = 50
             ) -> SafeJSONResponse:
    ledger = ledger_for_run(reader, run).to_dict()
    ledger["steps"] = ledger["steps"][-steps:] if steps else []
    return json_response(ledger)
