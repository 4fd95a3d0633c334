"""Who may ask: the bearer-token check (one for the daemon's routes and the fleet's, :class:`Tokens`), and
the Host and Origin checks of every request.

``Authorization: Bearer <token>``: the scheme in any case (RFC 7235), the token compared in constant time
with every token configured. Each token has a scope, and scopes are ordered: on a daemon ``read`` <
``submit`` < ``admin``, on the fleet ``view`` < ``manage`` < ``deploy`` (the config's ``token`` has the top
one). A route needs a scope; a token of that scope or a higher one passes. A wrong or missing token is 401
with ``WWW-Authenticate: Bearer`` and a detail that says what to send; a known token of a lower scope is
403, naming both scopes.
A Host that is not this server's (421) or a mutating request from another origin's page (403) is refused
before any route runs (:class:`HostAndOrigin`).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import socket
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from fastapi import HTTPException

__all__ = [
    "DAEMON_SCOPES",
    "FLEET_SCOPES",
    "MUTATING",
    "HostAndOrigin",
    "Tokens",
    "bound_name",
    "host_allowed",
    "machine_names",
    "unauthorized",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]


DAEMON_SCOPES = ("read", "submit", "admin")
"""A daemon's token scopes, lowest first: read its log; submit and cancel jobs; everything (circuits too)."""
FLEET_SCOPES = ("view", "manage", "deploy")
"""The fleet's token scopes, lowest first: read its daemons' logs; add, remove, stop, restart daemons,
register circuits and submit jobs through it; deploy code onto hosts."""


@dataclass(frozen=True)
class Tokens:
    """The bearer tokens a server takes, each with its scope (one of ``scopes``, lowest first)."""

    scopes: tuple[str, ...]
    granted: tuple[tuple[str, str], ...] = ()  # (token, its scope)
    whose: str = ""  # names the tokens in answers ("the fleet's")

    @classmethod
    def of(
        cls, scopes: tuple[str, ...], top: str, by_scope: Mapping[str, Iterable[str]], whose: str = ""
    ) -> Tokens:
        """``top`` (the config's ``token``; empty: none) with the highest scope, and ``by_scope``'s lists."""
        granted = [(token, scope) for scope in scopes for token in by_scope.get(scope, ()) if token]
        if top:
            granted.append((top, scopes[-1]))
        return cls(scopes, tuple(granted), whose)

    @property
    def enabled(self) -> bool:
        """Whether any token is configured (none: the routes that would need one are open)."""
        return bool(self.granted)

    def has(self, scope: str) -> bool:
        """Whether a token of exactly ``scope`` is configured."""
        return any(s == scope for _, s in self.granted)

    def check(self, authorization: str | None, need: str) -> None:
        """Raise 401 unless ``authorization`` (the header's value, None when absent) carries a token of
        this server, 403 unless its scope is ``need`` or higher."""
        named = f" ({self.whose} token)" if self.whose else ""
        if authorization is None:
            raise unauthorized(
                f"this route needs a bearer token (scope {need} or higher): send 'Authorization: Bearer "
                f"<token>'{named}"
            )
        scheme, _, given = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise unauthorized(f"malformed Authorization header: expected 'Bearer <token>'{named}")
        offered = given.strip().encode()
        found = None
        for token, scope in self.granted:  # every one compared, so the time says nothing of which matched
            if hmac.compare_digest(offered, token.encode()) and found is None:
                found = scope
        if found is None:
            raise unauthorized(f"wrong bearer token{named}")
        if self.scopes.index(found) < self.scopes.index(need):
            raise HTTPException(
                403, f"this token's scope is {found}: this route needs {need} or higher{named}"
            )


def unauthorized(detail: str) -> HTTPException:
    """A 401 answer asking for a bearer token."""
    return HTTPException(401, detail, headers={"WWW-Authenticate": "Bearer"})


MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def machine_names() -> frozenset[str]:
    """This machine's own names (its hostname and fully qualified name), lower case."""
    names = {socket.gethostname(), socket.getfqdn()}
    return frozenset(n.lower() for n in names if n)


def bound_name(host: str) -> frozenset[str]:
    """The name a server was told to listen on, when it is a name (``--host prover1.lan``), not an address."""
    return (
        frozenset({host.lower()})
        if host and not host.replace(".", "").replace(":", "").isdigit()
        else frozenset()
    )


def host_allowed(host: str, allowed: frozenset[str]) -> bool:
    """Whether a Host header names this daemon: an IP address (a browser sends one only when the page asked
    for it, never after a DNS rebinding), ``localhost``, or one of ``allowed`` (lower case)."""
    name = host.strip().lower()
    if name.startswith("["):  # [v6]:port
        name = name[1 : name.find("]")] if "]" in name else name
    elif name.count(":") == 1:
        name = name.split(":", 1)[0]
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    return name == "localhost" or name.endswith(".localhost") or name in allowed


class HostAndOrigin:
    """ASGI middleware: refuse a request whose Host is not a name of this server (421), and a mutating
    request sent from a page of another origin (403): a browser on a hostile page can reach a loopback
    daemon, but it always says which page sent the request, and a rebound name is never one of ours."""

    def __init__(self, app: Asgi, allowed_hosts: frozenset[str]) -> None:
        self.app = app
        self.allowed = frozenset(h.lower() for h in allowed_hosts) | machine_names()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {k.lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
            host = headers.get(b"host", "")
            if host and not host_allowed(host, self.allowed):
                detail = (f"Host {host!r} is not a name of this server: use its address, or add the name "
                          "to allowed_hosts in its config")  # fmt: skip
                await _refuse(send, 421, detail)
                return
            origin = headers.get(b"origin")
            if scope.get("method") in MUTATING and origin is not None and not _same_origin(origin, host):
                detail = (f"a request from the page at {origin!r} is refused: only this server's own "
                          "pages and clients that are not browsers may change it")  # fmt: skip
                await _refuse(send, 403, detail)
                return
        await self.app(scope, receive, send)


def _same_origin(origin: str, host: str) -> bool:
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and bool(host) and parts.netloc.lower() == host.lower()


async def _refuse(send: Send, status: int, detail: str) -> None:
    body = (json.dumps({"detail": detail}) + "\n").encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
