"""``rlcockpit users add | list | revoke``: people and roles of the control plane (docs/control.md)."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from rlcockpit.records import ROLES


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("users", help="manage the users (roles and bearer tokens) of a store",
                              description="Users of the control plane. Tokens are printed once; only a salted "
                                          "hash is stored. See docs/control.md.")
    sub = p.add_subparsers(dest="users_command", metavar="ACTION", required=True)
    add = sub.add_parser("add", help="create a user and print their token (once)")
    add.add_argument("name", help="user name (letters, digits, _ . @ -)")
    add.add_argument("--role", required=True, choices=ROLES,
                     help="viewer (read), operator (+ request), approver (+ approve others' tickets), admin")
    add.add_argument("--store", required=True, help="store URI, e.g. sqlite:///runs.db")
    add.set_defaults(func=_add)
    ls = sub.add_parser("list", help="list users, their roles and whether they are revoked")
    ls.add_argument("--store", required=True, help="store URI")
    ls.set_defaults(func=_list)
    rv = sub.add_parser("revoke", help="revoke a user's token (the user stays in the audit log)")
    rv.add_argument("name", help="user name")
    rv.add_argument("--store", required=True, help="store URI")
    rv.set_defaults(func=_revoke)


def _users(uri: str) -> Any:
    from rlcockpit.control.users import Users
    from rlcockpit.store import open_store

    return Users(open_store(uri).control())


def _add(args: argparse.Namespace) -> int:
    user, token = _users(args.store).add(args.name, args.role, by="cli")
    print(f"user {user.name} ({user.role}) created. Token (shown once, keep it secret):")
    print(token)
    return 0


def _list(args: argparse.Namespace) -> int:
    users = _users(args.store).list()
    if not users:
        print("no users (reading is open; changes are refused until a user exists)")
        return 0
    print(f"{'name':<20} {'role':<9} {'created':<20} status")
    for u in users:
        status = "revoked " + _when(u.revoked_at) if u.revoked_at else "active"
        print(f"{u.name:<20} {u.role:<9} {_when(u.created_at):<20} {status}")
    return 0


def _revoke(args: argparse.Namespace) -> int:
    user = _users(args.store).revoke(args.name, by="cli")
    print(f"user {user.name} revoked; their token no longer works")
    return 0


def _when(ts: float | None) -> str:
    return dt.datetime.fromtimestamp(ts or 0, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
