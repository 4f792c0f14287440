"""``rlcockpit ticket request | approve | reject | cancel | list | show`` over the server's HTTP API.

The token comes from ``--token`` or the ``RLCOCKPIT_TOKEN`` environment variable; errors print the
server's message and exit 2 (docs/control.md).
"""

from __future__ import annotations

import argparse
from typing import Any

from rlcockpit.cli._support.remote import add_connection, call, show, ticket_line


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("ticket", help="request, approve, reject, list tickets (over HTTP)",
                              description="Tickets for live changes of a running training, through the cockpit "
                                          "server. See docs/control.md.")
    sub = p.add_subparsers(dest="ticket_command", metavar="ACTION", required=True)
    rq = sub.add_parser("request", help="request a live-parameter change (operator)")
    rq.add_argument("--run", required=True, help="run id")
    rq.add_argument("--param", required=True, help="live parameter, e.g. kl.coef or clip_eps")
    rq.add_argument("--value", required=True, type=float, help="new value")
    rq.add_argument("--reason", required=True, help="why (required)")
    rq.set_defaults(func=_request)
    for action, helptext in (("approve", "approve a ticket (approver, not the requester)"),
                             ("reject", "reject a ticket with a comment (approver)"),
                             ("cancel", "cancel your pending ticket")):
        d = sub.add_parser(action, help=helptext)
        d.add_argument("ticket_id", type=int, help="ticket number")
        d.add_argument("--comment", default="", help="comment (required to reject)")
        d.set_defaults(func=_decide, action=action)
    ls = sub.add_parser("list", help="a run's tickets")
    ls.add_argument("--run", required=True, help="run id")
    ls.add_argument("--status", default="", help="comma-separated statuses, e.g. requested,approved")
    ls.set_defaults(func=_list)
    sh = sub.add_parser("show", help="one ticket with its effect measurement")
    sh.add_argument("ticket_id", type=int, help="ticket number")
    sh.set_defaults(func=_show)
    for q in (rq, *[sub.choices[a] for a in ("approve", "reject", "cancel")], ls, sh):
        add_connection(q)


def _request(args: argparse.Namespace) -> int:
    data = call(args, "POST", f"/api/runs/{args.run}/tickets",
                {"param": args.param, "value": args.value, "reason": args.reason})
    return show(args, data, "requested " + ticket_line(data["ticket"]))


def _decide(args: argparse.Namespace) -> int:
    data = call(args, "POST", f"/api/tickets/{args.ticket_id}/{args.action}", {"comment": args.comment})
    return show(args, data, ticket_line(data["ticket"]))


def _list(args: argparse.Namespace) -> int:
    data = call(args, "GET", f"/api/runs/{args.run}/tickets", params={"status": args.status} if args.status else None)
    lines = [ticket_line(t) for t in data["items"]] or ["no tickets"]
    return show(args, data, "\n".join(lines))


def _show(args: argparse.Namespace) -> int:
    data = call(args, "GET", f"/api/tickets/{args.ticket_id}")
    t = data["ticket"]
    effect = t.get("effect") or {}
    lines = [ticket_line(t), f"  decided by {t.get('decided_by')}: {t.get('comment') or ''}",
             f"  checkpoint: {t.get('checkpoint')}"]
    if "ks_pvalue" in effect:
        lines.append(f"  effect after {effect['effect_steps']} steps: KS p = {effect['ks_pvalue']}, reward mean "
                     f"{effect.get('reward_mean_delta')}, variance change {effect.get('reward_var_change')}")
    return show(args, data, "\n".join(lines))
