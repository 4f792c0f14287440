"""Records and store results as the JSON dicts of api.md (non-finite floats -> null)."""

from __future__ import annotations

from typing import Any

from rlcockpit.records import RunInfo, SampleRecord, to_dict
from rlcockpit.server.responses import finite, json_safe
from rlcockpit.store.base import Series
from rlcockpit.store.lease import RunLease

RUN_LIST_FIELDS = ("run_id", "project", "name", "status", "started_at", "ended_at", "last_step",
                   "heartbeat_at")
TOKEN_ARRAYS = ("tokens", "logprobs", "ref_logprobs", "token_kl")


def run_item(run: RunInfo, *, config: bool = False) -> dict[str, Any]:
    """A run in the runs list (the config only when asked: it can be large)."""
    fields = (*RUN_LIST_FIELDS, "config") if config else RUN_LIST_FIELDS
    return json_safe({k: getattr(run, k) for k in fields})


def lease_item(lease: RunLease | None) -> dict[str, Any] | None:
    """Who writes the run (kind, host, pid, taken / renewed / expiry times, age, live), never its
    token; None when nobody holds the run's lease."""
    return json_safe(lease.public()) if lease is not None else None


def series_dict(series: Series) -> dict[str, Any]:
    return {"steps": list(series.steps), "values": finite(series.values),
            "wall_times": finite(series.wall_times), "downsampled": series.downsampled}


def sample_dict(sample: SampleRecord, *, token_arrays: bool, has_arrays: bool | None = None
                ) -> dict[str, Any]:
    """SampleRecord fields plus ``has_token_arrays`` (``has_arrays`` when the store said so,
    else from the record); the arrays only when asked for."""
    has_arrays = sample.has_token_arrays if has_arrays is None else has_arrays
    out = to_dict(sample if token_arrays else sample.without_token_arrays())
    if not token_arrays:
        for key in TOKEN_ARRAYS:
            out.pop(key, None)
    out["has_token_arrays"] = has_arrays
    return out
