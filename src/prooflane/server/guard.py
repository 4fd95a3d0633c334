"""The middleware every prooflane HTTP application runs behind, the daemon's and the fleet's alike.

:func:`guard` puts them on an application in one order, outermost first:

- :class:`~.auth.HostAndOrigin`: a Host that is not a name of this server (421: DNS rebinding) and a
  mutating request from another origin's page (403), refused before any body is read;
- :class:`HeadAsGet`: ``HEAD`` answered wherever ``GET`` is (RFC 9110, 9.3.2), with the status and headers
  the ``GET`` would get and no body;
- :class:`BodyLimit`: request bodies over ``max_bytes`` are 413, whether sized or chunked; an upload
  (``streamed``) passes unread (marked :data:`~.limits.STREAMED`), to a route that streams it under its own
  limit, once its server has counted it (:data:`~.limits.UPLOAD_ADMISSION`: 503 when the connections left
  are kept for short requests).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import FastAPI

from .auth import HostAndOrigin
from .limits import STREAMED, UPLOAD_ADMISSION

__all__ = ["BodyLimit", "HeadAsGet", "guard"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]


def guard(
    app: FastAPI,
    *,
    allowed_hosts: frozenset[str],
    max_body_bytes: int,
    streamed: Callable[[Scope], bool] | None = None,
) -> None:
    """Put the middleware of this module's docstring on ``app`` (the last added runs first)."""
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes, streamed=streamed)
    app.add_middleware(HeadAsGet)
    app.add_middleware(HostAndOrigin, allowed_hosts=allowed_hosts)  # outermost: before any body


class HeadAsGet:
    """ASGI middleware: a ``HEAD`` request goes to the application as a ``GET``; its answer's status and
    headers (``Content-Length`` included) go out, and the response ends there. What the application still
    sends is dropped; a stream then sees its client gone (the response is complete) and ends."""

    def __init__(self, app: Asgi) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "HEAD":
            await self.app(scope, receive, send)
            return
        answered = False

        async def head_only(message: Message) -> None:
            nonlocal answered
            if answered or message["type"] != "http.response.start":
                return
            answered = True
            await send(message)
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        await self.app({**scope, "method": "GET"}, receive, head_only)


class BodyLimit:
    """Refuse request bodies larger than `max_bytes` with 413, whether sized or chunked; a request that
    ``streamed`` says is an upload goes to its route unread (marked :data:`STREAMED`) once its server admits
    it (:data:`UPLOAD_ADMISSION`; 503 saying why when it does not)."""

    def __init__(self, app: Asgi, max_bytes: int, streamed: Callable[[Scope], bool] | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.streamed = streamed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.streamed is not None and self.streamed(scope):
            admit = scope.get(UPLOAD_ADMISSION)
            refusal = admit() if admit is not None else None
            if refusal is not None:
                await _answer(send, 503, refusal)
                return
            scope[STREAMED] = True
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", ())).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        # Bodies are small (JSON requests), so read the whole one first and replay it to the app.
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away before sending its body
            body += message.get("body", b"")
            if len(body) > self.max_bytes:
                await self._refuse(send)
                return
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(bytes(body), receive), send)

    async def _refuse(self, send: Send) -> None:
        await _answer(send, 413, f"request body too large: at most {self.max_bytes} bytes are accepted")


async def _answer(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 503:
        headers.append((b"retry-after", b"1"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()  # later calls wait for the disconnect, as usual
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
