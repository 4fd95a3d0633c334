"""The chaos run's checks catch what they look for, on made-up samples and events (the runs themselves, on
real daemons, are tests/e2e/test_chaos.py)."""

from __future__ import annotations

import signal
import subprocess
from typing import Any

from prooflane.devices.child import _zombie_status
from prooflane.models import JobView
from prooflane.testing.checks import check_final, check_health_after_kills, check_reports, check_samples
from prooflane.testing.faults import Fault, ProcessKind, Sample
from tests.support.daemons import wait_until


def _status(seq: int, *, ok: bool = True, live: int = 1, invariants: bool = True) -> dict[str, Any]:
    return {
        "seq": seq,
        "invariants_ok": invariants,
        "invariant_violations": [] if invariants else ["made up"],
        "illegal_events": 0,
        "health": {
            "ok": ok,
            "reasons": [] if ok else ["down"],
            "devices_down": [] if ok or live else ["cpu:0"],
        },
        "devices": [{"device": "cpu:0", "workers": live}],
        "workers": [{"worker_id": "cpu:0/w0", "device": "cpu:0", "state": "idle" if live else "restarting"}],
    }


def test_the_sample_check_catches_broken_invariants_and_health_ok_without_a_live_worker() -> None:
    good = [Sample(0, 1.0, 200, _status(5)), Sample(0, 2.0, 503, _status(6, ok=False, live=0))]
    assert check_samples(good, ["cpu:0"]) == []
    lying = Sample(0, 3.0, 200, _status(7, ok=True, live=0))
    broken = Sample(0, 4.0, 200, _status(8, invariants=False))
    found = check_samples([*good, lying, broken], ["cpu:0", "cpu:1"])
    assert any("cpu:0 has no live worker, but health is" in f for f in found)
    assert any("invariants broken" in f for f in found)
    assert any("devices ['cpu:1'] not listed" in f for f in found)


def _event(seq: int, name: str, **data: Any) -> dict[str, Any]:
    return {"_id": seq, "_name": name, "at": float(seq), **data}


DEATH = [
    _event(1, "worker_registered", worker_id="cpu:0/w0", device="cpu:0"),
    _event(10, "worker_died", worker_id="cpu:0/w0", reason="cpu:0/w0 prover (pid 4242) exited: killed"),
    _event(15, "worker_registered", worker_id="cpu:0/w0", device="cpu:0"),
]


def test_the_health_check_catches_a_200_after_a_worker_process_was_seen_dead() -> None:
    fault = Fault(at=1.0, boot=0, kind=ProcessKind.PROVER, pid=4242, dead_at=2.0)
    honest = [Sample(0, 2.5, 503, _status(12, ok=False, live=0)), Sample(0, 3.0, 200, _status(15))]
    assert check_health_after_kills([fault], honest, [DEATH]) == []
    before_it_noticed = Sample(0, 2.1, 200, _status(9))
    found = check_health_after_kills([fault], [before_it_noticed, *honest], [DEATH])
    assert len(found) == 1 and "prover 4242 of cpu:0/w0 was dead" in found[0]
    before_the_replacement = Sample(0, 2.2, 200, _status(12))
    assert check_health_after_kills([fault], [before_the_replacement], [DEATH]) != []


def _view(job_id: str, finished_at: float) -> JobView:
    return JobView.model_validate(
        {"job_id": job_id, "kind": "winning-post", "priority": "critical", "state": "done",
         "submitted_at": 0.0, "finished_at": finished_at, "total_partitions": 1, "partitions_done": 1,
         "partitions": []}
    )  # fmt: skip


def test_the_report_check_catches_a_job_or_a_partition_reported_twice_or_never() -> None:
    lease = _event(3, "lease_granted", token=1, job_id="a", partition=0)
    finished = _event(5, "finalize_finished", token=1, outcome="applied")
    done = _event(6, "job_done", job_id="a")
    views = {"a": _view("a", 100.0)}
    assert check_reports(["a"], [[lease, finished, done]], [], views) == (0, [])
    _, twice = check_reports(["a"], [[lease, finished, done], [done]], [], views)
    assert twice == ["job a reported done 2 times"]
    _, proven_twice = check_reports(["a"], [[lease, finished, finished, done]], [], views)
    assert proven_twice == ["partition a/0 reported finished 2 times"]
    _, never = check_reports(["a"], [[lease, finished]], [], views)
    assert never == ["job a is done but was never reported done"]
    assert check_reports(["a"], [[lease, finished]], [200.0], views) == (1, [])  # its stream died with it


def test_the_final_check_catches_a_reservation_left_and_a_key_of_a_dead_worker() -> None:
    final = {
        "memory": {"reserved_bytes": 0, "cached_bytes": 10},
        "workers": [{"worker_id": "cpu:0/w0", "state": "idle"}],
        "allocations": [{"name": "key:winning-post@cpu:0/w0", "bytes": 10}],
        "health": {"ok": True, "reasons": []},
    }
    assert check_final(final) == []
    final["memory"] = {"reserved_bytes": 64, "cached_bytes": 20}
    final["allocations"] = [*final["allocations"], {"name": "key:winning-post@cpu:1/w0", "bytes": 10}]
    found = check_final(final)
    assert "64 bytes still reserved after the drain" in found
    assert any("cpu:1/w0" in f and "not live" in f for f in found)


def test_the_exit_status_of_a_dead_process_is_read_from_its_zombie_without_waiting() -> None:
    child = subprocess.Popen(["sleep", "60"])
    try:
        child.kill()
        wait_until("the child to end", lambda: _zombie_status(child.pid) is not None)  # not reaped yet
        assert _zombie_status(child.pid) == -signal.SIGKILL
    finally:
        child.wait()
    assert _zombie_status(child.pid) is None  # reaped: nothing left to read
