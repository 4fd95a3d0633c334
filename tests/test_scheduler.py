"""The work queue: priority, then job arrival, then partition index."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prooflane.models import Priority
from prooflane.scheduler import WorkKey, WorkQueue

pytestmark = pytest.mark.anyio


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


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.integers(0, 2), st.integers(0, 5), st.integers(0, 3)),
        st.tuples(st.just("pop"), st.just(0), st.just(0), st.just(0)),
        st.tuples(st.just("remove"), st.just(0), st.integers(0, 5), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(ops=OPS, slack=st.sampled_from([0, 1024]))
def test_the_queue_agrees_with_a_sorted_list_under_any_sequence(
    ops: list[tuple[str, int, int, int]], slack: int
) -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.SLACK = slack  # 0: the heap is rebuilt on every removal that leaves dropped entries behind
    model: dict[tuple[str, int], tuple[WorkKey, str]] = {}
    for n, (op, rank, seq, partition) in enumerate(ops):
        if op == "push":
            k = WorkKey(rank, seq, partition, f"job{seq}")
            model[(k.job_id, partition)] = (k, f"item{n}")
            queue.push(k, f"item{n}")
        elif op == "pop" and model:
            first = min(model.values(), key=lambda entry: entry[0])
            assert queue.pop() == first
            del model[(first[0].job_id, first[0].partition)]
        elif op == "remove":
            gone = sorted(v for (job, _), v in model.items() if job == f"job{seq}")
            assert queue.remove_job(f"job{seq}") == [item for _, item in gone]
            model = {k: v for k, v in model.items() if k[0] != f"job{seq}"}
        assert len(queue) == len(model)
        assert list(queue.queued()) == sorted(k for k, _ in model.values())
        expected = min(model.values(), key=lambda entry: entry[0]) if model else None
        assert queue.peek() == expected
