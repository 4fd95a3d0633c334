"""A small in-memory stand-in for the engine, for fast tests of the HTTP layer and the client only.

It keeps jobs in a dict and proves nothing; the end-to-end tests run the real daemon instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn

from prooflane._feed import FeedItem
from prooflane._snapshot import Health
from prooflane.api import close_streams, create_app
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
from prooflane.server import bind
from prooflane.status import StatusTracker, TrackerTotals

KINDS = {"porep-c2": (10, Priority.NORMAL), "winning-post": (1, Priority.CRITICAL)}
VERIFICATION_KEY = {"protocol": "groth16", "curve": "bn128", "nPublic": 1}


Item = FeedItem  # the tracker feed's items: an id, an event name, JSON data


@dataclass
class FakeSnapshot:
    seq: int
    jobs: int | None = None  # bounded(jobs): list at most this many pipelines

    def to_json_text(self) -> str:
        return json.dumps(self.to_json())

    def bounded(self, jobs: int) -> FakeSnapshot:
        return FakeSnapshot(self.seq, jobs)

    def to_json(self) -> dict[str, Any]:
        """The documented /status shape, with one worker and one job."""
        partition = {"index": 0, "state": "proving", "attempt": 1, "worker_id": "cpu:0/w0"}
        worker = {"worker_id": "cpu:0/w0", "device": "cpu:0", "state": "proving", "current_job": "job-1"}
        counters = {"total_completed": 0, "total_failed": 0, "total_cancelled": 0, "queue_depth": 0}
        return {
            "version": "test",
            "boot_id": "boot",
            "seq": self.seq,
            "taken_at": 1.0,
            "uptime_secs": 2.0,
            "invariants_ok": True,
            "stale_events": 0,
            "memory": {
                "total_bytes": 1 << 30,
                "reserved_bytes": 0,
                "available_bytes": 1 << 30,
                "process_rss_bytes": 1 << 20,
            },
            "synthesis": {"max_concurrent": 2, "active": 0},
            "pipelines": [
                {"job_id": "job-1", "proof_kind": "porep-c2", "priority": "normal", "state": "running"}
                | {"total_partitions": 1, "partitions_done": 0, "partitions": [partition]}
            ][: self.jobs],
            "workers": [worker | {"current_partition": 0, "finalizing": [], "busy_seconds_total": 1.5}],
            "devices": [{"device": "cpu:0", "kind": "cpu", "busy_fraction_1m": 0.5}],
            "counters": counters,
        }


@dataclass
class FakeTracker:
    """Publishes events with increasing ids; subscribers resume after an id."""

    items: list[Item] = field(default_factory=list)
    published: asyncio.Event | None = None

    def snapshot(self) -> FakeSnapshot:
        return FakeSnapshot(len(self.items))

    def totals(self) -> TrackerTotals:
        """The totals of a tracker that saw nothing (for /metrics)."""
        return StatusTracker().totals()

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
        self.finish_after: float | None = None
        """When set, every job submitted from then on finishes (done) this many seconds later."""

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
        if self.finish_after is not None:
            asyncio.get_running_loop().call_later(self.finish_after, self.finish, job_id)
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

    def snapshot(self) -> FakeSnapshot:
        return self.tracker.snapshot()

    def health(self) -> Health:
        return Health(True, ()) if self.ready else Health(False, ("starting",))

    def totals(self) -> TrackerTotals:
        return self.tracker.totals()

    def subscribe(self, last_event_id: int | None = None) -> AsyncIterator[Item]:
        return self.tracker.subscribe(last_event_id)


@dataclass
class Served:
    """An app served by uvicorn in a thread on a free port of 127.0.0.1."""

    url: str
    engine: FakeEngine
    loop: asyncio.AbstractEventLoop

    def call(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the server's loop (the engine lives there)."""
        self.loop.call_soon_threadsafe(fn, *args)


@contextlib.contextmanager
def served(engine: FakeEngine, token: str = "") -> Iterator[Served]:
    """Serve ``create_app(engine)`` over real HTTP until the block ends."""
    app = create_app(engine, api_config(token))
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning"))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(server.serve(sockets=[sock]),))
    thread.start()
    while not server.started and thread.is_alive():
        threading.Event().wait(0.01)
    host, port = sock.getsockname()[:2]
    try:
        yield Served(f"http://{host}:{port}", engine, loop)
    finally:
        loop.call_soon_threadsafe(close_streams, app)
        server.should_exit = True
        thread.join()
        loop.close()


def api_config(token: str = "") -> Config:
    """A config for the API tests (only the token and the body limit matter to the API)."""
    return Config(token=token, max_request_bytes=4096)
