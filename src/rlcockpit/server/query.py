"""Query-parameter helpers shared by the routes: comma lists, name wildcards, range checks.

(Live parameters, the knobs a ticket changes, are :mod:`rlcockpit.control.params`.)"""

from __future__ import annotations

from fnmatch import fnmatchcase

from rlcockpit.records import INT64
from rlcockpit.server.errors import ParameterError

# Every integer of a path or query is a 64-bit SQLite integer: bigger ones are 422, not 500.
I64_MIN, I64_MAX = INT64


def csv_of(choices: tuple[str, ...]) -> str:
    """A pattern for a comma-separated list of ``choices`` as :func:`csv` reads it (spaces and
    empty items allowed), so the schema says which values are valid."""
    one = " *(" + "|".join(choices) + ")? *"
    return f"^{one}(,{one})*$"


def csv(value: str | None) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``; ``None`` -> ``[]``."""
    if value is None:
        return []
    return [part.strip() for part in value.split(",") if part.strip()]


def choices(name: str, value: str | None, allowed: tuple[str, ...], what: str) -> list[str]:
    """The comma list ``value`` of ``allowed`` words (a route's ``Query(pattern=csv_of(allowed))``
    refuses others first; this keeps the rule where the value is used); an unknown word is 422
    ``invalid_parameter`` naming the parameter, like every other bad query parameter."""
    items = csv(value)
    bad = [item for item in items if item not in allowed]
    if bad:
        raise ParameterError(name, value, f"unknown {what} {bad[0]!r}; choose from {', '.join(allowed)}")
    return items


def expand_names(patterns: list[str], available: list[str], *, limit: int) -> list[str]:
    """Requested names in order, each ``*`` pattern (e.g. ``reward/category/*``) replaced by the
    run's matching names (sorted). A plain name is kept even when the run lacks it (its series
    is then empty), so the client gets an answer for every name it asked for."""
    out: dict[str, None] = {}
    for pattern in patterns:
        if "*" in pattern:
            out.update(dict.fromkeys(n for n in available if fnmatchcase(n, pattern)))
        else:
            out[pattern] = None
    names = list(out)
    if len(names) > limit:
        raise ParameterError("names", ",".join(patterns)[:200],
                             f"expands to {len(names)} metric names; at most {limit} per request")
    return names


def check_range(lo_name: str, lo: float | None, hi_name: str, hi: float | None) -> None:
    if lo is not None and hi is not None and lo > hi:
        raise ParameterError(lo_name, lo, f"must not exceed {hi_name}={hi!r}")


def check_cap(name: str, value: int | None, cap: int) -> None:
    if value is not None and value > cap:
        raise ParameterError(name, value, f"must be at most {cap} (the server's limit)")
