"""The server's own errors. Each is a :class:`~rlcockpit.errors.RlcockpitError`: its ``code`` and
``http_status`` reach the client in the canonical error shape (handlers.py, docs/server.md)."""

from __future__ import annotations

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
