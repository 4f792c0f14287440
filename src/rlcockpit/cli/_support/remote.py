"""The commands that talk to a running cockpit (``ticket``, ``pause`` / ``resume`` / ``stop`` /
``checkpoint`` / ``rollback``) share this: the ``--server`` / ``--token`` / ``--json`` options, one
HTTP call that turns the server's canonical error into :class:`RemoteError`, and how a ticket
prints.
"""

from __future__ import annotations

import argparse
import json
import os

from rlcockpit.errors import RlcockpitError

DEFAULT_SERVER = "http://127.0.0.1:8765"


class RemoteError(RlcockpitError):
    """The server refused a request (its canonical error, passed on)."""

    code = "remote_error"
    http_status = 502


def add_connection(p: argparse.ArgumentParser) -> None:
    p.add_argument("--server", default=os.environ.get("RLCOCKPIT_SERVER", DEFAULT_SERVER),
                   help=f"cockpit server URL (default $RLCOCKPIT_SERVER or {DEFAULT_SERVER})")
    p.add_argument("--token", default=None, help="bearer token (default $RLCOCKPIT_TOKEN)")
    p.add_argument("--json", action="store_true", help="print the server's JSON answer")


def call(args: argparse.Namespace, method: str, path: str, body: dict | None = None,
         params: dict | None = None) -> dict:
    """One HTTP request to the cockpit; RemoteError with the server's message on 4xx / 5xx."""
    import httpx

    token = args.token or os.environ.get("RLCOCKPIT_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        resp = httpx.request(method, args.server.rstrip("/") + path, json=body, params=params, headers=headers,
                             timeout=30.0)
    except httpx.HTTPError as exc:
        raise RemoteError(f"cannot reach the cockpit at {args.server} ({exc}); is `rlcockpit serve` running?",
                          details={"server": args.server}) from None
    data = resp.json() if resp.headers.get("content-type", "").startswith("application/json") else {}
    if resp.status_code >= 400:
        err = data.get("error", {}) if isinstance(data, dict) else {}
        raise RemoteError(f"{resp.status_code} {err.get('code', 'error')}: {err.get('message', resp.text)}",
                          details=err.get("details", {}))
    return data


def show(args: argparse.Namespace, data: dict, text: str) -> int:
    print(json.dumps(data, indent=1, ensure_ascii=False) if args.json else text)
    return 0


def ticket_line(t: dict) -> str:
    what = f"{t['target']} -> {t['value']}" if t["kind"] == "param" else f"{t['target']} {t['value'] or ''}".strip()
    applied = f" applied at step {t['applied_step']}" if t.get("applied_step") is not None else ""
    return f"#{t['ticket_id']:<5} {t['status']:<10} {what:<32} by {t['requested_by']}{applied}  ({t['reason']})"
