"""Run the daemon: the engine and the HTTP server in one asyncio loop, stopped cleanly by SIGINT/SIGTERM.

The socket is bound before anything else so a port in use is reported at once; the HTTP server then
answers `/healthz` with 503 while the engine starts, and 200 once it accepts jobs. What the process made
before serving is frozen out of the cycle collector's full passes (see `_freeze_startup_objects`). On a
signal (or when the process named by ``parent_pid`` ends) the event streams and long-polls are closed, the
server finishes the requests in flight, and the engine stops last.

Connections: accepted sockets get TCP_NODELAY (a response written in several sends would otherwise wait on
the client's delayed ACK, about 40 ms per request on a kept-alive connection); what a client may send and
how long it may take are :mod:`.limits` (the fleet's server is the same).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import socket
from collections.abc import Callable

from ..config import Config
from ..engine import Engine
from .api import close_streams, create_app, holds_open
from .descriptors import raise_fd_limit
from .limits import bind, http_server

__all__ = ["install_signal_handlers", "run_daemon", "serve"]

log = logging.getLogger("prooflane.server")

GRACEFUL_SHUTDOWN_SECS = 10.0


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
    server = http_server(app, config, holds_open=holds_open, graceful_shutdown_secs=GRACEFUL_SHUTDOWN_SECS)
    restore = install_signal_handlers(stop)
    if parent_pid is not None:
        restore = _chain(restore, _watch_parent(parent_pid, stop))
    serving = asyncio.create_task(server.serve(sockets=[sock]), name="http")
    started = False
    try:
        await engine.start()
        started = True
        for warning in engine.health().warnings:  # said once: they hold for the daemon's life
            log.warning("%s", warning, extra={"warning": warning})
        log.info("listening on %s (dashboard %s/)", url, url, extra={"url": url})
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


def install_signal_handlers(stop: asyncio.Event) -> Callable[[], None]:
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
        log.info("parent process %d ended: shutting down", pid, extra={"parent_pid": pid})
        stop.set()


def _chain(*steps: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        for step in steps:
            step()

    return run


def _on_signal(stop: asyncio.Event, sig: int) -> None:
    if stop.is_set():
        return
    name = signal.Signals(sig).name
    log.info("%s received: shutting down", name, extra={"signal": name})
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
    raise_fd_limit()  # a client's idle connections must not use up the descriptors workers need
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
