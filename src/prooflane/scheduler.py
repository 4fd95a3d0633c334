"""The priority work queue: priority, then job sequence (arrival), then partition index.

The oldest job's lowest partition always comes first within a priority. Entries of a job can be removed
at once (cancellation, failure). Event-loop only: no locks, nothing awaits between a check and a pop.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["WorkKey", "WorkQueue"]

T = TypeVar("T")


@dataclass(frozen=True, order=True)
class WorkKey:
    """The order of work: ``rank`` (0 critical, 1 high, 2 normal), ``job_seq`` (arrival), ``partition``."""

    rank: int
    job_seq: int
    partition: int
    job_id: str = field(compare=False)


class WorkQueue(Generic[T]):
    """A priority queue of items keyed by ``WorkKey``; ``get`` waits for an item."""

    def __init__(self) -> None:
        self._heap: list[tuple[WorkKey, int, T]] = []
        self._live: dict[tuple[str, int], int] = {}  # (job_id, partition) -> entry id still wanted
        self._entry = 0
        self._changed = asyncio.Event()

    def __len__(self) -> int:
        return len(self._live)

    def push(self, key: WorkKey, item: T) -> None:
        """Add ``item``; it replaces any queued item of the same job and partition."""
        self._entry += 1
        self._live[(key.job_id, key.partition)] = self._entry
        heapq.heappush(self._heap, (key, self._entry, item))
        self._wake()

    def peek(self) -> tuple[WorkKey, T] | None:
        """The first item without taking it, or None when empty."""
        self._drop_dead()
        if not self._heap:
            return None
        key, _, item = self._heap[0]
        return key, item

    def pop(self) -> tuple[WorkKey, T]:
        """Take the first item; raises IndexError when empty."""
        self._drop_dead()
        key, _, item = heapq.heappop(self._heap)
        del self._live[(key.job_id, key.partition)]
        return key, item

    async def get(self) -> tuple[WorkKey, T]:
        """Take the first item, waiting for one."""
        while not self:
            await self.wait_change()
        return self.pop()

    async def wait_change(self) -> None:
        """Wait until an item is pushed."""
        await self._changed.wait()

    def remove_job(self, job_id: str) -> list[T]:
        """Remove every queued item of ``job_id``; return them (in queue order)."""
        removed = [
            (k, item)
            for k, e, item in self._heap
            if k.job_id == job_id and self._live.get((k.job_id, k.partition)) == e
        ]
        out = [item for _, item in sorted(removed, key=lambda ki: ki[0])]
        for key in [k for k in self._live if k[0] == job_id]:
            del self._live[key]
        return out

    def queued(self) -> Iterator[WorkKey]:
        """The queued keys in queue order."""
        live = [k for k, e, _ in self._heap if self._live.get((k.job_id, k.partition)) == e]
        return iter(sorted(live))

    def _drop_dead(self) -> None:
        while self._heap:
            key, entry, _ = self._heap[0]
            if self._live.get((key.job_id, key.partition)) == entry:
                return
            heapq.heappop(self._heap)

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()
