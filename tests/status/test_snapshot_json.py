"""The exact ``GET /status`` text: a tracker driven through a fixed story gives the same bytes, key order too.

``tests/status/data/status_v1.json`` is the text the tracker served before the encoder became one generic
function; fields added since (listed in :data:`ADDED`) are taken out before comparing, so a tool written
against that text sees no change. ``tests/status/data/status.json`` is today's whole text. Regenerate the
latter (only when a field is added on purpose) with ``python -m tests.status.test_snapshot_json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from prooflane import events as ev
from prooflane.status.snapshot import MachineStatus
from prooflane.status.tracker import StatusTracker, TrackerConfig
from tests.support.clock import ManualClock

DATA = Path(__file__).parent / "data"

ADDED: dict[str, tuple[str, ...]] = {
    "": (
        "health",
        "live_jobs",
        "recent_failures",
        "machine",
        "arithmetic",
        "products",
        "journal_check",
        "tables",
    ),
    "memory": ("used_bytes", "tree_rss_bytes"),
    "workers": ("last_error", "restarts", "node", "last_restart_secs_ago", "stuck"),
    "devices": ("workers_down", "node", "memory"),
    "pipelines": ("partition_counts",),
    "history": (
        "proofs_per_hour_1m",
        "proofs_per_hour_10m",
        "partitions_per_hour_1m",
        "partitions_per_hour_10m",
    ),
}
"""Where fields were added after ``status_v1.json``: section ("" for the top) -> field names."""


def story() -> StatusTracker:
    """A tracker after a fixed sequence of events touching every part of ``/status``."""
    clock = ManualClock(5000.0)
    tracker = StatusTracker(
        TrackerConfig(
            memory_total_bytes=1 << 30,
            synthesis_max_concurrent=2,
            sample_rss=False,
            machine=MachineStatus("prover-1", "0123456789abcdef", 32 << 30, 16),
            arithmetic={"bn128": "c-extension", "bls12381": "libraries: the C extension is not built"},
            products={"bn128": "avx512-ifma", "bls12381": "libraries"},
        ),
        clock=clock,
        wall_clock=lambda: 1.7e9,
        strict=True,
        boot_id="golden",
        version="1.2.3",
    )
    minter = ev.LeaseMinter()

    def send(cls: type[ev.EventBase], **fields: Any) -> None:
        event: Any = cls(at=clock.now, **fields)
        tracker.apply(event)

    def lease(worker_id: str, device: str, job_id: str, index: int, attempt: int = 1) -> ev.LeaseToken:
        token = minter.mint()
        where = {"worker_id": worker_id, "device": device, "job_id": job_id, "partition": index}
        send(ev.LeaseGranted, token=token, attempt=attempt, **where)
        return token

    def synthesize(job_id: str, index: int, attempt: int = 1) -> None:
        send(ev.SynthesisStarted, job_id=job_id, partition=index, attempt=attempt)
        clock.now += 1.5
        send(ev.SynthesisFinished, job_id=job_id, partition=index, synth_ms=1500.0, attempt=attempt)

    send(ev.WorkerRegistered, worker_id="cpu0/w0", device="cpu0")
    send(ev.WorkerRegistered, worker_id="cpu0/w1", device="cpu0")
    send(ev.WorkerRegistered, worker_id="cuda0/w0", device="cuda0", device_kind="cuda")
    send(ev.ReservationMade, name="A/0", nbytes=1000)
    send(ev.AllocationCached, name="key porep-c2 cpu0/w0", nbytes=4096)
    send(ev.JobSubmitted, job_id="A", kind="porep-c2", priority="high", partitions=2)
    send(ev.JobSubmitted, job_id="B", kind="circom", priority="normal", partitions=3, circuit="multiplier")
    send(ev.JobSubmitted, job_id="C", kind="snap-update", priority="critical", partitions=1)
    synthesize("A", 0)
    synthesize("A", 1)
    a0 = lease("cpu0/w0", "cpu0", "A", 0)
    clock.now += 0.75
    send(ev.DeviceSectionFinished, token=a0, prove_ms=750.0)
    send(ev.ReservationShrunk, name="A/0", nbytes=400)
    a1 = lease("cpu0/w0", "cpu0", "A", 1)
    clock.now += 0.25
    send(ev.FinalizeFinished, token=a0, finalize_ms=250.0)
    send(ev.AllocationUsed, name="key porep-c2 cpu0/w0")
    send(ev.DeviceSectionFinished, token=a1, prove_ms=250.0)
    send(ev.FinalizeFinished, token=a1, finalize_ms=125.5)
    send(ev.JobDone, job_id="A")
    synthesize("B", 0)
    b0 = lease("cuda0/w0", "cuda0", "B", 0)
    send(ev.SynthesisStarted, job_id="B", partition=1)
    bad = "\x1b[31mwitness\x1b[0m is bad\n    at main (x.js:1:2)"
    send(ev.SynthesisFailed, job_id="B", partition=1, reason=bad)
    send(ev.JobFailed, job_id="B", reason="partition 1: witness is bad", partition=1)
    send(ev.PartitionRetried, job_id="C", partition=0, attempt=2, reason="worker cpu0/w1 died: exit code -9")
    synthesize("C", 0, attempt=2)
    c0 = lease("cpu0/w1", "cpu0", "C", 0, attempt=2)
    send(ev.ReservationReleased, name="A/0")
    send(ev.ReservationMade, name="C/0", nbytes=2048)
    clock.now += 61.0  # A and B leave the live view; one minute of history
    send(ev.JobSubmitted, job_id="D", kind="porep-c2", priority="normal", partitions=1)
    clock.now += 2.0
    assert b0 < c0
    return tracker


def strip_added(text: str) -> str:
    """``text`` without the fields in :data:`ADDED`, re-encoded the way ``/status`` encodes."""
    doc = json.loads(text)
    for section, names in ADDED.items():
        entries = [doc] if not section else doc[section] if isinstance(doc[section], list) else [doc[section]]
        for entry in entries:
            for name in names:
                entry.pop(name)
    return json.dumps(doc, separators=(",", ":"))


def test_status_text_is_byte_for_byte_what_tools_read_before() -> None:
    text = story().snapshot().to_json_text()
    assert strip_added(text) == (DATA / "status_v1.json").read_text()


def test_status_text_is_byte_for_byte_the_recorded_one() -> None:
    snapshot = story().snapshot()
    text = snapshot.to_json_text()
    assert text == (DATA / "status.json").read_text()
    assert text == json.dumps(snapshot.to_json(), separators=(",", ":"))


if __name__ == "__main__":
    target = DATA / ("status_v1.json" if sys.argv[1:] == ["v1"] else "status.json")
    target.parent.mkdir(exist_ok=True)
    target.write_text(story().snapshot().to_json_text())
    print(f"wrote {target}")
