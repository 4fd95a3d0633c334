"""The engine end to end at the ``tiny`` profile, with real proofs, worker processes and a real journal.

Every wait is on an event or a condition, with a timeout; nothing depends on how fast the machine is.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from prooflane.circuits import Sector, partition_witness, storage_circuit
from prooflane.config import Config
from prooflane.engine.engine import Engine
from prooflane.errors import Conflict, Invalid, NotFound, Refused, TooLarge
from prooflane.groth16 import (
    BN128,
    Proof,
    VerificationKey,
    read_r1cs,
    read_zkey,
    setup,
    verify,
    write_wtns,
    write_zkey,
)
from prooflane.groth16.prover import BASES, tables_folder
from prooflane.groth16.witness import Witness
from prooflane.kinds import inspect_zkey, prepare_builtin
from prooflane.models import JobRequest, JobState, PartitionState
from tests.support.groth16_samples import MUL_CIRCOM

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

WAIT = 120.0  # seconds any single condition may take before the test fails


@pytest.fixture(scope="session")
def circom_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A snarkjs .zkey and three .wtns files: two good witnesses and one that breaks a constraint."""
    folder = tmp_path_factory.mktemp("circom")
    circuit = storage_circuit("winning-post", "tiny", BN128)
    write_zkey(folder / "c.zkey", setup(circuit.r1cs, seed=b"circom-test"))
    sector = Sector.create(folder / "sector", 256, seed=3)
    files: dict[str, Path] = {"zkey": folder / "c.zkey"}
    for i in range(2):
        witness = partition_witness("winning-post", "tiny", sector, bytes([i]) * 32, 0, BN128)
        write_wtns(folder / f"w{i}.wtns", witness)
        files[f"w{i}"] = folder / f"w{i}.wtns"
    values = witness.values.copy()
    values[-1, 0] ^= 1  # a private wire changed: no constraint holds for it any more
    write_wtns(folder / "bad.wtns", Witness(BN128, values))
    files["bad"] = folder / "bad.wtns"
    return files


@pytest.fixture(scope="session")
def mul_circuit(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A one-constraint circom circuit compiled by circom2 to .r1cs and .wasm, with a development .zkey."""
    circom2 = Path(__file__).resolve().parents[2] / "node_modules" / ".bin" / "circom2"
    if not circom2.exists():
        pytest.fail("circom2 is not installed: run `make setup` (it runs `npm ci`)")
    folder = tmp_path_factory.mktemp("mul")
    (folder / "mul.circom").write_text(MUL_CIRCOM)
    argv = [str(circom2), str(folder / "mul.circom"), "--r1cs", "--wasm", "-o", str(folder)]
    subprocess.run(argv, check=True, capture_output=True)
    write_zkey(folder / "mul.zkey", setup(read_r1cs(folder / "mul.r1cs"), seed=b"mul"))
    return folder / "mul.zkey", folder / "mul_js" / "mul.wasm"


def config(tmp_path: Path, keys_dir: Path, **overrides: Any) -> Config:
    values: dict[str, Any] = {
        "data_dir": tmp_path / "data",
        "keys_dir": keys_dir,
        "allowed_roots": (tmp_path.parent,),  # the session's folders: its sectors and circom files
        "devices": ("cpu",),
        "workers_per_device": 2,
        "synthesis_workers": 2,
        "live_retention_secs": 600.0,
    }
    values.update(overrides)
    return Config(**values)


class Watcher:
    """Collects the tracker's events (from its SSE feed) so a test can wait for a condition on them."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.events: list[dict[str, Any]] = []
        self.violations: list[str] = []
        self._changed = asyncio.Event()
        self._task = asyncio.create_task(self._collect(engine.subscribe(0)))

    async def _collect(self, feed: AsyncIterator[Any]) -> None:
        async for item in feed:
            self.events.append({"event": item.event, **json.loads(item.data)})
            # Checked between every two events: the tracker's view is consistent at every step.
            self.violations += [
                f"after {item.event}: {v}" for v in self.engine.snapshot().invariant_violations
            ]
            budget = self.engine.budget.stats()
            if budget.reserved_bytes + budget.cached_bytes > budget.total_bytes:
                self.violations.append(f"after {item.event}: over budget {budget}")
            self._changed.set()

    def of(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == name]

    async def until(self, condition: Callable[[], bool], limit: float = WAIT) -> None:
        async with asyncio.timeout(limit):
            while not condition():
                self._changed.clear()
                await self._changed.wait()

    def close(self) -> None:
        self._task.cancel()
        assert self.violations == []


def _tables_folder() -> Path:
    found = tables_folder()
    assert found is not None
    return found


async def prove_all(engine: Engine, requests: list[JobRequest]) -> list[str]:
    ids = [await engine.submit(r) for r in requests]
    for job_id in ids:
        proof = await engine.wait_proof(job_id, WAIT)
        view = engine.job(job_id)
        assert proof is not None, view
    return ids


async def verified_count(engine: Engine, job_id: str, kind: str, circuit: str | None = None) -> int:
    vk = VerificationKey.from_json(engine.verification_key(kind, circuit))
    proof = await engine.wait_proof(job_id, 0)
    assert proof is not None
    for part in proof.partitions:
        parsed = Proof.from_json(part.proof, public=tuple(int(x) for x in part.public))
        assert verify(vk, [int(x) for x in part.public], parsed), f"partition {part.index}"
    return len(proof.partitions)


def assert_clean(engine: Engine, *, stale: int = 0) -> None:
    """Nothing reserved; budget and tracker consistent; no illegal and (unless told) no stale event."""
    assert engine.budget.reserved == 0
    engine.budget.check()
    assert engine.snapshot().invariant_violations == ()
    totals = engine.totals()
    assert totals.illegal_events == 0 and totals.stale_events == stale


async def test_every_kind_proves_end_to_end(
    tmp_path: Path, keys_dir: Path, sector: Path, circom_files: dict[str, Path]
) -> None:
    async with Engine(config(tmp_path, keys_dir)) as engine:
        assert engine.ready
        watch = Watcher(engine)
        info = await engine.register_circuit("wp", circom_files["zkey"])
        assert info.constraints > 0 and not info.has_witness_generator
        kinds = ["porep-c2", "snap-update", "window-post", "winning-post"]
        requests = [JobRequest(kind=k, sector=str(sector), randomness="ab" * 32) for k in kinds]
        witnesses: list[str | dict[str, Any]] = [str(circom_files["w0"]), str(circom_files["w1"])]
        requests.append(JobRequest(kind="circom", circuit="wp", witnesses=witnesses))
        ids = await prove_all(engine, requests)
        counts = [await verified_count(engine, i, k) for i, k in zip(ids, kinds, strict=False)]
        assert counts == [10, 16, 1, 1]
        assert await verified_count(engine, ids[4], "circom", "wp") == 2
        assert [k.name for k in engine.kinds()] == [*kinds, "circom"]
        await watch.until(lambda: len(watch.of("job_done")) == 5)
        watch.close()
        assert_clean(engine)


async def test_circom_circuit_with_a_witness_generator_proves_from_inputs(
    tmp_path: Path, keys_dir: Path, mul_circuit: tuple[Path, Path]
) -> None:
    zkey, wasm = mul_circuit
    async with Engine(config(tmp_path, keys_dir)) as engine:
        info = await engine.register_circuit("mul", zkey, wasm_path=wasm, priority="high")
        assert info.has_witness_generator and info.constraints == 1
        assert await engine.register_circuit("mul", zkey, wasm_path=wasm) == info
        with pytest.raises(Conflict):
            await engine.register_circuit("mul", zkey)
        inputs: list[str | dict[str, Any]] = [{"a": 3, "b": 11}, {"a": 5, "b": 7}]
        job_id = await engine.submit(JobRequest(kind="circom", circuit="mul", witnesses=inputs))
        proof = await engine.wait_proof(job_id, WAIT)
        assert proof is not None and [p.public for p in proof.partitions] == [["33"], ["35"]]
        assert await verified_count(engine, job_id, "circom", "mul") == 2
        view = engine.job(job_id)
        assert view is not None and view.circuit == "mul" and view.priority.value == "high"
        shown = engine.snapshot().to_json()
        assert [p["circuit"] for p in shown["pipelines"] if p["job_id"] == job_id] == ["mul"]


async def test_winning_post_overtakes_ten_porep_jobs(tmp_path: Path, keys_dir: Path, sector: Path) -> None:
    async with Engine(config(tmp_path, keys_dir)) as engine:
        watch = Watcher(engine)
        porep = [await engine.submit(JobRequest(kind="porep-c2", sector=str(sector))) for _ in range(10)]
        await watch.until(lambda: bool(watch.of("lease_granted")))  # the pipeline is busy with porep
        winning = await engine.submit(JobRequest(kind="winning-post", sector=str(sector)))
        assert await engine.wait_proof(winning, WAIT) is not None
        states = [engine.job(j).state for j in porep]  # type: ignore[union-attr]
        assert JobState.DONE not in states
        done_jobs = [e["job_id"] for e in watch.of("job_done")]
        assert done_jobs == [winning]
        for job_id in porep:
            assert await engine.cancel(job_id)
        await watch.until(lambda: engine.budget.reserved == 0)
        watch.close()
        assert_clean(engine)


async def test_memory_budget_holds_under_load_and_drains_to_zero(
    tmp_path: Path, keys_dir: Path, sector: Path
) -> None:
    porep = prepare_builtin("porep-c2", "tiny", "bn128", str(keys_dir))
    post = prepare_builtin("window-post", "tiny", "bn128", str(keys_dir))
    keys = 2 * porep.key_alloc_bytes + 2 * post.key_alloc_bytes
    budget = keys + porep.key_alloc_bytes + 3 * porep.partition_bytes  # room for about 3 partitions
    async with Engine(config(tmp_path, keys_dir, memory_budget_bytes=budget)) as engine:
        watch = Watcher(engine)
        peaks: list[int] = []

        def sample() -> bool:
            stats = engine.budget.stats()
            peaks.append(stats.reserved_bytes + stats.cached_bytes)
            return False

        requests = [JobRequest(kind="porep-c2", sector=str(sector))]
        requests += [JobRequest(kind="window-post", sector=str(sector)) for _ in range(4)]
        sampler = asyncio.create_task(watch.until(sample, WAIT))
        await prove_all(engine, requests)
        sampler.cancel()
        stats = engine.budget.stats()
        assert max(peaks) <= budget and stats.peak_used_bytes <= budget
        assert stats.reserved_bytes == 0 and stats.live_reservations == 0
        snapshot = engine.snapshot()
        assert snapshot.memory.reserved_bytes == 0
        watch.close()
        assert_clean(engine)


async def test_workers_with_fixed_base_tables_prove_and_reserve_the_tables(
    tmp_path: Path, keys_dir: Path, sector: Path
) -> None:
    """``msm_tables``: the proofs verify, and each worker's key allocation is named for its tables and holds
    their bytes besides the key's, as ``/v1/kinds`` says."""
    post = prepare_builtin("window-post", "tiny", "bn128", str(keys_dir))
    assert post.table_alloc_bytes > post.key_alloc_bytes  # the C extension: tables are several keys' worth
    cfg = config(tmp_path, keys_dir, msm_tables=True, workers_per_device=1)
    async with Engine(cfg) as engine:
        watch = Watcher(engine)
        ids = await prove_all(engine, [JobRequest(kind="window-post", sector=str(sector)) for _ in range(2)])
        assert [await verified_count(engine, i, "window-post") for i in ids] == [1, 1]
        held = {a.name: a.bytes for a in engine.snapshot().allocations}
        assert held == {f"key+tables:{post.key_name}@cpu:0/w0": post.key_alloc_bytes + post.table_alloc_bytes}
        kind = next(k for k in engine.kinds() if k.name == "window-post")
        assert kind.proving_key_bytes == post.worker_key_bytes(True)
        watch.close()
        assert_clean(engine)


async def test_by_default_a_key_s_tables_are_built_in_the_background_and_used_once_stored(
    tmp_path: Path, keys_dir: Path, circom_files: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """``msm_tables = "auto"`` (the default): a key's first job proves without its tables while one process
    builds and stores them; the worker's next partition takes its allocation again with their bytes and maps
    them, and its proofs verify. A key of its own (a seed no other test uses), so nothing is stored yet."""
    caplog.set_level(logging.INFO, logger="prooflane.engine")
    zkey = tmp_path / "fresh.zkey"
    write_zkey(zkey, setup(storage_circuit("winning-post", "tiny", BN128).r1cs, seed=os.urandom(16)))
    witnesses: list[str | dict[str, Any]] = [str(circom_files["w0"]), str(circom_files["w1"])]
    async with Engine(config(tmp_path, keys_dir, workers_per_device=1)) as engine:
        assert engine.config.msm_tables == "auto"
        await engine.register_circuit("fresh", zkey)
        meta = inspect_zkey("circom:fresh", str(zkey))
        first = await prove_all(engine, [JobRequest(kind="circom", circuit="fresh", witnesses=witnesses)])
        assert await verified_count(engine, first[0], "circom", "fresh") == 2
        async with asyncio.timeout(WAIT):
            while "msm tables of circom:fresh: built in" not in caplog.text:  # noqa: ASYNC110 (a log line)
                await asyncio.sleep(0.05)
        digest = read_zkey(zkey).digest
        assert sorted(p.name.split(".")[1] for p in _tables_folder().glob(f"{digest}.*.tables")) == sorted(
            BASES
        )
        second = await prove_all(engine, [JobRequest(kind="circom", circuit="fresh", witnesses=witnesses)])
        assert await verified_count(engine, second[0], "circom", "fresh") == 2
        held = {a.name: a.bytes for a in engine.snapshot().allocations}
        assert held == {"key+tables:circom:fresh@cpu:0/w0": meta.key_alloc_bytes + meta.table_alloc_bytes}
        told = next(r for r in caplog.records if "msm tables of circom:fresh: built in" in r.getMessage())
        assert [(t.key, t.state, t.bytes, t.reason) for t in engine.snapshot().tables] == [
            ("circom:fresh", "stored", told.bytes, "")  # type: ignore[attr-defined]
        ]
        assert_clean(engine)


@pytest.mark.parametrize("why", ["budget", "no folder", "unwritable folder"])
async def test_tables_that_would_not_fit_or_could_not_be_stored_are_never_used(
    tmp_path: Path,
    keys_dir: Path,
    sector: Path,
    why: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``auto`` keeps a key's tables only where every worker's copy fits in a quarter of the budget, and
    where they can be stored: otherwise the log says why once, and the key proves as before."""
    caplog.set_level(logging.INFO, logger="prooflane.engine")
    post = prepare_builtin("window-post", "tiny", "bn128", str(keys_dir))
    budget = 0
    if why == "budget":  # room for the partition and the key, not for the tables
        budget = post.partition_bytes + post.key_alloc_bytes + post.table_alloc_bytes
    elif why == "no folder":
        monkeypatch.setenv("PROOFLANE_TABLES", "")
    else:  # a path under a file: no process can store tables there, root included
        (tmp_path / "a-file").write_text("")
        monkeypatch.setenv("PROOFLANE_TABLES", str(tmp_path / "a-file" / "tables"))
    cfg = config(tmp_path, keys_dir, workers_per_device=1, memory_budget_bytes=budget)
    async with Engine(cfg) as engine:
        ids = await prove_all(engine, [JobRequest(kind="window-post", sector=str(sector)) for _ in range(2)])
        assert [await verified_count(engine, i, "window-post") for i in ids] == [1, 1]
        said = [m for r in caplog.records if (m := r.getMessage()).startswith("msm tables of window-post")]
        assert len(said) == 1 and "not used" in said[0], said
        expected = {"budget": "quarter of the memory budget", "no folder": "PROOFLANE_TABLES is set empty"}
        assert expected.get(why, f"cannot be stored in {tmp_path / 'a-file' / 'tables'}") in said[0]
        held = {a.name: a.bytes for a in engine.snapshot().allocations}
        assert held == {f"key:{post.key_name}@cpu:0/w0": post.key_alloc_bytes}
        reason = said[0].split("not used (", 1)[1].rsplit(")", 1)[0]
        assert [(t.key, t.state, t.reason) for t in engine.snapshot().tables] == [
            (post.key_name, "unused", reason)
        ]
        kind = next(k for k in engine.kinds() if k.name == "window-post")
        assert kind.proving_key_bytes == post.key_alloc_bytes
        assert_clean(engine)


@pytest.mark.parametrize(
    ("builder", "said"),
    [
        ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", "the build was stopped by SIGTERM"),
        ("import sys; sys.exit('ValueError: a torn key')", "the build failed (ValueError: a torn key)"),
    ],
    ids=["stopped", "failed"],
)
async def test_a_builder_stopped_by_a_signal_is_no_failure_and_a_failed_one_is_named(
    tmp_path: Path,
    keys_dir: Path,
    sector: Path,
    builder: str,
    said: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A builder ended by SIGTERM (``kill -TERM -PGID`` of the daemon's group can reach it before it leaves
    the signal to the daemon) is logged at INFO, with no warning; one that fails is a warning naming what
    it said. Either way the key proves without its tables, and its build is not tried again."""
    import prooflane.engine.tables as tables

    monkeypatch.setattr(tables, "BUILDER", ("-c", builder))
    caplog.set_level(logging.INFO, logger="prooflane.engine")
    post = prepare_builtin("window-post", "tiny", "bn128", str(keys_dir))
    async with Engine(config(tmp_path, keys_dir, workers_per_device=1)) as engine:
        first = await prove_all(engine, [JobRequest(kind="window-post", sector=str(sector))])
        async with asyncio.timeout(WAIT):
            while f"msm tables of {post.key_name}: the b" not in caplog.text:  # noqa: ASYNC110 (a log line)
                await asyncio.sleep(0.05)
        second = await prove_all(engine, [JobRequest(kind="window-post", sector=str(sector))])
        assert [await verified_count(engine, i, "window-post") for i in first + second] == [1, 1]
        lines = [r for r in caplog.records if r.getMessage().startswith(f"msm tables of {post.key_name}")]
        assert [r.getMessage().split(": ", 1)[1].split(";")[0] for r in lines[1:]] == [said]
        assert [r.levelno for r in lines] == [
            logging.INFO,
            logging.INFO if "stopped" in said else logging.WARNING,
        ]
        held = {a.name: a.bytes for a in engine.snapshot().allocations}
        assert held == {f"key:{post.key_name}@cpu:0/w0": post.key_alloc_bytes}
        shown = (
            "the build was stopped by SIGTERM"
            if "stopped" in said
            else "the build failed: ValueError: a torn key"
        )
        assert [(t.key, t.state, t.reason) for t in engine.snapshot().tables] == [
            (post.key_name, "unused", shown)
        ]
        assert_clean(engine)


async def test_job_larger_than_the_budget_is_refused_at_submit(
    tmp_path: Path, keys_dir: Path, sector: Path
) -> None:
    post = prepare_builtin("window-post", "tiny", "bn128", str(keys_dir))
    budget = post.partition_bytes + post.key_alloc_bytes  # a PoSt partition fits, a porep-c2 one does not
    async with Engine(config(tmp_path, keys_dir, memory_budget_bytes=budget)) as engine:
        with pytest.raises(TooLarge) as refused:
            await engine.submit(JobRequest(kind="porep-c2", sector=str(sector)))
        assert "memory_budget_bytes" in refused.value.detail
        with pytest.raises(NotFound) as unknown:
            await engine.submit(JobRequest(kind="porep-c3", sector=str(sector)))
        assert "porep-c2" in unknown.value.detail
        with pytest.raises(Invalid) as bad:
            await engine.submit(JobRequest(kind="window-post", sector=str(tmp_path / "nowhere")))
        assert "sector" in bad.value.detail
        assert engine.jobs() == []


async def test_submit_is_idempotent_on_job_id(tmp_path: Path, keys_dir: Path, sector: Path) -> None:
    async with Engine(config(tmp_path, keys_dir)) as engine:
        request = JobRequest(kind="winning-post", sector=str(sector), job_id="wp-1", randomness="01")
        assert await engine.submit(request) == "wp-1"
        assert await engine.submit(request) == "wp-1"
        with pytest.raises(Conflict):
            await engine.submit(JobRequest(kind="window-post", sector=str(sector), job_id="wp-1"))
        assert await engine.wait_proof("wp-1", WAIT) is not None
        assert [v.job_id for v in engine.jobs()] == ["wp-1"]
        assert [v.job_id for v in engine.jobs(state="done")] == ["wp-1"]


async def test_killed_worker_process_is_replaced_and_the_job_completes(
    tmp_path: Path, keys_dir: Path, sector: Path
) -> None:
    async with Engine(config(tmp_path, keys_dir)) as engine:
        watch = Watcher(engine)
        before = {w.worker_id: w for w in engine.workers()}
        job_id = await engine.submit(JobRequest(kind="porep-c2", sector=str(sector)))
        await watch.until(lambda: bool(watch.of("lease_granted")))
        victim = before[watch.of("lease_granted")[0]["worker_id"]]
        assert victim.prover_pid is not None and victim.finalizer_pid is None  # a cpu worker: one process
        os.kill(victim.prover_pid, signal.SIGKILL)
        assert await engine.wait_proof(job_id, WAIT) is not None
        await watch.until(lambda: bool(watch.of("worker_died")))
        await watch.until(lambda: len(watch.of("worker_registered")) == 3)
        after = {w.worker_id: w for w in engine.workers()}
        assert after[victim.worker_id].prover_pid not in (None, victim.prover_pid)
        assert await verified_count(engine, job_id, "porep-c2") == 10
        watch.close()
        assert_clean(engine)


async def test_cancel_frees_every_reservation(tmp_path: Path, keys_dir: Path, sector: Path) -> None:
    async with Engine(config(tmp_path, keys_dir)) as engine:
        watch = Watcher(engine)
        job_id = await engine.submit(JobRequest(kind="snap-update", sector=str(sector)))
        await watch.until(lambda: bool(watch.of("lease_granted")))
        assert await engine.cancel(job_id)
        assert not await engine.cancel(job_id)
        await watch.until(lambda: engine.budget.reserved == 0)
        view = engine.job(job_id)
        assert view is not None and view.state is JobState.CANCELLED
        assert all(p.state in (PartitionState.DONE, PartitionState.CANCELLED) for p in view.partitions)
        with pytest.raises(Conflict):
            await engine.wait_proof(job_id, 0)
        watch.close()
        assert_clean(engine)


async def test_bad_partition_fails_the_job_naming_it(
    tmp_path: Path, keys_dir: Path, circom_files: dict[str, Path]
) -> None:
    async with Engine(config(tmp_path, keys_dir)) as engine:
        await engine.register_circuit("wp", circom_files["zkey"])
        witnesses: list[str | dict[str, Any]] = [str(circom_files[n]) for n in ("w0", "bad", "w1")]
        job_id = await engine.submit(JobRequest(kind="circom", circuit="wp", witnesses=witnesses))
        with pytest.raises(Refused) as failed:
            await engine.wait_proof(job_id, WAIT)
        assert "partition 1" in failed.value.detail
        view = engine.job(job_id)
        assert view is not None and view.state is JobState.FAILED
        assert view.error is not None and "partition 1" in view.error
        assert view.partitions[1].state is PartitionState.FAILED
        await Watcher(engine).until(lambda: engine.budget.reserved == 0)
        assert_clean(engine)


async def test_restart_resumes_without_proving_done_partitions_again(
    tmp_path: Path, keys_dir: Path, sector: Path
) -> None:
    cfg = config(tmp_path, keys_dir)
    engine = Engine(cfg)
    await engine.start()
    watch = Watcher(engine)
    job_id = await engine.submit(JobRequest(kind="porep-c2", sector=str(sector), job_id="resume-me"))
    await watch.until(lambda: len(watch.of("finalize_finished")) >= 3)
    watch.close()
    await engine.stop()  # like a crash: nothing more is written, in-flight work is lost
    from prooflane.store import Store

    store = Store(cfg.data_dir / "journal.sqlite3")
    proven = {p.index: p.proof for p in store.partitions(job_id) if p.proof is not None}
    store.close()
    assert 3 <= len(proven) < 10

    async with Engine(cfg) as again:
        watch = Watcher(again)
        assert await again.wait_proof(job_id, WAIT) is not None
        leased = {e["partition"] for e in watch.of("lease_granted")}
        assert leased.isdisjoint(proven) and leased | set(proven) == set(range(10))
        final = await again.wait_proof(job_id, 0)
        assert final is not None
        assert {p.index: p.proof for p in final.partitions if p.index in proven} == proven
        assert await verified_count(again, job_id, "porep-c2") == 10
        watch.close()
        assert_clean(again)


async def test_workers_run_below_the_daemon_at_the_configured_niceness(
    tmp_path: Path, keys_dir: Path
) -> None:
    async with Engine(config(tmp_path, keys_dir, worker_niceness=7, split_prove=True)) as engine:
        own = os.getpriority(os.PRIO_PROCESS, 0)
        pids = [pid for w in engine.workers() for pid in (w.prover_pid, w.finalizer_pid)]
        assert pids and None not in pids  # a prover and a finalizer each (split_prove)
        assert {os.getpriority(os.PRIO_PROCESS, pid) - own for pid in pids if pid is not None} == {7}


UNGUARDED_SCRIPT = """
import asyncio, dataclasses, pathlib, sys
from prooflane.config import Config
from prooflane.engine import Engine

async def main() -> None:
    config = dataclasses.replace(Config(), data_dir=pathlib.Path(sys.argv[1]), profile="tiny")
    async with Engine(config):
        print("started")

asyncio.run(main())  # not under `if __name__ == "__main__":`
"""


def test_an_engine_started_by_a_script_without_a_main_guard_says_how_to_fix_it(tmp_path: Path) -> None:
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED_SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "data")],
        capture_output=True, text=True, timeout=150, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode != 0 and "started" not in done.stdout
    assert "while the engine started" in done.stderr, done.stderr[-3000:]
    assert 'if __name__ == "__main__":' in done.stderr
