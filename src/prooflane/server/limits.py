"""Limits on what a client may send and how long it may take, and the HTTP server those run in.

- :class:`Server`: uvicorn's server without its own signal handling (the daemon and the fleet own SIGINT and
  SIGTERM).
- :func:`connection_class`: uvicorn's HTTP/1.1 protocol with a deadline for receiving each request (408)
  and clear answers to a request line over ``MAX_HEADER_BYTES`` (414), a header block over it (431) or a
  malformed one (400); after such an answer what the client still sends is read and dropped for
  ``LINGER_SECS`` before closing, so the client sees the answer rather than a reset. At most
  ``max_connections`` connections at once: at the cap a new connection closes the one idle the longest
  (connected, nothing asked), and when none is idle it is answered 503 and closed at once (its file
  descriptor freed), so idle connections can never use up the daemon's descriptors nor lock clients out. A
  client that does not read its answer for ``request_timeout`` seconds (the write buffer stays full) is
  disconnected.
- :func:`raise_fd_limit`: the open-files soft limit raised to the hard limit, at start; and
  :func:`quiet_accept_errors`: asyncio's "accept() out of system resource" logged once a minute, not for
  every attempt.
- :class:`BodyLimit`: request bodies over ``max_bytes`` are 413, whether sized or chunked; an upload
  (``streamed``) passes unread, to a route that streams it under its own limit. While an upload's body
  streams, the connection's deadline counts from the last bytes received, not from the request's start.
- :func:`bind`: the listening socket, with a clear error when the port is taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import resource
import socket
import time
from collections.abc import Awaitable, Callable, Generator, MutableMapping
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..errors import ConfigError

__all__ = [
    "FD_RESERVE",
    "LINGER_SECS",
    "MAX_HEADER_BYTES",
    "STREAMED",
    "BodyLimit",
    "Server",
    "bind",
    "connection_cap",
    "connection_class",
    "quiet_accept_errors",
    "raise_fd_limit",
]

MAX_HEADER_BYTES = 64 * 1024
"""The longest request line plus headers accepted (h11's limit on an incomplete event)."""
LINGER_SECS = 2.0
"""How long a refused connection keeps reading (and dropping) what its client still sends before closing."""

STREAMED = "prooflane.streamed"
"""The scope key :class:`BodyLimit` sets on an upload: its connection then waits on progress, not in total."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]


class Server(uvicorn.Server):
    """uvicorn's server without its own signal handling: the daemon owns SIGINT and SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class _Connection(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a deadline for receiving each request, one for the client to take
    its answer, a cap on connections, and a lingering close."""

    request_timeout: float
    """Seconds a client has to send a whole request or to take an answer (see :func:`connection_class`)."""
    max_connections: int
    """The most connections at once (set by :func:`connection_class`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._request_timeout = self.request_timeout
        self._deadline: asyncio.TimerHandle | None = None
        self._write_deadline: asyncio.TimerHandle | None = None
        self._lingering = False
        self._turned_away = False
        self._opened_at = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if len(self.connections) >= self.max_connections and not self._close_oldest_idle():
            self._turn_away(transport)
            return
        super().connection_made(transport)  # type: ignore[arg-type]
        self._opened_at = self.loop.time()
        self._arm()

    def _close_oldest_idle(self) -> bool:
        """At the cap: close the connection idle the longest (no request in flight, nothing of one
        received), making room; False when every connection is busy. Idle connections held open on purpose
        therefore never lock out a real client (a health check, say), only take turns being closed."""
        idle = [
            c for c in self.connections
            if isinstance(c, _Connection) and not c._turned_away and not c.transport.is_closing()
            and c.conn.their_state is h11.IDLE and c.conn.our_state is h11.IDLE
            and not c.conn.trailing_data[0]
        ]  # fmt: skip
        if not idle:
            return False
        oldest = min(idle, key=lambda c: c._opened_at)
        oldest.transport.close()
        self.connections.discard(oldest)  # its place is free now; connection_lost follows
        return True

    def _turn_away(self, transport: asyncio.BaseTransport) -> None:
        """One connection too many: answer 503 in one write and close, before reading anything."""
        self._turned_away = True
        body = json.dumps({"detail": f"too many connections (at most {self.max_connections}): try again"})
        answer = (
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
            f"content-length: {len(body) + 1}\r\nconnection: close\r\n\r\n{body}\n"
        )
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(answer.encode())
        transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._turned_away:
            return
        self._disarm()
        self._disarm_write()
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        """The client is not taking its answer (the write buffer is full): it has ``request_timeout``."""
        super().pause_writing()
        if self._write_deadline is None:
            self._write_deadline = self.loop.call_later(self._request_timeout, self._not_read)

    def resume_writing(self) -> None:
        self._disarm_write()
        super().resume_writing()

    def _disarm_write(self) -> None:
        if self._write_deadline is not None:
            self._write_deadline.cancel()
            self._write_deadline = None

    def _not_read(self) -> None:
        self._write_deadline = None
        self.transport.abort()  # what it holds of its answer is dropped with it

    def data_received(self, data: bytes) -> None:
        if self._lingering or self._turned_away:
            return  # the answer is sent: drop the rest of the refused request
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE and self.conn.their_state is not h11.SEND_BODY:
            self._disarm()  # the request is fully received: the app has it
        elif self.conn.their_state is h11.SEND_BODY and getattr(self, "scope", {}).get(STREAMED):
            self._arm()  # an upload streams: it has request_timeout from its last bytes

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()  # the next request on this connection gets its own deadline

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self._request_timeout, self._request_timed_out)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _request_timed_out(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        their, ours = self.conn.their_state, self.conn.our_state
        if their is h11.IDLE and ours is h11.IDLE and not self.conn.trailing_data[0]:
            self.transport.close()  # an idle kept-alive connection: nothing to answer
            return
        if their in (h11.IDLE, h11.SEND_BODY) and ours in (h11.IDLE, h11.SEND_RESPONSE):
            detail = f"request not received in full within {self._request_timeout:g} s"
            self._refuse(408, "Request Timeout", detail)

    def send_400_response(self, msg: str) -> None:
        received = self.conn.trailing_data[0]
        if len(received) >= MAX_HEADER_BYTES and b"\n" not in received:  # the request line alone is too long
            self._refuse(414, "URI Too Long", f"the request line exceeds {MAX_HEADER_BYTES} bytes")
        elif len(received) >= MAX_HEADER_BYTES:
            self._refuse(431, "Request Header Fields Too Large",
                         f"request line and headers exceed {MAX_HEADER_BYTES} bytes")  # fmt: skip
        else:
            self._refuse(400, "Bad Request", f"not a valid HTTP/1.1 request: {msg}")

    def _refuse(self, status: int, reason: str, detail: str) -> None:
        """Answer in one write, then read and drop what the client still sends before closing."""
        self._disarm()
        body = (json.dumps({"detail": detail}) + "\n").encode()
        head = (
            f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        ).encode()
        self.transport.write(head + body)
        self._lingering = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_SECS, self.transport.close)


def connection_class(request_timeout: float, max_connections: int = 1 << 20) -> type[_Connection]:
    """The protocol class of a server whose clients have ``request_timeout`` seconds to send a request (and
    to take an answer), with at most ``max_connections`` at once."""
    attrs = {"request_timeout": request_timeout, "max_connections": max_connections}
    return type("Connection", (_Connection,), attrs)


FD_RESERVE = 256
"""File descriptors kept for the daemon's own use (journal, pipes and pidfds of workers, keys) beyond its
connections."""


def raise_fd_limit() -> int:
    """Raise this process's soft limit of open files to its hard limit; return the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def connection_cap(max_connections: int) -> int:
    """``max_connections``, lowered where the open-files limit would not hold that many and ``FD_RESERVE``."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return max_connections
    return max(16, min(max_connections, soft - FD_RESERVE))


class _OncePerMinute(logging.Filter):
    """Lets asyncio's "accept() out of system resource" through once a minute, counting the rest."""

    def __init__(self) -> None:
        super().__init__()
        self._last = float("-inf")
        self._dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if "out of system resource" not in record.getMessage():
            return True
        now = time.monotonic()
        if now - self._last < 60.0:
            self._dropped += 1
            return False
        if self._dropped:
            record.msg = f"{record.msg} ({self._dropped} more since the last such line)"
        self._last, self._dropped = now, 0
        record.exc_info = None  # the cause is in the message; the traceback says nothing more
        return True


def quiet_accept_errors() -> None:
    """Install :class:`_OncePerMinute` on asyncio's logger (once)."""
    logger = logging.getLogger("asyncio")
    if not any(isinstance(f, _OncePerMinute) for f in logger.filters):
        logger.addFilter(_OncePerMinute())


def bind(host: str, port: int) -> socket.socket:
    """Listen on host:port (port 0 picks a free one); a clear error when that is not possible.

    The socket is made with ``IPPROTO_TCP`` spelled out: asyncio sets TCP_NODELAY on accepted connections
    only when the listening socket says it is TCP (``proto == 0`` would leave Nagle's algorithm on).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        why = "the port is in use" if exc.errno == errno.EADDRINUSE else exc.strerror
        raise ConfigError(f"cannot listen on {host}:{port}: {why}") from None
    sock.listen(2048)
    sock.setblocking(False)
    return sock


class BodyLimit:
    """Refuse request bodies larger than `max_bytes` with 413, whether sized or chunked; a request that
    ``streamed`` says is an upload goes to its route unread (marked :data:`STREAMED`)."""

    def __init__(self, app: Asgi, max_bytes: int, streamed: Callable[[Scope], bool] | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.streamed = streamed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.streamed is not None and self.streamed(scope):
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
        body = json.dumps(
            {"detail": f"request body too large: at most {self.max_bytes} bytes are accepted"}
        ).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
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
