"""Run the daemon: the engine and the HTTP server in one asyncio loop, stopped cleanly by SIGINT/SIGTERM.

The socket is bound before anything else so a port in use is reported at once; the HTTP server then
answers `/healthz` with 503 while the engine starts, and 200 once it accepts jobs. What the process made
before serving is frozen out of the cycle collector's full passes (see `_freeze_startup_objects`). On a
signal (or when the process named by ``parent_pid`` ends) the event streams and long-polls are closed, the
server finishes the requests in flight, and the engine stops last.

Connections: accepted sockets get TCP_NODELAY (a response written in several sends would otherwise wait on
the client's delayed ACK, about 40 ms per request on a kept-alive connection); a request not fully received
within ``request_timeout_secs`` is answered 408 and closed; a request line over ``MAX_HEADER_BYTES`` is
answered 414, a header block over it 431 and a malformed one 400, and the rest of what the client sends is
read and dropped for a moment before closing, so the client sees the answer rather than a reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Generator
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..config import Config
from ..engine.engine import Engine
from ..errors import ConfigError
from .api import close_streams, create_app

__all__ = ["bind", "run_daemon", "serve"]

log = logging.getLogger("prooflane.server")

GRACEFUL_SHUTDOWN_SECS = 10.0
MAX_HEADER_BYTES = 64 * 1024
"""The longest request line plus headers accepted (h11's limit on an incomplete event)."""
LINGER_SECS = 2.0
"""How long a refused connection keeps reading (and dropping) what its client still sends before closing."""


class _Server(uvicorn.Server):
    """uvicorn's server without its own signal handling: the daemon owns SIGINT and SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class _Connection(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a deadline for receiving each request and a lingering close."""

    request_timeout = 30.0
    """Seconds a client has to send a whole request (set per daemon by `_connection_class`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._request_timeout = self.request_timeout
        self._deadline: asyncio.TimerHandle | None = None
        self._lingering = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return  # the answer is sent: drop the rest of the refused request
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE and self.conn.their_state is not h11.SEND_BODY:
            self._disarm()  # the request is fully received: the app has it

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


def _connection_class(request_timeout: float) -> type[_Connection]:
    return type("Connection", (_Connection,), {"request_timeout": request_timeout})


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


async def run_daemon(
    config: Config,
    sock: socket.socket,
    *,
    on_ready: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
    parent_pid: int | None = None,
) -> None:
    """Serve until `stop` is set (or SIGINT/SIGTERM arrives, or the process ``parent_pid`` ends), then shut
    down in order."""
    stop = stop or asyncio.Event()
    host, port = sock.getsockname()[:2]
    url = f"http://{host}:{port}"
    engine = Engine(config)
    app = create_app(engine, config)
    server = _Server(
        uvicorn.Config(
            app,
            lifespan="off",
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=int(GRACEFUL_SHUTDOWN_SECS),
            http=_connection_class(config.request_timeout_secs),
            h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        )
    )
    restore = _install_signal_handlers(stop)
    if parent_pid is not None:
        restore = _chain(restore, _watch_parent(parent_pid, stop))
    serving = asyncio.create_task(server.serve(sockets=[sock]), name="http")
    started = False
    try:
        await engine.start()
        started = True
        if on_ready is not None:
            on_ready(url)
        await _until_stopped(stop, serving, engine)
    finally:
        close_streams(app)
        server.should_exit = True
        await serving
        if started:
            await engine.stop()
        restore()


async def _until_stopped(stop: asyncio.Event, serving: asyncio.Task[None], engine: Engine) -> None:
    stopping = asyncio.create_task(stop.wait())
    failing = asyncio.create_task(engine.until_failed())
    try:
        await asyncio.wait({stopping, serving, failing}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        failing.cancel()
    if serving.done():
        serving.result()  # the HTTP server ended on its own: raise its error, if any
    if failing.done() and not failing.cancelled():
        # The pipeline cannot work any more: end the daemon (non-zero) rather than answer as if healthy.
        raise RuntimeError(f"the engine stopped: {failing.result()}")


def _install_signal_handlers(stop: asyncio.Event) -> Callable[[], None]:
    loop = asyncio.get_running_loop()
    handled = (signal.SIGINT, signal.SIGTERM)
    for sig in handled:
        loop.add_signal_handler(sig, _on_signal, stop, sig)

    def restore() -> None:
        for sig in handled:
            loop.remove_signal_handler(sig)

    return restore


def _watch_parent(pid: int, stop: asyncio.Event) -> Callable[[], None]:
    """Set ``stop`` when process ``pid`` ends (read from its pidfd: no polling, no race with pid reuse)."""
    loop = asyncio.get_running_loop()
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        fd = None
    if fd is None or os.getppid() != pid:  # already gone (this process was handed to another parent)
        _on_parent_gone(stop, pid)
        if fd is not None:
            os.close(fd)
        return lambda: None
    loop.add_reader(fd, _on_parent_gone, stop, pid)

    def forget() -> None:
        loop.remove_reader(fd)
        os.close(fd)

    return forget


def _on_parent_gone(stop: asyncio.Event, pid: int) -> None:
    if not stop.is_set():
        print(f"prooflane: parent process {pid} ended, shutting down", file=sys.stderr, flush=True)
        stop.set()


def _chain(*steps: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        for step in steps:
            step()

    return run


def _on_signal(stop: asyncio.Event, sig: int) -> None:
    if stop.is_set():
        return
    print(f"prooflane: {signal.Signals(sig).name} received, shutting down", file=sys.stderr, flush=True)
    stop.set()


def serve(
    config: Config,
    host: str,
    port: int,
    *,
    on_ready: Callable[[str], None] | None = None,
    parent_pid: int | None = None,
) -> None:
    """Bind, then run the daemon in a fresh event loop until a signal (or the end of ``parent_pid``) stops
    it."""
    sock = bind(host, port)
    _freeze_startup_objects()
    asyncio.run(run_daemon(config, sock, on_ready=on_ready, parent_pid=parent_pid))


def _freeze_startup_objects() -> None:
    """Keep what this process made before serving (modules, classes, the web framework: most of its objects,
    and they live as long as it does) out of the cycle collector's full passes.

    A full pass walks every tracked object while the event loop waits; at 1,000 live jobs a daemon holds
    about twice as many objects as it started with, and passes of 100 ms and more were measured on a busy
    machine. Frozen objects are still freed when their last reference goes; only cycles among them would
    stay, and there is nothing of a job's yet (the engine starts after this).
    """
    gc.collect()
    gc.freeze()
