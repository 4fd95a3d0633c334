"""Limits on what a client may send, hold and how long it may take, and the HTTP server those run in: one
setup for the daemon and the fleet (:func:`http_server`).

- :class:`Server`: uvicorn's server without its own signal handling (the daemon and the fleet own SIGINT and
  SIGTERM), whose event loop stops accepting for a second at the first ``accept()`` that fails for want of
  descriptors (:func:`back_off_accept_errors`) and logs that once a minute (:func:`quiet_accept_errors`).
- :func:`connection_class`: uvicorn's HTTP/1.1 protocol with a deadline for receiving each request (408)
  and clear answers to a request line over ``MAX_HEADER_BYTES`` (414), a header block over it (431) or a
  malformed one (400). A client that does not read its answer for ``request_timeout`` seconds (the write
  buffer stays full) is disconnected.
- Every refusal is read by its client, not lost to a reset: it is answered in one write, the connection
  stops counting at once, this end is shut (a FIN) and what the client still sends is read and dropped until
  the client closes, for ``LINGER_SECS`` at most (at most ``MAX_LINGERING`` connections linger at once; past
  that a refused one closes at once). A connection over a cap is answered 503 so too. An answer given before
  its request's body arrived in full (a refused upload: 401, 403, 413, 422, 503) says ``Connection: close``
  and closes so, the rest of the body unread.
- Fair shares of connections (:class:`ConnectionLimits`, :class:`~.ledger.Ledger`): at most
  ``max_connections`` at once, at most ``max_per_client`` from one client (an IPv4 address, an IPv6 /64),
  at most ``max_streams`` event streams and long-polls (never more than half the connections). Uploads,
  streams and long-polls together (the requests that hold a connection long) never take the last
  ``reserved`` connections, of all and of one client's (the reserve never more than half of either): those
  stay for short requests such as ``/healthz``; one more is answered 503 unless a slow upload makes room. A
  connection over a cap first makes room, in this order: it answers 408 to the oldest slow upload; else it
  closes the connection idle the longest (connected, nothing asked); else it answers 408 to the oldest
  request not yet received in full (a request head sent a byte at a time); else it ends the oldest stream of
  the client holding the most streams (cleanly: an event stream's body ends, a long-poll answers as it
  would at its deadline). Only when none of those is left is it answered 503. A stream over the stream
  budget ends another client's stream only when that client holds at least two more than the asker; else it
  is 503. So a client holding many connections competes with itself.
- An upload (:class:`~.guard.BodyLimit` asks :data:`UPLOAD_ADMISSION` before its body streams, then marks
  it :data:`STREAMED`) has no deadline in total: after its first ``request_timeout`` it must bring
  ``min_upload_rate`` bytes a second over each ``request_timeout`` window, else it is answered 408; below
  that rate it is slow, the first closed to make room (:mod:`.upload_rate`).
- :func:`raise_fd_limit`: the open-files soft limit raised to the hard limit, at start.
- :func:`bind`: the listening socket, with a clear error when the port is taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import socket
from collections.abc import Awaitable, Callable, Generator, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..errors import ConfigError
from .descriptors import back_off_accept_errors, quiet_accept_errors, raise_fd_limit
from .ledger import MAX_LINGERING, ConnectionLimits, Ledger, ServerKeys, client_of
from .upload_rate import UploadRate

__all__ = [
    "ENDING",
    "LINGER_SECS",
    "MAX_HEADER_BYTES",
    "MAX_LINGERING",
    "STREAMED",
    "UPLOAD_ADMISSION",
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
"""The scope key :class:`BodyLimit` sets on an upload admitted: its connection is judged by its rate."""
UPLOAD_ADMISSION = "prooflane.upload_admission"
"""The scope key of every request: a callable :class:`BodyLimit` calls before an upload's body streams; it
returns None when the upload may go on (it is counted and judged by its rate from then), else why not."""
ENDING = "prooflane.ending"
"""The scope key of a stream or long-poll: an :class:`asyncio.Event` set when it is ended to make room for
another client; a long-poll that waits on it answers at once, as at its deadline."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]


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
    """uvicorn's HTTP/1.1 protocol with a deadline for receiving each request, a minimum rate for uploads,
    one for the client to take its answer, fair shares (:class:`~.ledger.Ledger`, whose
    :class:`~.ledger.Holder` it is) and a lingering close."""

    limits: ConnectionLimits
    """This server's limits (set by :func:`connection_class`)."""
    ledger: Ledger
    """This server's connections by client, its streams and uploads (one per server, from
    :func:`connection_class`)."""
    holds_open: Callable[[Scope], bool]
    """Whether a request is a stream or long-poll (a staticmethod, set by :func:`connection_class`)."""
    clock: Callable[[], float] | None = None
    """The clock uploads are judged on (None: the event loop's; a test's, from :func:`connection_class`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._request_timeout = self.limits.request_timeout
        self._deadline: asyncio.TimerHandle | None = None
        self._write_deadline: asyncio.TimerHandle | None = None
        self._lingering = False
        self._lingers = False  # it holds one of the ledger's lingering places
        self._turned_away = False
        self.opened_at = 0.0
        self.peer = ""
        self._stream: _Stream | None = None
        self._upload: UploadRate | None = None
        self._judging: asyncio.TimerHandle | None = None
        self._app = self.app
        self.app = self._gate  # handle_events runs each request's cycle with self.app

    # --- admission ---------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.peer = client_of(transport.get_extra_info("peername"))
        refusal = self.ledger.make_room(self.peer)
        if refusal is not None:
            assert isinstance(transport, asyncio.Transport)
            self._turned_away = True  # never counted: answered 503 before anything is read
            transport.write(_answer_bytes(503, "Service Unavailable", f"{refusal}: try again"))
            self._linger(transport, LINGER_SECS)
            return
        super().connection_made(transport)  # type: ignore[arg-type]
        self.ledger.admit(self)
        self.opened_at = self.loop.time()
        self._arm()

    def _leave(self) -> None:
        """Stop counting this connection (closed, or closing to make room): its place is free now."""
        self.connections.discard(self)
        self.ledger.leave(self)
        self._end_upload()

    @property
    def idle(self) -> bool:
        """Connected, nothing asked (or a kept-alive connection between requests)."""
        return (
            self._stream is None and not self._lingering and not self.transport.is_closing()
            and self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE
            and not self.conn.trailing_data[0]
        )  # fmt: skip

    @property
    def incomplete(self) -> bool:
        """A request begun and not received in full, nothing answered yet (its head, or a body that is
        not an upload's: an upload is judged by its rate)."""
        if self._stream is not None or self._lingering or self.transport.is_closing():
            return False
        their, ours = self.conn.their_state, self.conn.our_state
        if ours is not h11.IDLE and ours is not h11.SEND_RESPONSE:
            return False
        if their is h11.IDLE:
            return bool(self.conn.trailing_data[0])
        return their is h11.SEND_BODY and not getattr(self, "scope", {}).get(STREAMED)

    @property
    def stream_started_at(self) -> float | None:
        stream = self._stream
        return None if stream is None or stream.ending.is_set() else stream.started_at

    @property
    def upload_started_at(self) -> float | None:
        return None if self._upload is None else self._upload.started_at

    def close_idle(self) -> None:
        self.transport.close()
        self._leave()  # connection_lost follows

    # --- uploads -----------------------------------------------------------------------------------

    def _now(self) -> float:
        return (self.clock or self.loop.time)()

    def _admit_upload(self) -> str | None:
        """As an upload's body is about to stream (:data:`UPLOAD_ADMISSION`): None when it may (it is
        counted from now on, and judged by its rate instead of the request's deadline); else why not."""
        if self._upload is not None or self.conn.their_state is not h11.SEND_BODY:
            return None  # its body is in already: a short request
        refusal = self.ledger.admit_held(self.peer)
        if refusal is not None:
            return refusal
        self._upload = UploadRate(self.limits.request_timeout, self.limits.min_upload_rate, self._now())
        self.ledger.uploads.add(self)
        self._disarm()
        self._judge_later()
        return None

    def slowness(self) -> str | None:
        """Why this connection's upload counts as slow (:meth:`UploadRate.slow`), or None."""
        upload = self._upload
        if upload is None or self._lingering or not upload.slow(self._now(), self.flow.read_paused):
            return None
        return (f"upload slower than {upload.minimum:,.0f} bytes/s (min_upload_bytes_per_sec): its "
                "connection was closed to make room for another")  # fmt: skip

    def _judge_later(self) -> None:
        assert self._upload is not None
        self._judging = self.loop.call_later(self._upload.until_judged(self._now()), self._judge)

    def _judge(self) -> None:
        """At the end of a window: cut the upload off if that window brought too few bytes."""
        self._judging = None
        if self._upload is None:
            return
        why = self._upload.too_slow(self._now(), self.flow.read_paused)
        if why is None:
            self._judge_later()
        else:
            self.refuse(408, "Request Timeout", why)

    def _end_upload(self) -> None:
        """Stop counting and judging this connection's upload (its body is in, or it was answered or cut)."""
        if self._judging is not None:
            self._judging.cancel()
            self._judging = None
        self._upload = None
        self.ledger.uploads.discard(self)

    # --- each request; streams and long-polls ------------------------------------------------------

    async def _gate(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Every request's way into the application: it may ask to stream an upload; an answer started
        before its body is in closes the connection; a stream or long-poll is counted (refused when over its
        budget) and can be ended to make room."""
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        scope[UPLOAD_ADMISSION] = self._admit_upload
        send = self._answering(self.cycle, send)
        if not self.holds_open(scope):
            await self._app(scope, receive, send)
            return
        refusal = self.ledger.admit_held(self.peer) or self.ledger.admit_stream(self.peer)
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

    def _answering(self, cycle: Any, send: Send) -> Send:
        """``send``, watching each answer start: an upload ends there, and an answer started before its
        request's body was in full (a refused upload) says ``Connection: close`` and closes lingering, the
        rest of the body unread."""

        async def answering(message: Message) -> None:
            if message["type"] == "http.response.start":
                self._end_upload()
                if self.conn.their_state is h11.SEND_BODY and cycle is not None and not self._lingering:
                    headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != b"connection"]
                    message = {**message, "headers": [*headers, (b"connection", b"close")]}
                    cycle.transport = _ClosingLingering(self)
            await send(message)

        return answering

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

    def end_stream(self) -> None:
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
        if self._lingers:
            self._lingers = False
            self.ledger.left_lingering()
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
            self._end_upload()
        elif self._upload is not None and not self._lingering:
            now, held = self._now(), self.flow.read_paused
            self._upload.received(len(data), now, held)
            why = self._upload.too_slow(now, held)
            if why is not None:
                self.refuse(408, "Request Timeout", why)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._lingering:
            self._unset_keepalive_if_required()  # it closes by itself, lingering
        elif not self.transport.is_closing():
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
            self.refuse(408, "Request Timeout", detail)

    def send_400_response(self, msg: str) -> None:
        received = self.conn.trailing_data[0]
        if len(received) >= MAX_HEADER_BYTES and b"\n" not in received:  # the request line alone is too long
            self.refuse(414, "URI Too Long", f"the request line exceeds {MAX_HEADER_BYTES} bytes")
        elif len(received) >= MAX_HEADER_BYTES:
            self.refuse(431, "Request Header Fields Too Large",
                        f"request line and headers exceed {MAX_HEADER_BYTES} bytes")  # fmt: skip
        else:
            self.refuse(400, "Bad Request", f"not a valid HTTP/1.1 request: {msg}")

    def refuse(self, status: int, reason: str, detail: str, linger: float = LINGER_SECS) -> None:
        """Answer in one write, then close lingering (:meth:`_close_lingering`)."""
        if self._lingering or self.transport.is_closing():
            return
        self.transport.write(_answer_bytes(status, reason, detail))
        self._close_lingering(linger)

    def _close_lingering(self, linger: float) -> None:
        """Stop counting this connection (its place is free now) and close it lingering (:meth:`_linger`)."""
        if self._lingering:
            return
        self._disarm()
        self._leave()
        self._unset_keepalive_if_required()
        self.flow.resume_reading()  # what the client still sends is read, to be dropped
        self._linger(self.transport, linger)

    def _linger(self, transport: asyncio.Transport, linger: float) -> None:
        """Shut this end (a FIN, once the answer is out), then close when the client does or after
        ``linger`` seconds, dropping what it still sends; at once when ``MAX_LINGERING`` linger already."""
        self._lingering = True
        if linger <= 0 or not transport.can_write_eof() or not self.ledger.take_lingering_place():
            transport.close()
            return
        self._lingers = True
        transport.write_eof()
        self.loop.call_later(linger, transport.close)


class _ClosingLingering(asyncio.Transport):
    """The transport a request's cycle answers on when its answer started before the request's body was in
    full: writes go to the connection's, and its ``close`` is the connection's lingering close."""

    def __init__(self, connection: _Connection) -> None:
        super().__init__()
        self._connection = connection

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._connection.transport.write(data)

    def is_closing(self) -> bool:
        return self._connection.transport.is_closing()

    def close(self) -> None:
        self._connection._close_lingering(LINGER_SECS)


def _answer_bytes(status: int, reason: str, detail: str) -> bytes:
    """A whole answer (its head says ``Connection: close``) with a JSON ``detail``, for one write."""
    body = (json.dumps({"detail": detail}) + "\n").encode()
    retry = "retry-after: 1\r\n" if status == 503 else ""
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n{retry}"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


async def _answer(send: Send, status: int, detail: str) -> None:
    body = (json.dumps({"detail": detail}) + "\n").encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 503:
        headers.append((b"retry-after", b"1"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def connection_class(
    limits: ConnectionLimits,
    holds_open: Callable[[Scope], bool] = _never,
    clock: Callable[[], float] | None = None,
) -> type[_Connection]:
    """The protocol class of a server with these limits (a ledger of its own); ``holds_open`` says which
    requests are streams or long-polls; ``clock`` is the one uploads are judged on (a test's; None: the
    event loop's)."""
    attrs = {
        "limits": limits,
        "ledger": Ledger(limits),
        "holds_open": staticmethod(holds_open),
        "clock": None if clock is None else staticmethod(clock),
    }
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
