"""The bearer-token check, one for the daemon's mutating routes and the fleet's.

``Authorization: Bearer <token>``: the scheme in any case (RFC 7235), the token compared in constant time.
A wrong or missing token is 401 with ``WWW-Authenticate: Bearer`` and a detail that says what to send.
"""

from __future__ import annotations

import hmac

from fastapi import HTTPException

__all__ = ["check_bearer", "unauthorized"]


def check_bearer(authorization: str | None, token: str, *, whose: str = "") -> None:
    """Raise 401 unless ``authorization`` (the header's value, None when absent) carries ``token``;
    ``whose`` names the token in the answer ("the fleet's")."""
    named = f" ({whose} token)" if whose else ""
    if authorization is None:
        raise unauthorized(f"this route needs a bearer token: send 'Authorization: Bearer <token>'{named}")
    scheme, _, given = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        raise unauthorized(f"malformed Authorization header: expected 'Bearer <token>'{named}")
    if not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise unauthorized(f"wrong bearer token{named}")


def unauthorized(detail: str) -> HTTPException:
    """A 401 answer asking for a bearer token."""
    return HTTPException(401, detail, headers={"WWW-Authenticate": "Bearer"})
