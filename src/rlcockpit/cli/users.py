"""``rlcockpit users add | list | revoke | rotate | signin``: people and roles of the control plane,
their API tokens and one-time sign-in links (docs/control.md)."""

from __future__ import annotations

import argparse
import datetime as dt
import re
from typing import Any

from rlcockpit.records import ROLES

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
EXPIRES_HELP = "life of the API token: a number and s, m, h or d (default 90d); scripts and CI rotate it"


def duration(text: str) -> float:
    """``90d``, ``12h``, ``10m``, ``600s`` or ``600`` (seconds) -> seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text or "")
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration; give e.g. 10m, 12h or 90d")
    return float(match.group(1)) * UNITS[match.group(2) or "s"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("users", help="manage the users (roles and bearer tokens) of a store",
                              description="Users of the control plane. Tokens and sign-in codes are printed "
                                          "once; only salted hashes are stored. See docs/control.md.")
    sub = p.add_subparsers(dest="users_command", metavar="ACTION", required=True)
    add = sub.add_parser("add", help="create a user and print their API token (once)")
    add.add_argument("name", help="user name (letters, digits, _ . @ -)")
    add.add_argument("--role", required=True, choices=ROLES,
                     help="viewer (read), operator (+ request), approver (+ approve others' tickets), admin")
    add.add_argument("--expires-in", type=duration, default=duration("90d"), metavar="DURATION", help=EXPIRES_HELP)
    add.add_argument("--store", required=True, help="store URI, e.g. sqlite:///runs.db")
    add.set_defaults(func=_add)
    ls = sub.add_parser("list", help="list users, their roles, token expiry and whether they are revoked")
    ls.add_argument("--store", required=True, help="store URI")
    ls.set_defaults(func=_list)
    rv = sub.add_parser("revoke", help="revoke a user's token and sessions (the user stays in the audit log)")
    rv.add_argument("name", help="user name")
    rv.add_argument("--store", required=True, help="store URI")
    rv.set_defaults(func=_revoke)
    ro = sub.add_parser("rotate", help="give a user a new API token (printed once); the old one, their "
                                       "sign-in links and sessions stop working")
    ro.add_argument("name", help="user name")
    ro.add_argument("--expires-in", type=duration, default=duration("90d"), metavar="DURATION", help=EXPIRES_HELP)
    ro.add_argument("--store", required=True, help="store URI")
    ro.set_defaults(func=_rotate)
    si = sub.add_parser("signin", help="print a one-time sign-in link for a user (works once, for minutes)")
    si.add_argument("name", help="user name")
    si.add_argument("--url", default="http://127.0.0.1:8765/", help="the cockpit's address (default %(default)s)")
    si.add_argument("--expires-in", type=duration, default=duration("10m"), metavar="DURATION",
                    help="how long the link may wait to be opened (default 10m)")
    si.add_argument("--store", required=True, help="store URI")
    si.set_defaults(func=_signin)


def _users(uri: str) -> Any:
    from rlcockpit.control.users import Users
    from rlcockpit.store import open_store

    return Users(open_store(uri).control())


def _add(args: argparse.Namespace) -> int:
    user, token = _users(args.store).add(args.name, args.role, by="cli", ttl_s=args.expires_in)
    print(f"user {user.name} ({user.role}) created. For a browser, print a one-time sign-in link: "
          f"rlcockpit users signin {user.name} --store {args.store}")
    print(f"API token (shown once, keep it secret; expires {_when(_expiry(user))} UTC):")
    print(token)  # the last line: scripts read it with `tail -n 1`
    return 0


def _list(args: argparse.Namespace) -> int:
    users = _users(args.store).list()
    if not users:
        print("no users (reading is open; changes are refused until a user exists)")
        return 0
    print(f"{'name':<20} {'role':<9} {'created':<20} {'token expires':<20} status")
    for u in users:
        status = "revoked " + _when(u.revoked_at) if u.revoked_at else "active"
        expiry = _expiry(u)
        print(f"{u.name:<20} {u.role:<9} {_when(u.created_at):<20} "
              f"{(_when(expiry) if expiry else 'never (rotate it)'):<20} {status}")
    return 0


def _revoke(args: argparse.Namespace) -> int:
    user = _users(args.store).revoke(args.name, by="cli")
    print(f"user {user.name} revoked; their token, sign-in links and sessions no longer work (open live "
          "streams end within seconds)")
    return 0


def _rotate(args: argparse.Namespace) -> int:
    user, token = _users(args.store).rotate(args.name, by="cli", ttl_s=args.expires_in)
    print(f"user {user.name}: new API token (shown once; expires {_when(_expiry(user))} UTC); the old token, "
          "sign-in links and sessions no longer work:")
    print(token)
    return 0


def _signin(args: argparse.Namespace) -> int:
    from rlcockpit.cli._support.demo_users import signin_link

    code, expires = _users(args.store).issue_signin(args.name, by="cli", ttl_s=args.expires_in)
    print(f"sign-in link for {args.name} (works once, until {_when(expires)} UTC; open it in the browser "
          "that should be signed in):")
    print(signin_link(args.url, code))
    return 0


def _expiry(user: Any) -> float | None:
    from rlcockpit.control.tokens import expires_at

    return expires_at(user.token_hash)


def _when(ts: float | None) -> str:
    return dt.datetime.fromtimestamp(ts or 0, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
