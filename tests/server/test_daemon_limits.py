"""The daemon's app on its own HTTP server (``http_server``) with small caps, over real sockets: event
streams, long-polls and request heads sent a byte at a time cannot starve ``/healthz`` and ``/status``.

The engine runs on the in-process backend on the test's event loop; a gate holds its job's synthesis, so a
long-poll for it waits as long as the test wants.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator

import pytest

from prooflane.server.api import close_streams, create_app, holds_open
from prooflane.server.limits import bind, http_server
from tests.support.engine import Harness, on_long_poll, synthesis_of

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]
Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@contextlib.asynccontextmanager
async def daemon_server(h: Harness, max_connections: int, max_streams: int = 512) -> AsyncIterator[int]:
    """The daemon's app around ``h``'s engine on the daemon's server, with these caps; its port."""
    config = dataclasses.replace(h.engine.config, max_connections=max_connections, max_streams=max_streams)
    app = create_app(h.engine, config)
    sock = bind("127.0.0.1", 0)
    server = http_server(app, config, holds_open=holds_open, graceful_shutdown_secs=1)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:  # noqa: ASYNC110  (uvicorn's server offers no event for "started")
        await asyncio.sleep(0.01)
    try:
        yield sock.getsockname()[1]
    finally:
        close_streams(app)
        server.should_exit = True
        await serving


async def _send(port: int, path: str, client: str = "127.0.0.1") -> Connection:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(client, 0))
    writer.write(f"GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n".encode())
    return reader, writer


async def _status(connection: Connection) -> int:
    head = await asyncio.wait_for(connection[0].readuntil(b"\r\n\r\n"), timeout=30)
    return int(head.split(b" ", 2)[1])


async def _get(port: int, path: str, client: str = "127.0.0.1") -> int:
    connection = await _send(port, path, client)
    try:
        return await _status(connection)
    finally:
        connection[1].close()


async def _answer(connection: Connection) -> tuple[int, dict[str, object]]:
    """A whole answer with a Content-Length: its status and JSON body."""
    reader = connection[0]
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    return int(head.split(b" ", 2)[1]), json.loads(await reader.readexactly(length))


def _close(connections: list[Connection]) -> None:
    for _, writer in connections:
        writer.close()


async def test_long_polls_and_event_streams_leave_room_for_healthz_and_status(h: Harness) -> None:
    """1,030 long-polls or event streams once made `/healthz` answer 503 "too many connections" on a
    default daemon for as long as they were held. Here at 16 connections (so at most 8 streams)."""
    held = h.gate.hold(lambda s: synthesis_of(s) is not None)
    job_id = await h.submit()
    async with daemon_server(h, max_connections=16, max_streams=64) as port:
        polls = [await _send(port, f"/v1/jobs/{job_id}/proof?wait=300") for _ in range(8)]
        streams = [await _send(port, "/v1/events") for _ in range(4)]
        assert await _status(streams[0]) == 503  # past the budget: refused, not queued
        polls_on_top = [await _send(port, f"/v1/jobs/{job_id}/proof?wait=300") for _ in range(4)]
        for connection in polls_on_top:
            assert (await _answer(connection))[0] == 503
        for _ in range(20):
            assert await _get(port, "/healthz") == 200
            assert await _get(port, "/status") == 200
        assert all(not r.at_eof() for r, _ in polls)  # the long-polls held their place meanwhile
        held.release.set()
        _close([*polls, *streams, *polls_on_top])


async def test_a_long_poll_ended_to_make_room_answers_202_with_the_jobs_state(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream budget full of one client's long-polls: another client's event stream takes the place
    of the oldest, which answers as at its deadline (202 and the job's state, ask again)."""
    held = h.gate.hold(lambda s: synthesis_of(s) is not None)
    job_id = await h.submit()
    waiting: list[None] = []
    on_long_poll(monkeypatch, h.engine, lambda: waiting.append(None))
    async with daemon_server(h, max_connections=64, max_streams=4) as port:
        polls = [await _send(port, f"/v1/jobs/{job_id}/proof?wait=300") for _ in range(4)]
        for _ in range(3000):  # until the four wait on the engine (at most 30 s)
            if len(waiting) == 4:
                break
            await asyncio.sleep(0.01)
        assert len(waiting) == 4
        other = await _send(port, "/v1/events", client="127.0.0.2")
        assert await _status(other) == 200
        status, body = await _answer(polls[0])
        assert status == 202 and body["job_id"] == job_id and body["state"] != "done"
        held.release.set()
        _close([*polls, other])


async def test_request_heads_sent_a_byte_at_a_time_leave_healthz_answering(h: Harness) -> None:
    """64 one-byte request heads once held a 64-connection daemon until their 408 at 30 s."""
    async with daemon_server(h, max_connections=16) as port:
        heads = []
        for _ in range(40):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"G")
            heads.append((reader, writer))
        for _ in range(10):
            assert await _get(port, "/healthz") == 200
        assert (await asyncio.wait_for(heads[0][0].read(), timeout=30)).startswith(b"HTTP/1.1 408")
        _close(heads)


@pytest.mark.parametrize(
    ("path", "query", "held"),
    [
        ("/v1/events", b"", True),
        ("/v1/jobs/j1/proof", b"wait=30", True),
        ("/v1/jobs/j1/proof", b"wait=0", False),  # answers at once: a short request
        ("/v1/jobs/j1/proof", b"", False),
        ("/v1/jobs/j1/proof", b"wait=soon", False),  # a 422 at once
        ("/v1/jobs/j1", b"wait=30", False),
        ("/status", b"", False),
    ],
)
def test_streams_are_the_event_stream_and_the_long_polls(path: str, query: bytes, held: bool) -> None:
    assert holds_open({"type": "http", "path": path, "query_string": query}) is held
