"""The engine's own records of jobs, partitions and circuits, and the views built from them.

Only the engine's event loop touches these records; what leaves the engine is the frozen views
(``JobView``, ``CircuitInfo``) built here.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from ..events import LeaseToken
from ..kinds import CircomInput, CircuitMeta, StorageInput
from ..memory import Reservation
from ..models import CircuitInfo, JobView, PartitionView
from ..scheduler import WorkKey
from ..states import JobState, PartitionState, Priority, check_job_move, check_partition_move
from ..status import readable_reason
from ..store import CircuitRecord, JobRecord, PartitionRow, Store

__all__ = ["CircuitEntry", "JobRun", "PartitionRun", "circuit_info", "journal_view", "live_view"]

P = PartitionState


@dataclass(eq=False)
class PartitionRun:
    """One partition in the engine: where it is, its attempt, what it holds."""

    job: JobRun
    index: int
    state: PartitionState = P.PENDING
    attempt: int = 1
    failures: int = 0  # attempts it was to blame for (a process died running its own work); see max_attempts
    reservation: Reservation | None = None
    synthesized: Any = None
    task: asyncio.Task[None] | None = None
    worker_id: str | None = None
    token: LeaseToken | None = None
    error: str | None = None

    @property
    def key(self) -> WorkKey:
        return WorkKey(self.job.priority.rank, self.job.record.seq, self.index, self.job.record.job_id)

    @property
    def name(self) -> str:
        return f"{self.job.record.job_id}/{self.index}"

    @property
    def live(self) -> bool:
        """The partition still matters (its job has not ended)."""
        return not self.job.state.terminal and not self.state.terminal

    def move(self, new: PartitionState) -> None:
        """Change state through the one transition table (IllegalTransition otherwise)."""
        check_partition_move(self.state, new, f"partition {self.name}")
        self.state = new


@dataclass(eq=False)
class JobRun:
    """One job in the engine (live, or ended within the retention time)."""

    record: JobRecord
    meta: CircuitMeta
    priority: Priority
    inputs: list[StorageInput | CircomInput]
    state: JobState = JobState.QUEUED
    error: str | None = None
    finished_at: float | None = None
    partitions: list[PartitionRun] = field(default_factory=list)
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def job_id(self) -> str:
        return self.record.job_id

    def move(self, new: JobState) -> None:
        """Change state through the one transition table (IllegalTransition otherwise)."""
        check_job_move(self.state, new, f"job {self.job_id}")
        self.state = new


@dataclass(eq=False)
class CircuitEntry:
    """A registered circom circuit and its description."""

    record: CircuitRecord
    meta: CircuitMeta
    field_product: str | None = (
        None  # how its .wasm multiplies (``wasm_witness.field_product``), if it has one
    )


def live_view(job: JobRun) -> JobView:
    """A job as the engine holds it now."""
    parts = [
        PartitionView(
            index=p.index, state=p.state, attempt=p.attempt, worker_id=p.worker_id, error=_readable(p.error)
        )
        for p in job.partitions
    ]
    return JobView(
        job_id=job.job_id,
        kind=job.record.kind,
        priority=job.priority,
        state=job.state,
        submitted_at=job.record.submitted_at,
        finished_at=job.finished_at,
        total_partitions=len(parts),
        partitions_done=sum(p.state is P.DONE for p in parts),
        partitions=parts,
        error=_readable(job.error),
        circuit=job.record.request.get("circuit"),
    )


def circuit_info(circuit: CircuitEntry) -> CircuitInfo:
    """A registered circuit as the API shows it."""
    r = circuit.record
    return CircuitInfo(
        name=r.name,
        curve=r.curve,
        constraints=r.constraints,
        public_signals=r.public_signals,
        has_witness_generator=r.wasm is not None,
        witness_field_product=circuit.field_product,
        priority=Priority(r.priority),
        memory_per_partition_bytes=r.memory_bytes,
    )


def journal_view(store: Store, record: JobRecord, states: list[PartitionRow] | None = None) -> JobView:
    """A job as the journal holds it (for jobs no longer in memory); its proofs are not read. ``states``:
    its partitions' rows when already read (a page of jobs reads them all at once)."""
    rows = store.partition_states(record.job_id) if states is None else states
    parts = [
        PartitionView(
            index=p.index, state=PartitionState(p.state), attempt=p.attempts, error=_readable(p.error)
        )
        for p in rows
    ]
    return JobView(
        job_id=record.job_id,
        kind=record.kind,
        priority=Priority(record.priority),
        state=JobState(record.state),
        submitted_at=record.submitted_at,
        finished_at=record.finished_at,
        total_partitions=record.partitions,
        partitions_done=sum(p.state is P.DONE for p in parts),
        partitions=parts,
        error=_readable(record.error),
        circuit=record.request.get("circuit"),
    )


def _readable(reason: str | None) -> str | None:
    """A failure reason as people read it (no escape codes or stack frames, as the status view cleans it);
    the journal and the log keep the whole text."""
    return None if reason is None else readable_reason(reason)
