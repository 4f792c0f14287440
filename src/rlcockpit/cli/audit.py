"""``rlcockpit audit verify | export``: check the hash chain of the audit log, or dump it."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("audit", help="verify or export the control plane's audit log",
                              description="The audit log is append-only; each entry holds the hash of the "
                                          "previous one. See docs/control.md.")
    sub = p.add_subparsers(dest="audit_command", metavar="ACTION", required=True)
    v = sub.add_parser("verify", help="report OK or the first broken link (a changed or removed entry)")
    v.add_argument("--store", required=True, help="store URI, e.g. sqlite:///runs.db")
    v.set_defaults(func=_verify)
    e = sub.add_parser("export", help="write every entry (one JSON object per line)")
    e.add_argument("--store", required=True, help="store URI")
    e.add_argument("--format", default="jsonl", choices=("jsonl",), help="output format (default jsonl)")
    e.add_argument("--output", help="file to write (default: standard output)")
    e.set_defaults(func=_export)


def _control(uri: str) -> Any:
    from rlcockpit.store import open_store

    return open_store(uri, read_only=True).control()  # verify and export never write


def _verify(args: argparse.Namespace) -> int:
    from rlcockpit.control.audit import verify

    result = verify(_control(args.store))
    print(result.message())
    return 0 if result.ok else 1


def _export(args: argparse.Namespace) -> int:
    from rlcockpit.control.audit import export_jsonl

    lines = export_jsonl(_control(args.store))
    if not args.output:
        for line in lines:
            sys.stdout.write(line + "\n")
        return 0
    with open(args.output, "w", encoding="utf-8") as out:
        for line in lines:
            out.write(line + "\n")
    return 0
