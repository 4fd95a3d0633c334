"""The daemon's HTTP server stack: TCP_NODELAY on accepted connections, request deadlines, oversized heads,
and the startup objects kept out of the cycle collector's full passes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn

from prooflane.server.limits import (
    MAX_HEADER_BYTES,
    Server,
    bind,
    connection_class,
    quiet_accept_errors,
)

pytestmark = pytest.mark.anyio


async def _hello(scope: dict[str, object], receive: object, send: object) -> None:
    assert callable(send)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@contextlib.asynccontextmanager
async def serving(
    request_timeout: float = 30.0, max_connections: int = 1 << 20, app: Any = _hello
) -> AsyncIterator[tuple[Server, int]]:
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, lifespan="off", log_level="warning", http=connection_class(request_timeout, max_connections),
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
    )  # fmt: skip
    server = Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:  # noqa: ASYNC110  (uvicorn's server offers no event for "started")
        await asyncio.sleep(0.01)
    try:
        yield server, port
    finally:
        server.should_exit = True
        await task


async def _request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    writer.write(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    await reader.readexactly(2)
    return head


def test_bound_socket_says_it_is_tcp() -> None:
    with bind("127.0.0.1", 0) as sock:
        assert sock.proto == socket.IPPROTO_TCP


async def test_accepted_connections_have_tcp_nodelay() -> None:
    async with serving() as (server, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert (await _request(reader, writer)).startswith(b"HTTP/1.1 200")
        assert (await _request(reader, writer)).startswith(b"HTTP/1.1 200")  # the same, kept-alive connection
        connections = list(server.server_state.connections)
        assert len(connections) == 1
        accepted = connections[0].transport.get_extra_info("socket")
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        writer.close()


async def test_an_incomplete_request_is_answered_408_and_closed() -> None:
    async with serving(request_timeout=0.2) as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nhost: x\r\n")  # the blank line never comes
        answer = await reader.read()
        assert answer.startswith(b"HTTP/1.1 408")
        assert b"not received in full" in answer
        writer.close()


@pytest.mark.parametrize(
    ("request_head", "answer_start"),
    [
        (b"GET / HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * (1 << 20) + b"\r\n\r\n", b"HTTP/1.1 431"),
        (b"GET /status?x=" + b"a" * (1 << 20) + b" HTTP/1.1\r\nhost: x\r\n\r\n", b"HTTP/1.1 414"),
    ],
    ids=["header block: 431", "url: 414"],
)
async def test_a_request_head_too_large_is_answered_not_reset(
    request_head: bytes, answer_start: bytes
) -> None:
    async with serving() as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request_head)
        await writer.drain()
        answer = await reader.read()
        assert answer.startswith(answer_start), answer[:100]
        assert b"exceed" in answer  # the body says what was too long
        writer.close()


def test_the_daemon_freezes_what_it_made_before_serving_out_of_full_collections() -> None:
    # In a child process: serve() with the daemon itself replaced by a probe of the collector's state.
    probe = """
import gc, prooflane.server.daemon as server
from prooflane.config import Config
seen = []
async def run_daemon(config, sock, **kw):
    seen.append((gc.get_freeze_count(), len(gc.get_objects())))
    sock.close()
server.run_daemon = run_daemon
server.serve(Config(), "127.0.0.1", 0)
print(*seen[0])
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    frozen, left = map(int, done.stdout.split())
    assert frozen > 10 * max(left, 1)  # the modules and the app: nearly everything, none of a job's


async def test_at_the_cap_a_new_connection_takes_the_place_of_the_oldest_idle_one() -> None:
    """Idle connections held open on purpose (1,100 of them once made /healthz unreachable) cannot lock a
    client out: each new connection closes the one idle the longest."""
    async with serving(max_connections=3) as (server, port):
        idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]  # they send nothing
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert (await _request(reader, writer)).startswith(b"HTTP/1.1 200")  # served at once
        oldest_reader, _ = idle[0]
        assert await asyncio.wait_for(oldest_reader.read(), timeout=30) == b""  # the oldest idle one: closed
        assert len(server.server_state.connections) <= 3
        for _, w in idle:
            w.close()
        writer.close()


async def test_at_the_cap_with_every_connection_busy_one_more_is_answered_503_and_closed() -> None:
    async with serving(max_connections=3) as (server, port):
        busy = []
        for _ in range(3):  # each has sent part of a request: not idle
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(b"GET / HTTP/1.1\r\nhost: x\r\n")
            await w.drain()
            busy.append((r, w))
        await asyncio.sleep(0.1)  # the server has read what they sent
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        answer = await asyncio.wait_for(reader.read(), timeout=30)  # closed by the server: EOF
        assert answer.startswith(b"HTTP/1.1 503") and b"too many connections" in answer
        assert len(server.server_state.connections) == 3  # the one turned away holds nothing
        for _, w in busy:
            w.close()
        writer.close()


async def _big(scope: dict[str, object], receive: object, send: object) -> None:
    assert callable(send)
    body = b"x" * (64 << 20)
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]}
    )
    await send({"type": "http.response.body", "body": body})


async def test_a_client_that_does_not_read_its_answer_is_disconnected() -> None:
    async with serving(request_timeout=0.5, app=_big) as (server, port):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        for _ in range(3000):  # the server's buffer fills; then it gives up on this client
            if not server.server_state.connections:
                break
            await asyncio.sleep(0.01)
        assert not server.server_state.connections
        sock.close()


def test_the_open_files_limit_is_raised_to_the_hard_limit_and_caps_connections() -> None:
    script = (
        "import resource\n"
        "from prooflane.server.limits import FD_RESERVE, connection_cap, raise_fd_limit\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (min(512, hard), hard))\n"
        "print(connection_cap(4096), FD_RESERVE, raise_fd_limit(), hard)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    capped, reserve, raised, hard = map(int, done.stdout.split())
    assert capped == 512 - reserve  # below the soft limit, keeping descriptors for the daemon's own use
    assert raised == hard


def test_accept_errors_are_logged_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    quiet_accept_errors()
    logger = logging.getLogger("asyncio")
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        for _ in range(50):
            logger.error(
                "socket.accept() out of system resource", exc_info=OSError(24, "Too many open files")
            )
        logger.error("something else")
    said = [r.getMessage() for r in caplog.records]
    assert said.count("socket.accept() out of system resource") == 1 and "something else" in said
