"""``rlcockpit store copy SRC DST [--run RUN]``: move runs between stores, verified.

Any two store URIs work (SQLite, ``clickhouse://``, ``chdb://``). After copying, both stores are
read back and each run's records are compared by count and SHA-256 per kind; a difference exits
with code 2 and names the kind.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from rlcockpit.errors import StoreError

EPILOG = """examples:
  rlcockpit store copy sqlite:///runs.db chdb:///data/rlcockpit-ch
  rlcockpit store copy sqlite:///runs.db 'clickhouse://rl:secret@ch.internal:8123/rlcockpit?control=/shared/control.db' --run RUN
  rlcockpit store copy chdb:///data/rlcockpit-ch sqlite:///laptop.db --run RUN --json

The control plane (users, tickets, the audit chain) is not copied: the chain's hashes vouch for
the store they were written in. A run that already exists in DST is refused.
chDB opens one directory per process: SRC and DST cannot both be chdb:// stores."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("store", help="manage stores (copy runs between SQLite and ClickHouse)",
                              description="Manage stores.")
    sub = p.add_subparsers(dest="store_command", metavar="STORE_COMMAND")
    c = sub.add_parser(
        "copy", help="copy runs from one store to another and verify them",
        description="Copy runs from the store SRC to the store DST (any URIs: sqlite:///, "
                    "clickhouse://, chdb:///), then verify each run by record counts and SHA-256 "
                    "checksums read back from both stores.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("src", metavar="SRC", help="source store URI")
    c.add_argument("dst", metavar="DST", help="destination store URI (created if missing)")
    c.add_argument("--run", action="append", default=None, metavar="RUN",
                   help="run id to copy (repeatable; default: every run of SRC)")
    c.add_argument("--json", action="store_true", help="print the verification as JSON")
    c.set_defaults(func=cmd_copy)
    p.set_defaults(func=lambda _args: p.print_help() or 1)


def cmd_copy(args: argparse.Namespace) -> int:
    from rlcockpit.store import open_store
    from rlcockpit.store.copy import check_run, compare, copy_run, runs_to_copy

    src = open_store(args.src, create=False)
    dst = open_store(args.dst)
    src_reader, dst_reader = src.reader(), dst.reader()
    writer = dst.writer()
    report, failed = [], False
    try:
        for run_id in runs_to_copy(src_reader, dst_reader, args.run):
            started = time.monotonic()
            copy_run(src_reader, writer, run_id,
                     progress=None if args.json else lambda m: print(m, file=sys.stderr))
            want, got = check_run(src_reader, run_id), check_run(dst_reader, run_id)
            diffs = compare(want, got)
            failed |= bool(diffs)
            report.append({"run_id": run_id, "seconds": round(time.monotonic() - started, 3),
                           "counts": got.counts, "sha256": got.digests, "differences": diffs})
    finally:
        writer.close()
        src_reader.close()
        dst_reader.close()
        src.close()
        dst.close()
    _print(report, as_json=args.json)
    if failed:
        raise StoreError("the copy differs from its source (see the differences above); the "
                         "destination keeps what was written", details={"runs": report})
    return 0


def _print(report: list[dict], *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report, indent=2))
        return
    for r in report:
        state = "VERIFIED" if not r["differences"] else "DIFFERS"
        counts = ", ".join(f"{k} {v}" for k, v in r["counts"].items() if v)
        print(f"{r['run_id']}: {state} in {r['seconds']} s ({counts or 'empty'})")
        for d in r["differences"]:
            print(f"  {d}")
