"""Roles are ordered: each may do everything the ones before it may (DESIGN.md §7)."""

from __future__ import annotations

from rlcockpit.errors import ConfigError
from rlcockpit.records import ROLES


def rank(role: str) -> int:
    return ROLES.index(role)


def at_least(role: str, needed: str) -> bool:
    return role in ROLES and rank(role) >= rank(needed)


def check_role(role: str) -> str:
    if role not in ROLES:
        raise ConfigError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}",
                          details={"role": role, "allowed": list(ROLES)})
    return role
