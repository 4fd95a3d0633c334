"""The status tracker's private records: jobs, partitions, leases, workers, and the memory ledger.

These are live, mutable state: only :class:`prooflane.status.StatusTracker` writes them, on the event loop
(no locks). The read-out (:mod:`.readout`) and the invariant check (:mod:`.invariants`)
read them on the same loop and hand out frozen copies (:mod:`.snapshot`) or words.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import assert_never

from .. import events as ev
from ..config import Config
from ..states import JobState, PartitionState, WorkerState
from .rss import this_machine
from .snapshot import (
    AllocationStatus,
    MachineStatus,
    PartitionStatus,
    PipelineEntry,
    RecentPartition,
    TablesStatus,
)
from .timing import CompletionRate, DeviceBusy, MinuteHistory, PhaseHistogram

__all__ = [
    "IllegalEvent",
    "Job",
    "JobViews",
    "Lease",
    "MemoryEvent",
    "MemoryLedger",
    "Partition",
    "Records",
    "StaleEvent",
    "TrackerConfig",
    "Worker",
    "tables_status",
]


@dataclass(frozen=True, slots=True)
class TrackerConfig:
    """The status tracker's settings (``prooflane.status.TrackerConfig``).

    Memory total and synthesis size may also arrive later as events.
    """

    retention_secs: float = Config.live_retention_secs  # the config's default
    memory_total_bytes: int = 0
    synthesis_max_concurrent: int = 0
    recent_jobs: int = 50
    recent_failures: int = 50  # failed jobs kept apart (and each for retention_secs at least)
    recent_partitions: int = 256
    history_minutes: int = 60
    feed_capacity: int = 4096
    feed_subscriber_queue: int = 1024
    sample_rss: bool = True
    stall_secs: float = Config.stall_secs  # a device section or finalization running longer: hung
    machine: MachineStatus | None = None  # None: the machine the tracker runs on (tests give a fixed one)
    # curve -> "c-extension" or "libraries: <why>": what proves it here, found by whoever runs the proofs
    # (the engine); any curve on the libraries is a health warning. Empty: not said.
    arithmetic: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # curve -> the field products its MSMs run on here ("avx512-ifma", "mulx", "portable", "libraries")
    products: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


class StaleEvent(Exception):
    """Raised inside the tracker when an event concerns work that is over or superseded: dropped, counted."""


class IllegalEvent(Exception):
    """Raised inside the tracker when an event breaks the legal transitions (counted, or raised if strict)."""


@dataclass(slots=True, eq=False)
class Job:
    """A job in the live view.

    Invariant: ``version`` changes whenever anything its ``/status`` entry shows changes. That holds by
    construction: every write to a field of the job or of one of its partitions bumps it (``__setattr__``
    here and in :class:`Partition`), so the cached views and JSON text in ``views``, keyed by ``version``,
    are never stale, whichever handler wrote what. (``partitions`` is assigned once, never changed in
    place.)
    """

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
    version: int = 0  # bumped on every write to the job or its partitions: keys the cached views
    views: JobViews | None = None  # the partition views and the job's JSON text at one version

    def __setattr__(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)
        if name not in _UNVERSIONED:
            try:  # noqa: SIM105 (runs on every write: no context manager)
                object.__setattr__(self, "version", self.version + 1)
            except AttributeError:  # still in __init__: version comes later
                pass


@dataclass(frozen=True, slots=True)
class JobViews:
    """What the read-out builds for a job and reuses while its ``version`` stays: its entry in the
    snapshots' ``pipelines`` (its view and JSON text)."""

    version: int
    entry: PipelineEntry


_UNVERSIONED = frozenset({"version", "views"})


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

    def __setattr__(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)
        if name != "job":  # any write but the first one (in __init__) may change what the job shows
            job = self.job
            job.version += 1

    @property
    def name(self) -> str:
        """``job_id/index``, for messages."""
        return f"{self.job.job_id}/{self.index}"

    def expect(self, state: PartitionState) -> None:
        """Raise IllegalEvent unless the partition is in ``state``."""
        if self.state is not state:
            raise IllegalEvent(f"partition {self.name}: expected {state.value}, got {self.state.value}")

    def recent(self) -> RecentPartition:
        """Its phase times, for the history of partitions done."""
        job, index = self.job, self.index
        return RecentPartition(job.job_id, job.kind, index, self.synth_ms, self.prove_ms, self.finalize_ms)

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
    """A registered worker, listed from its first registration on. Its state is computed, never stored.

    ``down`` is the fact about its processes: None while they live, restarting after they died, lost when
    they cannot come back. Invariant: a worker that is down holds no lease (``current`` None, no
    ``finalizing``).
    """

    worker_id: str
    device: DeviceBusy
    node: str | None = None
    current: ev.LeaseToken | None = None
    # its finalizing leases, in order, each with when its finalization began (its device section ended)
    finalizing: dict[ev.LeaseToken, float] = field(default_factory=dict)
    down: WorkerState | None = None  # None, RESTARTING or LOST
    last_error: str | None = None  # why its processes last died
    restarts: int = 0  # deaths after which its processes were (or are being) replaced
    last_restart_at: float | None = None  # when the last of those deaths was (None while restarts == 0)
    # the partition it last began to synthesize itself, and when: it is synthesizing while that partition is,
    # in that attempt (a fact of the partition's, so nothing has to clear it)
    synthesizing: tuple[Partition, int, float] | None = None

    @property
    def live(self) -> bool:
        """True unless its processes died (restarting) or cannot come back (lost)."""
        return self.down is None

    @property
    def state(self) -> WorkerState:
        """restarting or lost while down; else proving with a current lease, synthesizing its own next
        partition, finalizing with finalizing leases, idle otherwise."""
        if self.down is not None:
            return self.down
        if self.current is not None:
            return WorkerState.PROVING
        if self.own_synthesis() is not None:
            return WorkerState.SYNTHESIZING
        return WorkerState.FINALIZING if self.finalizing else WorkerState.IDLE

    def own_synthesis(self) -> tuple[Partition, float] | None:
        """The partition this worker synthesizes itself now, and since when (None: it synthesizes none)."""
        if self.synthesizing is None:
            return None
        partition, attempt, since = self.synthesizing
        if partition.state is not PartitionState.SYNTHESIZING or partition.attempt != attempt:
            return None
        return partition, since


@dataclass(slots=True, eq=False)
class Records:
    """Everything the tracker knows, written only by its fold. Invariants are written beside the fields."""

    memory: MemoryLedger
    synth_max: int
    history: MinuteHistory
    recent_jobs: deque[Job]
    recent_partitions: deque[RecentPartition]
    proofs_done: CompletionRate  # jobs done, per second of the clock, for the throughput
    partitions_done: CompletionRate  # partitions done, likewise
    # Failed jobs, oldest first, kept apart from recent_jobs so that no stream of jobs done pushes them out:
    # the last `recent_failures` of them, and every one that failed within the retention time.
    recent_failures: deque[Job] = field(default_factory=deque)
    failures_kept: int = 50  # how many recent_failures keeps, at least
    failures_kept_secs: float = 0.0  # how long it keeps each, at least (the retention time)
    stall_secs: float = Config.stall_secs  # a device section or finalization running longer: hung
    machine: MachineStatus | None = None  # None: the machine the tracker runs on (tests give a fixed one)
    arithmetic: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # never changes
    products: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # never changes
    # each of recent_partitions as JSON text, made once as it is added (invariant: the same partitions)
    recent_partitions_text: deque[str] = field(default_factory=deque)
    seq: int = 0  # the id of the last event received (applied or dropped)
    stale: int = 0
    illegal: int = 0
    jobs: dict[str, Job] = field(default_factory=dict)  # the live view, in submission order
    ended: deque[Job] = field(default_factory=deque)  # terminal jobs still in the live view, by end
    workers: dict[str, Worker] = field(default_factory=dict)  # every worker ever listed, never removed
    devices: dict[str, DeviceBusy] = field(default_factory=dict)
    # Each budgeted device's memory (a cuda device), by device name: made by its BudgetSet, never removed.
    device_memory: dict[str, MemoryLedger] = field(default_factory=dict)
    leases: dict[ev.LeaseToken, Lease] = field(default_factory=dict)  # live leases: current or finalizing
    max_token: int = 0  # tokens are granted in increasing order: one not above this is old
    # The engine's comparisons of the live view with the journal (engine/journal_check.py): what the last
    # found and how many times one found a disagreement anew (both by JournalChecked events); how many ran
    # and when the last did (the clock), counted outside the events.
    journal_disagreements: tuple[str, ...] = ()
    journal_disagreed: int = 0
    journal_checks: int = 0
    journal_checked_at: float | None = None
    states: Counter[PartitionState] = field(default_factory=Counter)  # == live-view partitions per state
    pending_by_priority: Counter[str] = field(default_factory=Counter)
    partitions_total: Counter[tuple[str, str]] = field(default_factory=Counter)  # (kind, outcome)
    jobs_total: Counter[tuple[str, str]] = field(default_factory=Counter)  # (kind, outcome): once per job
    pruned: Counter[JobState] = field(default_factory=Counter)  # terminal jobs that left the live view
    busy_total: dict[str, float] = field(default_factory=dict)  # worker -> closed device-section seconds
    retries: int = 0
    tables: dict[str, TablesStatus] = field(default_factory=dict)  # key name -> its tables, never removed
    phases: dict[str, PhaseHistogram] = field(
        default_factory=lambda: {name: PhaseHistogram() for name in ("synth", "prove", "finalize")}
    )

    @classmethod
    def new(cls, config: TrackerConfig) -> Records:
        """Empty records sized by ``config``."""
        return cls(
            memory=MemoryLedger(config.memory_total_bytes),
            synth_max=config.synthesis_max_concurrent,
            history=MinuteHistory(config.history_minutes),
            recent_jobs=deque(maxlen=config.recent_jobs),
            recent_partitions=deque(maxlen=config.recent_partitions),
            recent_partitions_text=deque(maxlen=config.recent_partitions),
            proofs_done=CompletionRate(),
            partitions_done=CompletionRate(),
            failures_kept=config.recent_failures,
            failures_kept_secs=config.retention_secs,
            stall_secs=config.stall_secs,
            machine=config.machine or this_machine(),
            arithmetic=MappingProxyType(dict(config.arithmetic)),
            products=MappingProxyType(dict(config.products)),
        )

    def ledger_for(self, event: MemoryEvent) -> MemoryLedger:
        """The ledger a memory event is about: the host's (``device`` None) or its device's, which its
        ``BudgetSet`` makes; an event about a device with no budget yet is illegal."""
        if event.device is None:
            return self.memory
        ledger = self.device_memory.get(event.device)
        if ledger is None:
            if not isinstance(event, ev.BudgetSet):
                raise IllegalEvent(f"device {event.device}: expected its budget_set first, got {event}")
            ledger = self.device_memory[event.device] = MemoryLedger(event.total_bytes)
        return ledger

    def count_end(self, job: Job) -> None:
        """``job`` just ended (its outcome and end set): counted once, in the ended jobs of the live view and
        the recent jobs, in the throughput when done, and in the recent failures when failed (the oldest of
        them leaves once more than ``failures_kept`` are kept and it failed ``failures_kept_secs`` ago)."""
        assert job.outcome is not None and job.ended_at is not None
        self.jobs_total[(job.kind, job.outcome.value)] += 1
        self.ended.append(job)
        self.recent_jobs.append(job)
        if job.outcome is JobState.DONE:
            self.proofs_done.count(job.ended_at)
        elif job.outcome is JobState.FAILED:
            failures, now, kept_secs = self.recent_failures, job.ended_at, self.failures_kept_secs
            failures.append(job)
            while len(failures) > self.failures_kept and now - (failures[0].ended_at or 0.0) >= kept_secs:
                failures.popleft()


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
    def allocated(self) -> int:
        """How many cached allocations are held."""
        return len(self._allocations)

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

    def allocation_names(self) -> list[str]:
        """The names of the cached allocations."""
        return list(self._allocations)

    def live_reservation_bytes(self) -> int:
        """The sum of the live reservations, counted afresh (``reserved_bytes`` must equal it)."""
        return sum(self._reservations.values())

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


def tables_status(event: ev.TablesChanged) -> TablesStatus:
    """The key's tables as the event says they are, or IllegalEvent: a state of ``TABLES_STATES``, bytes
    only when stored and a reason only when unused."""
    _check_bytes(f"tables of {event.key}", event.nbytes)
    if event.state not in ev.TABLES_STATES:
        raise IllegalEvent(
            f"tables of {event.key}: expected a state of {ev.TABLES_STATES}, got {event.state!r}"
        )
    stored, unused = event.state == ev.TablesState.STORED, event.state == ev.TablesState.UNUSED
    if (event.nbytes > 0) != stored or bool(event.reason) != unused:
        raise IllegalEvent(
            f"tables of {event.key}: expected bytes when stored and a reason when unused, got {event}"
        )
    return TablesStatus(event.key, event.state, event.nbytes, event.reason)


def _check_bytes(name: str, nbytes: int) -> None:
    if nbytes < 0:
        raise IllegalEvent(f"{name}: expected bytes >= 0, got {nbytes}")
