"""Limits on what a client may send, hold and how long it may take, and the HTTP server those run in: one
setup for the daemon and the fleet (:func:`http_server`).

- :class:`Server`: uvicorn's server without its own signal handling (the daemon and the fleet own SIGINT and
  SIGTERM), whose event loop stops accepting for a second at the first ``accept()`` that fails for want of
  descriptors (:func:`back_off_accept_errors`) and logs that once a minute (:func:`quiet_accept_errors`).
- :func:`connection_class`: uvicorn's HTTP/1.1 protocol with a deadline for receiving each request (408)
  and clear answers to a request line over ``MAX_HEADER_BYTES`` (414), a header block over it (431) or a
  malformed one (400); after such an answer what the client still sends is read and dropped for
  ``LINGER_SECS`` before closing, so the client sees the answer rather than a reset. A client that does not
  read its answer for ``request_timeout`` seconds (the write buffer stays full) is disconnected.
- Fair shares of connections (:class:`ConnectionLimits`): at most ``max_connections`` at once, at most
  ``max_per_client`` from one client (an IPv4 address, an IPv6 /64), and at most ``max_streams`` event streams
  and long-polls (never more than half the connections: the other half is kept for short requests such as
  ``/healthz`` and ``/status``). A connection over a cap first makes room, in this order: it closes the
  connection idle the longest (connected, nothing asked); else it answers 408 to the oldest request not yet
  received in full (a request head sent a byte at a time); else it ends the oldest stream of the client
  holding the most streams (cleanly: an event stream's body ends, a long-poll answers as it would at its
  deadline). Only when none of those is left is it answered 503 and closed at once, its file descriptor
  freed. A stream over the stream budget ends another client's stream only when that client holds at least
  two more than the asker; else it is 503. So a client holding many connections competes with itself.
- :func:`raise_fd_limit`: the open-files soft limit raised to the hard limit, at start.
- While an upload's body streams (:data:`STREAMED`, set by :class:`~.guard.BodyLimit`), the connection's
  deadline counts from the last bytes received, not from the request's start.
- :func:`bind`: the listening socket, with a clear error when the port is taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import json
import socket
from collections import Counter
from collections.abc import Awaitable, Callable, Generator, MutableMapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qs

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..errors import ConfigError
from .descriptors import back_off_accept_errors, connection_cap, quiet_accept_errors, raise_fd_limit

__all__ = [
    "ENDING",
    "LINGER_SECS",
    "MAX_HEADER_BYTES",
    "STREAMED",
    "ConnectionLimits",
    "Server",
    "ServerKeys",
    "asks_to_wait",
    "bind",
    "client_of",
    "connection_class",
    "http_server",
]

MAX_HEADER_BYTES = 64 * 1024
"""The longest request line plus headers accepted (h11's limit on an incomplete event)."""
LINGER_SECS = 2.0
"""How long a refused connection keeps reading (and dropping) what its client still sends before closing."""
END_GRACE_SECS = 1.0
"""How long a long-poll ended to make room has to answer by itself (as at its deadline) before it is cut off
and answered 503."""

STREAMED = "prooflane.streamed"
"""The scope key :class:`BodyLimit` sets on an upload: its connection then waits on progress, not in total."""
ENDING = "prooflane.ending"
"""The scope key of a stream or long-poll: an :class:`asyncio.Event` set when it is ended to make room for
another client; a long-poll that waits on it answers at once, as at its deadline."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]


class ServerKeys(Protocol):
    """The config keys of an HTTP server's limits (the daemon's config and the fleet's both have them)."""

    @property
    def request_timeout_secs(self) -> float: ...

    @property
    def max_connections(self) -> int: ...

    @property
    def max_connections_per_client(self) -> int: ...

    @property
    def max_streams(self) -> int: ...


@dataclass(frozen=True)
class ConnectionLimits:
    """What the clients of one server may hold, and how long they have (see the module's docstring)."""

    request_timeout: float
    """Seconds a client has to send a whole request, or to take an answer."""
    max_connections: int
    """Connections at once, all clients together."""
    max_per_client: int
    """Connections at once from one client (:func:`client_of`)."""
    max_streams: int
    """Event streams and long-polls at once, all clients together."""

    @classmethod
    def of(cls, config: ServerKeys) -> ConnectionLimits:
        """The config's limits, ``max_connections`` lowered to what the open-files limit holds."""
        return cls(
            config.request_timeout_secs,
            connection_cap(config.max_connections),
            config.max_connections_per_client,
            config.max_streams,
        )

    @property
    def client_cap(self) -> int:
        """Connections one client may hold."""
        return max(1, min(self.max_per_client, self.max_connections))

    @property
    def stream_cap(self) -> int:
        """Streams at once: ``max_streams``, and never more than half the connections (the rest stay for
        short requests)."""
        return max(1, min(self.max_streams, self.max_connections // 2))


def client_of(peername: Any) -> str:
    """Who a connection counts against: its peer's IPv4 address (an IPv4-mapped IPv6 one as IPv4), or its
    IPv6 /64 (one machine's usual share); ``local`` for a socket without an address."""
    host = peername[0] if isinstance(peername, tuple) and peername else ""
    try:
        address = ipaddress.ip_address(str(host).split("%", 1)[0])
    except ValueError:
        return str(host) or "local"
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


def asks_to_wait(scope: Scope) -> bool:
    """Whether the request's query asks to ``wait`` more than 0 seconds (a long-poll)."""
    query = parse_qs(bytes(scope.get("query_string", b"")).decode("latin-1"))
    try:
        return float(query.get("wait", ["0"])[-1]) > 0
    except ValueError:
        return False


class Server(uvicorn.Server):
    """uvicorn's server without its own signal handling: the daemon owns SIGINT and SIGTERM. Its event loop
    backs off at a failing ``accept()`` (:func:`back_off_accept_errors`)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        quiet_accept_errors()
        back_off_accept_errors(asyncio.get_running_loop())
        await super().startup(sockets)


def http_server(
    app: Asgi,
    config: ServerKeys,
    *,
    holds_open: Callable[[Scope], bool],
    graceful_shutdown_secs: float,
) -> Server:
    """The HTTP server of the daemon and of the fleet: uvicorn with ``config``'s limits (the open-files limit
    raised first, so that they hold), its lines through the process's own log. ``holds_open`` says which
    requests are streams or long-polls."""
    raise_fd_limit()
    limits = ConnectionLimits.of(config)
    return Server(
        uvicorn.Config(
            app,
            lifespan="off",
            log_config=None,  # its lines go through the process's own log (prooflane.logs), in its format
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=int(graceful_shutdown_secs),
            http=connection_class(limits, holds_open),
            h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        )
    )


class _Ledger:
    """Who holds a server's connections: each client's, and which are streams. Only the event loop touches
    it (no lock). Invariant: a connection is in ``by_client[its client]`` from its admission until it is
    closed or made room for, and in ``streams`` while it serves a stream (never once made room for)."""

    def __init__(self) -> None:
        self.by_client: dict[str, set[_Connection]] = {}
        self.streams: set[_Connection] = set()


@dataclass
class _Stream:
    """A stream or long-poll in progress on a connection."""

    started_at: float
    ending: asyncio.Event
    answer_started: bool = False
    answer_complete: bool = False


def _never(scope: Scope) -> bool:
    return False


class _Connection(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a deadline for receiving each request, one for the client to take
    its answer, fair shares of connections and streams, and a lingering close."""

    limits: ConnectionLimits
    """This server's limits (set by :func:`connection_class`)."""
    ledger: _Ledger
    """This server's connections by client and its streams (one per server, from :func:`connection_class`)."""
    holds_open: Callable[[Scope], bool]
    """Whether a request is a stream or long-poll (a staticmethod, set by :func:`connection_class`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._request_timeout = self.limits.request_timeout
        self._deadline: asyncio.TimerHandle | None = None
        self._write_deadline: asyncio.TimerHandle | None = None
        self._lingering = False
        self._turned_away = False
        self._opened_at = 0.0
        self._peer = ""
        self._stream: _Stream | None = None
        self._app = self.app
        self.app = self._gate  # handle_events runs each request's cycle with self.app

    # --- admission ---------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._peer = client_of(transport.get_extra_info("peername"))
        refusal = self._make_room()
        if refusal is not None:
            self._turn_away(transport, refusal)
            return
        super().connection_made(transport)  # type: ignore[arg-type]
        self.ledger.by_client.setdefault(self._peer, set()).add(self)
        self._opened_at = self.loop.time()
        self._arm()

    def _make_room(self) -> str | None:
        """None when this new connection may be served (after another was closed to make room, if need be);
        else why not."""
        limits = self.limits
        mine = self.ledger.by_client.get(self._peer, set())
        if len(mine) >= limits.client_cap and not _make_room_among(mine):
            return f"too many connections from {self._peer} (at most {limits.client_cap} from one client)"
        if len(self.connections) >= limits.max_connections and not _make_room_among(self.connections):
            return f"too many connections (at most {limits.max_connections})"
        return None

    def _turn_away(self, transport: asyncio.BaseTransport, detail: str) -> None:
        """One connection too many: answer 503 in one write and close, before reading anything."""
        self._turned_away = True
        body = json.dumps({"detail": f"{detail}: try again"})
        answer = (
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
            f"content-length: {len(body) + 1}\r\nconnection: close\r\n\r\n{body}\n"
        )
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(answer.encode())
        transport.close()

    def _leave(self) -> None:
        """Stop counting this connection (closed, or closing to make room): its place is free now."""
        self.connections.discard(self)
        mine = self.ledger.by_client.get(self._peer)
        if mine is not None:
            mine.discard(self)
            if not mine:
                del self.ledger.by_client[self._peer]
        self.ledger.streams.discard(self)

    @property
    def _idle(self) -> bool:
        """Connected, nothing asked (or a kept-alive connection between requests)."""
        return (
            self._stream is None and not self._lingering and not self.transport.is_closing()
            and self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE
            and not self.conn.trailing_data[0]
        )  # fmt: skip

    @property
    def _incomplete(self) -> bool:
        """A request begun and not received in full, nothing answered yet (its head, or a body that is
        not an upload's)."""
        if self._stream is not None or self._lingering or self.transport.is_closing():
            return False
        their, ours = self.conn.their_state, self.conn.our_state
        if ours is not h11.IDLE and ours is not h11.SEND_RESPONSE:
            return False
        if their is h11.IDLE:
            return bool(self.conn.trailing_data[0])
        return their is h11.SEND_BODY and not getattr(self, "scope", {}).get(STREAMED)

    # --- streams and long-polls --------------------------------------------------------------------

    async def _gate(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Every request's way into the application: a stream or long-poll is counted (refused when over
        its budget) and can be ended to make room."""
        if scope["type"] != "http" or not self.holds_open(scope):
            await self._app(scope, receive, send)
            return
        refusal = self._admit_stream()
        if refusal is not None:
            await _answer(send, 503, refusal)
            return
        stream = _Stream(self.loop.time(), asyncio.Event())
        scope[ENDING] = stream.ending
        self._stream = stream
        self.ledger.streams.add(self)
        try:
            await self._run_stream(stream, scope, receive, send)
        finally:
            self._stream = None
            self.ledger.streams.discard(self)

    def _admit_stream(self) -> str | None:
        """None when one more stream of this client's may start (after ending another client's, if that
        one holds at least two more); else why not."""
        streams = self.ledger.streams
        cap = self.limits.stream_cap
        if len(streams) < cap:
            return None
        held = Counter(c._peer for c in streams)
        heaviest, most = held.most_common(1)[0]
        if most > held[self._peer] + 1:
            victim = min((c for c in streams if c._peer == heaviest), key=_stream_start)
            victim._end_stream()
            return None
        return f"too many event streams and long-polls (at most {cap} at once): try again"

    async def _run_stream(self, stream: _Stream, scope: Scope, receive: Receive, send: Send) -> None:
        async def tracked(message: Message) -> None:
            if message["type"] == "http.response.start":
                stream.answer_started = True
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                stream.answer_complete = True
            await send(message)

        app = asyncio.ensure_future(self._app(scope, receive, tracked))
        ending = asyncio.ensure_future(stream.ending.wait())
        try:
            await asyncio.wait({app, ending}, return_when=asyncio.FIRST_COMPLETED)
            if app.done():
                app.result()  # the application's own error, if any, as uvicorn would see it
                return
            if not stream.answer_started:  # a long-poll: it answers by itself, as at its deadline
                await asyncio.wait({app}, timeout=END_GRACE_SECS)
            if not app.done():
                app.cancel()
                await asyncio.wait({app})
            if stream.answer_complete:
                return
            if stream.answer_started:  # an event stream: its body ends here, cleanly
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            else:
                detail = "this long-poll was ended to make room for another client's request: ask again"
                await _answer(send, 503, detail)
        finally:
            ending.cancel()
            if not app.done():
                app.cancel()

    def _end_stream(self) -> None:
        """End this connection's stream to make room: its place is free at once, the connection closes once
        the stream has ended (and within ``END_GRACE_SECS + LINGER_SECS`` in any case)."""
        assert self._stream is not None
        self._stream.ending.set()
        if self.cycle is not None:
            self.cycle.keep_alive = False  # closed once its answer is complete
        self._leave()
        self.loop.call_later(END_GRACE_SECS + LINGER_SECS, self.transport.abort)

    # --- the connection's life ---------------------------------------------------------------------

    def connection_lost(self, exc: Exception | None) -> None:
        if self._turned_away:
            return
        self._leave()
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

    def _refuse(self, status: int, reason: str, detail: str, linger: float = LINGER_SECS) -> None:
        """Answer in one write, then read and drop what the client still sends for ``linger`` seconds
        before closing."""
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
        self.loop.call_later(linger, self.transport.close)


def _make_room_among(candidates: set[Any]) -> bool:
    """Close one of ``candidates`` to make room for a new connection: the one idle the longest, else the
    oldest request not received in full (answered 408), else the oldest stream of the client holding the
    most; False when none is left (every one is a short request in progress)."""
    live = [c for c in candidates if isinstance(c, _Connection) and not c._turned_away]
    idle = [c for c in live if c._idle]
    if idle:
        oldest = min(idle, key=_opened)
        oldest.transport.close()
        oldest._leave()  # connection_lost follows
        return True
    incomplete = [c for c in live if c._incomplete]
    if incomplete:
        oldest = min(incomplete, key=_opened)
        detail = "request not received in full: its connection was closed to make room for another"
        oldest._refuse(408, "Request Timeout", detail, linger=0.0)  # its descriptor is wanted now
        oldest._leave()
        return True
    streams = [c for c in live if c._stream is not None and not c._stream.ending.is_set()]
    if streams:
        heaviest, _ = Counter(c._peer for c in streams).most_common(1)[0]
        min((c for c in streams if c._peer == heaviest), key=_stream_start)._end_stream()
        return True
    return False


def _opened(connection: _Connection) -> float:
    return connection._opened_at


def _stream_start(connection: _Connection) -> float:
    return connection._stream.started_at if connection._stream is not None else 0.0


async def _answer(send: Send, status: int, detail: str) -> None:
    body = (json.dumps({"detail": detail}) + "\n").encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 503:
        headers.append((b"retry-after", b"1"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def connection_class(
    limits: ConnectionLimits, holds_open: Callable[[Scope], bool] = _never
) -> type[_Connection]:
    """The protocol class of a server with these limits (a ledger of its own); ``holds_open`` says which
    requests are streams or long-polls."""
    attrs = {"limits": limits, "ledger": _Ledger(), "holds_open": staticmethod(holds_open)}
    return type("Connection", (_Connection,), attrs)


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
