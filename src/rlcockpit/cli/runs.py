"""``rlcockpit runs``: list the runs in a store (id, name, project, status, steps, started)."""

from __future__ import annotations

import argparse
import json
import time

EPILOG = """examples:
  rlcockpit runs --store sqlite:///rlcockpit.db
  rlcockpit runs --store runs.db --json

A run shown as "crashed" was still marked running but its heartbeat stopped (its process died
without closing the run). "writer" is the process holding the run's lease (kind, pid@host) and how
long it has held it; "stale" when it stopped renewing it (the next writer takes the run over)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "runs", help="list the runs in a store",
        description="List the runs in a store, newest first: id, name, project, status, number "
                    "of steps, start time.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", default="sqlite:///rlcockpit.db",
                   help="store URI (default: sqlite:///rlcockpit.db); a bare path works too")
    p.add_argument("--json", action="store_true",
                   help="print one JSON array instead of a table")
    p.set_defaults(func=cmd_runs)


def run_rows(store_uri: str) -> list[dict]:
    """One dict per run, newest first (what the table and --json show)."""
    from rlcockpit.store import open_store

    reader = open_store(store_uri, read_only=True).reader()  # listing never writes
    try:
        rows = []
        now = time.time()
        for run in reader.list_runs():
            summary = reader.summary(run.run_id)
            lease = reader.get_lease(run.run_id)
            rows.append({"run_id": run.run_id, "name": run.name, "project": run.project,
                         "status": run.status, "steps": summary.steps,
                         "missing_steps": summary.missing_steps,
                         "last_step": run.last_step, "started_at": run.started_at,
                         "ended_at": run.ended_at, "dropped_total": summary.dropped_total,
                         "lease": lease.public(now) if lease is not None else None})
        return rows
    finally:
        reader.close()


def writer_cell(lease: dict | None) -> str:
    """``trainer 1234@host, 2m03s`` (the lease's holder and age), ``-`` when nobody holds it."""
    if lease is None:
        return "-"
    age = int(lease["age_s"])
    shown = f"{age // 3600}h{age % 3600 // 60:02d}m" if age >= 3600 else f"{age // 60}m{age % 60:02d}s"
    stale = "" if lease["live"] else f", stale {int(lease['renewed_ago_s'])}s"
    return f"{lease['kind']} {lease['pid']}@{lease['host']}, {shown}{stale}"


def cmd_runs(args: argparse.Namespace) -> int:
    rows = run_rows(args.store)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"runs in {args.store}")
    for column in ("id", "name", "project", "status", "steps", "started", "writer"):
        table.add_column(column, justify="right" if column == "steps" else "left",
                         no_wrap=column in ("id", "started"))
    for r in rows:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["started_at"]))
        status = r["status"] + (f" (degraded: {r['missing_steps']} steps missing)" if r["missing_steps"] else "")
        table.add_row(r["run_id"], r["name"], r["project"], status, str(r["steps"]),
                      started, writer_cell(r["lease"]))
    console = Console()
    if rows:
        console.print(table)
    else:
        console.print(f"no runs in {args.store}")
    return 0
