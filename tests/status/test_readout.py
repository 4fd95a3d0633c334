"""The read-out at scale: what it reuses between reads is never stale; a bounded snapshot keeps its promise.

Each job's views and JSON text, and each job's invariant facts, are kept while the job's ``version`` stays;
every write to a job or one of its partitions moves it. These tests change a job in the ways that once went
unseen (a field written without a partition moving) and compare with what a fresh read-out gives.
(``tests/test_status_stateful.py`` does the same after every step of random event sequences.)
"""

from __future__ import annotations

import json
from collections import deque

import pytest

from prooflane import events as ev
from prooflane.states import JobState, PartitionState
from prooflane.status.encode import to_json_text
from prooflane.status.invariants import broken_invariants
from prooflane.status.tracker import StatusSnapshot
from tests.support.tracker import Script


def fresh_text(s: Script) -> str:
    """The ``/status`` text of a tracker that never kept anything between reads."""
    records = s.tracker.records
    records.recent_partitions_text = deque(
        map(to_json_text, records.recent_partitions), maxlen=records.recent_partitions.maxlen
    )
    for job in records.jobs.values():
        job.views = None
    return s.tracker.snapshot().to_json_text()


def assert_fresh(s: Script) -> StatusSnapshot:
    snapshot = s.tracker.snapshot()
    text = snapshot.to_json_text()
    assert text == json.dumps(snapshot.to_json(), separators=(",", ":"))
    assert text == fresh_text(s)
    return snapshot


@pytest.fixture
def s() -> Script:
    script = Script()
    script.worker("W0")
    return script


def test_a_retry_after_a_workers_death_shows_the_new_attempt(s: Script) -> None:
    s.job("A", partitions=1)
    s.start("W0", "A", 0)
    s(ev.WorkerDied, worker_id="W0", reason="killed")
    assert_fresh(s)  # read while the partition is pending again, attempt 1
    s(ev.PartitionRetried, job_id="A", partition=0, attempt=2, reason="worker W0 died")
    (partition,) = assert_fresh(s).pipelines[0].partitions  # no partition moved, yet the view follows
    assert (partition.attempt, partition.reason) == (2, "worker W0 died")


def test_recent_partitions_text_follows_every_partition_done(s: Script) -> None:
    s.job("A", partitions=3)
    for index in range(3):
        token = s.start("W0", "A", index)
        s.prove_end(token)
        s.finalize(token)
        assert [p.index for p in assert_fresh(s).recent_partitions] == list(range(index + 1))


def test_a_job_that_ends_without_a_partition_moving_shows_its_end(s: Script) -> None:
    s.job("A", partitions=1)
    token = s.start("W0", "A", 0)
    s.prove_end(token)
    s.finalize(token)
    assert assert_fresh(s).pipelines[0].state is JobState.RUNNING
    s(ev.JobDone, job_id="A")
    assert assert_fresh(s).pipelines[0].state is JobState.DONE


def test_only_the_time_fields_move_between_reads_of_an_unchanged_job(s: Script) -> None:
    s.job("A", partitions=1)
    first = s.tracker.snapshot().pipelines[0]
    s.clock.advance(2.5)
    second = s.tracker.snapshot().pipelines[0]
    assert second.started_secs_ago == first.started_secs_ago + 2.5
    assert second.json_frame is first.json_frame  # the rest of its text was reused
    assert_fresh(s)


def test_invariants_catch_a_partition_corrupted_after_its_job_was_checked(s: Script) -> None:
    s.job("A", partitions=2)
    s.start("W0", "A", 0)
    assert s.tracker.invariants() == []
    s.tracker.records.jobs["A"].partitions[1].lease = ev.LeaseToken(99)  # pending, yet holding a lease
    s.tracker.records.seq += 1  # invariants are cached per seq
    problems = s.tracker.invariants()
    assert problems == broken_invariants(s.tracker.records)
    assert any("A/1 is pending but holds lease 99" in p for p in problems)


def bounded_story() -> tuple[Script, StatusSnapshot]:
    """Jobs in every state: E1 ended first, R1 running, Q1 queued (normal), E2 ended last, Q2 queued
    (critical), R2 running, Q3 queued (normal)."""
    s = Script()
    s.worker("W0")
    s(ev.JobSubmitted, job_id="E1", kind="k", priority="normal", partitions=1)
    s(ev.JobCancelled, job_id="E1")
    s.clock.advance(1)
    s.job("R1", partitions=1)
    s(ev.SynthesisStarted, job_id="R1", partition=0)
    s(ev.JobSubmitted, job_id="Q1", kind="k", priority="normal", partitions=1)
    s(ev.JobSubmitted, job_id="E2", kind="k", priority="high", partitions=1)
    s(ev.JobFailed, job_id="E2", reason="bad", partition=0)
    s(ev.JobSubmitted, job_id="Q2", kind="k", priority="critical", partitions=1)
    s.job("R2", partitions=1)
    s(ev.SynthesisStarted, job_id="R2", partition=0)
    s(ev.JobSubmitted, job_id="Q3", kind="k", priority="normal", partitions=1)
    return s, s.tracker.snapshot()


@pytest.mark.parametrize(
    ("queued", "ended", "kept"),
    [
        (0, 0, ["R1", "R2"]),  # the running jobs always: a worker's partition is always listed
        (1, 0, ["R1", "Q2", "R2"]),  # the critical job runs next
        (2, 0, ["R1", "Q1", "Q2", "R2"]),
        (3, 0, ["R1", "Q1", "Q2", "R2", "Q3"]),
        (0, 1, ["R1", "E2", "R2"]),  # the job that ended last
        (1, 1, ["R1", "E2", "Q2", "R2"]),
        (3, 2, ["E1", "R1", "Q1", "E2", "Q2", "R2", "Q3"]),
    ],
)
def test_a_bounded_snapshot_keeps_running_then_next_to_run_then_last_ended(
    queued: int, ended: int, kept: list[str]
) -> None:
    _, full = bounded_story()
    bounded = full.bounded(queued, ended)
    assert [p.job_id for p in bounded.pipelines] == kept  # in submission order
    counts = bounded.live_jobs
    assert (counts.total, counts.shown) == (7, len(kept))
    assert (counts.queued, counts.running, counts.done, counts.failed, counts.cancelled) == (3, 2, 0, 1, 1)
    assert bounded.seq == full.seq and bounded.workers == full.workers
    assert bounded.tag() == full.tag()
    doc = json.loads(bounded.to_json_text())
    assert doc["live_jobs"]["shown"] == len(kept) and [p["job_id"] for p in doc["pipelines"]] == kept


def test_a_bounded_snapshot_with_room_for_all_is_the_snapshot_itself() -> None:
    _, full = bounded_story()
    assert full.bounded(3, 2) is full and full.bounded(100, 100) is full
    assert full.live_jobs.shown == full.live_jobs.total == 7
    with pytest.raises(ValueError, match="waiting and ended must be >= 0"):
        full.bounded(-1, 0)


def test_live_jobs_count_every_job_by_kind_priority_and_state() -> None:
    _, full = bounded_story()
    groups = [(g.proof_kind, g.priority, g.state.value, g.jobs, g.partitions, g.partitions_pending)
              for g in full.bounded(0, 0).live_jobs.groups]  # fmt: skip
    assert groups == [
        ("k", "critical", "queued", 1, 1, 1),
        ("k", "high", "failed", 1, 1, 0),
        ("k", "normal", "queued", 2, 2, 2),
        ("k", "normal", "cancelled", 1, 1, 0),
        ("porep-c2", "normal", "running", 2, 2, 0),
    ]
    assert sum(g.jobs for g in full.live_jobs.groups) == full.live_jobs.total


def test_live_job_counts_follow_every_state(s: Script) -> None:
    s.job("A", partitions=1)
    s.job("B", partitions=1)
    live = s.tracker.snapshot().live_jobs
    assert (live.total, live.queued, live.running) == (2, 2, 0)
    s(ev.SynthesisStarted, job_id="A", partition=0)
    s(ev.JobCancelled, job_id="B")
    live = s.tracker.snapshot().live_jobs
    assert (live.queued, live.running, live.cancelled) == (0, 1, 1)
    s.clock.advance(60)  # B leaves the live view
    live = s.tracker.snapshot().live_jobs
    assert (live.total, live.cancelled) == (1, 0)
    assert s.tracker.snapshot().pipelines[0].partitions[0].state is PartitionState.SYNTHESIZING


def test_pipelines_read_as_a_tuple_of_views(s: Script) -> None:
    s.job("A", partitions=1)
    s.job("B", partitions=2)
    pipelines = s.tracker.snapshot().pipelines
    assert len(pipelines) == 2 and [p.job_id for p in pipelines] == ["A", "B"]
    assert pipelines[1].total_partitions == 2 and [p.job_id for p in pipelines[:1]] == ["A"]
    assert pipelines == tuple(pipelines) and pipelines == s.tracker.snapshot().pipelines
    assert pipelines != ("A", "B") and hash(pipelines) == hash(tuple(pipelines))
    assert repr(pipelines).startswith("Pipelines((PipelineStatus(job_id='A'")
    assert pipelines.bounded(5, 0) is pipelines and [p.job_id for p in pipelines.bounded(1, 0)] == ["A"]
