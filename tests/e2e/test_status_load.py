"""The status API under load, at a small scale: 100 jobs queued, 3 event-stream clients, 3 pollers.

The real engine (in-process backend, synthesis held so the jobs stay queued) behind the real app and a uvicorn
server on a loopback port. Every event-stream client must receive every event from where it started, in
order, with no resync; every poll must count the live jobs exactly, whatever it lists (``/status`` lists the
running jobs, the next 20 queued and the last 20 ended; ``?jobs=`` bounds the last two).
``benchmarks/bench_load.py`` is the same at 1,000 jobs with 20 + 20 clients, against a daemon process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from prooflane.config import Config
from tests.support.engine import WAIT, served

JOBS, STREAMS, POLLERS, BOUNDED = 100, 3, 3, 10


@dataclass
class Stream:
    """What one event-stream client received: every id in order, and the names of the events."""

    ids: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    until: int | None = None  # the id it must reach
    reached: asyncio.Event = field(default_factory=asyncio.Event)

    def expect(self, until: int) -> None:
        self.until = until
        self.check()

    def check(self) -> None:
        if self.until is not None and self.ids and self.ids[-1] >= self.until:
            self.reached.set()


async def read_events(http: httpx.AsyncClient, after: int, into: Stream) -> None:
    async with http.stream("GET", "/v1/events", headers={"Last-Event-ID": str(after)}) as response:
        assert response.status_code == 200
        event_id, name = None, "message"
        async for line in response.aiter_lines():
            if line.startswith("id: "):
                event_id = int(line[4:].rpartition(":")[2])  # "<boot_id>:<seq>" (or a bare seq)
            elif line.startswith("event: "):
                name = line[7:]
            elif line == "" and event_id is not None:
                into.ids.append(event_id)
                into.names.append(name)
                into.check()
                event_id, name = None, "message"


Answers = list[tuple[str, dict[str, Any]]]  # (path, answer) of every poll


async def poll(http: httpx.AsyncClient, answers: Answers, stop: asyncio.Event) -> None:
    while not stop.is_set():
        for path in ("/status", f"/status?jobs={BOUNDED}"):
            response = await http.get(path)
            assert response.status_code == 200
            answers.append((path, response.json()))
        assert (await http.get("/healthz")).status_code == 200
        await asyncio.sleep(0)


def check_counts(path: str, status: dict[str, Any]) -> None:
    """A poll counts every live job exactly, whatever it lists."""
    live, pipelines = status["live_jobs"], status["pipelines"]
    by_state = {state: live[state] for state in ("queued", "running", "done", "failed", "cancelled")}
    assert sum(by_state.values()) == live["total"] == sum(g["jobs"] for g in live["groups"])
    bound = 20 if path == "/status" else BOUNDED
    ended = live["done"] + live["failed"] + live["cancelled"]
    assert live["shown"] == len(pipelines) == live["running"] + min(bound, live["queued"]) + min(bound, ended)
    listed = {state: sum(p["state"] == state for p in pipelines) for state in by_state}
    assert listed["running"] == live["running"]  # every running job is listed
    pending = sum(g["partitions_pending"] for g in live["groups"])
    assert pending == status["counters"]["queue_depth"]
    assert len({p["job_id"] for p in pipelines}) == len(pipelines)


async def load(url: str, submit: Callable[[], None]) -> tuple[list[Stream], Answers, dict[str, Any], int]:
    async with httpx.AsyncClient(base_url=url, timeout=WAIT) as http:
        start = (await http.get("/status", params={"jobs": 0})).json()["seq"]
        streams = [Stream() for _ in range(STREAMS)]
        readers = [asyncio.create_task(read_events(http, start, s)) for s in streams]
        answers: Answers = []
        stop = asyncio.Event()
        pollers = [asyncio.create_task(poll(http, answers, stop)) for _ in range(POLLERS)]
        await asyncio.to_thread(submit)
        stop.set()
        await asyncio.gather(*pollers)
        final = (await http.get("/status", params={"next": 1000})).json()
        for stream in streams:
            stream.expect(final["seq"])
        async with asyncio.timeout(WAIT):  # every client gets every event up to the final seq
            await asyncio.gather(*(s.reached.wait() for s in streams))
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        return streams, answers, final, start


def test_every_stream_gets_every_event_and_every_poll_counts_exactly(
    engine_config: Callable[..., Config], sector: Path
) -> None:
    with served(engine_config()) as server:
        server.hold()  # no synthesis ends: the jobs stay queued (one partition synthesizing)

        def submit() -> None:
            with httpx.Client(base_url=server.url, timeout=WAIT) as http:
                for n in range(JOBS):
                    body = {"kind": "porep-c2" if n % 2 else "winning-post", "sector": str(sector)}
                    assert http.post("/v1/jobs", json=body).status_code == 202

        streams, answers, final, start = asyncio.run(load(server.url, submit))

    expected = list(range(start + 1, final["seq"] + 1))
    submitted = [name for name in streams[0].names if name == "job_submitted"]
    assert len(submitted) == JOBS
    for stream in streams:  # nothing dropped, nothing repeated, no resync
        assert stream.ids[: len(expected)] == expected
        assert "resync" not in stream.names
    live = final["live_jobs"]
    assert (live["total"], live["shown"], live["queued"] + live["running"]) == (JOBS, JOBS, JOBS)
    assert live["running"] <= 1 and len(final["pipelines"]) == JOBS
    assert len(answers) >= 2 * POLLERS
    for path, status in answers:
        check_counts(path, status)
    partitions = sum(p["total_partitions"] for p in final["pipelines"])
    assert final["counters"]["queue_depth"] + final["synthesis"]["active"] == partitions
