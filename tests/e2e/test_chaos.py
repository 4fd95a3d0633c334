"""Chaos: processes of a real daemon's tree SIGKILLed at random moments (seeded) while it proves.

These run :class:`prooflane.testing.chaos.ChaosRun` (the code ``benchmarks/chaos.py`` runs, smaller): every
kind of process killed a few times, then the daemon itself; every property the run checks must hold (its
``violations`` list them in words). A corrupt key on disk fails its partition with a named reason, and a
synthesis process killed while it sends its result does not hang the pool. tests/testing/test_chaos.py shows
that the checks catch what they look for."""

from __future__ import annotations

import asyncio
import contextlib
import operator
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

from prooflane.client import Client
from prooflane.devices import PoolProcessDied, PoolReplaced, ProcessBackend
from prooflane.errors import DaemonError
from prooflane.testing.chaos import DEFAULT_KINDS, ChaosRun, ChaosSettings
from prooflane.testing.faults import ProcessKind, daemon_tree
from tests.support.daemons import TIMEOUT, circom_files, seed_keys, start_daemon, wait_done, wait_until

SMALL_MIX = "porep-c2=1,snap-update=1,window-post=1,winning-post=1"  # every built-in kind


@pytest.mark.timeout(600)
def test_killing_any_process_of_the_daemon_loses_no_job_and_health_tells_the_truth(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    data = tmp_path_factory.mktemp("chaos") / "data"
    seed_keys(tmp_path_factory, data)
    # With a finalizer beside each prover (split_prove): every kind of process a daemon may have.
    kinds = (*DEFAULT_KINDS, ProcessKind.FINALIZER)
    settings = ChaosSettings(
        jobs=4, mix=SMALL_MIX, seed=7, interval=(0.2, 0.8), quota=2, keep_busy=True, kinds=kinds,
        config="max_attempts = 10\nsplit_prove = true\n",
    )  # fmt: skip
    report = ChaosRun(settings, data).run()
    assert report.violations == []
    faults = {row["kind"]: row for row in report.by_kind()}
    assert sorted(faults) == sorted(kind.value for kind in kinds)
    assert {(row["injected"], row["survived"]) for row in faults.values()} == {(2, 2)}
    assert set(report.jobs.values()) == {"done"} and len(report.jobs) >= 4
    assert report.verified_partitions == report.partitions
    assert report.partitions_retried > 0  # the faults did hit partitions in flight


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


@pytest.mark.timeout(600)
@pytest.mark.parametrize("damage", ["truncated", "replaced"])
def test_a_key_corrupted_on_disk_after_registration_refuses_its_jobs_with_a_named_reason(
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
            size = registered.stat().st_size
            registered.chmod(0o644)  # the daemon's copy is read-only: what an operator's mistake takes
            if damage == "truncated":
                registered.write_bytes(registered.read_bytes()[: size // 2])
            else:  # another circuit's valid key in its place
                shutil.copyfile(next((daemon.data_dir / "keys").glob("porep-c2-*.zkey")), registered)
            _renew_every_process(daemon.pid, client)  # nothing keeps the good key in memory
            with pytest.raises(DaemonError) as refused:  # a missing key: refused before anything runs
                client.submit("circom", circuit="wp", witnesses=[str(files["good"])])
            now = registered.stat().st_size
            assert refused.value.status == 503
            assert refused.value.detail.startswith(
                f"circuit 'wp': its key file {registered} changed on disk since it was registered "
                f"(rewritten in place ({size:,} bytes, now {now:,}))"
            )
            assert "changed on disk" in (client.health_reason() or "")
            assert client.status()["invariants_ok"] is True
            client.register_circuit("wp", files["zkey"])  # the same files: back, and proving
            again = client.submit("circom", circuit="wp", witnesses=[str(files["good"])])
            assert [v.state for v in wait_done(client, [again])] == ["done"]
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
