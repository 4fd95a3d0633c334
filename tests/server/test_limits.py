"""The daemon's HTTP server stack: TCP_NODELAY on accepted connections, request deadlines, oversized heads,
and the startup objects kept out of the cycle collector's full passes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from prooflane.server.descriptors import quiet_accept_errors
from prooflane.server.limits import (
    MAX_HEADER_BYTES,
    ConnectionLimits,
    Scope,
    Server,
    bind,
    client_of,
    connection_class,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def _hello(scope: dict[str, object], receive: object, send: object) -> None:
    assert callable(send)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def _never(scope: Scope) -> bool:
    return False


@contextlib.asynccontextmanager
async def serving(
    request_timeout: float = 30.0,
    max_connections: int = 1 << 20,
    app: Any = _hello,
    *,
    per_client: int = 1 << 20,
    streams: int = 1 << 20,
    holds_open: Any = _never,
) -> AsyncIterator[tuple[Server, int]]:
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    limits = ConnectionLimits(request_timeout, max_connections, per_client, streams)
    config = uvicorn.Config(
        app, lifespan="off", log_level="warning", http=connection_class(limits, holds_open),
        h11_max_incomplete_event_size=MAX_HEADER_BYTES, timeout_graceful_shutdown=1,
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


class _Paths:
    """An application of three routes: ``/`` answers at once, ``/slow`` once ``release`` is set (a short
    request in progress), ``/stream`` sends one event and then holds its connection until the client goes
    (an event stream; ``holds_open`` says so)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["path"] == "/stream":
            headers = [(b"content-type", b"text/event-stream")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b"data: hi\n\n", "more_body": True})
            while (await receive())["type"] != "http.disconnect":
                pass
            return
        if scope["path"] == "/slow":
            await self.release.wait()
        await _hello(scope, receive, send)

    @staticmethod
    def holds_open(scope: Scope) -> bool:
        return scope.get("path") == "/stream"


async def _until(condition: Any) -> None:
    for _ in range(3000):  # at most 30 s
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the server never got there")


async def _connect(port: int, client: str = "127.0.0.1") -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(client, 0))


async def _open_stream(
    port: int, client: str = "127.0.0.1"
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection holding ``/stream`` open, its first event read."""
    reader, writer = await _connect(port, client)
    writer.write(b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\n")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
    assert head.startswith(b"HTTP/1.1 200"), head
    assert b"data: hi" in await asyncio.wait_for(reader.readuntil(b"\n\n"), timeout=30)
    return reader, writer


async def _get(port: int, path: str = "/", client: str = "127.0.0.1") -> bytes:
    """One request on a new connection: the answer's head."""
    reader, writer = await _connect(port, client)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
        return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
    finally:
        writer.close()


def _close(connections: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]) -> None:
    for _, writer in connections:
        writer.close()


async def test_at_the_cap_with_every_connection_a_short_request_in_progress_one_more_is_503() -> None:
    app = _Paths()
    async with serving(max_connections=3, app=app) as (server, port):
        busy = []
        for _ in range(3):
            r, w = await _connect(port)
            w.write(b"GET /slow HTTP/1.1\r\nhost: x\r\n\r\n")
            busy.append((r, w))
        await _until(lambda: len(server.server_state.tasks) == 3)  # the three are in the application
        reader, writer = await _connect(port)
        answer = await asyncio.wait_for(reader.read(), timeout=30)  # closed by the server: EOF
        assert answer.startswith(b"HTTP/1.1 503") and b"too many connections" in answer
        assert len(server.server_state.connections) == 3  # the one turned away holds nothing
        app.release.set()
        for r, _ in busy:
            assert (await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), timeout=30)).startswith(b"HTTP/1.1 200")
        _close([*busy, (reader, writer)])


async def test_request_heads_sent_a_byte_at_a_time_cannot_lock_a_client_out() -> None:
    """64 one-byte request heads once held a 64-connection daemon until their 408 at 30 s: now a new
    connection at the cap answers 408 to the oldest of them and is served at once."""
    async with serving(max_connections=16) as (server, port):
        partial = []
        for _ in range(16):
            r, w = await _connect(port)
            w.write(b"G")
            partial.append((r, w))

        def each_has_its_byte() -> bool:
            received = [c for c in server.server_state.connections if isinstance(c, H11Protocol)]
            return len(received) == 16 and all(c.conn.trailing_data[0] for c in received)

        await _until(each_has_its_byte)
        assert (await _get(port, "/")).startswith(b"HTTP/1.1 200")
        oldest = await asyncio.wait_for(partial[0][0].read(), timeout=30)
        assert oldest.startswith(b"HTTP/1.1 408") and b"make room" in oldest
        _close(partial)


async def test_at_the_cap_the_oldest_stream_ends_before_a_short_request_is_refused() -> None:
    app = _Paths()
    async with serving(max_connections=4, app=app, streams=2, holds_open=app.holds_open) as (server, port):
        streams = [await _open_stream(port) for _ in range(2)]
        slow = []
        for _ in range(2):
            r, w = await _connect(port)
            w.write(b"GET /slow HTTP/1.1\r\nhost: x\r\n\r\n")
            slow.append((r, w))
        await _until(lambda: len(server.server_state.tasks) == 4)
        assert (await _get(port, "/")).startswith(b"HTTP/1.1 200")  # served: a stream made room
        rest = await asyncio.wait_for(streams[0][0].read(), timeout=30)
        assert rest.endswith(b"\r\n0\r\n\r\n")  # the oldest stream's body ended cleanly (the last chunk)
        assert not streams[1][0].at_eof()  # the younger one goes on
        app.release.set()
        _close([*streams, *slow])


async def test_streams_have_their_own_budget_and_short_requests_are_always_served() -> None:
    """1,030 event streams or long-polls once made /healthz answer 503 (at most 1024 connections): streams
    now have a budget of their own, never more than half the connections."""
    app = _Paths()
    async with serving(max_connections=16, app=app, streams=100, holds_open=app.holds_open) as (_, port):
        held = [await _open_stream(port) for _ in range(8)]  # half of 16: the budget
        refused = await _get(port, "/stream")
        assert refused.startswith(b"HTTP/1.1 503")
        for _ in range(20):
            assert (await _get(port, "/")).startswith(b"HTTP/1.1 200")
        assert all(not r.at_eof() for r, _ in held)
        _close(held)


async def test_one_client_competes_with_itself_for_connections() -> None:
    """At its own cap a client's new connection makes room among that client's connections only (its
    oldest stream here); another client is served as if it were not there."""
    app = _Paths()
    async with serving(max_connections=64, app=app, per_client=4, holds_open=app.holds_open) as (_, port):
        greedy = [await _open_stream(port, "127.0.0.2") for _ in range(4)]
        assert (await _get(port, "/", client="127.0.0.1")).startswith(b"HTTP/1.1 200")
        assert all(not r.at_eof() for r, _ in greedy)  # the other client took nothing of its
        assert (await _get(port, "/", client="127.0.0.2")).startswith(b"HTTP/1.1 200")
        assert (await asyncio.wait_for(greedy[0][0].read(), timeout=30)).endswith(
            b"\r\n0\r\n\r\n"
        )  # its own oldest
        _close(greedy)


async def test_a_full_stream_budget_makes_room_for_a_client_holding_fewer() -> None:
    app = _Paths()
    async with serving(max_connections=64, app=app, streams=4, holds_open=app.holds_open) as (_, port):
        greedy = [await _open_stream(port, "127.0.0.2") for _ in range(4)]
        refused = await _get(port, "/stream", client="127.0.0.2")
        assert refused.startswith(b"HTTP/1.1 503")  # one more for the client that holds them all: no
        other = await _open_stream(port, "127.0.0.1")  # a client that holds none: yes, in the place of
        assert (await asyncio.wait_for(greedy[0][0].read(), timeout=30)).endswith(b"\r\n0\r\n\r\n")
        _close([*greedy, other])


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
        "from prooflane.server.descriptors import FD_RESERVE, connection_cap, raise_fd_limit\n"
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


_ACCEPTING_WITH_FEW_FILES = """
import asyncio, resource, sys
import uvicorn
from prooflane.server.limits import ConnectionLimits, Server, bind, connection_class

async def hello(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b""})

async def main():
    loop = asyncio.get_running_loop()
    failed = []
    loop.set_exception_handler(lambda loop, context: failed.append(context.get("message", "")))
    sock = bind("127.0.0.1", 0)
    resource.setrlimit(resource.RLIMIT_NOFILE, (48, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    limits = ConnectionLimits(30.0, 1 << 20, 1 << 20, 1 << 20)  # no cap: only the files run out
    config = uvicorn.Config(hello, lifespan="off", log_level="critical", http=connection_class(limits))
    server = Server(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    print(sock.getsockname()[1], flush=True)
    await loop.run_in_executor(None, sys.stdin.readline)  # the connections were made, and some time passed
    print(sum("out of system resource" in m for m in failed), flush=True)
    server.should_exit = True
    await serving

asyncio.run(main())
"""


def test_an_accept_out_of_descriptors_backs_off_instead_of_retrying_the_whole_backlog() -> None:
    """asyncio retried a failed accept() 2,048 times a round, each a log line and a timer: 1,100 connections
    over a 1,024-file limit once wrote 936,000 lines in 40 s. Now one round stops at the first failure."""
    clients: list[socket.socket] = []
    with subprocess.Popen([sys.executable, "-c", _ACCEPTING_WITH_FEW_FILES], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as child:  # fmt: skip
        try:
            assert child.stdout is not None and child.stdin is not None
            port = int(child.stdout.readline())
            for _ in range(100):  # the kernel takes them all (the backlog); the server cannot accept them all
                clients.append(socket.create_connection(("127.0.0.1", port), timeout=30))
            time.sleep(2.5)  # a measured span: about two rounds of asyncio's retry, a second apart
            child.stdin.write("\n")
            child.stdin.flush()
            failures = int(child.stdout.readline())
        finally:
            for client in clients:
                client.close()
            child.wait(30)
    assert 1 <= failures <= 5, f"{failures} failed accept() calls reported in 2.5 s"


@pytest.mark.parametrize(
    ("peername", "client"),
    [
        (("10.0.0.5", 50000), "10.0.0.5"),
        (("::ffff:10.0.0.5", 50000, 0, 0), "10.0.0.5"),  # IPv4 through an IPv6 socket: the same client
        (("2001:db8:1:2:aaaa::1", 50000, 0, 0), "2001:db8:1:2::/64"),
        (("2001:db8:1:2:bbbb::9", 50001, 0, 0), "2001:db8:1:2::/64"),  # one machine's /64: one client
        (("fe80::1%eth0", 50000, 0, 2), "fe80::/64"),
        ("", "local"),  # a Unix socket
    ],
)
def test_a_client_is_an_ipv4_address_or_an_ipv6_64(peername: Any, client: str) -> None:
    assert client_of(peername) == client
