"""Chaos: processes of a real daemon's tree SIGKILLed at random moments (seeded) while it proves.

The slow tests run :class:`prooflane.testing.chaos.ChaosRun` (the code ``benchmarks/chaos.py`` runs, smaller):
every kind of process killed a few times, then the daemon itself; every property the run checks must hold
(its ``violations`` list them in words). The fast tests show that those checks do catch what they look for,
on made-up samples and events; and a corrupt key on disk fails its partition with a named reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import operator
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from prooflane.client import Client, ServerEvent
from prooflane.devices import PoolProcessDied, PoolReplaced, ProcessBackend
from prooflane.devices.child import _zombie_status
from prooflane.models import JobView
from prooflane.testing.chaos import DEFAULT_KINDS, ChaosRun, ChaosSettings
from prooflane.testing.checks import check_final, check_health_after_kills, check_reports, check_samples
from prooflane.testing.faults import Fault, ProcessKind, Sample, daemon_tree
from tests.support.daemons import TIMEOUT, circom_files, seed_keys, start_daemon, wait_done, wait_until

SMALL_MIX = "porep-c2=1,snap-update=1,window-post=1,winning-post=1"  # every built-in kind


# -- the chaos runs (slow: real daemons) ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_killing_any_process_of_the_daemon_loses_no_job_and_health_tells_the_truth(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    data = tmp_path_factory.mktemp("chaos") / "data"
    seed_keys(tmp_path_factory, data)
    settings = ChaosSettings(jobs=4, mix=SMALL_MIX, seed=7, interval=(0.2, 0.8), quota=2, keep_busy=True)
    report = ChaosRun(settings, data).run()
    assert report.violations == []
    faults = {row["kind"]: row for row in report.by_kind()}
    assert sorted(faults) == sorted(kind.value for kind in DEFAULT_KINDS)
    assert {(row["injected"], row["survived"]) for row in faults.values()} == {(2, 2)}
    assert set(report.jobs.values()) == {"done"} and len(report.jobs) >= 4
    assert report.verified_partitions == report.partitions
    assert report.partitions_retried > 0  # the faults did hit partitions in flight


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_killing_the_daemon_too_resumes_every_job_from_the_journal(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    data = tmp_path_factory.mktemp("chaos-daemon") / "data"
    seed_keys(tmp_path_factory, data)
    settings = ChaosSettings(
        jobs=3, mix=SMALL_MIX, seed=11, interval=(0.3, 1.0), quota=1, keep_busy=True,
        kinds=(ProcessKind.PROVER, ProcessKind.SYNTHESIS), kill_daemon=True, daemon_kills=2,
    )  # fmt: skip
    report = ChaosRun(settings, data).run()
    assert report.violations == []
    assert report.boots == 3
    assert [f.kind for f in report.faults].count(ProcessKind.DAEMON) == 2
    assert set(report.jobs.values()) == {"done"}
    assert report.verified_partitions == report.partitions


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("damage", ["truncated", "replaced"])
def test_a_key_corrupted_on_disk_after_registration_fails_its_partition_with_a_named_reason(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, damage: str
) -> None:
    daemon = start_daemon(tmp_path_factory, "corrupt-key")
    try:
        with Client(daemon.url) as client:
            files = circom_files(tmp_path)
            client.register_circuit("wp", files["zkey"])
            first = client.submit("circom", circuit="wp", witnesses=[str(files["good"])])
            assert [v.state for v in wait_done(client, [first])] == ["done"]
            registered = daemon.data_dir / "circuits" / "wp" / "circuit.zkey"
            if damage == "truncated":
                registered.write_bytes(registered.read_bytes()[: registered.stat().st_size // 2])
            else:  # another circuit's valid key in its place
                shutil.copyfile(next((daemon.data_dir / "keys").glob("porep-c2-*.zkey")), registered)
            _renew_every_process(daemon.pid, client)  # nothing keeps the good key in memory
            second = client.submit("circom", circuit="wp", witnesses=[str(files["good"])])
            [view] = wait_done(client, [second])
            assert view.state == "failed" and view.error is not None
            said = {  # what is wrong, in the reader's words (naming the file) or the synthesis's
                "truncated": f"partition 0 failed: synthesis failed: {registered}: truncated section",
                "replaced": (
                    "partition 0 failed: synthesis failed: this witness has 742 wires, the circuit 1,723"
                ),
            }
            assert view.error.startswith(said[damage])
            retries = [
                e for e in _events(client) if e.name == "partition_retried" and e.data["job_id"] == second
            ]
            assert not [
                e for e in retries if "circuit.zkey" in e.data["reason"]
            ]  # failed at once, not retried
            assert client.status()["invariants_ok"] is True
    finally:
        daemon.stop()


def _renew_every_process(daemon_pid: int, client: Client) -> None:
    """Kill the daemon's pool and worker processes; wait until it replaced them all (health ok again)."""
    kinds = (ProcessKind.SYNTHESIS, ProcessKind.PROVER, ProcessKind.FINALIZER)
    victims = [p.pid for p in daemon_tree(daemon_pid) if p.kind in kinds]
    assert len(victims) >= 3
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):  # one that ended by itself meanwhile (a replaced pool)
            os.kill(pid, signal.SIGKILL)
    wait_until("new worker processes", lambda: not set(victims) & _pids(daemon_pid) and client.health())


def _events(client: Client) -> list[ServerEvent]:
    """Every event of the daemon's boot so far."""
    last: int = client.status()["seq"]
    events: list[ServerEvent] = []
    with contextlib.closing(client.events(last_event_id=0)) as stream:
        for event in stream:
            events.append(event)
            if event.id is not None and event.id >= last:
                break
    return events


def _pids(daemon_pid: int) -> set[int]:
    return {p.pid for p in daemon_tree(daemon_pid)}


def half_written_result(megabytes: int) -> bytes:
    """In a pool process: a result far larger than a pipe holds; the process dies while it writes it."""
    main = threading.get_native_id()

    def die_mid_write() -> None:
        while True:
            with open(f"/proc/self/task/{main}/wchan") as wchan:
                if "pipe_write" in wchan.read():  # blocked on a full pipe: half the message is out
                    os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(0.001)

    threading.Thread(target=die_mid_write, daemon=True).start()
    return b"\0" * (megabytes << 20)


def _pool_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if type(t).__name__ == "_ExecutorManagerThread"}


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_a_synthesis_process_killed_while_it_sends_its_result_does_not_hang_the_pool() -> None:
    before = _pool_threads()
    backend = ProcessBackend(pool_size=1, workers=1)
    await backend.start()
    try:
        with pytest.raises(PoolProcessDied) as died:
            async with asyncio.timeout(TIMEOUT):
                await backend.run(half_written_result, 64)
        assert not isinstance(died.value, PoolReplaced)  # it died with the work: the work is to blame
        assert await backend.run(operator.add, 2, 3) == 5  # a new pool took over
    finally:
        await backend.stop()
    # The old pool's thread, which waited for the rest of the message, ended (else the daemon could not exit).
    wait_until("the pools' threads to end", lambda: _pool_threads() <= before)


# -- the checks catch what they look for (fast) ---------------------------------------------------------


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
