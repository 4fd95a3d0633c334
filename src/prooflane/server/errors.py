"""The HTTP answers to errors, in one place: each engine refusal's status code, request validation, and
routing's own 404 and 405 made to say which request they refuse.

Every 4xx answer is ``{"detail": ...}`` with a detail a person can act on (:class:`ErrorBody`).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route

from ..errors import Conflict, Forbidden, Invalid, NotFound, Refused, StorageFull, TooLarge, Unavailable
from ..store import JournalUnreadable

__all__ = ["REFUSAL_STATUS", "ErrorBody", "install_error_handlers", "status_of"]

REFUSAL_STATUS: dict[type[Refused], int] = {
    NotFound: 404,
    Conflict: 409,
    Invalid: 422,
    Forbidden: 403,
    TooLarge: 413,
    Unavailable: 503,
    StorageFull: 507,
}
"""The one mapping of the engine's refusals to HTTP status codes."""


class ErrorBody(BaseModel):
    """Every 4xx answer: what was wrong, in words a person can act on."""

    detail: str = Field(description="What was refused and why, naming the field or file at fault.")
    errors: list[str] | None = Field(default=None, description="For 422: each invalid field and its problem.")


def status_of(refusal: Refused) -> int:
    """The HTTP status of an engine refusal (the most specific class mapped; 422 for the bare base)."""
    for cls in type(refusal).__mro__:
        if cls in REFUSAL_STATUS:
            return REFUSAL_STATUS[cls]
    return 422


def install_error_handlers(app: FastAPI) -> None:
    """Answer refusals, invalid requests and routing errors with a ``detail`` that says what to do."""
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Refused, _refused)
    app.add_exception_handler(JournalUnreadable, _journal_unreadable)
    app.add_exception_handler(StarletteHTTPException, _http_error)


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    problems = [_describe(error) for error in exc.errors()]
    detail = "invalid request: " + "; ".join(problems)
    return JSONResponse({"detail": detail, "errors": problems}, status_code=422)


def _describe(error: Any) -> str:
    where = ".".join(str(part) for part in error.get("loc", ()) if part != "body") or "body"
    return f"{where}: {error.get('msg', 'invalid')}"


async def _refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Refused)
    headers = {"Retry-After": "1"} if isinstance(exc, Unavailable) else None  # "try again": soon
    return JSONResponse({"detail": exc.detail}, status_code=status_of(exc), headers=headers)


async def _journal_unreadable(request: Request, exc: Exception) -> Response:
    """The daemon's own fault, not the request's: 500, saying what is damaged (health says it too)."""
    return JSONResponse({"detail": str(exc)}, status_code=500)


async def _http_error(request: Request, exc: Exception) -> Response:
    """Routing's bare "Not Found" / "Method Not Allowed" say which request; other details pass through."""
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail
    where = f"{request.method} {request.url.path}"
    if exc.status_code == 404 and detail == "Not Found":
        detail = f"no route or file for {where}: the API is under /v1 (see /openapi.json)"
    headers = exc.headers
    if exc.status_code == 405:
        allowed = _allowed_methods(request)
        if allowed:  # a route of the API, not a dashboard file: say what it takes
            headers = {**(headers or {}), "Allow": ", ".join(allowed)}
        if detail == "Method Not Allowed":
            detail = f"{request.method} is not allowed on {request.url.path} (see /openapi.json)"
    return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=headers)


def _allowed_methods(request: Request) -> list[str]:
    """The methods the API's routes take on this request's path (empty when no API route has the path)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        if isinstance(route, Route) and route.methods and route.path_regex.match(request.url.path):
            methods |= route.methods
    if "GET" in methods:
        methods.add("HEAD")  # answered wherever GET is (server.guard.HeadAsGet)
    return sorted(methods)
