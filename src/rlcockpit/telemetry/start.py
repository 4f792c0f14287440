"""Starting a run or resuming one in the store, with its lease taken before anything is written
(split from :mod:`rlcockpit.telemetry.run`: ``init`` calls :func:`start_or_resume`)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from typing import Any

from rlcockpit.errors import ConfigError, NotFoundError
from rlcockpit.records import Batch, EventRecord, RunInfo
from rlcockpit.telemetry.lease import Lease, LeaseOptions, take_lease


def new_run_id() -> str:
    """Short, sortable and unique enough: UTC time to the second plus 24 random bits."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def start_or_resume(opened, writer, project: str, name: str | None,
                     config: Mapping[str, Any] | None, run_id: str | None,
                     resume: bool, lease: LeaseOptions, force: bool) -> tuple[RunInfo, Lease | None]:
    if resume:
        if not run_id:
            raise ConfigError("resume=True needs the run_id of the run to continue",
                              details={"key": "run_id"})
        reader = opened.reader()
        try:
            info = reader.get_run(run_id)
        except NotFoundError:
            raise NotFoundError(f"cannot resume run {run_id!r}: it is not in store "
                                f"{opened.uri}; check the run id and the store URI",
                                details={"run_id": run_id}) from None
        finally:
            reader.close()
        held = _lease(opened, run_id, lease, force)  # before anything of the run is written
        try:
            writer.set_run_status(run_id, "running")
            writer.write_batch(run_id, _resume_batch(info, config, held))
        except BaseException:
            if held is not None:
                held.leases.release(run_id, held.token)
                held.leases.close()
            raise
        return info, held
    run_id = run_id or new_run_id()
    info = RunInfo(run_id=run_id, project=str(project), name=str(name or run_id),
                   status="running", started_at=time.time(), config=dict(config or {}))
    writer.create_run(info)
    return info, _lease(opened, run_id, lease, force)


def _lease(opened, run_id: str, options: LeaseOptions, force: bool) -> Lease | None:
    """The run's lease (None for a store object without leases, e.g. a test double)."""
    return take_lease(opened, run_id, options, force=force) if hasattr(opened, "leases") else None


def _resume_batch(info: RunInfo, config: Mapping[str, Any] | None, lease: Lease | None) -> Batch:
    payload: dict[str, Any] = {"previous_status": info.status, "last_step": info.last_step}
    if config is not None:
        payload["config"] = dict(config)
    events = [EventRecord(step=info.last_step or 0, kind="run_resumed", payload=payload,
                          wall_time=time.time())]
    takeover = lease.takeover_event(info.last_step or 0) if lease is not None else None
    return Batch(events=tuple(events + ([takeover] if takeover is not None else [])))
