"""Everything the engine reports about its work, one frozen dataclass per thing that happens.

The engine builds these events and hands them to :meth:`prooflane.status.StatusTracker.apply` on the
event loop (threads and processes post them with ``loop.call_soon_threadsafe(tracker.apply, event)``;
they never touch the tracker's state). Every event carries ``at``: a timestamp from the same clock the
tracker was given (``time.monotonic`` unless injected), read when the thing happened.

Leased work. Each assignment of a partition to a worker is a *lease*, named by a token the engine mints
with :class:`LeaseMinter` (one minter per engine, minted on the event loop right before the
:class:`LeaseGranted` that carries it, so tokens are granted in increasing order). Every later event about
that work (:class:`DeviceSectionFinished`, :class:`FinalizeFinished`, and :class:`PartitionFailed` when a
worker holds the partition) carries the token; the tracker applies it only
while the lease is live, so an old finalizer can never clear a worker that has moved on.

Attempts. A partition's first attempt is 1. When the engine requeues it (its worker died) it emits
:class:`PartitionRetried` with the new attempt number; synthesis and lease events carry the attempt they
belong to, and events of an older attempt are dropped as stale.

The life of one partition, as the engine reports it::

    JobSubmitted                     all partitions pending
    SynthesisStarted                 pending      -> synthesizing
    SynthesisFinished                synthesizing -> synthesized   (or SynthesisFailed -> failed)
    LeaseGranted(token)              synthesized  -> proving       (the worker's current lease)
    DeviceSectionFinished(token)     proving      -> finalizing    (the worker is free for the next one)
    FinalizeFinished(token)          finalizing   -> done          (after the partition proof verified)
    JobDone                          once every partition is done

Failure, cancellation and retry: :class:`PartitionFailed`, :class:`JobFailed`,
:class:`JobCancelled`, :class:`WorkerDied`, :class:`WorkerLost`, :class:`PartitionRetried`. The tracker emits
:class:`JobExpired` when an ended job leaves the live view. Memory: :class:`BudgetSet`,
:class:`ReservationMade`, :class:`ReservationShrunk`, :class:`ReservationReleased`, and the cached proving
keys :class:`AllocationCached`, :class:`AllocationUsed`, :class:`AllocationEvicted`. Each memory event names
the budget it is about: ``device`` None for the host's, a device's name (``cuda:0``) for that device's memory
(its resident keys as allocations, each partition's device section as a reservation).
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import typing
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NewType, TypeAlias

__all__ = [
    "EVENT_TYPES",
    "TABLES_STATES",
    "AllocationCached",
    "AllocationEvicted",
    "AllocationUsed",
    "BudgetSet",
    "DeviceSectionFinished",
    "Event",
    "EventBase",
    "FinalizeFinished",
    "JobCancelled",
    "JobDone",
    "JobExpired",
    "JobFailed",
    "JobSubmitted",
    "JournalChecked",
    "LeaseGranted",
    "LeaseMinter",
    "LeaseToken",
    "PartitionFailed",
    "PartitionRetried",
    "ReservationMade",
    "ReservationReleased",
    "ReservationShrunk",
    "SynthesisFailed",
    "SynthesisFinished",
    "SynthesisPoolSized",
    "SynthesisStarted",
    "TablesChanged",
    "TablesState",
    "WorkerDied",
    "WorkerLost",
    "WorkerRegistered",
    "event_name",
    "event_to_dict",
    "key_allocation",
]

LeaseToken = NewType("LeaseToken", int)
"""Names one assignment of one partition to one worker; unique and increasing within an engine."""


class LeaseMinter:
    """Mints lease tokens: 1, 2, 3, ... Use one per engine and call :meth:`mint` on the event loop."""

    def __init__(self) -> None:
        self._counter = itertools.count(1)

    def mint(self) -> LeaseToken:
        """Return a token never returned before by this minter, greater than all earlier ones."""
        return LeaseToken(next(self._counter))


@dataclass(frozen=True, slots=True, kw_only=True)
class EventBase:
    """Fields every event has. ``at``: when it happened, on the tracker's clock (seconds)."""

    at: float


# --- jobs ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSubmitted(EventBase):
    """A job was accepted: its ``partitions`` partitions (indices 0 .. partitions-1) are pending.

    ``priority`` is "critical", "high" or "normal". ``done_partitions``: partitions already proven (a job
    resumed from the journal after a restart); they start done. ``circuit``: the registered circuit a
    ``circom`` job proves (None for the built-in kinds).
    """

    job_id: str
    kind: str
    priority: str
    partitions: int
    done_partitions: tuple[int, ...] = ()
    circuit: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobDone(EventBase):
    """Every partition of the job is done and verified; the proof is stored."""

    job_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class JobFailed(EventBase):
    """The job failed; ``partition`` names the partition at fault when there is one.

    Its partitions still live are failed (the named one) or cancelled (the rest) and their leases end.
    """

    job_id: str
    reason: str
    partition: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobCancelled(EventBase):
    """The job was cancelled: its live partitions are cancelled and their leases end."""

    job_id: str
    reason: str = "cancelled"


@dataclass(frozen=True, slots=True, kw_only=True)
class JobExpired(EventBase):
    """The ended job left the live view, ``retention_secs`` after its end (the journal keeps it).

    The tracker emits this one itself when the retention time passes, so the live view never changes without
    ``seq`` moving; ``at`` is the moment the retention ran out.
    """

    job_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class JournalChecked(EventBase):
    """The engine's comparison of the live view with the journal found something other than the last one
    did: ``disagreements``, in words (empty: they agree again). Posted only on a change, so the live view
    never changes without ``seq`` moving; each is an invariant violation until the next."""

    disagreements: tuple[str, ...]


# --- synthesis -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SynthesisStarted(EventBase):
    """The synthesis pool started the partition (pending -> synthesizing); or, with ``worker_id``, that
    worker's own process did (a worker that synthesizes what it proves: it is busy synthesizing until the
    partition leaves that state)."""

    job_id: str
    partition: int
    attempt: int = 1
    worker_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SynthesisFinished(EventBase):
    """Synthesis finished after ``synth_ms`` (synthesizing -> synthesized: it waits for a worker)."""

    job_id: str
    partition: int
    synth_ms: float
    attempt: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class SynthesisFailed(EventBase):
    """Synthesis failed (synthesizing -> failed); the job usually fails next."""

    job_id: str
    partition: int
    reason: str
    attempt: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class SynthesisPoolSized(EventBase):
    """The synthesis pool runs at most ``max_concurrent`` partitions at once."""

    max_concurrent: int


# --- leased work -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseGranted(EventBase):
    """A worker took the partition (synthesized -> proving); ``token`` becomes its current lease."""

    token: LeaseToken
    worker_id: str
    device: str
    job_id: str
    partition: int
    attempt: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceSectionFinished(EventBase):
    """The device section (``prove_start``) of the lease ended after ``prove_ms`` (proving -> finalizing).

    The worker's current lease ends and the lease joins the worker's finalizing leases.
    """

    token: LeaseToken
    prove_ms: float


@dataclass(frozen=True, slots=True, kw_only=True)
class FinalizeFinished(EventBase):
    """The finalizer (``prove_finish`` and the partition's verification) ended (finalizing -> done)."""

    token: LeaseToken
    finalize_ms: float


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionFailed(EventBase):
    """The partition failed. ``token``: the lease it failed under, when a worker held it."""

    job_id: str
    partition: int
    reason: str
    token: LeaseToken | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionRetried(EventBase):
    """The partition goes back to pending for attempt ``attempt`` (its worker died); any lease ends."""

    job_id: str
    partition: int
    attempt: int
    reason: str


# --- workers ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerRegistered(EventBase):
    """A worker of ``device`` (of kind ``device_kind``: "cpu" or "cuda") is ready for work (idle).

    The same ``worker_id`` again after :class:`WorkerDied` or :class:`WorkerLost` means its processes were
    replaced: it is live again. ``node``: the machine it runs on, where there are several (None: this one).
    """

    worker_id: str
    device: str
    device_kind: str = "cpu"
    node: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerDied(EventBase):
    """The worker's processes died and are being replaced: it stays listed, ``restarting``.

    Its leases end and the partitions they covered go back to pending. A :class:`WorkerRegistered` with the
    same ``worker_id`` makes it live again; a :class:`WorkerLost` says it will not come back.
    """

    worker_id: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerLost(EventBase):
    """The worker's processes cannot be brought back: it stays listed, ``lost`` (registering revives it).

    A live worker's leases end as with :class:`WorkerDied`. For a worker that never registered (its first
    start failed), give its ``device`` (and ``device_kind``, ``node``) so it is listed all the same.
    """

    worker_id: str
    reason: str
    device: str | None = None
    device_kind: str = "cpu"
    node: str | None = None


# --- memory ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetSet(EventBase):
    """The memory budget is ``total_bytes``."""

    total_bytes: int
    device: str | None = None  # the budget: None the host's, else a device's ("cuda:0")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReservationMade(EventBase):
    """A reservation of ``nbytes`` named ``name`` (unique while it lives) was taken from the budget."""

    name: str
    nbytes: int
    device: str | None = None  # the budget: None the host's, else a device's ("cuda:0")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReservationShrunk(EventBase):
    """``nbytes`` of the reservation were given back (partial release); the rest stays reserved."""

    name: str
    nbytes: int
    device: str | None = None  # the budget: None the host's, else a device's ("cuda:0")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReservationReleased(EventBase):
    """What was left of the reservation was given back; the name may be used again."""

    name: str
    device: str | None = None  # the budget: None the host's, else a device's ("cuda:0")


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocationCached(EventBase):
    """A cached allocation (a worker's proving key) of ``nbytes`` is held; evictable when idle."""

    name: str
    nbytes: int
    evictable: bool = True
    device: str | None = None  # the budget: None the host's, else a device's ("cuda:0")


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocationUsed(EventBase):
    """The cached allocation was used (its idle time starts again)."""

    name: str
    device: str | None = None  # the budget: None the host's, else a device's ("cuda:0")


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocationEvicted(EventBase):
    """The cached allocation was dropped and its bytes returned to the budget."""

    name: str
    device: str | None = None  # the budget: None the host's, else a device's ("cuda:0")


# --- fixed-base tables -----------------------------------------------------------------------------


def key_allocation(key: str, worker: str, *, tables: bool = False) -> str:
    """The name of a worker's cached key: ``key:<key>@<worker>``, or ``key+tables:<key>@<worker>`` with the
    key's fixed-base tables (as ``/status``'s ``allocations`` and the dashboard show it)."""
    return f"key{'+tables' if tables else ''}:{key}@{worker}"


class TablesState(StrEnum):
    """What a key's fixed-base tables can be (``msm_tables = "auto"``)."""

    BUILDING = "building"  # being looked for or built
    STORED = "stored"  # stored for the workers to map
    UNUSED = "unused"  # not eligible, or the build failed or was stopped (why: ``reason``)


TABLES_STATES = tuple(TablesState)
"""Every :class:`TablesState`, the states a ``TablesChanged`` may name."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TablesChanged(EventBase):
    """What is known of a key's fixed-base tables changed (``msm_tables = "auto"``): ``state`` one of
    ``TABLES_STATES``; ``nbytes`` a worker's copy when stored; ``reason`` why they are unused."""

    key: str
    state: str
    nbytes: int = 0
    reason: str = ""


Event: TypeAlias = (
    JobSubmitted
    | JobDone
    | JobFailed
    | JobCancelled
    | JobExpired
    | JournalChecked
    | SynthesisStarted
    | SynthesisFinished
    | SynthesisFailed
    | SynthesisPoolSized
    | LeaseGranted
    | DeviceSectionFinished
    | FinalizeFinished
    | PartitionFailed
    | PartitionRetried
    | WorkerRegistered
    | WorkerDied
    | WorkerLost
    | BudgetSet
    | ReservationMade
    | ReservationShrunk
    | ReservationReleased
    | AllocationCached
    | AllocationUsed
    | AllocationEvicted
    | TablesChanged
)
"""Any event the tracker accepts."""


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


EVENT_TYPES: dict[str, type[EventBase]] = {_snake(cls.__name__): cls for cls in typing.get_args(Event)}
"""Event name (snake case, e.g. "lease_granted") -> event class."""

_NAMES: dict[type[EventBase], str] = {cls: name for name, cls in EVENT_TYPES.items()}
_FIELDS: dict[type[EventBase], tuple[str, ...]] = {
    cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in EVENT_TYPES.values()
}


def event_name(event: EventBase) -> str:
    """The event's name as the SSE stream and JSON give it, e.g. ``"device_section_finished"``."""
    return _NAMES[type(event)]


def event_to_dict(event: EventBase) -> dict[str, Any]:
    """The event as a JSON-ready dict: ``{"type": name, **fields}``."""
    cls = type(event)
    out: dict[str, Any] = {"type": _NAMES[cls]}
    for name in _FIELDS[cls]:
        out[name] = getattr(event, name)
    return out
