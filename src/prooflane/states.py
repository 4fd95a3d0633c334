"""Job, partition and worker states, priorities, and the one table of legal transitions.

Every module takes its states from here: the engine's own records, the status tracker, the journal and the
HTTP models. Nothing here knows of any of them.

Partition transitions (:data:`PARTITION_TRANSITIONS`; anything else raises :class:`IllegalTransition`)::

    pending      -> synthesizing        the dispatcher reserved its memory and started its synthesis
    synthesizing -> synthesized         synthesis finished
    synthesized  -> proving             a worker holds its lease and runs the device section
    proving      -> finalizing          the device section finished; the worker's finalizer takes over
    finalizing   -> done                its proof is made and verified
    any live     -> failed              synthesis or proving failed for good, or its proof did not verify
    any live     -> cancelled           its job ended (cancelled, or failed at another partition)
    synthesizing | synthesized | proving | finalizing -> pending
                                        a retry: the process that held it died

Job transitions (:data:`JOB_TRANSITIONS`)::

    queued  -> running                  its first partition was synthesized
    queued | running -> done            every partition is done (queued -> done: resumed fully proven)
    queued | running -> failed | cancelled

``done``, ``failed`` and ``cancelled`` are terminal for both: nothing leaves them.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

from .errors import IllegalTransition

__all__ = [
    "JOB_TRANSITIONS",
    "LIVE_PARTITION_STATES",
    "PARTITION_TRANSITIONS",
    "TERMINAL_JOB_STATES",
    "TERMINAL_PARTITION_STATES",
    "IllegalTransition",
    "JobState",
    "PartitionState",
    "Priority",
    "WorkerState",
    "check_job_move",
    "check_partition_move",
]


class Priority(StrEnum):
    """Scheduling priority; ``rank`` orders them (lower goes first)."""

    CRITICAL = "critical"
    HIGH = "high"
    NORMAL = "normal"

    @property
    def rank(self) -> int:
        """0 for critical, 1 for high, 2 for normal."""
        return _RANK[self]


_RANK = {Priority.CRITICAL: 0, Priority.HIGH: 1, Priority.NORMAL: 2}


class JobState(StrEnum):
    """A job's state (transitions: :data:`JOB_TRANSITIONS`)."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """True for done, failed and cancelled."""
        return self in TERMINAL_JOB_STATES


class PartitionState(StrEnum):
    """A partition's state (transitions: :data:`PARTITION_TRANSITIONS`)."""

    PENDING = "pending"
    SYNTHESIZING = "synthesizing"
    SYNTHESIZED = "synthesized"
    PROVING = "proving"
    FINALIZING = "finalizing"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """True for done, failed and cancelled."""
        return self in TERMINAL_PARTITION_STATES


class WorkerState(StrEnum):
    """What a configured worker does, computed from facts (its leases, its processes), never stored.

    ``proving``: it holds a current lease (it may finalize others meanwhile); ``synthesizing``: it
    synthesizes, in its own process, the partition it proves next (a worker that finishes its partitions
    itself: a ``cpu`` one); ``finalizing``: only its finalizer works; ``idle``: it is live and holds
    nothing; ``restarting``: its processes died and are being replaced; ``lost``: they died and cannot be
    brought back. A dead worker is never shown idle.
    """

    IDLE = "idle"
    SYNTHESIZING = "synthesizing"
    PROVING = "proving"
    FINALIZING = "finalizing"
    RESTARTING = "restarting"
    LOST = "lost"


P = PartitionState
J = JobState

TERMINAL_PARTITION_STATES: frozenset[PartitionState] = frozenset({P.DONE, P.FAILED, P.CANCELLED})
LIVE_PARTITION_STATES: frozenset[PartitionState] = frozenset(set(P) - TERMINAL_PARTITION_STATES)
"""The partition states that may still change."""
TERMINAL_JOB_STATES: frozenset[JobState] = frozenset({J.DONE, J.FAILED, J.CANCELLED})

_FORWARD = {
    P.PENDING: P.SYNTHESIZING,
    P.SYNTHESIZING: P.SYNTHESIZED,
    P.SYNTHESIZED: P.PROVING,
    P.PROVING: P.FINALIZING,
    P.FINALIZING: P.DONE,
}

_RETRYABLE = LIVE_PARTITION_STATES - {P.PENDING}

PARTITION_TRANSITIONS: Mapping[PartitionState, frozenset[PartitionState]] = MappingProxyType(
    {
        **{
            s: frozenset({_FORWARD[s], P.FAILED, P.CANCELLED} | ({P.PENDING} if s in _RETRYABLE else set()))
            for s in LIVE_PARTITION_STATES
        },
        **{s: frozenset() for s in TERMINAL_PARTITION_STATES},
    }
)
"""Partition state -> the states it may move to (the table in this module's docstring)."""

JOB_TRANSITIONS: Mapping[JobState, frozenset[JobState]] = MappingProxyType(
    {
        J.QUEUED: frozenset({J.RUNNING, J.DONE, J.FAILED, J.CANCELLED}),
        J.RUNNING: frozenset({J.DONE, J.FAILED, J.CANCELLED}),
        **{s: frozenset() for s in TERMINAL_JOB_STATES},
    }
)
"""Job state -> the states it may move to."""


def check_partition_move(old: PartitionState, new: PartitionState, what: str = "partition") -> None:
    """Raise :class:`IllegalTransition` ("expected X, got Y") unless ``old -> new`` is legal."""
    if new not in PARTITION_TRANSITIONS[old]:
        sources = sorted(s.value for s, targets in PARTITION_TRANSITIONS.items() if new in targets)
        raise IllegalTransition(f"{what}: expected one of {sources}, got {old.value} (-> {new.value})")


def check_job_move(old: JobState, new: JobState, what: str = "job") -> None:
    """Raise :class:`IllegalTransition` ("expected X, got Y") unless ``old -> new`` is legal."""
    if new not in JOB_TRANSITIONS[old]:
        sources = sorted(s.value for s, targets in JOB_TRANSITIONS.items() if new in targets)
        raise IllegalTransition(f"{what}: expected one of {sources}, got {old.value} (-> {new.value})")
