"""The daemon's HTTP server stack: TCP_NODELAY on accepted connections, request deadlines, oversized heads,
and the startup objects kept out of the cycle collector's full passes."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest
import uvicorn

from prooflane.server.limits import MAX_HEADER_BYTES, Server, bind, connection_class

pytestmark = pytest.mark.anyio


async def _hello(scope: dict[str, object], receive: object, send: object) -> None:
    assert callable(send)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@contextlib.asynccontextmanager
async def serving(request_timeout: float = 30.0) -> AsyncIterator[tuple[Server, int]]:
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        _hello, lifespan="off", log_level="warning", http=connection_class(request_timeout),
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
