"""JSON responses with non-finite floats as ``null`` (api.md) and the canonical error body.

Routes build plain, already JSON-safe payloads (records via ``records.to_dict``, number lists via
:func:`finite`) and return :func:`json_response`, which skips FastAPI's per-item encoder: a
dashboard call carries tens of thousands of numbers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

from fastapi.responses import JSONResponse
from pydantic import BaseModel

from rlcockpit.records import bounded, json_safe


class SafeJSONResponse(JSONResponse):
    """``json.dumps`` without NaN/Infinity literals; anything non-finite left becomes null."""

    def render(self, content: Any) -> bytes:
        try:
            text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        except ValueError:  # a non-finite float slipped through: clean the whole payload
            text = json.dumps(json_safe(content), ensure_ascii=False, allow_nan=False,
                              separators=(",", ":"))
        return text.encode("utf-8")


def json_response(content: Any, status_code: int = 200) -> SafeJSONResponse:
    return SafeJSONResponse(content, status_code=status_code)


def finite(values: Iterable[float | None]) -> list[float | None]:
    """A number list with NaN and ±inf as None (fast path for series)."""
    isfinite = math.isfinite
    return [v if v is not None and isfinite(v) else None for v in values]


class ErrorInfo(BaseModel):
    code: str
    message: str
    details: dict[str, Any]


class ErrorBody(BaseModel):
    """The one error shape of every route (documented in the OpenAPI schema per status)."""

    error: ErrorInfo


WHY = {400: "the Host header is not an allowed name (host_not_allowed)",
       401: "no valid token (once the store has users) or a change without users",
       403: "the caller's role is too low for this", 404: "no such run, sample, ticket or item",
       409: "the ticket or run is not in a state that allows this",
       413: "the request body is larger than max_body_bytes",
       422: "a parameter or body field is invalid (the canonical error names it)",
       429: "this client address failed too many token checks (too_many_attempts; see Retry-After)",
       503: "unavailable (the failure library is missing, or max_streams streams are open)",
       504: "the request's store reads ran past query_timeout_s"}
READ_ERRORS = (400, 401, 403, 404, 413, 422, 429, 504)
CONTROL_ERRORS = (400, 401, 403, 404, 409, 413, 422, 429)


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` of a router: each status with the canonical error body."""
    return {s: {"model": ErrorBody, "description": WHY[s]} for s in statuses}


def error_body(code: str, message: str, details: dict | None = None) -> dict:
    """The canonical error; what the client sent is echoed only cut to size (records.bounded)."""
    return {"error": {"code": code, "message": bounded(message), "details": bounded(details or {})}}
