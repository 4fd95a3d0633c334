"""The priority work queue: priority, then job sequence (arrival), then partition index.

The oldest job's lowest partition always comes first within a priority. Entries of a job can be removed
at once (cancellation, failure). Event-loop only: no locks, nothing awaits between a check and a pop.

``first`` looks past the jobs a caller names (the dispatcher's one exception to the order: a job whose
synthesis runs long waits for it, and the jobs behind it go on) and ``take`` removes what it found.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable, Iterator
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

    SLACK = 1024
    """Dropped entries the heap may hold beyond twice the live ones before it is rebuilt."""

    def __init__(self) -> None:
        self._heap: list[tuple[WorkKey, int, T]] = []
        # job_id -> partition -> the heap entry still wanted (others in the heap are dropped when reached)
        self._jobs: dict[str, dict[int, tuple[WorkKey, int, T]]] = {}
        self._count = 0
        self._entry = 0
        self._changed = asyncio.Event()

    def __len__(self) -> int:
        return self._count

    def push(self, key: WorkKey, item: T) -> None:
        """Add ``item``; it replaces any queued item of the same job and partition."""
        self._entry += 1
        entry = (key, self._entry, item)
        partitions = self._jobs.setdefault(key.job_id, {})
        self._count += key.partition not in partitions
        partitions[key.partition] = entry
        heapq.heappush(self._heap, entry)
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
        partitions = self._jobs[key.job_id]
        del partitions[key.partition]
        if not partitions:
            del self._jobs[key.job_id]
        self._count -= 1
        return key, item

    def first(self, allowed: Callable[[str], bool]) -> tuple[WorkKey, T] | None:
        """The first item, in queue order, of a job for which ``allowed(job_id)`` holds, or None. Costs the
        queued jobs, not their partitions (each job's first partition is looked at)."""
        heads = (min(partitions.values()) for job, partitions in self._jobs.items() if allowed(job))
        found = min(heads, default=None)
        return None if found is None else (found[0], found[2])

    def take(self, key: WorkKey) -> T:
        """Remove the item queued at ``key`` (as ``first`` found it); its heap entry goes when reached."""
        partitions = self._jobs[key.job_id]
        _, _, item = partitions.pop(key.partition)
        if not partitions:
            del self._jobs[key.job_id]
        self._count -= 1
        return item

    async def get(self) -> tuple[WorkKey, T]:
        """Take the first item, waiting for one."""
        while not self:
            await self.wait_change()
        return self.pop()

    async def wait_change(self) -> None:
        """Wait until an item is pushed."""
        await self._changed.wait()

    def remove_job(self, job_id: str) -> list[T]:
        """Remove every queued item of ``job_id``; return them (in queue order). Costs the job's own
        partitions, not the queue's: their heap entries are dropped when they reach the top."""
        partitions = self._jobs.pop(job_id, {})
        self._count -= len(partitions)
        if len(self._heap) > 2 * self._count + self.SLACK:  # mostly dropped entries: keep only live ones
            self._heap = [entry for entries in self._jobs.values() for entry in entries.values()]
            heapq.heapify(self._heap)
        return [item for _, _, item in sorted(partitions.values(), key=lambda entry: entry[0])]

    def queued(self) -> Iterator[WorkKey]:
        """The queued keys in queue order."""
        return iter(sorted(key for partitions in self._jobs.values() for key, _, _ in partitions.values()))

    def _drop_dead(self) -> None:
        while self._heap:
            key, entry, _ = self._heap[0]
            wanted = self._jobs.get(key.job_id, {}).get(key.partition)
            if wanted is not None and wanted[1] == entry:
                return
            heapq.heappop(self._heap)

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()
