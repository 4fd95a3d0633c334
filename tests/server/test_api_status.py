"""The status routes over the real status tracker: ``/status`` bounded by ``?jobs=``, and the event stream
written from the tracker's own feed (a burst in few writes, heartbeats, the end of a stream, resync).

``tests/test_api.py`` covers the HTTP layer over a fake engine; here the engine side is a real
:class:`~prooflane.status.StatusTracker` behind the methods the status routes call.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import cast

import httpx
import pytest

from prooflane import events as ev
from prooflane.config import Config
from prooflane.server.api import EngineApi, create_app
from prooflane.server.sse import BATCH_EVENTS, event_stream
from prooflane.server.status_answer import bounded_tag
from prooflane.status.feed import Subscription
from prooflane.status.snapshot import Health, StatusSnapshot
from prooflane.status.tracker import StatusTracker, TrackerConfig, TrackerTotals

pytestmark = pytest.mark.anyio


class TrackerEngine:
    """The engine methods the status routes call, answered by a real tracker."""

    ready = True

    def __init__(self, tracker: StatusTracker) -> None:
        self.tracker = tracker

    def snapshot(self) -> StatusSnapshot:
        return self.tracker.snapshot()

    def totals(self) -> TrackerTotals:
        return self.tracker.totals()

    def health(self) -> Health:
        return self.tracker.health()

    @property
    def boot_id(self) -> str:
        return self.tracker.boot_id

    @property
    def seq(self) -> int:
        return self.tracker.seq

    def subscribe(self, last_event_id: int | None = None) -> Subscription:
        return self.tracker.subscribe(last_event_id)


def tracker_with_jobs(jobs: int) -> StatusTracker:
    tracker = StatusTracker(TrackerConfig(sample_rss=False), clock=lambda: 10.0, strict=True)
    tracker.apply(ev.WorkerRegistered(at=10.0, worker_id="cpu0/w0", device="cpu0"))
    for n in range(jobs):
        tracker.apply(ev.JobSubmitted(at=10.0, job_id=f"j{n}", kind="k", priority="normal", partitions=2))
    return tracker


def http_for(engine: TrackerEngine) -> httpx.AsyncClient:
    app = create_app(cast(EngineApi, engine), Config())
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")


async def test_status_lists_the_running_jobs_the_next_queued_and_counts_them_all() -> None:
    engine = TrackerEngine(tracker_with_jobs(5))
    engine.tracker.apply(ev.SynthesisStarted(at=10.0, job_id="j3", partition=0))
    async with http_for(engine) as http:
        whole = (await http.get("/status")).json()
        bounded = (await http.get("/status", params={"next": 1})).json()
        none = (await http.get("/status", params={"jobs": 0})).json()
        head = await http.head("/status", params={"jobs": 1})
    assert [p["job_id"] for p in whole["pipelines"]] == ["j0", "j1", "j2", "j3", "j4"]
    assert [p["job_id"] for p in bounded["pipelines"]] == ["j0", "j3"]  # running, then the next queued
    counts = {k: v for k, v in bounded["live_jobs"].items() if k != "groups"}
    assert counts == {"total": 5, "shown": 2, "queued": 4, "running": 1, "done": 0, "failed": 0,
                      "cancelled": 0}  # fmt: skip
    assert bounded["live_jobs"]["groups"] == [
        {"proof_kind": "k", "priority": "normal", "state": "queued", "jobs": 4, "partitions": 8,
         "partitions_pending": 8},
        {"proof_kind": "k", "priority": "normal", "state": "running", "jobs": 1, "partitions": 2,
         "partitions_pending": 1},
    ]  # fmt: skip
    assert [p["job_id"] for p in none["pipelines"]] == ["j3"]  # a running job is always listed
    assert none["live_jobs"]["total"] == 5
    assert whole["live_jobs"]["shown"] == 5
    assert head.status_code == 200 and head.content == b""


async def test_status_by_default_lists_twenty_queued_of_a_thousand() -> None:
    engine = TrackerEngine(tracker_with_jobs(1000))
    async with http_for(engine) as http:
        answer = await http.get("/status")
    doc = answer.json()
    assert [p["job_id"] for p in doc["pipelines"]] == [f"j{i}" for i in range(20)]
    assert doc["live_jobs"]["total"] == doc["live_jobs"]["queued"] == 1000 and doc["live_jobs"]["shown"] == 20
    assert len(answer.content) < 128 << 10


async def test_an_unchanged_status_is_304_and_encoded_once() -> None:
    engine = TrackerEngine(tracker_with_jobs(30))
    app = create_app(cast(EngineApi, engine), Config())
    answers = app.state.status_answers
    answers.clock = lambda: 0.0  # no encoding outlives REUSE_SECS here, whatever the machine's speed
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        first = await http.get("/status")
        tag = first.headers["etag"]
        again = await http.get("/status", headers={"If-None-Match": tag})
        other = await http.get("/status")  # another client, no tag: the same encoding
        wildcard = await http.get("/status", headers={"If-None-Match": "*"})
        engine.tracker.apply(ev.SynthesisStarted(at=10.0, job_id="j3", partition=0))
        moved = await http.get("/status", headers={"If-None-Match": tag})
    assert tag.startswith('W/"') and first.headers["cache-control"] == "no-cache"
    assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == tag
    assert wildcard.status_code == 304
    assert other.status_code == 200 and other.content == first.content
    assert moved.status_code == 200 and moved.headers["etag"] != tag
    assert moved.json()["seq"] == first.json()["seq"] + 1
    assert answers.encodings == 2  # the first answer, then the one after the event


@pytest.mark.parametrize(
    ("first", "then"),
    [({}, {"next": 1}), ({"next": 1}, {"next": 2}), ({"ended": 0}, {"ended": 5}), ({"jobs": 3}, {"jobs": 0})],
)
async def test_a_tag_names_the_bounds_asked_so_other_bounds_are_never_304(
    first: dict[str, int], then: dict[str, int]
) -> None:
    """A tag once named the snapshot alone: a client that asked other bounds (``?next=``, ``?ended=``,
    ``?jobs=``) was answered 304, and kept the body of the bounds it had."""
    engine = TrackerEngine(tracker_with_jobs(6))
    async with http_for(engine) as http:
        one = await http.get("/status", params=first)
        tag = one.headers["etag"]
        same = await http.get("/status", params=first, headers={"If-None-Match": tag})
        other = await http.get("/status", params=then, headers={"If-None-Match": tag})
        direct = await http.get("/status", params=then)
    assert same.status_code == 304
    assert other.status_code == 200 and other.headers["etag"] != tag
    assert other.content == direct.content and other.headers["etag"] == direct.headers["etag"]


def test_a_bounded_tag_keeps_the_snapshots_and_its_weakness() -> None:
    assert bounded_tag('W/"b.7.abc"', 20, 20) == 'W/"b.7.abc.n20.e20"'
    assert bounded_tag('"b.7.abc"', 0, 1000) == '"b.7.abc.n0.e1000"'
    assert bounded_tag('W/"b.7.abc"', 1, 2) != bounded_tag('W/"b.7.abc"', 2, 1)


async def read(stream: AsyncIterator[str], chunks: int) -> list[str]:
    return [await asyncio.wait_for(anext(stream), timeout=10) for _ in range(chunks)]


def ids(chunk: str) -> list[int]:
    return [int(line.rpartition(":")[2]) for line in chunk.splitlines() if line.startswith("id: ")]


async def test_a_burst_of_events_goes_out_in_few_writes_without_a_gap() -> None:
    tracker = tracker_with_jobs(0)
    engine = TrackerEngine(tracker)
    stream = event_stream(cast(EngineApi, engine), "0", 60.0, asyncio.Event())
    for n in range(BATCH_EVENTS + 43):  # published before the stream reads anything
        tracker.apply(ev.JobSubmitted(at=10.0, job_id=f"j{n}", kind="k", priority="normal", partitions=1))
    preamble, first, second = await read(stream, 3)
    assert preamble.startswith(": prooflane event stream")
    assert ids(first) == list(range(1, BATCH_EVENTS + 1))  # WorkerRegistered was id 1
    assert ids(second) == list(range(BATCH_EVENTS + 1, tracker.seq + 1))
    frame = first.split("\n\n")[1]
    assert frame.startswith(f"id: {tracker.boot_id}:2\nevent: job_submitted\ndata: ")
    assert json.loads(frame.split("data: ", 1)[1])["job_id"] == "j0"
    tracker.apply(ev.JobSubmitted(at=10.0, job_id="late", kind="k", priority="normal", partitions=1))
    assert ids((await read(stream, 1))[0]) == [tracker.seq]  # then live, one event at a time
    await stream.aclose()
    assert tracker.feed.subscribers == 0


async def test_every_subscriber_shares_one_encoding_of_each_event() -> None:
    tracker = tracker_with_jobs(1)
    first, second = tracker.subscribe(0), tracker.subscribe(0)
    a, b = first.take(10), second.take(10)
    assert a == b and all(x is y for x, y in zip(a, b, strict=True))
    await first.aclose()
    await second.aclose()


async def test_an_idle_stream_sends_heartbeats_and_ends_when_the_daemon_closes() -> None:
    tracker = tracker_with_jobs(1)
    closing = asyncio.Event()
    stream = event_stream(cast(EngineApi, TrackerEngine(tracker)), str(tracker.seq), 0.01, closing)
    assert (await read(stream, 3))[1:] == [": heartbeat\n\n", ": heartbeat\n\n"]
    assert tracker.feed.subscribers == 1
    closing.set()
    rest = [chunk async for chunk in stream]
    assert all(chunk == ": heartbeat\n\n" for chunk in rest)  # at most one more, then the end
    assert tracker.feed.subscribers == 0


async def test_a_stream_from_an_id_no_longer_held_starts_with_a_resync() -> None:
    tracker = StatusTracker(TrackerConfig(sample_rss=False, feed_capacity=4), clock=lambda: 10.0)
    for n in range(10):
        tracker.apply(ev.BudgetSet(at=10.0, total_bytes=n))
    stream = event_stream(cast(EngineApi, TrackerEngine(tracker)), "2", 60.0, asyncio.Event())
    chunk = (await read(stream, 2))[1]
    assert chunk == f'id: {tracker.boot_id}:10\nevent: resync\ndata: {{"reason":"behind","seq":10}}\n\n'
    await stream.aclose()


@pytest.mark.parametrize(
    ("accepts", "gzipped"),
    [
        ("gzip", True),
        ("br, gzip;q=0.5", True),
        ("*", True),
        ("identity", False),
        ("gzip;q=0", False),
        (None, False),
    ],
)
async def test_a_large_status_is_gzipped_for_a_client_that_takes_it(
    accepts: str | None, gzipped: bool
) -> None:
    engine = TrackerEngine(tracker_with_jobs(400))
    headers = {"Accept-Encoding": accepts} if accepts is not None else {"Accept-Encoding": ""}
    async with http_for(engine) as http:
        small = await http.get("/status", params={"jobs": 0}, headers=headers)
        answer = await http.get("/status", params={"next": 400}, headers=headers)
    assert answer.headers.get("content-encoding") == ("gzip" if gzipped else None)
    assert answer.headers["vary"] == "Accept-Encoding"
    assert len(answer.json()["pipelines"]) == 400  # httpx undoes the gzip: the same snapshot
    sent = int(answer.headers["content-length"])
    if gzipped:
        assert sent * 5 < len(answer.content)  # the wire carries a fifth or less
        assert "content-encoding" not in small.headers  # a small answer is sent as it is
