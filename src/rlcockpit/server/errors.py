"""The server's own errors. Each is a :class:`~rlcockpit.errors.RlcockpitError`: its ``code`` and
``http_status`` reach the client in the canonical error shape (handlers.py, docs/server.md)."""

from __future__ import annotations

import math

from rlcockpit.errors import RlcockpitError


class ParameterError(RlcockpitError):
    """A query parameter is out of range or inconsistent with another one."""

    code = "invalid_parameter"
    http_status = 422

    def __init__(self, parameter: str, value: object, why: str) -> None:
        super().__init__(f"query parameter {parameter}={value!r}: {why}",
                         details={"parameter": parameter, "value": value})


class TooManyStreams(RlcockpitError):
    """``max_streams`` live streams are open already (workers.StreamSlots)."""

    code = "too_many_streams"
    http_status = 503


class LibraryUnavailable(RlcockpitError):
    """This installation has no failure library (routes/library.py)."""

    code = "library_unavailable"
    http_status = 503


class TooManyAttempts(RlcockpitError):
    """The client address failed too many token checks (control.refusals.AuthThrottle)."""

    code = "too_many_attempts"
    http_status = 429

    def __init__(self, retry_after_s: float) -> None:
        wait = max(1, math.ceil(retry_after_s))
        super().__init__(f"too many failed sign-in attempts from this address; wait {wait} s (Retry-After) "
                         "and check the token: copy it again from `rlcockpit users add` / `rotate`, or ask "
                         "for a new sign-in link", details={"reason": "throttled", "retry_after_s": wait})
        self.headers = {"Retry-After": str(wait)}
