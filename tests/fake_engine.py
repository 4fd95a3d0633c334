"""A small in-memory stand-in for the engine, for fast tests of the HTTP layer and the client only.

It keeps jobs in a dict and proves nothing; the end-to-end tests run the real daemon instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from prooflane.config import Config
from prooflane.errors import JobRejected
from prooflane.models import (
    CircuitInfo,
    JobProof,
    JobRequest,
    JobState,
    JobView,
    KindInfo,
    PartitionProof,
    PartitionState,
    PartitionView,
    Priority,
)

KINDS = {"porep-c2": (10, Priority.NORMAL), "winning-post": (1, Priority.CRITICAL)}
VERIFICATION_KEY = {"protocol": "groth16", "curve": "bn128", "nPublic": 1}


class Item(NamedTuple):
    """Like the tracker feed's items: an id, an event name, JSON data."""

    id: int
    event: str
    data: str


@dataclass
class FakeSnapshot:
    seq: int

    def to_json(self) -> dict[str, Any]:
        return {"version": "test", "seq": self.seq, "invariants_ok": True}


@dataclass
class FakeTracker:
    """Publishes events with increasing ids; subscribers resume after an id."""

    items: list[Item] = field(default_factory=list)
    published: asyncio.Event | None = None

    def snapshot(self) -> FakeSnapshot:
        return FakeSnapshot(len(self.items))

    def publish(self, event: str, **data: Any) -> None:
        self.items.append(Item(len(self.items) + 1, event, json.dumps(data)))
        if self.published is not None:
            self.published.set()

    async def subscribe(self, last_event_id: int | None = None) -> AsyncIterator[Item]:
        position = last_event_id or 0
        if self.published is None:
            self.published = asyncio.Event()
        while True:
            while position < len(self.items):
                position += 1
                yield self.items[position - 1]
            self.published.clear()
            await self.published.wait()


class FakeEngine:
    """Implements the engine methods the API calls, with the same errors."""

    def __init__(self, ready: bool = True) -> None:
        self.ready = ready
        self.tracker = FakeTracker()
        self.views: dict[str, JobView] = {}
        self.requests: dict[str, JobRequest] = {}
        self.done: dict[str, asyncio.Event] = {}
        self.registered: list[CircuitInfo] = []

    async def submit(self, req: JobRequest) -> str:
        if req.kind not in KINDS:
            raise JobRejected(f"unknown proof kind {req.kind!r}", 404)
        if req.job_id is not None and req.job_id in self.views:
            if self.requests[req.job_id] != req:
                raise JobRejected(f"job {req.job_id} exists with a different request", 409)
            return req.job_id
        job_id = req.job_id or f"job-{len(self.views) + 1}"
        count, priority = KINDS[req.kind]
        parts = [PartitionView(index=i, state=PartitionState.PENDING, attempt=0) for i in range(count)]
        self.views[job_id] = JobView(
            job_id=job_id,
            kind=req.kind,
            priority=req.priority or priority,
            state=JobState.QUEUED,
            submitted_at=1.0,
            total_partitions=count,
            partitions_done=0,
            partitions=parts,
        )
        self.requests[job_id] = req
        self.tracker.publish("job_submitted", job_id=job_id)
        return job_id

    def finish(self, job_id: str, state: JobState = JobState.DONE, error: str | None = None) -> None:
        """Move a job to a terminal state (as the pipeline would)."""
        view = self.views[job_id]
        self.views[job_id] = view.model_copy(update={"state": state, "error": error, "finished_at": 2.0})
        self._event(job_id).set()

    def _event(self, job_id: str) -> asyncio.Event:
        return self.done.setdefault(job_id, asyncio.Event())

    def job(self, job_id: str) -> JobView | None:
        return self.views.get(job_id)

    def jobs(self, state: str | None = None, limit: int = 100) -> list[JobView]:
        views = [v for v in reversed(self.views.values()) if state is None or v.state == state]
        return views[:limit]

    async def wait_proof(self, job_id: str, timeout: float) -> JobProof | None:  # noqa: ASYNC109
        if job_id not in self.views:
            raise JobRejected(f"no job {job_id}", 404)
        if self.views[job_id].state == JobState.QUEUED and timeout > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._event(job_id).wait(), timeout)
        view = self.views[job_id]
        if view.state in (JobState.FAILED, JobState.CANCELLED):
            raise JobRejected(f"job {job_id} {view.state.value}: {view.error}", 409)
        if view.state != JobState.DONE:
            return None
        proof = PartitionProof(index=0, proof={"protocol": "groth16"}, public=["1"])
        return JobProof(job_id=job_id, kind=view.kind, partitions=[proof])

    async def cancel(self, job_id: str) -> bool:
        if job_id not in self.views:
            raise JobRejected(f"no job {job_id}", 404)
        if self.views[job_id].state.terminal:
            return False
        self.finish(job_id, JobState.CANCELLED, "cancelled")
        return True

    def kinds(self) -> list[KindInfo]:
        return [
            KindInfo(
                name=name,
                partitions=count,
                priority=priority,
                curve="bn128",
                constraints_per_partition=100,
                memory_per_partition_bytes=1 << 20,
            )
            for name, (count, priority) in KINDS.items()
        ]

    def verification_key(self, kind: str, circuit: str | None = None) -> dict[str, Any]:
        if kind not in KINDS:
            raise JobRejected(f"unknown proof kind {kind!r}", 404)
        return VERIFICATION_KEY

    async def register_circuit(
        self, name: str, zkey_path: Path, *, wasm_path: Path | None = None, priority: str = "normal"
    ) -> CircuitInfo:
        if not zkey_path.name.endswith(".zkey") or "nope" in zkey_path.name:
            raise JobRejected(f"{zkey_path}: no such file", 422)
        info = CircuitInfo(
            name=name,
            curve="bn128",
            constraints=3,
            public_signals=1,
            has_witness_generator=wasm_path is not None,
            priority=Priority(priority),
            memory_per_partition_bytes=1024,
        )
        self.registered.append(info)
        return info

    def circuits(self) -> list[CircuitInfo]:
        return list(self.registered)


def api_config(token: str = "") -> Config:
    """A config for the API tests (only the token and the body limit matter to the API)."""
    return Config(token=token, max_request_bytes=4096)
