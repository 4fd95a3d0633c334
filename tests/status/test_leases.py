"""Leases: stale events dropped, worker deaths and losses, what a worker holds."""

from __future__ import annotations

import pytest

from prooflane import events as ev
from prooflane.errors import IllegalTransition
from prooflane.status.tracker import Health, Outcome, WorkerState
from tests.support.tracker import Script, job_of, states_of, worker_of

# --- leases ------------------------------------------------------------------------------------------------


def test_duplicate_and_unknown_lease_events_are_stale(s: Script) -> None:
    s.job("A", partitions=1)
    token = s.start("W0", "A", 0)
    assert s.prove_end(token) is Outcome.APPLIED
    assert s.prove_end(token) is Outcome.STALE
    assert s.finalize(ev.LeaseToken(999)) is Outcome.STALE
    assert s.finalize(token) is Outcome.APPLIED
    assert s.finalize(token) is Outcome.STALE
    assert s.status()["stale_events"] == 3


def test_a_replayed_lease_grant_is_stale(s: Script) -> None:
    s.job("A", partitions=2)
    s.synthesize("A", 1)
    token = s.start("W0", "A", 0)
    s.prove_end(token)
    replay = s(ev.LeaseGranted, token=token, worker_id="W0", device="cpu0", job_id="A", partition=1)
    assert replay is Outcome.STALE


def test_worker_death_requeues_its_partitions_and_old_attempts_are_stale(s: Script) -> None:
    s.worker("W1")
    s.job("A", partitions=2)
    s.synthesize("A", 1)
    a0 = s.start("W0", "A", 0)
    s.prove_end(a0)
    a1 = s.lease("W0", "A", 1)
    s(ev.WorkerDied, worker_id="W0", reason="exit code -9")
    status = s.status()
    # the dead worker stays listed, restarting, never idle and never silently gone
    assert [(w["worker_id"], w["state"]) for w in status["workers"]] == [("W0", "restarting"), ("W1", "idle")]
    assert states_of(status, "A") == ["pending", "pending"]
    assert s.prove_end(a1) is Outcome.STALE
    assert s.finalize(a0) is Outcome.STALE

    s(ev.PartitionRetried, job_id="A", partition=0, attempt=2, reason="worker W0 died")
    assert s(ev.SynthesisStarted, job_id="A", partition=0, attempt=1) is Outcome.STALE
    s.synthesize("A", 0, attempt=2)
    s.lease("W1", "A", 0, attempt=2)
    part = job_of(s.status(), "A")["partitions"][0]
    assert (part["state"], part["attempt"], part["worker_id"]) == ("proving", 2, "W1")
    assert s.status()["counters"]["retries"] == 1


def test_a_dead_worker_stays_listed_restarting_until_it_registers_again(s: Script) -> None:
    s.job("A", partitions=1)
    token = s.start("W0", "A", 0)
    assert s(ev.WorkerDied, worker_id="W0", reason="exit code -9\n    at frame (x:1)") is Outcome.APPLIED
    w0 = worker_of(s.status(), "W0")
    assert (w0["state"], w0["current_job"], w0["restarts"], w0["last_error"]) == (
        "restarting",
        None,
        1,
        "exit code -9 …",
    )
    assert states_of(s.status(), "A") == ["pending"]
    assert s.prove_end(token) is Outcome.STALE
    s(ev.PartitionRetried, job_id="A", partition=0, attempt=2, reason="worker W0 died")
    s.synthesize("A", 0, attempt=2)
    with pytest.raises(IllegalTransition, match="live registered worker, got W0 \\(restarting\\)"):
        s.lease("W0", "A", 0, attempt=2)
    assert s(ev.WorkerDied, worker_id="W0", reason="again") is Outcome.STALE  # dead already

    assert s(ev.WorkerRegistered, worker_id="W0", device="cpu0", node="host-b") is Outcome.APPLIED
    w0 = worker_of(s.status(), "W0")
    assert (w0["state"], w0["restarts"], w0["last_error"], w0["node"]) == (
        "idle",
        1,
        "exit code -9 …",
        "host-b",
    )
    s.lease("W0", "A", 0, attempt=2)
    assert worker_of(s.status(), "W0")["state"] == "proving"
    with pytest.raises(IllegalTransition, match=r"W0 \(live\)"):
        s(ev.WorkerRegistered, worker_id="W0", device="cpu0")  # a live worker cannot register twice


def test_a_lost_worker_is_listed_lost_and_its_finalizing_work_requeued(s: Script) -> None:
    s.job("A", partitions=1)
    s.prove_end(s.start("W0", "A", 0))
    assert s(ev.WorkerLost, worker_id="W0", reason="device gone") is Outcome.APPLIED
    status = s.status()
    w0 = worker_of(status, "W0")
    assert (w0["state"], w0["finalizing"], w0["restarts"], w0["last_error"]) == ("lost", [], 0, "device gone")
    assert states_of(status, "A") == ["pending"]
    assert s(ev.WorkerLost, worker_id="W0", reason="again") is Outcome.STALE
    assert s(ev.WorkerDied, worker_id="W0", reason="again") is Outcome.STALE
    assert s(ev.WorkerRegistered, worker_id="W0", device="cpu0") is Outcome.APPLIED  # brought back after all
    assert worker_of(s.status(), "W0")["state"] == "idle"


def test_a_restarting_worker_that_cannot_come_back_becomes_lost(s: Script) -> None:
    s(ev.WorkerDied, worker_id="W0", reason="exit code 255")
    assert s(ev.WorkerLost, worker_id="W0", reason="3 failed starts") is Outcome.APPLIED
    w0 = worker_of(s.status(), "W0")
    assert (w0["state"], w0["restarts"], w0["last_error"]) == ("lost", 1, "3 failed starts")


def test_a_worker_that_never_started_is_listed_lost_on_its_device(s: Script) -> None:
    with pytest.raises(IllegalTransition, match="a registered worker or a device"):
        s(ev.WorkerLost, worker_id="gpu0/w0", reason="no driver")  # neither known nor placed
    event = {"worker_id": "gpu0/w0", "reason": "no driver", "device": "gpu0", "device_kind": "cuda"}
    assert s(ev.WorkerLost, **event) is Outcome.APPLIED
    status = s.status()
    assert worker_of(status, "gpu0/w0")["state"] == "lost"
    devices = {d["device"]: d for d in status["devices"]}
    assert (devices["gpu0"]["kind"], devices["gpu0"]["workers"], devices["gpu0"]["workers_down"]) == (
        "cuda",
        0,
        1,
    )
    assert (devices["cpu0"]["workers"], devices["cpu0"]["workers_down"]) == (1, 0)


def test_health_names_every_device_without_a_live_worker() -> None:
    s = Script()
    assert s.tracker.health().ok is False  # nothing can work yet
    assert s.tracker.health().reasons == ("no worker is registered",)
    s.worker("cpu0/w0", "cpu0")
    s.worker("cpu0/w1", "cpu0")
    s.worker("cpu1/w0", "cpu1")
    assert s.tracker.health() == Health(True, (), ())
    s(ev.WorkerDied, worker_id="cpu0/w0", reason="exit code -9")
    assert s.tracker.health().ok is True  # cpu0 still has a live worker
    s(ev.WorkerDied, worker_id="cpu1/w0", reason="exit code -9")
    health = s.tracker.health()
    assert (health.ok, health.devices_down) == (False, ("cpu1",))
    assert health.reasons == ("device cpu1 has no live worker (cpu1/w0 restarting: exit code -9)",)
    assert s.status()["health"] == {
        "ok": False, "reasons": list(health.reasons), "devices_down": ["cpu1"], "warnings": [],
    }  # fmt: skip
    s(ev.WorkerRegistered, worker_id="cpu1/w0", device="cpu1")
    assert s.tracker.health().ok is True
    stalled = s.tracker.health("queue stalled for 300 s")
    assert (stalled.ok, stalled.reasons) == (False, ("queue stalled for 300 s",))
    assert s.tracker.snapshot("queue stalled for 300 s").health == stalled
    assert stalled.with_reasons() is stalled and s.tracker.health().with_reasons("x").ok is False


def test_invariants_catch_a_dead_worker_holding_a_lease(s: Script) -> None:
    s.job("A", partitions=1)
    s.start("W0", "A", 0)
    s.tracker.records.workers["W0"].down = WorkerState.RESTARTING  # dead, yet still holding its lease
    s.tracker.records.seq += 1  # invariants are cached per seq
    assert any("W0 is restarting but holds a lease" in p for p in s.tracker.invariants())


def test_retry_of_a_leased_partition_frees_its_worker(s: Script) -> None:
    s.job("A", partitions=1)
    token = s.start("W0", "A", 0)
    s(ev.PartitionRetried, job_id="A", partition=0, attempt=2, reason="device error")
    assert worker_of(s.status(), "W0")["state"] == "idle"
    assert s.prove_end(token) is Outcome.STALE


def test_partition_failure_under_an_old_lease_is_stale(s: Script) -> None:
    s.job("A", partitions=1)
    old = s.start("W0", "A", 0)
    s(ev.PartitionRetried, job_id="A", partition=0, attempt=2, reason="retry")
    s.synthesize("A", 0, attempt=2)
    s.lease("W0", "A", 0, attempt=2)
    assert s(ev.PartitionFailed, job_id="A", partition=0, reason="x", token=old) is Outcome.STALE
    assert states_of(s.status(), "A") == ["proving"]


def test_restarts_their_last_reason_and_time_survive_the_workers_return(s: Script) -> None:
    s.clock.advance(10.0)
    s(ev.WorkerDied, worker_id="W0", reason="prover exited: killed by signal 9")
    s.clock.advance(2.0)
    s(ev.WorkerRegistered, worker_id="W0", device="cpu0")  # back, live and idle
    s.clock.advance(30.0)
    w0 = worker_of(s.status(), "W0")
    assert (w0["state"], w0["restarts"], w0["last_error"], w0["last_restart_secs_ago"]) == (
        "idle",
        1,
        "prover exited: killed by signal 9",
        32.0,
    )
    s(ev.WorkerDied, worker_id="W0", reason="prover exited: exit code 1")
    s(ev.WorkerRegistered, worker_id="W0", device="cpu0")
    s.clock.advance(5.0)
    w0 = worker_of(s.status(), "W0")
    assert (w0["restarts"], w0["last_error"], w0["last_restart_secs_ago"]) == (
        2,
        "prover exited: exit code 1",
        5.0,
    )


def test_a_worker_never_restarted_has_no_restart_time_and_a_loss_is_not_a_restart(s: Script) -> None:
    assert worker_of(s.status(), "W0")["last_restart_secs_ago"] is None
    s(ev.WorkerLost, worker_id="W0", reason="device gone")
    w0 = worker_of(s.status(), "W0")
    assert (w0["restarts"], w0["last_error"], w0["last_restart_secs_ago"]) == (0, "device gone", None)


# --- a worker that does not answer ------------------------------------------------------------------------


def test_a_device_section_running_past_stall_secs_says_the_worker_may_be_hung() -> None:
    s = Script(stall_secs=10.0)
    s.worker("W0")
    s.job("A", partitions=1)
    s.start("W0", "A", 0)
    s.clock.advance(9.0)
    assert s.tracker.health().ok and worker_of(s.status(), "W0")["stuck"] is None
    s.clock.advance(2.0)  # 11 s in its device section: no event says anything, the read-out does
    health = s.tracker.health()
    assert not health.ok
    assert any("W0" in r and "device section of A/0" in r and "stall_secs" in r for r in health.reasons)
    assert "device section of A/0 has run 11 s" in worker_of(s.status(), "W0")["stuck"]


def test_a_finalization_running_past_stall_secs_is_seen_too_and_ends_with_its_lease() -> None:
    s = Script(stall_secs=10.0)
    s.worker("W0")
    s.job("A", partitions=1)
    token = s.start("W0", "A", 0)
    s.clock.advance(5.0)
    s.prove_end(token)  # the finalization starts now
    s.clock.advance(8.0)
    assert s.tracker.health().ok  # 13 s since the lease, but only 8 s finalizing
    s.clock.advance(3.0)
    assert "finalization of A/0" in worker_of(s.status(), "W0")["stuck"]
    s.finalize(token)
    assert s.tracker.health().ok and worker_of(s.status(), "W0")["stuck"] is None


def test_a_worker_synthesizing_its_own_partition_is_busy_until_that_partition_moves_on(s: Script) -> None:
    """A worker that synthesizes what it proves shows synthesizing, with the partition, from the start of
    that synthesis until the partition leaves synthesizing (finished, retried, cancelled): computed from the
    partition's state, so no late event can leave it shown busy, nor an early one idle."""
    s.job("A", partitions=2)
    s(ev.SynthesisStarted, job_id="A", partition=0, worker_id="W0")
    s.clock.advance(2.0)
    worker = worker_of(s.status(), "W0")
    assert (worker["state"], worker["current_job"], worker["current_partition"]) == ("synthesizing", "A", 0)
    assert worker["current_token"] is None and worker["busy_secs"] == 2.0
    assert worker["busy_seconds_total"] == 0.0  # not device-section time
    s(ev.SynthesisFinished, job_id="A", partition=0, synth_ms=2000.0)
    assert worker_of(s.status(), "W0")["state"] == "idle"  # synthesized, its lease not yet granted
    token = s.lease("W0", "A", 0)
    assert worker_of(s.status(), "W0")["state"] == "proving"
    s.prove_end(token)
    s.finalize(token)
    s(ev.SynthesisStarted, job_id="A", partition=1, worker_id="W0")
    assert worker_of(s.status(), "W0")["state"] == "synthesizing"
    s(ev.JobCancelled, job_id="A", reason="cancelled by request")
    assert worker_of(s.status(), "W0")["state"] == "idle"
    assert s.tracker.invariants() == []
