"""Uploads at the caps, over real sockets on the daemon's HTTP server stack: they count like every other
request, keep a reserve of connections free for short ones, are judged by their rate (on a test clock, so
nothing here depends on the machine's speed), and every refusal reaches its client as an answer, not a reset.

The application is :class:`~prooflane.server.guard.BodyLimit` (the daemon's and the fleet's) in front of a few
routes; ``/upload`` and ``/refuse`` are uploads to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from prooflane.config import Config
from prooflane.errors import ConfigError
from prooflane.fleet import Fleet, create_fleet_app
from prooflane.fleet.app import holds_open as fleet_holds_open
from prooflane.fleet.config import FleetConfig
from prooflane.server.guard import BodyLimit
from prooflane.server.limits import (
    MAX_HEADER_BYTES,
    ConnectionLimits,
    Scope,
    Server,
    bind,
    connection_class,
    http_server,
)
from tests.support.clock import ManualClock

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]
Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]
WINDOW = 3600.0  # an upload's window: on the test clock only (no real timer of the server fires in a test)
WAIT = 30.0  # the most any one answer may take to come (never reached when the test passes)


class Routes:
    """``/`` answers at once; ``/slow`` once ``release`` is set (a short request in progress); ``/upload``
    reads its whole body (once ``release`` is set, when the request asks ``?held``) and answers how many
    bytes it read; ``/refuse`` answers 401 without reading (an upload with a wrong token)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.uploading = 0  # uploads that reached the route (admitted)
        self.read = 0  # bytes the uploads read, all together (the server has counted them by then)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        path = scope["path"]
        if path == "/refuse":
            await _send(send, 401, b"wrong bearer token")
            return
        if path == "/slow":
            await self.release.wait()
        if path != "/upload":
            await _send(send, 200, b"ok")
            return
        self.uploading += 1
        if scope.get("query_string") == b"held":
            await self.release.wait()
        read, more = 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return
            read, more = read + len(message.get("body", b"")), message.get("more_body", False)
            self.read += len(message.get("body", b""))
        await _send(send, 200, b"%d" % read)


async def _send(send: Any, status: int, body: bytes) -> None:
    headers = [(b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _uploads(scope: Scope) -> bool:
    return scope.get("path") in ("/upload", "/refuse")


@contextlib.asynccontextmanager
async def serving(
    routes: Routes,
    *,
    max_connections: int = 1 << 20,
    per_client: int = 1 << 20,
    reserved: int = 0,
    min_rate: float = 100.0,
    clock: ManualClock | None = None,
    keep_alive: int = 5,
) -> AsyncIterator[tuple[Server, int]]:
    sock = bind("127.0.0.1", 0)
    limits = ConnectionLimits(WINDOW, max_connections, per_client, 1 << 20, reserved, min_rate)
    app = BodyLimit(routes, max_bytes=1 << 20, streamed=_uploads)
    config = uvicorn.Config(
        app, lifespan="off", log_level="warning", http=connection_class(limits, clock=clock),
        h11_max_incomplete_event_size=MAX_HEADER_BYTES, timeout_graceful_shutdown=1,
        timeout_keep_alive=keep_alive,
    )  # fmt: skip
    server = Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:  # noqa: ASYNC110  (uvicorn's server offers no event for "started")
        await asyncio.sleep(0.01)
    try:
        yield server, sock.getsockname()[1]
    finally:
        routes.release.set()
        server.should_exit = True
        await task


async def _until(condition: Any) -> None:
    for _ in range(3000):  # at most 30 s
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the server never got there")


async def _connect(port: int, client: str = "127.0.0.1") -> Connection:
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(client, 0))


async def _upload(port: int, first: bytes = b"x", query: str = "", length: int = 10**6) -> Connection:
    """An upload of ``length`` bytes begun: its head and ``first`` bytes sent (on their way)."""
    reader, writer = await _connect(port)
    path = f"/upload?{query}" if query else "/upload"
    writer.write(f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {length}\r\n\r\n".encode() + first)
    return reader, writer


async def _send_body(routes: Routes, uploads: list[Connection], data: bytes) -> None:
    """``data`` sent on each of ``uploads``, and read by the routes (so counted by the server, at the test
    clock's time now)."""
    expected = routes.read + len(data) * len(uploads)
    for _, writer in uploads:
        writer.write(data)
    await _until(lambda: routes.read >= expected)


async def _whole(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes (its answer, then EOF); a reset fails the test."""
    return await asyncio.wait_for(reader.read(), timeout=WAIT)


async def _get(port: int, path: str = "/") -> bytes:
    reader, writer = await _connect(port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n".encode())
        return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=WAIT)
    finally:
        writer.close()


def _protocols(server: Server) -> list[Any]:
    return [c for c in server.server_state.connections if isinstance(c, H11Protocol)]


def _close(connections: list[Connection]) -> None:
    for _, writer in connections:
        writer.close()


async def test_uploads_leave_a_reserve_of_connections_for_short_requests() -> None:
    """256 trickling uploads from one address once locked `/healthz` out for every client of that address
    (its 256 connections all uploads). Here a client of 16 connections, 4 kept for short requests."""
    routes = Routes()
    async with serving(routes, per_client=16, reserved=4) as (_, port):
        uploads = []
        for held in range(12):
            uploads.append(await _upload(port))
            await _until(lambda held=held: routes.uploading == held + 1)
        for _ in range(4):  # past its share: refused at once, with an answer it reads
            reader, writer = await _upload(port)
            answer = await _whole(reader)
            assert answer.startswith(b"HTTP/1.1 503") and b"kept for short requests" in answer, answer
            assert b"connection: close" in answer.lower()
            writer.close()
        for _ in range(10):
            assert (await _get(port)).startswith(b"HTTP/1.1 200")
        assert routes.uploading == 12 and not any(r.at_eof() for r, _ in uploads)
        _close(uploads)


async def test_at_a_cap_a_slow_upload_is_closed_first() -> None:
    clock = ManualClock()
    routes = Routes()
    async with serving(routes, max_connections=3, clock=clock) as (_, port):
        trickling = await _upload(port)
        await _until(lambda: routes.uploading == 1)
        idle = [await _connect(port) for _ in range(2)]
        clock.advance(2 * WINDOW)  # past its grace, with 1 byte (or none) in a window: slow
        assert (await _get(port)).startswith(b"HTTP/1.1 200")
        cut = await _whole(trickling[0])
        assert cut.startswith(b"HTTP/1.1 408") and b"upload slower than 100 bytes/s" in cut, cut
        assert not any(r.at_eof() for r, _ in idle)  # the idle connections come after it
        _close([trickling, *idle])


async def test_an_upload_in_its_grace_or_keeping_its_rate_is_not_made_room_for() -> None:
    clock = ManualClock()
    routes = Routes()
    async with serving(routes, max_connections=2, min_rate=1.0, clock=clock) as (_, port):
        uploads = [await _upload(port, b"", length=10**7) for _ in range(2)]
        await _until(lambda: routes.uploading == 2)
        clock.advance(WINDOW / 2)
        refused = await _get(port)  # both in their grace (their first window): neither is slow yet
        assert refused.startswith(b"HTTP/1.1 503"), refused
        for _ in range(3):  # twice the minimum (1 byte a second) in each window, in one burst
            await _send_body(routes, uploads, b"y" * int(2 * WINDOW))  # neither is cut off
            clock.advance(WINDOW)
            assert (await _get(port)).startswith(b"HTTP/1.1 503")  # nor slow
        assert not any(r.at_eof() for r, _ in uploads)
        _close(uploads)


async def test_an_upload_slower_than_the_minimum_is_cut_off_however_often_it_sends() -> None:
    """An upload's deadline once restarted with every byte: a byte every 20 s held its connection forever."""
    clock = ManualClock()
    routes = Routes()
    async with serving(routes, clock=clock) as (_, port):
        reader, writer = await _upload(port, b"")
        await _until(lambda: routes.uploading == 1)
        for _ in range(3):  # a byte every quarter of a window: its first window (its grace) goes by
            clock.advance(WINDOW / 4)
            await _send_body(routes, [(reader, writer)], b"x")
        clock.advance(WINDOW / 4)  # 3 bytes in that window, where 100 a second are the least
        writer.write(b"x")
        answer = await _whole(reader)
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert b"upload slower than 100 bytes/s (min_upload_bytes_per_sec)" in answer
        writer.close()


async def test_an_upload_the_server_holds_back_is_never_judged_slow() -> None:
    """The route does not read yet (its buffer full, the server stops reading): the windows that pass
    meanwhile are the server's doing, and the upload is neither cut off nor made room for."""
    clock = ManualClock()
    routes = Routes()
    length = 4 << 20
    async with serving(routes, max_connections=1, clock=clock) as (server, port):
        reader, writer = await _upload(port, b"z" * (256 << 10), query="held", length=length)
        await _until(lambda: routes.uploading == 1 and all(c.flow.read_paused for c in _protocols(server)))
        clock.advance(3 * WINDOW)
        refused = await _get(port)
        assert refused.startswith(b"HTTP/1.1 503"), refused  # it was not closed to make room
        routes.release.set()
        writer.write(b"z" * (length - (256 << 10)))
        await writer.drain()
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=WAIT)
        assert answer.startswith(b"HTTP/1.1 200"), answer
        assert await reader.readexactly(len(str(length))) == str(length).encode()
        writer.close()


async def test_at_the_connection_cap_the_503_is_read_not_reset() -> None:
    """The request is in the server's socket before it accepts the connection (no await between the connect
    and the send): closing at once with it unread sent a reset, and the client lost the 503."""
    routes = Routes()
    async with serving(routes, max_connections=1) as (server, port):
        busy = await _connect(port)
        busy[1].write(b"GET /slow HTTP/1.1\r\nhost: x\r\n\r\n")
        await _until(lambda: len(server.server_state.tasks) == 1)
        loop = asyncio.get_running_loop()
        for _ in range(5):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            sock.setblocking(False)
            answer = b""
            while chunk := await asyncio.wait_for(loop.sock_recv(sock, 65536), timeout=WAIT):
                answer += chunk
            sock.close()
            assert answer.startswith(b"HTTP/1.1 503") and b"too many connections" in answer, answer
        _close([busy])


async def test_a_refused_upload_is_answered_and_closed_at_once() -> None:
    """An upload refused before its body was read (401 here) once held its connection until uvicorn's
    keep-alive timeout (5 s; an hour here), reading its body meanwhile."""
    routes = Routes()
    async with serving(routes, max_connections=16, keep_alive=3600) as (server, port):
        reader, writer = await _connect(port)
        head = b"POST /refuse HTTP/1.1\r\nhost: x\r\ncontent-length: 100000000\r\n\r\n"
        writer.write(head + b"w" * (64 << 10))
        answer = await _whole(reader)  # the answer, then the end: the server closed it
        assert answer.startswith(b"HTTP/1.1 401") and answer.endswith(b"wrong bearer token"), answer
        assert b"connection: close" in answer.lower()
        assert not _protocols(server)  # it counts no longer
        writer.close()


def test_the_upload_keys_come_from_the_config_and_the_fleet_has_the_daemons() -> None:
    limits = ConnectionLimits.of(Config(min_upload_bytes_per_sec=1000, reserved_connections=8))
    assert (limits.min_upload_rate, limits.reserved) == (1000, 8)
    fleet = ConnectionLimits.of(FleetConfig())  # the fleet's server: the same limits, the daemon's defaults
    assert (fleet.min_upload_rate, fleet.reserved) == (
        Config.min_upload_bytes_per_sec,
        Config.reserved_connections,
    )
    for key, value in (("min_upload_bytes_per_sec", 0), ("reserved_connections", -1)):
        with pytest.raises(ConfigError, match=key):
            Config.from_dict({key: value})


def test_the_reserve_is_never_more_than_half_a_cap() -> None:
    limits = ConnectionLimits(30.0, 1024, 256, 512, reserved=32)
    assert (limits.held_cap, limits.client_held_cap) == (992, 224)
    small = ConnectionLimits(30.0, 16, 4, 512, reserved=32)
    assert (small.held_cap, small.client_held_cap) == (8, 2)


async def test_the_fleets_circuit_uploads_leave_a_reserve_too(tmp_path: Path) -> None:
    """The fleet's app on its own server (the daemon's, ``http_server``): trickling circuit uploads from one
    address take at most its connections less the reserve; `/healthz` answers from that address."""
    config = FleetConfig(port=0, token="fleet-token", max_connections=16, max_connections_per_client=4)
    fleet = Fleet(config, tmp_path / "fleet.toml")
    app = create_fleet_app(fleet)
    sock = bind("127.0.0.1", 0)
    server = http_server(app, config, holds_open=fleet_holds_open, graceful_shutdown_secs=1)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:  # noqa: ASYNC110  (uvicorn's server offers no event for "started")
        await asyncio.sleep(0.01)
    port = sock.getsockname()[1]
    head = (
        b"PUT /fleet/circuits/wp HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer fleet-token\r\n"
        b"content-type: multipart/form-data; boundary=b0undary\r\ncontent-length: 100000\r\n\r\n"
        b"--b0undary\r\n"
    )
    uploads = []
    try:
        for _ in range(2):  # 4 connections from one client, 2 of them kept for short requests
            uploads.append(await _connect(port))
            uploads[-1][1].write(head)
            await _until(lambda: len(_protocols(server)) == len(uploads) and all(
                c.upload_started_at is not None for c in _protocols(server)))  # fmt: skip
        reader, writer = await _connect(port)
        writer.write(head)
        answer = await _whole(reader)
        assert answer.startswith(b"HTTP/1.1 503") and b"kept for short requests" in answer, answer
        writer.close()
        for _ in range(5):
            assert (await _get(port, "/healthz")).startswith(b"HTTP/1.1 200")
        assert not any(r.at_eof() for r, _ in uploads)
    finally:
        _close(uploads)
        server.should_exit = True
        await serving
        await fleet.close()
