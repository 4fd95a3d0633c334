"""The work queue: priority, then job arrival, then partition index."""

from __future__ import annotations

import asyncio

import pytest

from prooflane.models import Priority
from prooflane.scheduler import WorkKey, WorkQueue

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def key(priority: Priority, seq: int, partition: int) -> WorkKey:
    return WorkKey(priority.rank, seq, partition, f"job{seq}")


def test_order_is_priority_then_arrival_then_partition() -> None:
    queue: WorkQueue[str] = WorkQueue()
    for seq, prio, parts in ((1, Priority.NORMAL, 3), (2, Priority.HIGH, 2), (3, Priority.CRITICAL, 1)):
        for p in reversed(range(parts)):
            queue.push(key(prio, seq, p), f"{seq}/{p}")
    queue.push(key(Priority.NORMAL, 4, 0), "4/0")
    order = [queue.pop()[1] for _ in range(len(queue))]
    assert order == ["3/0", "2/0", "2/1", "1/0", "1/1", "1/2", "4/0"]


def test_remove_job_drops_only_that_job() -> None:
    queue: WorkQueue[str] = WorkQueue()
    for seq in (1, 2):
        for p in range(3):
            queue.push(key(Priority.NORMAL, seq, p), f"{seq}/{p}")
    assert queue.remove_job("job1") == ["1/0", "1/1", "1/2"]
    assert len(queue) == 3
    assert [k.partition for k in queue.queued()] == [0, 1, 2]
    assert queue.peek() == (key(Priority.NORMAL, 2, 0), "2/0")


def test_pushing_the_same_partition_again_replaces_it() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.push(key(Priority.NORMAL, 1, 0), "first")
    queue.push(key(Priority.NORMAL, 1, 0), "retry")
    assert len(queue) == 1 and queue.pop()[1] == "retry"
    with pytest.raises(IndexError):
        queue.pop()


async def test_get_waits_for_an_item() -> None:
    queue: WorkQueue[str] = WorkQueue()
    getter = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    assert not getter.done()
    queue.push(key(Priority.HIGH, 1, 0), "x")
    async with asyncio.timeout(5):
        assert (await getter)[1] == "x"
