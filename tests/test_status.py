"""The status tracker: leases, transitions, invariants, retention, counters, snapshots, the event feed."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

from prooflane import events as ev
from prooflane.errors import IllegalTransition
from prooflane.status.feed import RESYNC, EventFeed, FeedItem
from prooflane.status.reasons import readable_reason
from prooflane.status.tracker import Health, Outcome, StatusTracker, TrackerConfig, WorkerState


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Script:
    """Drives a strict tracker with events stamped by a fake clock."""

    def __init__(self, strict: bool = True, **config: Any) -> None:
        self.clock = Clock()
        config.setdefault("sample_rss", False)
        self.tracker = StatusTracker(
            TrackerConfig(**config), clock=self.clock, wall_clock=lambda: 1.7e9, strict=strict, boot_id="b"
        )
        self.minter = ev.LeaseMinter()
        self.devices: dict[str, str] = {}

    def __call__(self, cls: type[ev.EventBase], **fields: Any) -> Outcome:
        event: Any = cls(at=self.clock.now, **fields)
        return self.tracker.apply(event)

    def worker(self, worker_id: str, device: str = "cpu0") -> None:
        self.devices[worker_id] = device
        assert self(ev.WorkerRegistered, worker_id=worker_id, device=device) is Outcome.APPLIED

    def job(self, job_id: str, partitions: int = 2, kind: str = "porep-c2") -> None:
        fields = {"job_id": job_id, "kind": kind, "priority": "normal", "partitions": partitions}
        assert self(ev.JobSubmitted, **fields) is Outcome.APPLIED

    def synthesize(self, job_id: str, index: int, attempt: int = 1) -> None:
        assert self(ev.SynthesisStarted, job_id=job_id, partition=index, attempt=attempt) is Outcome.APPLIED
        self.clock.advance(1.0)
        finished = self(
            ev.SynthesisFinished, job_id=job_id, partition=index, synth_ms=1000.0, attempt=attempt
        )
        assert finished is Outcome.APPLIED

    def lease(self, worker_id: str, job_id: str, index: int, attempt: int = 1) -> ev.LeaseToken:
        token = self.minter.mint()
        outcome = self(
            ev.LeaseGranted,
            token=token,
            worker_id=worker_id,
            device=self.devices[worker_id],
            job_id=job_id,
            partition=index,
            attempt=attempt,
        )
        assert outcome is Outcome.APPLIED
        return token

    def start(self, worker_id: str, job_id: str, index: int) -> ev.LeaseToken:
        self.synthesize(job_id, index)
        return self.lease(worker_id, job_id, index)

    def prove_end(self, token: ev.LeaseToken) -> Outcome:
        return self(ev.DeviceSectionFinished, token=token, prove_ms=500.0)

    def finalize(self, token: ev.LeaseToken) -> Outcome:
        return self(ev.FinalizeFinished, token=token, finalize_ms=250.0)

    def status(self) -> dict[str, Any]:
        snapshot = self.tracker.snapshot()
        assert self.tracker.invariants() == []
        return snapshot.to_json()


def _worker(status: dict[str, Any], worker_id: str) -> dict[str, Any]:
    return next(w for w in status["workers"] if w["worker_id"] == worker_id)


def _job(status: dict[str, Any], job_id: str) -> dict[str, Any]:
    return next(j for j in status["pipelines"] if j["job_id"] == job_id)


def _states(status: dict[str, Any], job_id: str) -> list[str]:
    return [p["state"] for p in _job(status, job_id)["partitions"]]


@pytest.fixture
def s() -> Script:
    script = Script()
    script.worker("W0")
    return script


# --- the seed sequence and the family of bugs it belongs to ------------------------------------------------


def test_old_finalizer_cannot_clear_a_worker_that_moved_on(s: Script) -> None:
    s.job("A", partitions=1)
    s.job("B", partitions=2)
    s.synthesize("B", 1)
    a0 = s.start("W0", "A", 0)
    assert s.prove_end(a0) is Outcome.APPLIED
    b1 = s.lease("W0", "B", 1)
    assert s.finalize(a0) is Outcome.APPLIED

    status = s.status()
    w0 = _worker(status, "W0")
    assert (w0["state"], w0["current_job"], w0["current_partition"]) == ("proving", "B", 1)
    assert w0["current_token"] == b1
    assert w0["finalizing"] == []
    assert _states(status, "A") == ["done"]
    assert _states(status, "B")[1] == "proving"


def test_worker_proving_while_its_finalizer_runs_shows_both(s: Script) -> None:
    s.job("A", partitions=2)
    s.synthesize("A", 1)
    a0 = s.start("W0", "A", 0)
    s.prove_end(a0)
    s.lease("W0", "A", 1)
    w0 = _worker(s.status(), "W0")
    assert w0["state"] == "proving"
    assert w0["finalizing"] == [{"job_id": "A", "partition": 0, "token": a0}]


def test_failed_job_leaves_the_live_view_after_the_retention(s: Script) -> None:
    s.job("A", partitions=2)
    s.start("W0", "A", 0)
    s(ev.JobFailed, job_id="A", reason="partition 0 did not verify", partition=0)
    status = s.status()
    assert _job(status, "A")["state"] == "failed"
    assert _states(status, "A") == ["failed", "cancelled"]
    assert _worker(status, "W0")["state"] == "idle"

    s.clock.advance(59.0)
    assert [j["job_id"] for j in s.status()["pipelines"]] == ["A"]
    s.clock.advance(1.0)
    status = s.status()
    assert status["pipelines"] == []
    assert status["counters"]["total_failed"] == 1
    assert status["recent_jobs"][0]["reason"] == "partition 0 did not verify"
    s.job("B")  # the next event prunes A from the state, not only from the view
    assert s.tracker.invariants() == []
    assert [j["job_id"] for j in s.status()["pipelines"]] == ["B"]


def test_retention_is_configurable() -> None:
    s = Script(retention_secs=5.0)
    s.job("A", partitions=1)
    s(ev.JobCancelled, job_id="A")
    s.clock.advance(5.0)
    assert s.status()["pipelines"] == []


def test_a_job_leaving_the_live_view_moves_seq_and_reaches_the_feed(s: Script) -> None:
    s.job("A", partitions=1)
    s(ev.JobCancelled, job_id="A")
    before = s.tracker.snapshot()
    assert [j.job_id for j in before.pipelines] == ["A"]
    s.clock.advance(60.0)
    after = s.tracker.snapshot()
    assert after.pipelines == ()
    assert after.seq == before.seq + 1  # a different view never has the same seq
    assert s.tracker.snapshot().seq == after.seq  # nothing else changed: same seq
    backlog = s.tracker.feed.backlog(before.seq)
    assert backlog is not None
    assert [(i.id, i.event) for i in backlog] == [(after.seq, "job_expired")]
    data = json.loads(backlog[0].data)
    assert (data["job_id"], data["outcome"], data["job_state"], data["at"]) == (
        "A",
        "applied",
        "cancelled",
        1060.0,
    )
    assert s.tracker.invariants() == []
    assert s.status()["counters"]["total_cancelled"] == 1


def test_expiry_comes_before_the_event_that_finds_it_due(s: Script) -> None:
    s.job("A", partitions=1)
    s(ev.JobCancelled, job_id="A")
    s.clock.advance(60.0)
    s.job("B")
    backlog = s.tracker.feed.backlog(0)
    assert backlog is not None
    assert [i.event for i in backlog][-2:] == ["job_expired", "job_submitted"]
    assert [i.id for i in backlog] == list(range(1, s.tracker.seq + 1))


def test_subscribers_learn_of_an_expiry_without_any_poll() -> None:
    s = Script(retention_secs=0.25)

    async def main() -> FeedItem:
        s.job("A", partitions=1)
        s(ev.JobCancelled, job_id="A")
        stream = s.tracker.subscribe(last_event_id=s.tracker.seq)
        s.clock.advance(1.0)  # nothing is applied nor read from here on: a timer on the loop expires it
        item = await asyncio.wait_for(anext(stream), timeout=10)
        await stream.aclose()
        return item

    item = asyncio.run(main())
    assert (item.event, json.loads(item.data)["job_id"]) == ("job_expired", "A")
    assert s.tracker.snapshot().pipelines == ()


def test_the_expiry_timer_follows_the_tracker_to_a_new_loop() -> None:
    s = Script(retention_secs=0.25)

    async def end(job_id: str) -> None:
        s.job(job_id, partitions=1)
        s(ev.JobCancelled, job_id=job_id)  # arms a timer on this loop, which ends before it fires

    async def wait_for_expiry() -> list[str]:
        await end("B")
        stream = s.tracker.subscribe(last_event_id=s.tracker.seq)
        s.clock.advance(1.0)
        items = [await asyncio.wait_for(anext(stream), timeout=10) for _ in range(2)]
        await stream.aclose()
        return [json.loads(i.data)["job_id"] for i in items]

    asyncio.run(end("A"))
    assert asyncio.run(wait_for_expiry()) == ["A", "B"]


def test_pipelines_and_recent_jobs_name_a_circom_jobs_circuit(s: Script) -> None:
    circuit = "sector-merkle-inclusion-poseidon-circuit"
    s(ev.JobSubmitted, job_id="C", kind="circom", priority="high", partitions=1, circuit=circuit)
    s.job("P", partitions=1)
    status = json.loads(s.tracker.snapshot().to_json_text())  # the text /status serves
    assert [(j["proof_kind"], j["circuit"]) for j in status["pipelines"]] == [
        ("circom", circuit),
        ("porep-c2", None),
    ]
    s(ev.JobFailed, job_id="C", reason="bad witness", partition=0)
    s(ev.JobCancelled, job_id="P")
    recent = s.status()["recent_jobs"]
    assert [(j["job_id"], j["proof_kind"], j["circuit"]) for j in recent] == [
        ("P", "porep-c2", None),
        ("C", "circom", circuit),
    ]


# What the engine reports when `snarkjs wtns calculate` fails at an assert: snarkjs' coloured output and
# the Node stack trace, as printed by snarkjs 0.7.6 for a circom 2 witness generator.
SNARKJS_ERROR = (
    "witness generation failed: \x1b[31;22m[ERROR] \x1b[39;1msnarkJS\x1b[0m: Error: Error: Assert Failed. "
    "Error in template Multiplier_0 line: 9\r\n\r\n"
    "    at /srv/prooflane/node_modules/circom_runtime/build/main.cjs:529:27\n"
    "    at Array.forEach (<anonymous>)\n"
    "    at WitnessCalculatorCircom2._doCalculateWitness "
    "(/srv/prooflane/node_modules/circom_runtime/build/main.cjs:500:14)\n"
    "    at WitnessCalculatorCircom2.calculateWTNSBin "
    "(/srv/prooflane/node_modules/circom_runtime/build/main.cjs:559:20)\n"
    "    at wtnsCalculate$1 (/srv/prooflane/node_modules/snarkjs/build/cli.cjs:6100:28)\n"
    "    at async Object.wtnsCalculate [as action] "
    "(/srv/prooflane/node_modules/snarkjs/build/cli.cjs:12925:5)\n"
    "    at async clProcessor (/srv/prooflane/node_modules/snarkjs/build/cli.cjs:519:27)\n"
    "ERROR:  \x1b[33m4\x1b[39m Error in template Multiplier_0 line: 9\x07\n"
)
READABLE = (
    "witness generation failed: [ERROR] snarkJS: Error: Error: Assert Failed. Error in template Multiplier_0 "
    "line: 9\nERROR: 4 Error in template Multiplier_0 line: 9 …"
)


def test_failure_reasons_are_readable_in_the_snapshot_and_whole_in_the_feed(s: Script) -> None:
    s.job("C", partitions=2, kind="circom")
    s(ev.SynthesisStarted, job_id="C", partition=0)
    s(ev.SynthesisFailed, job_id="C", partition=0, reason=SNARKJS_ERROR)
    s(ev.JobFailed, job_id="C", reason=SNARKJS_ERROR, partition=0)
    text = s.tracker.snapshot().to_json_text()
    assert "\\u001b" not in text and "\\u0007" not in text and "main.cjs" not in text
    status = json.loads(text)
    job = _job(status, "C")
    assert (job["reason"], job["partitions"][0]["reason"]) == (READABLE, READABLE)
    assert job["partitions"][1]["reason"] == READABLE  # cancelled with the job's reason
    assert status["recent_jobs"][0]["reason"] == READABLE
    backlog = s.tracker.feed.backlog(s.tracker.seq - 1)
    assert backlog is not None
    assert json.loads(backlog[0].data)["reason"] == SNARKJS_ERROR  # the event itself is whole


def test_long_failure_reasons_are_cut_with_a_marker(s: Script) -> None:
    lines = [f"line {n}: " + "x" * 40 for n in range(40)]
    s.job("A", partitions=1)
    s(ev.PartitionFailed, job_id="A", partition=0, reason="\n".join(lines))
    s(ev.JobFailed, job_id="A", reason="y" * 5000)
    job = _job(s.status(), "A")
    partition_reason = job["partitions"][0]["reason"]
    assert len(partition_reason) == 500 and partition_reason.endswith(" …")
    assert partition_reason.startswith("\n".join(lines[:10]))  # the first lines, whole
    assert job["reason"] == "y" * 498 + " …"


def test_readable_reason_keeps_short_plain_text_and_drops_control_characters() -> None:
    assert readable_reason("partition 0 did not verify") == "partition 0 did not verify"
    assert readable_reason("a\tb\x07c\r\nd\x1b]0;title\x07e\x9b1m") == "a bc\nde"
    assert readable_reason("    at only (a frame:1:2)\n    at another (b:3:4)") == "at only (a frame:1:2) …"
    assert readable_reason("") == ""


def test_failed_synthesis_decrements_active_synthesis(s: Script) -> None:
    s.job("A", partitions=2)
    s(ev.SynthesisStarted, job_id="A", partition=0)
    s(ev.SynthesisStarted, job_id="A", partition=1)
    assert s.status()["synthesis"]["active"] == 2
    s(ev.SynthesisFailed, job_id="A", partition=0, reason="witness does not satisfy constraint 7")
    status = s.status()
    assert status["synthesis"]["active"] == 1
    assert _states(status, "A") == ["failed", "synthesizing"]
    s(ev.JobFailed, job_id="A", reason="synthesis failed", partition=0)
    assert s.status()["synthesis"]["active"] == 0


def test_a_partition_cancelled_after_pickup_frees_its_worker(s: Script) -> None:
    s.job("A", partitions=1)
    token = s.start("W0", "A", 0)
    assert _worker(s.status(), "W0")["state"] == "proving"
    s(ev.JobCancelled, job_id="A", reason="cancelled by request")
    status = s.status()
    assert _worker(status, "W0")["state"] == "idle"
    assert _states(status, "A") == ["cancelled"]
    assert s.prove_end(token) is Outcome.STALE


def test_a_partition_cancelled_while_finalizing_frees_the_finalizer(s: Script) -> None:
    s.job("A", partitions=1)
    token = s.start("W0", "A", 0)
    s.prove_end(token)
    s(ev.JobCancelled, job_id="A", reason="cancelled by request")
    assert _worker(s.status(), "W0")["state"] == "idle"
    assert s.finalize(token) is Outcome.STALE


def test_job_order_is_stable_between_snapshots(s: Script) -> None:
    ids = ["ps-snap-update-3644168-33825", "b", "a", "porep-c2-0001", "c"]
    for job_id in ids:
        s.job(job_id, partitions=1)
    first = [j["job_id"] for j in s.status()["pipelines"]]
    s.start("W0", "a", 0)  # activity on a later job must not reorder the list
    s(ev.JobCancelled, job_id="b")
    second = [j["job_id"] for j in s.status()["pipelines"]]
    assert first == second == ids


def test_late_events_after_cancel_are_stale_not_applied(s: Script) -> None:
    s.job("A", partitions=2)
    s(ev.SynthesisStarted, job_id="A", partition=1)
    token = s.start("W0", "A", 0)
    s(ev.JobCancelled, job_id="A")
    before = s.status()

    late = [
        s.prove_end(token),
        s.finalize(token),
        s(ev.SynthesisFinished, job_id="A", partition=1, synth_ms=5.0),
        s(ev.LeaseGranted, token=s.minter.mint(), worker_id="W0", device="cpu0", job_id="A", partition=1),
        s(ev.JobDone, job_id="A"),
        s(ev.JobCancelled, job_id="A"),
    ]
    assert late == [Outcome.STALE] * 6
    after = s.status()
    assert after["stale_events"] == before["stale_events"] + 6
    assert after["pipelines"] == before["pipelines"]
    assert _worker(after, "W0")["state"] == "idle"
    assert after["counters"]["total_cancelled"] == 1


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
    assert _states(status, "A") == ["pending", "pending"]
    assert s.prove_end(a1) is Outcome.STALE
    assert s.finalize(a0) is Outcome.STALE

    s(ev.PartitionRetried, job_id="A", partition=0, attempt=2, reason="worker W0 died")
    assert s(ev.SynthesisStarted, job_id="A", partition=0, attempt=1) is Outcome.STALE
    s.synthesize("A", 0, attempt=2)
    s.lease("W1", "A", 0, attempt=2)
    part = _job(s.status(), "A")["partitions"][0]
    assert (part["state"], part["attempt"], part["worker_id"]) == ("proving", 2, "W1")
    assert s.status()["counters"]["retries"] == 1


def test_a_dead_worker_stays_listed_restarting_until_it_registers_again(s: Script) -> None:
    s.job("A", partitions=1)
    token = s.start("W0", "A", 0)
    assert s(ev.WorkerDied, worker_id="W0", reason="exit code -9\n    at frame (x:1)") is Outcome.APPLIED
    w0 = _worker(s.status(), "W0")
    assert (w0["state"], w0["current_job"], w0["restarts"], w0["last_error"]) == (
        "restarting",
        None,
        1,
        "exit code -9 …",
    )
    assert _states(s.status(), "A") == ["pending"]
    assert s.prove_end(token) is Outcome.STALE
    s(ev.PartitionRetried, job_id="A", partition=0, attempt=2, reason="worker W0 died")
    s.synthesize("A", 0, attempt=2)
    with pytest.raises(IllegalTransition, match="live registered worker, got W0 \\(restarting\\)"):
        s.lease("W0", "A", 0, attempt=2)
    assert s(ev.WorkerDied, worker_id="W0", reason="again") is Outcome.STALE  # dead already

    assert s(ev.WorkerRegistered, worker_id="W0", device="cpu0", node="host-b") is Outcome.APPLIED
    w0 = _worker(s.status(), "W0")
    assert (w0["state"], w0["restarts"], w0["last_error"], w0["node"]) == (
        "idle",
        1,
        "exit code -9 …",
        "host-b",
    )
    s.lease("W0", "A", 0, attempt=2)
    assert _worker(s.status(), "W0")["state"] == "proving"
    with pytest.raises(IllegalTransition, match=r"W0 \(live\)"):
        s(ev.WorkerRegistered, worker_id="W0", device="cpu0")  # a live worker cannot register twice


def test_a_lost_worker_is_listed_lost_and_its_finalizing_work_requeued(s: Script) -> None:
    s.job("A", partitions=1)
    s.prove_end(s.start("W0", "A", 0))
    assert s(ev.WorkerLost, worker_id="W0", reason="device gone") is Outcome.APPLIED
    status = s.status()
    w0 = _worker(status, "W0")
    assert (w0["state"], w0["finalizing"], w0["restarts"], w0["last_error"]) == ("lost", [], 0, "device gone")
    assert _states(status, "A") == ["pending"]
    assert s(ev.WorkerLost, worker_id="W0", reason="again") is Outcome.STALE
    assert s(ev.WorkerDied, worker_id="W0", reason="again") is Outcome.STALE
    assert s(ev.WorkerRegistered, worker_id="W0", device="cpu0") is Outcome.APPLIED  # brought back after all
    assert _worker(s.status(), "W0")["state"] == "idle"


def test_a_restarting_worker_that_cannot_come_back_becomes_lost(s: Script) -> None:
    s(ev.WorkerDied, worker_id="W0", reason="exit code 255")
    assert s(ev.WorkerLost, worker_id="W0", reason="3 failed starts") is Outcome.APPLIED
    w0 = _worker(s.status(), "W0")
    assert (w0["state"], w0["restarts"], w0["last_error"]) == ("lost", 1, "3 failed starts")


def test_a_worker_that_never_started_is_listed_lost_on_its_device(s: Script) -> None:
    with pytest.raises(IllegalTransition, match="a registered worker or a device"):
        s(ev.WorkerLost, worker_id="gpu0/w0", reason="no driver")  # neither known nor placed
    event = {"worker_id": "gpu0/w0", "reason": "no driver", "device": "gpu0", "device_kind": "cuda"}
    assert s(ev.WorkerLost, **event) is Outcome.APPLIED
    status = s.status()
    assert _worker(status, "gpu0/w0")["state"] == "lost"
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
    assert s.status()["health"] == {"ok": False, "reasons": list(health.reasons), "devices_down": ["cpu1"]}
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
    assert _worker(s.status(), "W0")["state"] == "idle"
    assert s.prove_end(token) is Outcome.STALE


def test_partition_failure_under_an_old_lease_is_stale(s: Script) -> None:
    s.job("A", partitions=1)
    old = s.start("W0", "A", 0)
    s(ev.PartitionRetried, job_id="A", partition=0, attempt=2, reason="retry")
    s.synthesize("A", 0, attempt=2)
    s.lease("W0", "A", 0, attempt=2)
    assert s(ev.PartitionFailed, job_id="A", partition=0, reason="x", token=old) is Outcome.STALE
    assert _states(s.status(), "A") == ["proving"]


# --- transitions -------------------------------------------------------------------------------------------


def test_illegal_transition_raises_in_strict_mode(s: Script) -> None:
    s.job("A", partitions=1)
    with pytest.raises(IllegalTransition, match="expected synthesizing, got pending"):
        s(ev.SynthesisFinished, job_id="A", partition=0, synth_ms=1.0)
    with pytest.raises(IllegalTransition, match="expected one of"):
        s(ev.LeaseGranted, token=s.minter.mint(), worker_id="W0", device="cpu0", job_id="A", partition=0)


def test_illegal_transition_is_counted_and_ignored_in_production() -> None:
    s = Script(strict=False)
    s.worker("W0")
    s.job("A", partitions=1)
    outcome = s(
        ev.LeaseGranted, token=s.minter.mint(), worker_id="W0", device="cpu0", job_id="A", partition=0
    )
    assert outcome is Outcome.ILLEGAL
    status = s.status()
    assert status["illegal_events"] == 1
    assert _states(status, "A") == ["pending"]
    assert _worker(status, "W0")["state"] == "idle"


def test_a_worker_cannot_hold_two_current_leases(s: Script) -> None:
    s.job("A", partitions=2)
    s.synthesize("A", 1)
    s.start("W0", "A", 0)
    with pytest.raises(IllegalTransition, match="expected no current lease"):
        s.lease("W0", "A", 1)


def test_job_done_needs_every_partition_done(s: Script) -> None:
    s.job("A", partitions=2)
    token = s.start("W0", "A", 0)
    s.prove_end(token)
    s.finalize(token)
    with pytest.raises(IllegalTransition, match="expected all 2 partitions done, got 1"):
        s(ev.JobDone, job_id="A")


def test_each_terminal_job_is_counted_once(s: Script) -> None:
    s.job("A", partitions=1, kind="winning-post")
    token = s.start("W0", "A", 0)
    s.prove_end(token)
    s.finalize(token)
    assert s(ev.JobDone, job_id="A") is Outcome.APPLIED
    assert s(ev.JobDone, job_id="A") is Outcome.STALE
    assert s(ev.JobFailed, job_id="A", reason="late") is Outcome.STALE
    s.clock.advance(120)
    s.job("B", partitions=1)
    s(ev.JobCancelled, job_id="B")
    counters = s.status()["counters"]
    assert (counters["total_completed"], counters["total_failed"], counters["total_cancelled"]) == (1, 0, 1)
    assert counters["completed_by_kind"] == {"winning-post": 1}
    assert counters["cancelled_by_kind"] == {"porep-c2": 1}


def test_resumed_job_starts_with_its_proven_partitions_done(s: Script) -> None:
    s(ev.JobSubmitted, job_id="A", kind="porep-c2", priority="normal", partitions=3, done_partitions=(0, 2))
    job = _job(s.status(), "A")
    assert [p["state"] for p in job["partitions"]] == ["done", "pending", "done"]
    assert job["partitions_done"] == 2
    assert job["state"] == "running"


# --- memory ------------------------------------------------------------------------------------------------


def test_reservations_partial_release_and_budget() -> None:
    s = Script(memory_total_bytes=1000)
    s(ev.ReservationMade, name="A/0", nbytes=600)
    s(ev.ReservationShrunk, name="A/0", nbytes=400)
    s(ev.AllocationCached, name="key:porep-c2", nbytes=100)
    memory = s.status()["memory"]
    assert (memory["total_bytes"], memory["reserved_bytes"], memory["available_bytes"]) == (1000, 200, 700)
    s(ev.ReservationReleased, name="A/0")
    assert s(ev.ReservationReleased, name="A/0") is Outcome.STALE
    s(ev.BudgetSet, total_bytes=2000)
    memory = s.status()["memory"]
    assert (memory["total_bytes"], memory["reserved_bytes"], memory["available_bytes"]) == (2000, 0, 1900)


def test_shrinking_a_reservation_below_zero_is_illegal() -> None:
    s = Script()
    s(ev.ReservationMade, name="A/0", nbytes=10)
    with pytest.raises(IllegalTransition, match=r"expected 0\.\.10 bytes, got 11"):
        s(ev.ReservationShrunk, name="A/0", nbytes=11)


def test_allocations_show_size_and_idle_time() -> None:
    s = Script()
    s(ev.AllocationCached, name="key:snap-update", nbytes=4096, evictable=False)
    s.clock.advance(3.0)
    s(ev.AllocationUsed, name="key:snap-update")
    s.clock.advance(2.0)
    assert s.status()["allocations"] == [
        {"name": "key:snap-update", "bytes": 4096, "last_used_secs_ago": 2.0, "evictable": False}
    ]
    s(ev.AllocationEvicted, name="key:snap-update")
    assert s(ev.AllocationUsed, name="key:snap-update") is Outcome.STALE
    assert s.status()["allocations"] == []


# --- time accounting ---------------------------------------------------------------------------------------


def test_busy_seconds_come_from_lease_intervals(s: Script) -> None:
    s.job("A", partitions=2)
    s.synthesize("A", 1)
    token = s.start("W0", "A", 0)
    s.clock.advance(4.0)
    w0 = _worker(s.status(), "W0")
    assert (w0["busy_secs"], w0["busy_seconds_total"]) == (4.0, 4.0)
    s.prove_end(token)
    s.clock.advance(2.0)
    w0 = _worker(s.status(), "W0")
    assert (w0["state"], w0["busy_secs"], w0["busy_seconds_total"]) == ("finalizing", 0.0, 4.0)
    s.lease("W0", "A", 1)
    s.clock.advance(1.0)
    assert _worker(s.status(), "W0")["busy_seconds_total"] == 5.0
    assert s.tracker.totals().worker_busy_seconds["W0"] == 5.0


def test_device_busy_fraction_counts_overlapping_workers_once() -> None:
    s = Script()
    s.clock.now = 6000.0  # the start of a minute, so the history's current minute is whole
    s.worker("W0")
    s.worker("W1")
    s.job("A", partitions=2)
    s.synthesize("A", 0)
    s.synthesize("A", 1)
    s.clock.advance(28.0)  # now 30 s into the device's life
    a0 = s.lease("W0", "A", 0)
    a1 = s.lease("W1", "A", 1)
    s.clock.advance(15.0)
    s.prove_end(a0)
    s.clock.advance(15.0)
    s.prove_end(a1)
    status = s.status()
    device = {"device": "cpu0", "kind": "cpu", "busy_fraction_1m": 0.5, "workers": 2}
    assert status["devices"] == [device | {"workers_down": 0, "node": None}]
    assert status["history"]["busy_fraction_per_minute"][-2:] == [0.5, 0.0]  # a new minute began
    assert len(status["history"]["busy_fraction_per_minute"]) == 60


def test_history_counts_proofs_and_partitions_per_minute(s: Script) -> None:
    s.job("A", partitions=1)
    token = s.start("W0", "A", 0)
    s.prove_end(token)
    s.finalize(token)
    s(ev.JobDone, job_id="A")
    s.clock.advance(60.0)
    history = s.status()["history"]
    assert history["proofs_per_minute"][-2:] == [1, 0]
    assert history["partitions_per_minute"][-2:] == [1, 0]
    recent = s.status()["recent_partitions"]
    assert recent == [
        {
            "job_id": "A",
            "proof_kind": "porep-c2",
            "index": 0,
            "synth_ms": 1000.0,
            "prove_ms": 500.0,
            "finalize_ms": 250.0,
        }
    ]


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


# --- the event feed ----------------------------------------------------------------------------------------


async def _take(stream: AsyncIterator[FeedItem], n: int) -> list[FeedItem]:
    return [await asyncio.wait_for(anext(stream), timeout=5) for _ in range(n)]


def test_every_event_gets_the_next_id_applied_or_not(s: Script) -> None:
    s.job("A", partitions=1)
    s(ev.JobDone, job_id="missing")
    backlog = s.tracker.feed.backlog(0)
    assert backlog is not None
    assert [i.id for i in backlog] == [1, 2, 3]  # the fixture's worker registration is 1
    assert [json.loads(i.data)["outcome"] for i in backlog] == ["applied", "applied", "stale"]
    assert [i.event for i in backlog] == ["worker_registered", "job_submitted", "job_done"]
    assert s.tracker.seq == 3


def test_feed_resumes_from_an_id_without_gap_or_repeat(s: Script) -> None:
    async def main() -> list[int]:
        for n in range(5):
            s.job(f"J{n}")
        stream = s.tracker.subscribe(last_event_id=3)
        first = await _take(stream, 3)  # 4, 5, 6 from the ring
        s.job("later")
        first += await _take(stream, 1)
        await stream.aclose()
        return [item.id for item in first]

    assert asyncio.run(main()) == [4, 5, 6, 7]


def test_lease_events_in_the_feed_name_worker_and_partition(s: Script) -> None:
    s.job("A", partitions=1)
    token = s.start("W0", "A", 0)
    s.prove_end(token)
    item = s.tracker.feed.backlog(s.tracker.seq - 1)
    assert item is not None
    data = json.loads(item[0].data)
    assert (data["type"], data["worker_id"], data["job_id"], data["partition"]) == (
        "device_section_finished",
        "W0",
        "A",
        0,
    )


def test_feed_tells_a_client_too_far_behind_to_resync() -> None:
    feed = EventFeed(capacity=3)
    event = ev.BudgetSet(at=0.0, total_bytes=1)
    for n in range(1, 6):
        feed.publish(n, event, "applied", {})

    async def main() -> list[FeedItem]:
        stream = feed.subscribe(last_event_id=1)
        items = await _take(stream, 1)
        feed.publish(6, event, "applied", {})
        items += await _take(stream, 1)
        return items

    resync, next_item = asyncio.run(main())
    assert resync.event == RESYNC
    assert json.loads(resync.data) == {"reason": "behind", "seq": 5}
    assert next_item.id == 6
    assert feed.backlog(99) is None  # an id from another boot


def test_slow_subscriber_gets_a_resync_and_never_blocks_publishing() -> None:
    feed = EventFeed(capacity=100, subscriber_queue=4)
    event = ev.BudgetSet(at=0.0, total_bytes=1)

    async def main() -> list[FeedItem]:
        stream = feed.subscribe()
        pending = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(0)  # the subscriber attaches and waits
        for n in range(1, 11):  # 10 events while it reads none
            feed.publish(n, event, "applied", {})
        items = [await asyncio.wait_for(pending, timeout=5)]
        feed.publish(11, event, "applied", {})
        feed.publish(12, event, "applied", {})
        items += await _take(stream, 2)
        return items

    items = asyncio.run(main())
    assert items[0].event == RESYNC
    assert json.loads(items[0].data)["reason"] == "overflow"
    assert items[0].id == 10  # the newest event it lost: /status at seq >= 10 covers it
    assert [i.id for i in items[1:]] == [11, 12]
    assert feed.resyncs == 1
