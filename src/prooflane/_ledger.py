"""The status tracker's private records: jobs, partitions, leases, workers, and the memory ledger.

These are live, mutable state: only :class:`prooflane.status.StatusTracker` touches them, on the event loop
(no locks), and they never leave it: readers get frozen copies from :mod:`prooflane._snapshot`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import assert_never

from . import events as ev
from ._snapshot import AllocationStatus, PartitionStatus
from ._stats import DeviceBusy
from .states import LIVE_PARTITION_STATES, JobState, PartitionState, WorkerState

__all__ = [
    "IllegalEvent",
    "Job",
    "Lease",
    "MemoryEvent",
    "MemoryLedger",
    "Partition",
    "StaleEvent",
    "Worker",
]


class StaleEvent(Exception):
    """Raised inside the tracker when an event concerns work that is over or superseded: dropped, counted."""


class IllegalEvent(Exception):
    """Raised inside the tracker when an event breaks the legal transitions (counted, or raised if strict)."""


@dataclass(slots=True, eq=False)
class Job:
    """A job in the live view."""

    job_id: str
    kind: str
    priority: str
    submitted_at: float
    circuit: str | None = None  # the registered circuit of a circom job
    partitions: list[Partition] = field(default_factory=list)
    started: bool = False
    done: int = 0  # invariant: == partitions in state done
    outcome: JobState | None = None  # set once, with ended_at and counted, when the job ends
    ended_at: float | None = None
    counted: bool = False
    reason: str | None = None
    failed_partition: int | None = None
    version: int = 0  # bumped on every partition move: keys the cached partition views
    views: tuple[int, tuple[PartitionStatus, ...], str] | None = None  # version, views, their JSON

    def problems(self, current: Counter[ev.LeaseToken], finalizing: Counter[ev.LeaseToken]) -> list[str]:
        """Broken invariants of this job, given how many workers hold each lease as current / finalizing."""
        P = PartitionState
        problems = []
        done = live = 0
        for p in self.partitions:  # one pass: this runs for every partition at every new seq
            state = p.state
            if state is P.DONE:
                done += 1
            elif state is P.PROVING:
                live += 1
                if p.lease is None or current[p.lease] != 1:
                    holders = current[p.lease] if p.lease is not None else 0
                    problems.append(
                        f"partition {p.name} is proving but the current lease of {holders} workers"
                    )
                continue
            elif state is P.FINALIZING:
                live += 1
                if p.lease is None or finalizing[p.lease] != 1:
                    problems.append(f"partition {p.name} is finalizing but no single worker finalizes it")
                continue
            elif state in LIVE_PARTITION_STATES:
                live += 1
            if p.lease is not None:
                problems.append(f"partition {p.name} is {state.value} but holds lease {p.lease}")
        if self.done != done:
            problems.append(f"job {self.job_id} counts {self.done} partitions done, recount {done}")
        ended = self.outcome is not None
        if ended and (self.ended_at is None or not self.counted):
            problems.append(f"job {self.job_id} ended without an end time or without being counted")
        if ended and live:
            problems.append(f"job {self.job_id} ended with live partitions")
        if not ended and self.counted:
            problems.append(f"job {self.job_id} is counted but has not ended")
        return problems


@dataclass(slots=True, eq=False)
class Partition:
    """A partition of a live job."""

    job: Job
    index: int
    state: PartitionState = PartitionState.PENDING
    attempt: int = 1
    lease: ev.LeaseToken | None = None  # invariant: set exactly while proving or finalizing
    worker_id: str | None = None  # the last worker that held it, kept for display
    synth_ms: float | None = None
    prove_ms: float | None = None
    finalize_ms: float | None = None
    reason: str | None = None

    @property
    def name(self) -> str:
        """``job_id/index``, for messages."""
        return f"{self.job.job_id}/{self.index}"

    def status(self) -> PartitionStatus:
        """A frozen copy."""
        return PartitionStatus(
            index=self.index,
            state=self.state,
            attempt=self.attempt,
            worker_id=self.worker_id,
            synth_ms=self.synth_ms,
            prove_ms=self.prove_ms,
            finalize_ms=self.finalize_ms,
            reason=self.reason,
        )


@dataclass(slots=True, eq=False)
class Lease:
    """A live lease: the worker's current one (proving) or one of its finalizing ones."""

    token: ev.LeaseToken
    worker_id: str
    partition: Partition
    granted_at: float


@dataclass(slots=True, eq=False)
class Worker:
    """A registered worker. Its state is computed from its leases, never stored."""

    worker_id: str
    device: DeviceBusy
    current: ev.LeaseToken | None = None
    finalizing: dict[ev.LeaseToken, None] = field(default_factory=dict)  # an ordered set

    @property
    def state(self) -> WorkerState:
        """proving with a current lease, else finalizing with finalizing leases, else idle."""
        if self.current is not None:
            return WorkerState.PROVING
        return WorkerState.FINALIZING if self.finalizing else WorkerState.IDLE


MemoryEvent = (
    ev.BudgetSet
    | ev.ReservationMade
    | ev.ReservationShrunk
    | ev.ReservationReleased
    | ev.AllocationCached
    | ev.AllocationUsed
    | ev.AllocationEvicted
)


@dataclass(slots=True, eq=False)
class _Allocation:
    nbytes: int
    evictable: bool
    last_used: float


class MemoryLedger:
    """The memory budget as the engine reports it: total, live reservations, cached allocations."""

    def __init__(self, total_bytes: int) -> None:
        self.total_bytes = total_bytes
        self._reservations: dict[str, int] = {}
        self.reserved_bytes = 0  # invariant: == sum of live reservations
        self._allocations: dict[str, _Allocation] = {}

    @property
    def reservations(self) -> int:
        """How many reservations are live."""
        return len(self._reservations)

    @property
    def cached_bytes(self) -> int:
        """Bytes held by cached allocations."""
        return sum(a.nbytes for a in self._allocations.values())

    def apply(self, event: MemoryEvent) -> None:
        """Fold one memory event in, or raise StaleEvent / IllegalEvent without changing anything."""
        match event:
            case ev.BudgetSet():
                _check_bytes("total_bytes", event.total_bytes)
                self.total_bytes = event.total_bytes
            case ev.ReservationMade():
                _check_bytes(event.name, event.nbytes)
                if event.name in self._reservations:
                    raise IllegalEvent(f"expected a new reservation name, got {event.name} (live)")
                self._reservations[event.name] = event.nbytes
                self.reserved_bytes += event.nbytes
            case ev.ReservationShrunk():
                held = self._reservation(event.name)
                if not 0 <= event.nbytes <= held:
                    raise IllegalEvent(
                        f"reservation {event.name}: expected 0..{held} bytes, got {event.nbytes}"
                    )
                self._reservations[event.name] = held - event.nbytes
                self.reserved_bytes -= event.nbytes
            case ev.ReservationReleased():
                self.reserved_bytes -= self._reservation(event.name)
                del self._reservations[event.name]
            case ev.AllocationCached():
                _check_bytes(event.name, event.nbytes)
                if event.name in self._allocations:
                    raise IllegalEvent(f"expected a new allocation name, got {event.name} (cached)")
                self._allocations[event.name] = _Allocation(event.nbytes, event.evictable, event.at)
            case ev.AllocationUsed():
                self._allocation(event.name).last_used = event.at
            case ev.AllocationEvicted():
                self._allocation(event.name)
                del self._allocations[event.name]
            case _:
                assert_never(event)

    def problems(self) -> list[str]:
        """Broken memory invariants, in words."""
        live = sum(self._reservations.values())
        if self.reserved_bytes != live:
            return [f"reserved {self.reserved_bytes} bytes != sum of live reservations {live}"]
        return []

    def allocations(self, now: float) -> tuple[AllocationStatus, ...]:
        """Frozen copies of the cached allocations."""
        return tuple(
            AllocationStatus(name, a.nbytes, now - a.last_used, a.evictable)
            for name, a in self._allocations.items()
        )

    def _reservation(self, name: str) -> int:
        if name not in self._reservations:
            raise StaleEvent(f"reservation {name} is not live")
        return self._reservations[name]

    def _allocation(self, name: str) -> _Allocation:
        if name not in self._allocations:
            raise StaleEvent(f"allocation {name} is not cached")
        return self._allocations[name]


def _check_bytes(name: str, nbytes: int) -> None:
    if nbytes < 0:
        raise IllegalEvent(f"{name}: expected bytes >= 0, got {nbytes}")
