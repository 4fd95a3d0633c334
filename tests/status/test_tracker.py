"""The status tracker: the seed sequence and the family of bugs it belongs to, transitions, counting."""

from __future__ import annotations

import asyncio
import json

import pytest

from prooflane import events as ev
from prooflane.errors import IllegalTransition
from prooflane.status.feed import FeedItem
from prooflane.status.reasons import readable_reason
from prooflane.status.tracker import Outcome
from tests.support.tracker import Script, job_of, states_of, worker_of

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
    w0 = worker_of(status, "W0")
    assert (w0["state"], w0["current_job"], w0["current_partition"]) == ("proving", "B", 1)
    assert w0["current_token"] == b1
    assert w0["finalizing"] == []
    assert states_of(status, "A") == ["done"]
    assert states_of(status, "B")[1] == "proving"


def test_worker_proving_while_its_finalizer_runs_shows_both(s: Script) -> None:
    s.job("A", partitions=2)
    s.synthesize("A", 1)
    a0 = s.start("W0", "A", 0)
    s.prove_end(a0)
    s.lease("W0", "A", 1)
    w0 = worker_of(s.status(), "W0")
    assert w0["state"] == "proving"
    assert w0["finalizing"] == [{"job_id": "A", "partition": 0, "token": a0}]


def test_failed_job_leaves_the_live_view_after_the_retention(s: Script) -> None:
    s.job("A", partitions=2)
    s.start("W0", "A", 0)
    s(ev.JobFailed, job_id="A", reason="partition 0 did not verify", partition=0)
    status = s.status()
    assert job_of(status, "A")["state"] == "failed"
    assert states_of(status, "A") == ["failed", "cancelled"]
    assert worker_of(status, "W0")["state"] == "idle"

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
    job = job_of(status, "C")
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
    job = job_of(s.status(), "A")
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
    assert states_of(status, "A") == ["failed", "synthesizing"]
    s(ev.JobFailed, job_id="A", reason="synthesis failed", partition=0)
    assert s.status()["synthesis"]["active"] == 0


def test_a_partition_cancelled_after_pickup_frees_its_worker(s: Script) -> None:
    s.job("A", partitions=1)
    token = s.start("W0", "A", 0)
    assert worker_of(s.status(), "W0")["state"] == "proving"
    s(ev.JobCancelled, job_id="A", reason="cancelled by request")
    status = s.status()
    assert worker_of(status, "W0")["state"] == "idle"
    assert states_of(status, "A") == ["cancelled"]
    assert s.prove_end(token) is Outcome.STALE


def test_a_partition_cancelled_while_finalizing_frees_the_finalizer(s: Script) -> None:
    s.job("A", partitions=1)
    token = s.start("W0", "A", 0)
    s.prove_end(token)
    s(ev.JobCancelled, job_id="A", reason="cancelled by request")
    assert worker_of(s.status(), "W0")["state"] == "idle"
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
    assert worker_of(after, "W0")["state"] == "idle"
    assert after["counters"]["total_cancelled"] == 1


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
    assert states_of(status, "A") == ["pending"]
    assert worker_of(status, "W0")["state"] == "idle"


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
    job = job_of(s.status(), "A")
    assert [p["state"] for p in job["partitions"]] == ["done", "pending", "done"]
    assert job["partitions_done"] == 2
    assert job["state"] == "running"


# --- failures in sight -----------------------------------------------------------------------------


def test_a_failure_stays_in_recent_failures_however_many_jobs_finish_after_it(s: Script) -> None:
    s.fail_job("F", reason="partition 0 did not verify", kind="snap-update")
    for n in range(100):
        s.prove_job(f"J{n}")
        s.clock.advance(1.0)  # 100 s: F has left the live view, and recent_jobs holds only the last 50
    status = s.status()
    assert "F" not in [j["job_id"] for j in status["pipelines"] + status["recent_jobs"]]
    assert status["counters"]["total_failed"] == 1
    (failure,) = status["recent_failures"]
    assert failure == {
        "job_id": "F",
        "proof_kind": "snap-update",
        "outcome": "failed",
        "duration_secs": 0.0,
        "ended_secs_ago": failure["ended_secs_ago"],
        "reason": "partition 0 did not verify",
        "failed_partition": 0,
        "circuit": None,
    }
    assert failure["ended_secs_ago"] >= 100.0
    s.clock.advance(3600.0)
    assert [j["job_id"] for j in s.status()["recent_failures"]] == ["F"]  # kept by count, not by age


def test_recent_failures_keep_their_count_and_every_failure_of_the_retention_time() -> None:
    s = Script(recent_failures=3, retention_secs=60.0)
    for n in range(5):  # five failures within the retention time: all kept, though over the count
        s.fail_job(f"F{n}", reason=f"reason {n}")
        s.clock.advance(1.0)
    assert [j["job_id"] for j in s.status()["recent_failures"]] == ["F4", "F3", "F2", "F1", "F0"]
    s.clock.advance(60.0)
    s.fail_job("F5", reason="reason 5")  # the old ones are past the retention: the last three stay
    failures = s.status()["recent_failures"]
    assert [(j["job_id"], j["reason"]) for j in failures] == [
        ("F5", "reason 5"),
        ("F4", "reason 4"),
        ("F3", "reason 3"),
    ]


def test_done_and_cancelled_jobs_are_not_failures(s: Script) -> None:
    s.prove_job("A")
    s.job("B")
    s(ev.JobCancelled, job_id="B")
    status = s.status()
    assert status["recent_failures"] == []
    assert [j["job_id"] for j in status["recent_jobs"]] == ["B", "A"]  # newest first
