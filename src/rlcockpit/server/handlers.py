"""The exception handlers: one canonical error shape for every failure (api.md):
``{"error": {code, message, details}}``. The server's own error types are in errors.py.

RlcockpitError maps through its ``code`` / ``http_status``; HTTP errors (unknown route, wrong
method) keep their status; validation errors become 422 ``invalid_parameter`` naming the
parameter; anything unexpected is logged and answered 500 ``internal_error`` without a traceback.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from rlcockpit.errors import RlcockpitError
from rlcockpit.server.responses import SafeJSONResponse, error_body

log = logging.getLogger("rlcockpit.server")

_HTTP_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 406: "not_acceptable", 413: "too_large",
               429: "too_many_requests", 503: "unavailable"}


def install(app: FastAPI) -> None:
    app.add_exception_handler(RlcockpitError, _rlcockpit_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Exception, _unexpected_error)


def _respond(status: int, code: str, message: str, details: dict | None = None,
             headers: dict | None = None) -> SafeJSONResponse:
    return SafeJSONResponse(error_body(code, message, details), status_code=status,
                            headers=headers)


async def _rlcockpit_error(request: Request, exc: RlcockpitError) -> SafeJSONResponse:
    if exc.http_status >= 500:
        log.warning("%s %s -> %s: %s", request.method, request.url.path, exc.code, exc.message)
    return _respond(exc.http_status, exc.code, exc.message, exc.details,
                    headers=getattr(exc, "headers", None))  # e.g. Retry-After of a 429


async def _http_error(request: Request, exc: StarletteHTTPException) -> SafeJSONResponse:
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    if exc.status_code == 404 and exc.detail in (None, "Not Found"):
        message = (f"no such route {request.url.path}; the API lives under /api (see "
                   "/openapi.json or docs/server.md)")
    else:
        message = str(exc.detail)
    return _respond(exc.status_code, code, message, {"path": request.url.path},
                    headers=getattr(exc, "headers", None))


async def _validation_error(request: Request, exc: RequestValidationError) -> SafeJSONResponse:
    errors = [{"parameter": str(e.get("loc", ["?"])[-1]), "location": str(e.get("loc", [""])[0]),
               "message": e.get("msg", ""), "value": _shown(e.get("input"))}
              for e in exc.errors()]
    first = errors[0] if errors else {"parameter": "?", "location": "query",
                                      "message": "invalid", "value": None}
    where = {"body": "body field", "path": "path parameter", "header": "header"}.get(
        first["location"], "query parameter")
    message = f"{where} {first['parameter']}={first['value']!r} is invalid: {first['message']}"
    return _respond(422, "invalid_parameter", message,
                    {"parameter": first["parameter"], "errors": errors})


async def _unexpected_error(request: Request, exc: Exception) -> SafeJSONResponse:
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    return _respond(500, "internal_error",
                    f"the server failed on {request.url.path} ({type(exc).__name__}); the details "
                    "are in the server log", {"path": request.url.path})


def _shown(value: object) -> object:
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)
