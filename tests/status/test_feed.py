"""The event feed: ids, resume without gap or repeat, resync for clients too far behind."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from prooflane import events as ev
from prooflane.status.feed import RESYNC, EventFeed, FeedItem
from tests.support.tracker import Script

# --- the event feed ----------------------------------------------------------------------------------------


async def _take(stream: AsyncIterator[FeedItem], n: int) -> list[FeedItem]:
    return [await asyncio.wait_for(anext(stream), timeout=5) for _ in range(n)]


def test_every_event_gets_the_next_id_applied_or_not(s: Script) -> None:
    s.job("A", partitions=1)
    s(ev.JobDone, job_id="missing")
    backlog = s.tracker.feed.backlog(0)
    assert backlog is not None
    assert [i.id for i in backlog] == [1, 2, 3]  # the fixture's worker registration is 1
    assert [json.loads(i.data)["outcome"] for i in backlog] == ["applied", "applied", "stale"]
    assert [i.event for i in backlog] == ["worker_registered", "job_submitted", "job_done"]
    assert s.tracker.seq == 3


def test_feed_resumes_from_an_id_without_gap_or_repeat(s: Script) -> None:
    async def main() -> list[int]:
        for n in range(5):
            s.job(f"J{n}")
        stream = s.tracker.subscribe(last_event_id=3)
        first = await _take(stream, 3)  # 4, 5, 6 from the ring
        s.job("later")
        first += await _take(stream, 1)
        await stream.aclose()
        return [item.id for item in first]

    assert asyncio.run(main()) == [4, 5, 6, 7]


def test_lease_events_in_the_feed_name_worker_and_partition(s: Script) -> None:
    s.job("A", partitions=1)
    token = s.start("W0", "A", 0)
    s.prove_end(token)
    item = s.tracker.feed.backlog(s.tracker.seq - 1)
    assert item is not None
    data = json.loads(item[0].data)
    assert (data["type"], data["worker_id"], data["job_id"], data["partition"]) == (
        "device_section_finished",
        "W0",
        "A",
        0,
    )


def test_feed_tells_a_client_too_far_behind_to_resync() -> None:
    feed = EventFeed(capacity=3)
    event = ev.BudgetSet(at=0.0, total_bytes=1)
    for n in range(1, 6):
        feed.publish(n, event, "applied", {})

    async def main() -> list[FeedItem]:
        stream = feed.subscribe(last_event_id=1)
        items = await _take(stream, 1)
        feed.publish(6, event, "applied", {})
        items += await _take(stream, 1)
        return items

    resync, next_item = asyncio.run(main())
    assert resync.event == RESYNC
    assert json.loads(resync.data) == {"reason": "behind", "seq": 5}
    assert next_item.id == 6
    assert feed.backlog(99) is None  # an id from another boot


def test_slow_subscriber_gets_a_resync_and_never_blocks_publishing() -> None:
    feed = EventFeed(capacity=100, subscriber_queue=4)
    event = ev.BudgetSet(at=0.0, total_bytes=1)

    async def main() -> list[FeedItem]:
        stream = feed.subscribe()
        pending = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(0)  # the subscriber attaches and waits
        for n in range(1, 11):  # 10 events while it reads none
            feed.publish(n, event, "applied", {})
        items = [await asyncio.wait_for(pending, timeout=5)]
        feed.publish(11, event, "applied", {})
        feed.publish(12, event, "applied", {})
        items += await _take(stream, 2)
        return items

    items = asyncio.run(main())
    assert items[0].event == RESYNC
    assert json.loads(items[0].data)["reason"] == "overflow"
    assert items[0].id == 10  # the newest event it lost: /status at seq >= 10 covers it
    assert [i.id for i in items[1:]] == [11, 12]
    assert feed.resyncs == 1
