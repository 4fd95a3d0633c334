"""The fleet's rules over stored facts: health, per-daemon numbers, totals, cost per proof, metrics."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from prooflane import events as ev
from prooflane.fleet.view import (
    RATE_WINDOW_SECS,
    RATE_WINDOWS_SECS,
    DaemonFacts,
    arithmetic_of,
    daemon_entry,
    fleet_metrics,
    fleet_totals,
    health,
    natural_key,
    proofs_per_hour,
    ray_info,
    relabel_metrics,
    summarize,
)
from prooflane.server.metrics import render
from prooflane.status.timing import THROUGHPUT_WINDOWS
from prooflane.status.tracker import StatusTracker, TrackerConfig
from tests.support.clock import ManualClock
from tests.support.tracker import metric_samples

STALE_AFTER = 5.0


def _tracker(workers: list[tuple[str, str]]) -> tuple[StatusTracker, ManualClock]:
    """A real status tracker with ``workers`` (worker id, device) registered, in that order."""
    clock = ManualClock(1000.0)
    tracker = StatusTracker(
        TrackerConfig(memory_total_bytes=1 << 30, sample_rss=False), clock=clock, strict=True
    )
    for worker_id, device in workers:
        tracker.apply(ev.WorkerRegistered(at=clock.now, worker_id=worker_id, device=device))
    return tracker, clock


def _proving_snapshot() -> dict[str, Any]:
    """cpu:1/w1 proves partition 0 of a job; one job finished before; one failed."""
    tracker, clock = _tracker([("cpu:1/w1", "cpu:1"), ("cpu:10/w0", "cpu:10"), ("cpu:1/w0", "cpu:1")])
    minter = ev.LeaseMinter()
    tracker.apply(ev.JobSubmitted(at=clock.now, job_id="j1", kind="winning-post", priority="critical",
                                  partitions=1))  # fmt: skip
    tracker.apply(ev.ReservationMade(at=clock.now, name="j1/0#1", nbytes=4096))
    tracker.apply(ev.SynthesisStarted(at=clock.now, job_id="j1", partition=0))
    tracker.apply(ev.SynthesisFinished(at=clock.now, job_id="j1", partition=0, synth_ms=10.0))
    token = minter.mint()
    tracker.apply(ev.LeaseGranted(at=clock.now, token=token, worker_id="cpu:1/w1", device="cpu:1",
                                  job_id="j1", partition=0))  # fmt: skip
    tracker.apply(ev.JobSubmitted(at=clock.now, job_id="j2", kind="winning-post", priority="normal",
                                  partitions=1))  # fmt: skip
    clock.now += 1.0
    tracker.apply(ev.JobFailed(at=clock.now, job_id="j2", reason="partition 0: witness\nmore", partition=0))
    clock.now += 1.0
    snapshot: dict[str, Any] = json.loads(tracker.snapshot().to_json_text())
    return snapshot


def _facts(
    name: str,
    snapshot: dict[str, Any] | None,
    *,
    received_at: float | None = 100.0,
    failures: int = 0,
    cost: float | None = None,
) -> DaemonFacts:
    return DaemonFacts(name=name, where=f"http://{name}:9821", snapshot=snapshot, received_at=received_at,
                       received_wall=1.7e9 if received_at is not None else None, failures=failures,
                       last_error="ConnectError: refused" if failures else None, last_error_wall=None,
                       feed="events", cost_per_hour=cost)  # fmt: skip


def test_health_comes_from_facts() -> None:
    snap = _proving_snapshot()
    assert health(_facts("a", None, received_at=None), 100.0, STALE_AFTER) == "connecting"
    assert health(_facts("a", snap), 104.0, STALE_AFTER) == "up"
    assert health(_facts("a", snap), 105.5, STALE_AFTER) == "stale"
    assert health(_facts("a", snap, failures=1), 100.5, STALE_AFTER) == "unreachable"
    assert health(_facts("a", None, received_at=None, failures=3), 100.0, STALE_AFTER) == "unreachable"


def test_a_daemon_the_fleet_stopped_is_stopped_until_it_answers_again() -> None:
    snap = _proving_snapshot()
    down = dataclasses.replace(_facts("a", snap, failures=1), stopped_at=1.7e9 + 5.0)  # after its last answer
    assert health(down, 110.0, STALE_AFTER) == "stopped"
    entry = daemon_entry(down, 110.0, STALE_AFTER, wall_now=1.7e9 + 65.0)
    assert entry["health"] == "stopped" and not entry["reachable"]
    assert entry["stopped_at"] == 1.7e9 + 5.0 and entry["stopped_secs_ago"] == 60.0
    # Started again by someone else and down once more: an answer after the stop makes it unreachable.
    again = dataclasses.replace(down, received_wall=1.7e9 + 30.0)
    assert health(again, 110.0, STALE_AFTER) == "unreachable"
    assert daemon_entry(again, 110.0, STALE_AFTER, wall_now=1.7e9 + 65.0)["stopped_at"] is None
    # Up again: up, whatever the fleet did before.
    up = dataclasses.replace(_facts("a", snap), stopped_at=1.7e9 + 5.0, received_wall=1.7e9 + 30.0)
    assert health(up, 101.0, STALE_AFTER) == "up"


def test_summary_counts_from_the_snapshot() -> None:
    summary = summarize(_proving_snapshot(), cost_per_hour=None)
    assert summary["devices"] == 2
    assert summary["devices_busy"] == 1  # cpu:1 has a worker in its device section
    assert summary["devices_idle"] == 1
    assert summary["workers"] == 3
    assert summary["workers_proving"] == 1
    assert summary["workers_by_state"] == {"idle": 2, "proving": 1}
    assert summary["jobs_running"] == 1
    assert summary["memory_reserved_bytes"] == 4096
    assert summary["memory_total_bytes"] == 1 << 30
    assert summary["last_error"]["job_id"] == "j2"
    assert summary["last_error"]["reason"].startswith("partition 0: witness")
    assert summary["ray"] is None
    assert summary["cost_per_proof"] is None


def test_every_error_carries_its_age() -> None:
    facts = dataclasses.replace(_facts("a", _proving_snapshot(), failures=2), last_error_wall=1.7e9)
    entry = daemon_entry(facts, 100.5, STALE_AFTER, wall_now=1.7e9 + 480)
    assert entry["last_error"] == "ConnectError: refused" and entry["last_error_age_secs"] == 480.0
    assert (
        daemon_entry(_facts("b", None, received_at=None), 100.0, STALE_AFTER)["last_error_age_secs"] is None
    )
    job = summarize(_proving_snapshot(), cost_per_hour=None)["last_error"]
    assert isinstance(job["ended_secs_ago"], float)  # how long before its snapshot the job failed


def test_last_error_outlives_the_recent_jobs() -> None:
    """A failure followed by more finished jobs than ``recent_jobs`` holds is still the last error."""
    tracker, clock = _tracker([("cpu:0/w0", "cpu:0")])
    tracker.apply(ev.JobSubmitted(at=clock.now, job_id="bad", kind="winning-post", priority="normal",
                                  partitions=1))  # fmt: skip
    tracker.apply(ev.JobFailed(at=clock.now, job_id="bad", reason="partition 0: witness", partition=0))
    for n in range(60):
        clock.now += 1.0
        job_id = f"ok{n}"
        tracker.apply(ev.JobSubmitted(at=clock.now, job_id=job_id, kind="winning-post", priority="normal",
                                      partitions=1))  # fmt: skip
        tracker.apply(ev.JobCancelled(at=clock.now, job_id=job_id))
    snapshot: dict[str, Any] = json.loads(tracker.snapshot().to_json_text())
    assert all(j["job_id"] != "bad" for j in snapshot["recent_jobs"])  # it left the short history
    error = summarize(snapshot, cost_per_hour=None)["last_error"]
    assert error is not None and error["job_id"] == "bad" and error["reason"] == "partition 0: witness"
    assert error["ended_secs_ago"] == pytest.approx(60.0)


def test_ids_sort_in_natural_order() -> None:
    ids = ["cpu:10", "cpu:2", "cpu:1/w1", "cpu:1/w0", "cpu:1", "cpu:0"]
    assert sorted(ids, key=natural_key) == ["cpu:0", "cpu:1", "cpu:1/w0", "cpu:1/w1", "cpu:2", "cpu:10"]


def test_proofs_per_hour_are_the_daemons_own_1_and_10_minute_rates() -> None:
    # Busy for an hour, idle for the last two minutes: the per-minute history still holds the busy hour, but
    # the daemon's own rates (what its dashboard shows) say 0 over the last minute, less over the last ten.
    busy: dict[str, Any] = {"minute_secs": 60.0, "proofs_per_minute": [90] * 58 + [0, 0],
                            "proofs_per_hour_1m": 0.0, "proofs_per_hour_10m": 4320.0}  # fmt: skip
    snapshot = {"history": busy, "uptime_secs": 7200.0}
    assert proofs_per_hour(snapshot, 60.0) == 0.0
    assert proofs_per_hour(snapshot, 600.0) == pytest.approx(4320.0)
    assert proofs_per_hour(snapshot) == proofs_per_hour(snapshot, RATE_WINDOW_SECS) == pytest.approx(4320.0)
    assert RATE_WINDOWS_SECS == THROUGHPUT_WINDOWS == (60.0, 600.0)
    # A daemon from before those figures: the per-minute history's last 1 or 10 minutes, never the hour.
    before = {k: v for k, v in busy.items() if not k.startswith("proofs_per_hour")}
    old = {"history": before, "uptime_secs": 7200.0}
    assert proofs_per_hour(old, 60.0) == 0.0
    assert proofs_per_hour(old, 600.0) == pytest.approx(90 * 8 * 6.0)
    young = {"history": {**before, "proofs_per_minute": [0] * 58 + [4, 6]}, "uptime_secs": 120.0}
    assert proofs_per_hour(young, 600.0) == pytest.approx(300.0)  # up two minutes: over its uptime
    assert proofs_per_hour({}) == 0.0


def test_an_idle_daemon_does_not_reach_break_even_on_its_busy_hour() -> None:
    snap = _proving_snapshot()
    snap["uptime_secs"] = 7200.0
    snap["history"] = {**snap["history"], "proofs_per_minute": [90] * 58 + [0, 0]}
    snap["history"].update(proofs_per_hour_1m=0.0, proofs_per_hour_10m=0.0)  # idle for ten minutes
    priced = dataclasses.replace(_facts("a", snap, cost=0.5), price_per_proof=0.01)
    entry = daemon_entry(priced, 101.0, STALE_AFTER)
    assert entry["summary"]["proofs_per_hour"] == 0.0 and entry["summary"]["rate_window_secs"] == 600.0
    assert entry["break_even"]["reached"] is False


def test_cost_per_proof_for_a_daemon_and_the_fleet() -> None:
    snap = _proving_snapshot()
    snap["history"] = {"minute_secs": 60.0, "proofs_per_minute": [2] * 60, "proofs_per_hour_10m": 120.0}
    snap["uptime_secs"] = 7200.0
    entries = [
        daemon_entry(_facts("a", snap, cost=3.0), 101.0, STALE_AFTER),
        daemon_entry(_facts("b", snap, cost=1.0), 101.0, STALE_AFTER),
    ]
    assert entries[0]["summary"]["proofs_per_hour"] == pytest.approx(120.0)
    assert entries[0]["summary"]["cost_per_proof"] == pytest.approx(3.0 / 120.0)
    totals = fleet_totals(entries)
    assert totals["proofs_per_hour"] == pytest.approx(240.0)
    assert totals["cost_per_hour"] == pytest.approx(4.0)
    assert totals["cost_per_proof"] == pytest.approx(4.0 / 240.0)


def test_unreachable_and_stale_daemons_are_named_not_added_as_zero() -> None:
    snap = _proving_snapshot()
    entries = [
        daemon_entry(_facts("up", snap, cost=2.0), 101.0, STALE_AFTER),
        daemon_entry(_facts("stale", snap, received_at=90.0, cost=2.0), 101.0, STALE_AFTER),
        daemon_entry(_facts("down", snap, failures=2, cost=2.0), 101.0, STALE_AFTER),
        daemon_entry(_facts("new", None, received_at=None), 101.0, STALE_AFTER),
    ]
    assert [e["health"] for e in entries] == ["up", "stale", "unreachable", "connecting"]
    down = entries[2]
    assert down["snapshot"] == snap  # the last good snapshot is kept whole, with its age
    assert down["snapshot_age_secs"] == pytest.approx(1.0)
    assert down["fresh"] is False and down["feed"] is None
    assert entries[1]["snapshot_age_secs"] == pytest.approx(11.0)
    totals = fleet_totals(entries)
    assert totals["counted"] == ["up"]
    assert totals["not_counted"] == ["stale", "down", "new"]
    assert totals["workers"] == 3 and totals["workers_proving"] == 1
    assert totals["reachable"] == 2  # up and stale answered at some point without failing since
    assert totals["cost_per_hour"] == pytest.approx(6.0)  # a machine that is down still costs money
    assert totals["cost_per_proof"] is None  # no proofs made: no cost per proof, never zero


def test_ray_backed_daemon_and_its_nodes_are_shown_when_status_says_so() -> None:
    assert ray_info({}) is None
    nodes = [{"node_id": "n1", "alive": True}, {"node_id": "n2", "alive": False}]
    assert ray_info({"ray": {"address": "10.0.0.1:6379", "nodes": nodes}}) == {
        "address": "10.0.0.1:6379",
        "nodes": nodes,
    }
    assert ray_info({"nodes": nodes}) == {"enabled": False, "nodes": nodes}
    snap = {**_proving_snapshot(), "ray": {"address": "head:6379"}, "nodes": nodes}
    assert summarize(snap, None)["ray"] == {"address": "head:6379", "nodes": nodes}


def test_metrics_of_several_daemons_parse_with_a_daemon_label() -> None:
    first, _ = _tracker([("cpu:0/w0", "cpu:0")])
    second, _ = _tracker([("cpu:0/w0", "cpu:0"), ("cpu:1/w0", "cpu:1")])
    text = relabel_metrics([("a", render(first)), ("b-2", render(second))])
    samples = metric_samples(text)
    assert samples[("prooflane_memory_budget_bytes", (("daemon", "a"),))] == 1 << 30
    assert samples[("prooflane_workers", (("daemon", "b-2"), ("state", "idle")))] == 2
    assert samples[("prooflane_workers", (("daemon", "a"), ("state", "idle")))] == 1
    assert text.count("# TYPE prooflane_workers gauge") == 1  # one header per family
    assert all(dict(k[1]).get("daemon") in ("a", "b-2") for k in samples)


def test_fleet_gauges_leave_out_what_is_not_known() -> None:
    snap = _proving_snapshot()
    entries = [
        daemon_entry(_facts("a", snap, cost=1.5), 101.0, STALE_AFTER),
        daemon_entry(_facts("down", snap, failures=1), 101.0, STALE_AFTER),
    ]
    samples = metric_samples(fleet_metrics(entries))
    assert samples[("prooflane_fleet_daemon_up", (("daemon", "a"),))] == 1
    assert samples[("prooflane_fleet_daemon_up", (("daemon", "down"),))] == 0
    assert samples[("prooflane_fleet_cost_per_hour", (("daemon", "a"),))] == 1.5
    assert ("prooflane_fleet_proofs_per_hour", (("daemon", "down"),)) not in samples
    assert ("prooflane_fleet_cost_per_hour", (("daemon", "down"),)) not in samples


def _on(machine_id: str, memory_bytes: int, budget: int) -> dict[str, Any]:
    snapshot = _proving_snapshot()
    snapshot["machine"] = {
        "hostname": machine_id,
        "machine_id": machine_id,
        "memory_bytes": memory_bytes,
        "cpus": 2,
    }
    snapshot["memory"] = snapshot["memory"] | {"total_bytes": budget, "used_bytes": budget // 4}
    return snapshot


def test_memory_is_summed_per_machine_never_more_than_a_machine_has() -> None:
    gib = 1 << 30
    # Two daemons on one 23 GiB machine, each with the automatic budget (the machine's memory less 2 GiB),
    # and one daemon on a machine of its own.
    entries = [
        daemon_entry(_facts(name, _on(machine, memory, budget)), 100.5, STALE_AFTER)
        for name, machine, memory, budget in (
            ("a", "m1", 23 * gib, 21 * gib),
            ("b", "m1", 23 * gib, 21 * gib),
            ("c", "m2", 8 * gib, 6 * gib),
        )
    ]
    totals = fleet_totals(entries)
    assert totals["memory_total_bytes"] == 23 * gib + 6 * gib  # not 48 GiB
    by_machine = {m["machine_id"]: m for m in totals["machines"]}
    assert by_machine["m1"]["daemons"] == ["a", "b"] and by_machine["m1"]["overcommitted"]
    assert not by_machine["m2"]["overcommitted"]
    assert totals["memory_used_bytes"] == (21 * gib // 4) * 2 + 6 * gib // 4


def test_a_daemon_that_does_not_say_its_machine_counts_as_one_of_its_own() -> None:
    snapshot = _proving_snapshot()
    snapshot.pop("machine", None)
    (entry,) = [daemon_entry(_facts("old", snapshot), 100.5, STALE_AFTER)]
    (machine,) = fleet_totals([entry])["machines"]
    assert machine["daemons"] == ["old"] and machine["memory_bytes"] is None


def test_break_even_is_cost_over_price_and_reached_only_with_a_live_rate() -> None:
    snap = _proving_snapshot()
    snap["history"] = {"minute_secs": 60.0, "proofs_per_minute": [1] * 60, "proofs_per_hour_10m": 60.0}
    snap["uptime_secs"] = 7200.0  # 60 proofs an hour
    priced = dataclasses.replace(_facts("a", snap, cost=0.5), price_per_proof=0.01)  # needs 50 an hour
    entry = daemon_entry(priced, 101.0, STALE_AFTER)
    assert entry["break_even"] == {"price_per_proof": 0.01, "proofs_per_hour_needed": pytest.approx(50.0),
                                   "proofs_per_hour": pytest.approx(60.0), "reached": True}  # fmt: skip
    dear = daemon_entry(dataclasses.replace(priced, name="d", cost_per_hour=0.9), 101.0, STALE_AFTER)
    assert dear["break_even"]["proofs_per_hour_needed"] == pytest.approx(90.0)
    assert dear["break_even"]["reached"] is False
    # Unreachable: what it needs is still known, whether it reaches it is not (never "short" from old data).
    down = daemon_entry(dataclasses.replace(priced, failures=1), 101.0, STALE_AFTER)
    assert down["break_even"]["proofs_per_hour"] is None and down["break_even"]["reached"] is None
    # No price, or no cost: no break-even at all.
    assert daemon_entry(_facts("b", snap, cost=0.5), 101.0, STALE_AFTER)["break_even"] is None
    no_cost = dataclasses.replace(_facts("c", snap), price_per_proof=0.01)
    assert daemon_entry(no_cost, 101.0, STALE_AFTER)["break_even"] is None
    # The fleet: every declared cost over the price, against the up daemons' proofs; unknown while one
    # with a cost is not up.
    totals = fleet_totals([entry, dear])
    assert totals["break_even"]["proofs_per_hour_needed"] == pytest.approx(140.0)
    assert totals["break_even"]["reached"] is False  # 120 an hour made, 140 needed
    assert fleet_totals([entry, down])["break_even"]["reached"] is None
    families = text_string_to_metric_families(fleet_metrics([entry, dear]))
    gauges = {s.labels["daemon"]: s.value for f in families for s in f.samples
              if s.name == "prooflane_fleet_proofs_per_hour_needed"}  # fmt: skip
    assert gauges == {"a": pytest.approx(50.0), "d": pytest.approx(90.0)}


def _snapshot_of(arithmetic: dict[str, str]) -> dict[str, Any]:
    """A real tracker's /status text when its engine found ``arithmetic``."""
    tracker = StatusTracker(TrackerConfig(sample_rss=False, arithmetic=arithmetic), clock=ManualClock(1.0))
    tracker.apply(ev.WorkerRegistered(at=1.0, worker_id="cpu:0/w0", device="cpu:0"))
    snapshot: dict[str, Any] = json.loads(tracker.snapshot().to_json_text())
    return snapshot


def test_a_daemons_row_names_its_arithmetic_whole_and_warns_of_the_libraries() -> None:
    fast = _snapshot_of({"bn128": "c-extension", "bls12381": "c-extension"})
    assert summarize(fast, None)["arithmetic"] == {
        "curves": {"bn128": "c-extension", "bls12381": "c-extension"},
        "text": "c-extension",
        "libraries": [],
        "warnings": [],
    }
    off = {"bn128": "libraries: PROOFLANE_NATIVE=0", "bls12381": "libraries: PROOFLANE_NATIVE=0"}
    slow = summarize(_snapshot_of(off), None)["arithmetic"]
    assert (slow["text"], slow["libraries"]) == ("libraries (PROOFLANE_NATIVE=0)", ["bn128", "bls12381"])
    assert slow["warnings"] == [
        "bn128 and bls12381 prove on the libraries, the slower arithmetic (PROOFLANE_NATIVE=0)"
    ]
    why = "the C extension cannot prove BLS12-381 on this CPU (no BMI2 and ADX)"
    mixed = arithmetic_of(_snapshot_of({"bn128": "c-extension", "bls12381": f"libraries: {why}"}))
    assert mixed is not None
    assert mixed["text"] == f"bn128 c-extension, bls12381 libraries ({why})"  # every word kept
    assert mixed["libraries"] == ["bls12381"]
    before = _snapshot_of({})
    assert arithmetic_of(before) is None and arithmetic_of({"seq": 1}) is None  # a daemon that does not say
