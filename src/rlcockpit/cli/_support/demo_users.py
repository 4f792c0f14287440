"""The demo's two people: ``demo-operator`` requests a change, ``demo-approver`` approves it
(docs/control.md: nobody approves their own ticket, so the story needs two users).

Each gets a one-time sign-in link (docs/control.md "Sign-in links and sessions"): the code in it
is good once, for ``SIGNIN_TTL_S``; the page exchanges it for an expiring session. The users' API
tokens are never shown, and a second ``rlcockpit demo`` on the same store revokes the demo's own
users (named ``demo-*`` and created by the demo) and adds fresh ones under the next free name
(``demo-operator-2``, ...). A store that has any other active user is left alone: the demo
creates nobody there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEMO_USERS = (("demo-operator", "operator"), ("demo-approver", "approver"))
CREATED_BY = "demo"
SIGNIN_TTL_S = 1800.0  # the demo prints its links at start; the approver's is opened minutes later


@dataclass(frozen=True)
class DemoUser:
    name: str
    role: str
    code: str  # the one-time sign-in code of the printed link


@dataclass(frozen=True)
class DemoUsers:
    """What :func:`ensure_demo_users` did: ``created`` (with sign-in codes), the demo users it
    ``replaced`` (revoked), or the ``others`` it found and therefore left alone."""

    created: tuple[DemoUser, ...] = ()
    replaced: tuple[str, ...] = ()
    others: tuple[str, ...] = ()

    def named(self, role: str) -> str | None:
        return next((u.name for u in self.created if u.role == role), None)


def _is_demo(user: Any) -> bool:
    return user.name.startswith("demo-") and user.created_by == CREATED_BY


def ensure_demo_users(control_store: Any) -> DemoUsers:
    """Create the demo users on a store without other users (see the module doc)."""
    from rlcockpit.control import Users

    users = Users(control_store)
    everyone = users.list()
    active = [u for u in everyone if u.revoked_at is None]
    others = tuple(u.name for u in active if not _is_demo(u))
    if others:
        return DemoUsers(others=others)
    replaced = tuple(u.name for u in active)
    for name in replaced:
        users.revoke(name, by=CREATED_BY)
    taken = {u.name for u in everyone}
    created = []
    for base, role in DEMO_USERS:
        name = free_name(base, taken)
        users.add(name, role, by=CREATED_BY)
        code, _ = users.issue_signin(name, by=CREATED_BY, ttl_s=SIGNIN_TTL_S)
        created.append(DemoUser(name, role, code))
    return DemoUsers(created=tuple(created), replaced=replaced)


def free_name(base: str, taken: set[str]) -> str:
    """``base``, or ``base-2``, ``base-3``, ... (user names are unique, revoked ones included)."""
    if base not in taken:
        return base
    n = 2
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"


def signin_link(url: str, code: str) -> str:
    """The cockpit URL that signs a browser in with a one-time code. The code sits in the fragment
    (after ``#``), which a browser never sends to a server: it stays out of request lines, logs
    and Referer headers; the page exchanges it (POST /api/session) for a session, so the history
    entry the browser keeps holds a code that no longer works."""
    return f"{url.rstrip('/')}/#/signin?code={code}"


def describe(result: DemoUsers, url: str, store: str) -> list[str]:
    """The lines printed after the cockpit URL."""
    add = f"rlcockpit users add NAME --role operator --store {store}"
    if result.others:
        return [f"This store already has users ({', '.join(result.others)}): the demo creates none. "
                f"Sign in with your token, or add a user: {add}"]
    lines = []
    if result.replaced:
        lines.append(f"Demo users existed already ({', '.join(result.replaced)}); they were revoked and "
                     "replaced (their old links and sessions no longer work).")
    lines.append(f"Sign in (each link works once, within {SIGNIN_TTL_S / 60:.0f} minutes; the page trades it for a "
                 "12-hour session):")
    lines += [f"  {u.name} ({u.role}): {signin_link(url, u.code)}" for u in result.created]
    lines.append("  Open the approver link in a private window to approve as a second person.")
    lines.append(f"  A new link later: rlcockpit users signin NAME --url {url} --store {store}")
    lines.append(f"  More users: {add}")
    return lines
