"""Snapshots: the exact shape, seq, frozen copies, invariants, the one writer."""

from __future__ import annotations

import json
import threading

import pytest

from prooflane import events as ev
from prooflane.errors import IllegalTransition
from tests.support.tracker import Script

# --- snapshots ---------------------------------------------------------------------------------------------

STATUS_KEYS = {
    "version", "boot_id", "seq", "taken_at", "uptime_secs", "invariants_ok", "stale_events",
    "memory", "synthesis", "pipelines", "workers", "devices", "allocations", "counters",
}  # fmt: skip
NESTED_KEYS = {
    "memory": {"total_bytes", "reserved_bytes", "available_bytes", "process_rss_bytes"},
    "synthesis": {"max_concurrent", "active"},
    "counters": {
        "total_completed", "total_failed", "total_cancelled", "completed_by_kind", "failed_by_kind",
        "queue_depth",
    },
}  # fmt: skip
LIST_KEYS = {
    "pipelines": {
        "job_id", "proof_kind", "priority", "state", "started_secs_ago", "total_partitions",
        "partitions_done", "partitions",
    },
    "workers": {
        "worker_id", "device", "state", "current_job", "current_partition", "busy_secs", "finalizing",
        "busy_seconds_total",
    },
    "devices": {"device", "kind", "busy_fraction_1m"},
    "allocations": {"name", "bytes", "last_used_secs_ago", "evictable"},
}  # fmt: skip
PARTITION_KEYS = {"index", "state", "attempt", "worker_id", "synth_ms", "prove_ms", "finalize_ms"}


def test_snapshot_json_has_the_exact_status_shape() -> None:
    s = Script(memory_total_bytes=1 << 30, synthesis_max_concurrent=2, sample_rss=True)
    s.worker("W0")
    s.job("A", partitions=2)
    a0 = s.start("W0", "A", 0)
    s.prove_end(a0)
    s(ev.AllocationCached, name="key", nbytes=1)
    status = json.loads(json.dumps(s.status()))  # plain JSON types only
    assert status.keys() >= STATUS_KEYS
    for key, keys in NESTED_KEYS.items():
        assert keys <= status[key].keys(), key
    for key, keys in LIST_KEYS.items():
        assert status[key], key
        for entry in status[key]:
            assert keys <= entry.keys(), key
    for partition in status["pipelines"][0]["partitions"]:
        assert partition.keys() >= PARTITION_KEYS
    assert status["workers"][0]["finalizing"] == [{"job_id": "A", "partition": 0, "token": a0}]
    assert status["memory"]["process_rss_bytes"] > 0
    assert status["synthesis"] == {"max_concurrent": 2, "active": 0}
    assert status["invariants_ok"] is True
    assert isinstance(status["version"], str) and status["boot_id"] == "b"


def test_snapshot_json_text_is_the_same_document(s: Script) -> None:
    s.job("A", partitions=3)
    s.start("W0", "A", 1)
    snapshot = s.tracker.snapshot()
    assert json.loads(snapshot.to_json_text()) == json.loads(json.dumps(snapshot.to_json()))


def test_seq_never_goes_back_and_counts_dropped_events(s: Script) -> None:
    seqs = [s.tracker.snapshot().seq]
    s.job("A", partitions=1)
    seqs.append(s.tracker.snapshot().seq)
    s(ev.JobDone, job_id="nope")  # stale
    seqs.append(s.tracker.snapshot().seq)
    seqs.append(s.tracker.snapshot().seq)
    assert seqs == sorted(seqs)
    assert seqs[-1] == seqs[0] + 2


def test_snapshots_are_frozen_and_do_not_follow_the_tracker(s: Script) -> None:
    s.job("A", partitions=1)
    snapshot = s.tracker.snapshot()
    with pytest.raises(TypeError):
        snapshot.counters.completed_by_kind["x"] = 1  # type: ignore[index]
    s.start("W0", "A", 0)
    assert snapshot.pipelines[0].partitions[0].state == "pending"
    assert snapshot.workers[0].state == "idle"


def test_invariants_catch_a_corrupted_state(s: Script) -> None:
    s.job("A", partitions=1)
    s.start("W0", "A", 0)
    s.tracker.records.workers["W0"].current = None  # what the old tracker's stray finalizer did
    s.tracker.records.seq += 1  # invariants are cached per seq
    problems = s.tracker.invariants()
    assert any("A/0 is proving" in p for p in problems)
    assert s.tracker.snapshot().invariants_ok is False


def test_apply_from_a_second_thread_is_refused_in_strict_mode(s: Script) -> None:
    errors: list[BaseException] = []

    def post() -> None:
        try:
            s.job("X")
        except IllegalTransition as exc:
            errors.append(exc)

    thread = threading.Thread(target=post)
    thread.start()
    thread.join()
    assert errors and "second thread" in str(errors[0])
