"""The cost ledger of a run (seed 004, docs/cost.md): what the cockpit's cost panel shows."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from rlcockpit.metrics.cost import ledger_for_run
from rlcockpit.server.deps import Reader, require_viewer
from rlcockpit.server.responses import READ_ERRORS, SafeJSONResponse, error_responses, json_response

router = APIRouter(prefix="/api", tags=["cost"], dependencies=[Depends(require_viewer)],
                   default_response_class=SafeJSONResponse, responses=error_responses(*READ_ERRORS))


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
