"""``rlcockpit pause | resume | stop | checkpoint | rollback``: commands to a running training, as
tickets over the server's HTTP API (pause and checkpoint are approved at once by the policy; the
others need an approver, docs/control.md)."""

from __future__ import annotations

import argparse
from typing import Any

from rlcockpit.cli._support.remote import add_connection, call, show, ticket_line

HELP = {
    "pause": "pause a run at its next phase boundary (approved at once)",
    "resume": "resume a paused run (needs an approver)",
    "stop": "stop a run at its next boundary, with a final checkpoint (needs an approver)",
    "checkpoint": "write a checkpoint at the next boundary (approved at once)",
    "rollback": "roll a run back to one of its checkpoints (needs an approver)",
}


def register(subparsers: Any) -> None:
    for name, helptext in HELP.items():
        p = subparsers.add_parser(name, help=helptext, description=helptext + ". Sent as a ticket to the cockpit.")
        p.add_argument("--run", required=True, help="run id")
        p.add_argument("--reason", required=True, help="why (required)")
        if name == "rollback":
            where = p.add_mutually_exclusive_group()
            where.add_argument("--step", type=int, help="the checkpoint step (default: the newest checkpoint)")
            where.add_argument("--checkpoint", help="the checkpoint directory")
        add_connection(p)
        p.set_defaults(func=_command, command=name)


def _command(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"command": args.command, "reason": args.reason}
    if args.command == "rollback":
        body["args"] = {k: v for k, v in (("step", args.step), ("checkpoint", args.checkpoint)) if v is not None}
    data = call(args, "POST", f"/api/runs/{args.run}/commands", body)
    return show(args, data, "requested " + ticket_line(data["ticket"]))
