"""Run the daemon: the engine and the HTTP server in one asyncio loop, stopped cleanly by SIGINT/SIGTERM.

The socket is bound before anything else so a port in use is reported at once; the HTTP server then
answers `/healthz` with 503 while the engine starts, and 200 once it accepts jobs. On a signal the event
streams are closed, the server finishes the requests in flight, and the engine stops last.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import signal
import socket
import sys
from collections.abc import Callable, Generator

import uvicorn

from .api import close_streams, create_app
from .config import Config
from .devices import RayBackend
from .engine import Engine
from .errors import ConfigError

__all__ = ["bind", "run_daemon", "serve"]

log = logging.getLogger("prooflane.server")

GRACEFUL_SHUTDOWN_SECS = 10.0


class _Server(uvicorn.Server):
    """uvicorn's server without its own signal handling: the daemon owns SIGINT and SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def bind(host: str, port: int) -> socket.socket:
    """Listen on host:port (port 0 picks a free one); a clear error when that is not possible."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
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
) -> None:
    """Serve until `stop` is set (or SIGINT/SIGTERM arrives), then shut down in order."""
    stop = stop or asyncio.Event()
    host, port = sock.getsockname()[:2]
    url = f"http://{host}:{port}"
    backend = RayBackend.from_config(config) if config.ray_address else None
    engine = Engine(config, backend=backend)
    app = create_app(engine, config)
    server = _Server(
        uvicorn.Config(
            app,
            lifespan="off",
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=int(GRACEFUL_SHUTDOWN_SECS),
        )
    )
    restore = _install_signal_handlers(stop)
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


def _on_signal(stop: asyncio.Event, sig: int) -> None:
    if stop.is_set():
        return
    print(f"prooflane: {signal.Signals(sig).name} received, shutting down", file=sys.stderr, flush=True)
    stop.set()


def serve(config: Config, host: str, port: int, *, on_ready: Callable[[str], None] | None = None) -> None:
    """Bind, then run the daemon in a fresh event loop until a signal stops it."""
    sock = bind(host, port)
    asyncio.run(run_daemon(config, sock, on_ready=on_ready))
