"""The proving pipeline under one asyncio task group.

submit -> journal -> scheduler -> dispatcher (memory budget) -> synthesis pool -> device queue
-> device worker: prove_start under the device lock -> finalizer: prove_finish + verify -> journal -> waiters.
Every step posts one event to the status tracker. See docs/engine.md.

Everything here runs on the event loop; no locks. Invariants kept by construction:

- a partition's reservation is live exactly while its partition is synthesizing, synthesized, proving or
  finalizing (or a worker process still computes on it after its job ended; released when that returns);
- a partition is in at most one place: the pending queue, a synthesis task, the ready queue, or one worker;
- a job ends once (``_end_job``), and the journal is written before waiters are woken.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from types import TracebackType
from typing import Any

from . import events as ev
from ._jobs import CircuitEntry, JobRun, PartitionRun, circuit_info, journal_view, live_view
from .config import Config
from .devices import Device, RemoteError, Worker, WorkerInfo, exit_with, mp_context
from .errors import JobRejected, ProoflaneError, WorkerDied
from .kinds import (
    BUILTIN_KINDS,
    CIRCOM,
    CircomInput,
    CircuitMeta,
    StorageInput,
    SynthesisTask,
    inspect_zkey,
    kind_infos,
    kind_spec,
    prepare_builtin,
    synthesize_partition,
)
from .memory import CachedAllocation, MemoryBudget
from .models import (
    CircuitInfo,
    JobProof,
    JobRequest,
    JobState,
    JobView,
    KindInfo,
    PartitionProof,
    PartitionState,
    Priority,
)
from .scheduler import WorkQueue
from .status import StatusTracker, TrackerConfig
from .store import CircuitRecord, JobRecord, Store

__all__ = ["Engine"]

log = logging.getLogger(__name__)
P = PartitionState
_MAX_FAILED_STARTS = 3  # a worker whose fresh processes die this many times in a row stops the engine


class Engine:
    """The proving engine: accepts jobs, proves their partitions on devices, hands back verified proofs.

    Use ``async with Engine(config) as engine:`` (or ``await start()`` / ``await stop()``). Every public
    method is called on the event loop that started the engine. ``clock`` (monotonic seconds) stamps the
    status events; the journal uses wall-clock time.
    """

    def __init__(self, config: Config, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config.resolved()
        self._clock = clock
        self.ready = False
        self._tracker = StatusTracker(
            TrackerConfig(
                retention_secs=self.config.live_retention_secs,
                memory_total_bytes=self.config.memory_budget_bytes,
                synthesis_max_concurrent=self.config.synthesis_workers,
            ),
            clock=clock,
        )
        self._kick = asyncio.Event()  # set whenever the dispatcher may be able to start more work
        self._budget = MemoryBudget(self.config.memory_budget_bytes, emit=self._post, clock=clock)
        self._minter = ev.LeaseMinter()
        self._pending: WorkQueue[PartitionRun] = WorkQueue()
        self._ready: WorkQueue[PartitionRun] = WorkQueue()
        self._jobs: dict[str, JobRun] = {}  # live and recently ended jobs
        self._metas: dict[str, CircuitMeta] = {}  # built-in kind -> its circuit
        self._circuits: dict[str, CircuitEntry] = {}
        self._workers: dict[str, Worker] = {}
        self._held: dict[str, set[PartitionRun]] = {}  # worker id -> partitions it holds (staged..finalizing)
        self._keys: dict[tuple[str, str], CachedAllocation] = {}  # (worker id, key path) -> allocation
        self._synth_active = 0
        self._store: Store | None = None
        self._pool: ProcessPoolExecutor | None = None
        self._io: ThreadPoolExecutor | None = None
        self._runner: asyncio.Task[None] | None = None
        self._tg: asyncio.TaskGroup | None = None
        self._ctx = mp_context()

    # -- lifecycle ------------------------------------------------------------------------------------

    async def __aenter__(self) -> Engine:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        """Open the journal, start synthesis and device worker processes, resume unfinished jobs.

        Returns once the engine accepts jobs and its workers are started (``ready`` is then True).
        """
        try:
            await self._start()
        except BaseException:
            await self.stop()  # whatever did start is ended: no stray processes after a failed start
            raise
        self.ready = True

    async def _start(self) -> None:
        cfg = self.config
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        self._store = Store(cfg.data_dir / "journal.sqlite3")
        n_workers = len(cfg.devices) * cfg.workers_per_device
        self._io = ThreadPoolExecutor(max_workers=4 * n_workers + 4, thread_name_prefix="prooflane-io")
        self._pool = self._new_pool()
        self._post(ev.SynthesisPoolSized(at=self._clock(), max_concurrent=cfg.synthesis_workers))
        await self._prepare_kinds()
        started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._runner = asyncio.create_task(self._run(started), name="prooflane-engine")
        await started
        self._resume()

    async def stop(self) -> None:
        """Stop accepting jobs, cancel the pipeline's tasks, end every worker process. Jobs in flight stay
        in the journal unfinished and resume at the next start."""
        self.ready = False
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
            self._runner = None
        for worker in self._workers.values():
            worker.kill()
        if self._pool is not None:
            _kill_pool(self._pool)
            self._pool = None
        if self._io is not None:
            self._io.shutdown(wait=False, cancel_futures=True)
        if self._store is not None:
            self._store.close()
            self._store = None

    async def _run(self, started: asyncio.Future[None]) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                ready = [
                    asyncio.Event() for _ in range(len(self.config.devices) * self.config.workers_per_device)
                ]
                slots = [
                    (Device(name), i)
                    for name in self.config.devices
                    for i in range(self.config.workers_per_device)
                ]
                for (device, i), event in zip(_share_devices(slots), ready, strict=True):
                    tg.create_task(self._supervise(device, i, event), name=f"worker {device.name}/w{i}")
                for event in ready:
                    await event.wait()
                tg.create_task(self._dispatch(), name="dispatcher")
                started.set_result(None)
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
            raise

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            max_workers=self.config.synthesis_workers,
            mp_context=self._ctx,
            initializer=exit_with,
            initargs=(os.getpid(), self.config.worker_niceness),
        )

    async def _prepare_kinds(self) -> None:
        cfg, loop = self.config, asyncio.get_running_loop()
        keys_dir = str(cfg.keys_dir)
        calls = [
            loop.run_in_executor(self._pool, prepare_builtin, k.name, cfg.profile, cfg.curve, keys_dir)
            for k in BUILTIN_KINDS
        ]
        for spec, meta in zip(BUILTIN_KINDS, await asyncio.gather(*calls), strict=True):
            self._metas[spec.name] = meta
        for record in self._journal.circuits():
            meta_path = Path(record.zkey).with_suffix(".json")
            self._circuits[record.name] = CircuitEntry(
                record, CircuitMeta(**json.loads(meta_path.read_text()))
            )

    # -- public API -----------------------------------------------------------------------------------

    async def submit(self, req: JobRequest) -> str:
        """Journal a job and queue its partitions; return its id.

        Idempotent on ``req.job_id``: resubmitting an id returns it without a new job (a different request
        under the same id is refused with 409). Raises ``JobRejected`` (status 404 unknown kind or circuit,
        422 bad sector / witnesses / randomness, 413 a partition larger than the whole memory budget, 503 not
        started).
        """
        if not self.ready:
            raise JobRejected("the engine is not running: start it first", 503)
        original = req.model_dump(mode="json", exclude_none=True)
        if req.job_id is not None and (known := self._journal.job(req.job_id)) is not None:
            if known.request.get("original") != original:
                raise JobRejected(f"job_id {req.job_id!r} is taken by a different request", 409)
            return req.job_id
        spec = kind_spec(req.kind)
        if spec is None:
            names = ", ".join([k.name for k in BUILTIN_KINDS] + [CIRCOM])
            raise JobRejected(f"unknown kind {req.kind!r}: expected one of {names}", 404)
        job_id = req.job_id or uuid.uuid4().hex
        meta = self._circuit(req.circuit or "").meta if req.kind == CIRCOM else self._metas[req.kind]
        self._check_fits(req.kind, meta)  # before anything is created for the job
        meta, priority, resolved = self._resolve(req, job_id)
        randomness = (req.randomness_bytes() or os.urandom(32)).hex()
        partitions = len(req.witnesses or []) if req.kind == CIRCOM else spec.partitions
        record = self._journal.insert_job(
            job_id=job_id,
            kind=req.kind,
            priority=priority.value,
            request={"original": original, **resolved},
            randomness=randomness,
            partitions=partitions,
            submitted_at=time.time(),
        )
        self._admit(record, meta, done={})
        return job_id

    def job(self, job_id: str) -> JobView | None:
        """The job's state and per-partition states, or None when no such job was ever accepted."""
        if (job := self._jobs.get(job_id)) is not None:
            return live_view(job)
        record = self._journal.job(job_id)
        return None if record is None else journal_view(self._journal, record)

    def jobs(self, state: str | None = None, limit: int = 100) -> list[JobView]:
        """Jobs from the journal, newest first, optionally only those in ``state`` (a JobState value)."""
        if state is not None and state not in {s.value for s in JobState}:
            raise JobRejected(f"state {state!r}: expected one of {', '.join(s.value for s in JobState)}", 422)
        views = []
        for record in self._journal.jobs(state, max(1, min(limit, 10_000))):
            live = self._jobs.get(record.job_id)
            views.append(live_view(live) if live is not None else journal_view(self._journal, record))
        return views

    async def wait_proof(self, job_id: str, timeout: float) -> JobProof | None:  # noqa: ASYNC109
        """The job's verified proofs once it is done, waiting up to ``timeout`` seconds.

        Returns None if it is not done by then. Raises ``JobRejected`` (404) for an unknown job and (409)
        for a job that failed or was cancelled, with its error.
        """
        job = self._jobs.get(job_id)
        if job is not None and not job.state.terminal and timeout > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await job.ended.wait()
        record = self._journal.job(job_id)
        if record is None:
            raise JobRejected(f"no job {job_id!r}", 404)
        if record.state in (JobState.FAILED, JobState.CANCELLED):
            raise JobRejected(f"job {job_id} {record.state}: {record.error or 'no proof'}", 409)
        if record.state != JobState.DONE:
            return None
        parts = [
            PartitionProof(index=p.index, proof=p.proof or {}, public=p.public or [])
            for p in self._journal.partitions(job_id)
        ]
        return JobProof(job_id=job_id, kind=record.kind, partitions=parts)

    async def cancel(self, job_id: str) -> bool:
        """Cancel a job at any stage, freeing its reservations; False when it was already finished.

        Raises ``JobRejected`` (404) for an unknown job.
        """
        job = self._jobs.get(job_id)
        if job is None:
            if self._journal.job(job_id) is None:
                raise JobRejected(f"no job {job_id!r}", 404)
            return False
        if job.state.terminal:
            return False
        self._end_job(job, JobState.CANCELLED, "cancelled by request")
        return True

    def kinds(self) -> list[KindInfo]:
        """Every proof kind this engine proves (the built-in ones, then ``circom``)."""
        return kind_infos(self._metas)

    def verification_key(self, kind: str, circuit: str | None = None) -> dict[str, Any]:
        """The snarkjs verification_key.json of ``kind`` (for ``circom``, of the registered ``circuit``).

        Raises ``JobRejected`` (404) for an unknown kind or circuit.
        """
        if kind == CIRCOM:
            return self._circuit(circuit or "").meta.vk
        if kind not in self._metas:
            raise JobRejected(f"unknown kind {kind!r}: expected one of {', '.join(self._metas)}", 404)
        return self._metas[kind].vk

    async def register_circuit(
        self, name: str, zkey_path: Path, *, wasm_path: Path | None = None, priority: str = "normal"
    ) -> CircuitInfo:
        """Register a circom circuit for kind ``circom``: its snarkjs .zkey and optionally its circom
        witness generator (.wasm), copied into the data folder so the registration survives restarts.

        Jobs then name it in ``circuit`` and give one witness per partition. Re-registering a name with the
        same files is a no-op; with different files it is refused (409). Raises ``JobRejected`` (422) for a
        file that is missing or not a Groth16 .zkey.
        """
        _check_files(zkey_path, wasm_path)
        try:
            prio = Priority(priority)
        except ValueError:
            raise JobRejected(f"priority {priority!r}: expected critical, high or normal", 422) from None
        digest = _digest(Path(zkey_path), Path(wasm_path) if wasm_path else None)
        if (known := self._circuits.get(name)) is not None:
            if known.record.digest != digest:
                raise JobRejected(f"circuit {name!r} is registered with other files; pick another name", 409)
            return circuit_info(known)
        folder = self.config.data_dir / "circuits" / name
        folder.mkdir(parents=True, exist_ok=True)
        zkey = folder / "circuit.zkey"
        shutil.copyfile(zkey_path, zkey)
        wasm = folder / "circuit.wasm" if wasm_path else None
        if wasm_path and wasm:
            shutil.copyfile(wasm_path, wasm)
        loop = asyncio.get_running_loop()
        try:
            meta = await loop.run_in_executor(self._pool, inspect_zkey, f"circom:{name}", str(zkey))
        except ProoflaneError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            raise JobRejected(f"zkey {str(zkey_path)!r}: {exc}", 422) from None
        zkey.with_suffix(".json").write_text(json.dumps(meta.to_json()))
        record = CircuitRecord(
            name, str(zkey), str(wasm) if wasm else None, digest, prio.value, meta.curve, meta.constraints,
            meta.public_signals, meta.partition_bytes,
        )  # fmt: skip
        self._journal.add_circuit(record)
        self._circuits[name] = CircuitEntry(record, meta)
        return circuit_info(self._circuits[name])

    def circuits(self) -> list[CircuitInfo]:
        """The registered circom circuits."""
        return [circuit_info(c) for c in self._circuits.values()]

    def workers(self) -> list[WorkerInfo]:
        """The device workers and their process ids."""
        return [w.info() for w in self._workers.values()]

    @property
    def tracker(self) -> StatusTracker:
        """The status tracker (events in, snapshots out) that /status, /metrics and SSE read."""
        return self._tracker

    @property
    def budget(self) -> MemoryBudget:
        """The memory budget (read its ``stats()``; never change it from outside)."""
        return self._budget

    # -- submission helpers ---------------------------------------------------------------------------

    @property
    def _journal(self) -> Store:
        if self._store is None:
            raise JobRejected("the engine is not running: start it first", 503)
        return self._store

    def _circuit(self, name: str) -> CircuitEntry:
        circuit = self._circuits.get(name)
        if circuit is None:
            known = ", ".join(self._circuits) or "none registered"
            raise JobRejected(f"unknown circuit {name!r} (registered: {known})", 404)
        return circuit

    def _resolve(self, req: JobRequest, job_id: str) -> tuple[CircuitMeta, Priority, dict[str, Any]]:
        """The job's circuit, priority, and its inputs as the journal keeps them (paths on this machine)."""
        if req.kind == CIRCOM:
            circuit = self._circuit(req.circuit or "")
            witnesses = []
            for i, w in enumerate(req.witnesses or []):
                if isinstance(w, str) and not Path(w).is_file():
                    raise JobRejected(f"witnesses[{i}]: no .wtns file {w!r} on the daemon's machine", 422)
                if isinstance(w, dict) and circuit.record.wasm is None:
                    raise JobRejected(
                        f"witnesses[{i}]: circuit inputs given, but circuit {circuit.record.name!r} has no "
                        "witness generator: pass .wtns paths or register it with a .wasm",
                        422,
                    )
                witnesses.append(str(Path(w).resolve()) if isinstance(w, str) else w)
            prio = req.priority or Priority(circuit.record.priority)
            return circuit.meta, prio, {"witnesses": witnesses, "circuit": circuit.record.name}
        spec = kind_spec(req.kind)
        assert spec is not None
        sector = self._sector_path(req, job_id)
        return self._metas[req.kind], req.priority or spec.priority, {"sector": sector}

    def _sector_path(self, req: JobRequest, job_id: str) -> str:
        from .circuits import Sector, profile_by_name

        try:
            if isinstance(req.sector, str):
                path = Path(req.sector).expanduser().resolve()
                sector = Sector.open(path)
            else:
                assert req.sector is not None
                path = self.config.data_dir / "sectors" / job_id
                seed = bytes.fromhex(req.sector.seed.removeprefix("0x")) if req.sector.seed else None
                sector = Sector.create(path, req.sector.size, seed=seed)
        except (ProoflaneError, OSError, ValueError) as exc:
            raise JobRejected(f"sector: {exc}", 422) from None
        want = profile_by_name(self.config.profile).sector_bytes
        if sector.size_bytes != want:
            raise JobRejected(
                f"sector {str(path)!r} holds {sector.size_bytes} bytes, but profile {self.config.profile!r} "
                f"proves sectors of {want} bytes (prooflane sector new --size {want})",
                422,
            )
        return str(path)

    def _check_fits(self, kind: str, meta: CircuitMeta) -> None:
        need = meta.partition_bytes + meta.key_alloc_bytes
        if not self._budget.could_ever_fit(need):
            raise JobRejected(
                f"a {kind} partition needs {need} bytes (its reservation plus a loaded proving key), more "
                f"than the whole memory budget of {self._budget.total} bytes: raise memory_budget_bytes "
                "or use a smaller profile",
                413,
            )

    def _admit(self, record: JobRecord, meta: CircuitMeta, done: dict[int, bool]) -> JobRun:
        """Put a journalled job in the pipeline: every partition not already proven goes to the queue."""
        req = record.request
        if record.kind == CIRCOM:
            wasm = self._circuits[req["circuit"]].record.wasm
            inputs: list[StorageInput | CircomInput] = [CircomInput(w, wasm) for w in req["witnesses"]]
        else:
            rnd = bytes.fromhex(record.randomness)
            base = StorageInput(record.kind, self.config.profile, self.config.curve, req["sector"], rnd)
            inputs = [base] * record.partitions
        job = JobRun(record, meta, Priority(record.priority), inputs)
        job.partitions = [
            PartitionRun(job, i, P.DONE if done.get(i) else P.PENDING) for i in range(record.partitions)
        ]
        self._jobs[job.job_id] = job
        self._post(
            ev.JobSubmitted(
                at=self._clock(),
                job_id=job.job_id,
                kind=record.kind,
                priority=job.priority.value,
                partitions=record.partitions,
                done_partitions=tuple(sorted(i for i, d in done.items() if d)),
                circuit=req.get("circuit") if record.kind == CIRCOM else None,
            )
        )
        for part in job.partitions:
            if part.state is P.PENDING:
                self._pending.push(part.key, part)
        if all(p.state is P.DONE for p in job.partitions):
            self._end_job(job, JobState.DONE, None)
        return job

    def _resume(self) -> None:
        """Queue again every job the journal holds unfinished; proven partitions stay proven."""
        for record in self._journal.unfinished_jobs():
            done = {p.index: p.proof is not None for p in self._journal.partitions(record.job_id)}
            try:
                meta = (
                    self._circuit(record.request["circuit"]).meta
                    if record.kind == CIRCOM
                    else self._metas[record.kind]
                )
            except (JobRejected, KeyError) as exc:
                self._journal.set_job_state(
                    record.job_id, JobState.FAILED, error=f"cannot resume: {exc}", finished_at=time.time()
                )
                continue
            self._admit(record, meta, done)

    # -- dispatcher and synthesis ---------------------------------------------------------------------

    async def _dispatch(self) -> None:
        """Take partitions in scheduler order, reserve memory for each (atomically), start its synthesis."""
        while True:
            self._kick.clear()
            while self._can_synthesize() and (head := self._pending.peek()) is not None:
                _, part = head
                name = f"{part.name}#{part.attempt}"
                reservation = self._budget.try_reserve(
                    name, part.job.meta.partition_bytes, headroom=self._headroom()
                )
                if reservation is None:
                    break  # the oldest highest-priority partition waits; nothing overtakes it
                self._pending.pop()
                part.reservation = reservation
                part.state = P.SYNTHESIZING
                self._synth_active += 1
                assert self._tg is not None
                part.task = self._tg.create_task(self._synthesize(part), name=f"synthesize {part.name}")
            await self._kick.wait()

    def _can_synthesize(self) -> bool:
        cfg = self.config
        return (
            self._synth_active < cfg.synthesis_workers
            and self._synth_active + len(self._ready) < cfg.prefetch_partitions + cfg.synthesis_workers
        )

    def _headroom(self) -> int:
        """Bytes reservations leave free so a worker can always load a proving key it needs."""
        return max((j.meta.key_alloc_bytes for j in self._jobs.values() if not j.state.terminal), default=0)

    async def _synthesize(self, part: PartitionRun) -> None:
        job, loop = part.job, asyncio.get_running_loop()
        self._post(
            ev.SynthesisStarted(
                at=self._clock(), job_id=job.job_id, partition=part.index, attempt=part.attempt
            )
        )
        task = SynthesisTask(job.job_id, part.index, job.meta.key_path, job.inputs[part.index])
        pool = self._pool
        try:
            synthesized, ms = await loop.run_in_executor(pool, synthesize_partition, task)
        except asyncio.CancelledError:
            self._release(part)
            raise
        except BrokenProcessPool:
            if self._pool is pool:  # the first to notice replaces the pool; the others just retry
                if pool is not None:
                    _kill_pool(pool)
                self._pool = self._new_pool()
            self._retry(part, "a synthesis process died")
            return
        except Exception as exc:
            self._post(
                ev.SynthesisFailed(
                    at=self._clock(),
                    job_id=job.job_id,
                    partition=part.index,
                    reason=_reason(exc),
                    attempt=part.attempt,
                )
            )
            self._fail_partition(part, f"synthesis failed: {_reason(exc)}")
            return
        finally:
            self._synth_active -= 1
            part.task = None
            self._kick.set()
        if not part.live:
            self._release(part)
            return
        self._post(
            ev.SynthesisFinished(
                at=self._clock(), job_id=job.job_id, partition=part.index, synth_ms=ms, attempt=part.attempt
            )
        )
        part.state, part.synthesized = P.SYNTHESIZED, synthesized
        if job.state is JobState.QUEUED:
            job.state = JobState.RUNNING
            self._journal.set_job_state(job.job_id, JobState.RUNNING)
        self._ready.push(part.key, part)

    # -- device workers -------------------------------------------------------------------------------

    async def _supervise(self, device: Device, index: int, registered: asyncio.Event) -> None:
        """Keep one worker slot filled: start its processes, run it, replace it when a process dies."""
        worker_id = f"{device.name}/w{index}"
        assert self._io is not None
        failed_starts = 0
        while True:
            worker = Worker(worker_id, device, self._ctx, self._io, self.config.worker_niceness)
            self._workers[worker_id] = worker
            self._held[worker_id] = set()
            try:
                await worker.ready()
            except WorkerDied as exc:
                self._worker_died(worker, str(exc), registered=False)
                failed_starts += 1
                if failed_starts >= _MAX_FAILED_STARTS:
                    raise RuntimeError(f"worker {worker_id} cannot start: {exc}") from None
                continue
            failed_starts = 0
            self._post(
                ev.WorkerRegistered(
                    at=self._clock(), worker_id=worker_id, device=device.name, device_kind=device.kind
                )
            )
            registered.set()
            worker.task = asyncio.create_task(self._work(worker), name=f"work {worker_id}")
            try:
                await asyncio.wait({worker.task})
            finally:
                worker.task.cancel()
            if not worker.task.cancelled() and (exc2 := worker.task.exception()) is not None:
                if not isinstance(exc2, WorkerDied):
                    raise exc2
                worker.death = str(exc2)
            self._worker_died(worker, worker.death or "its processes ended")

    async def _work(self, worker: Worker) -> None:
        """Prove partitions one after another: stage, device section under the lock, hand to the finalizer."""
        while True:
            _, part = await self._ready.get()
            self._kick.set()  # a ready slot freed: the dispatcher may synthesize the next partition
            if not part.live:
                self._release(part)
                continue
            held = self._held[worker.worker_id]
            held.add(part)
            part.worker_id = worker.worker_id
            allocation = await self._key_for(worker, part.job.meta)
            allocation.use()
            try:
                state = await self._device_section(worker, part)
            except RemoteError as exc:
                held.discard(part)
                allocation.done()
                self._fail_partition(part, f"prove_start failed: {exc}")
                continue
            if state is None:  # the job ended meanwhile
                held.discard(part)
                allocation.done()
                self._release(part)
                continue
            assert self._tg is not None
            self._tg.create_task(
                self._finalize(worker, part, state, allocation), name=f"finalize {part.name}"
            )

    async def _device_section(self, worker: Worker, part: PartitionRun) -> Any:
        """Stage outside the lock, then prove_start under it; None when the job ended meanwhile."""
        job = part.job
        await worker.stage(job.meta.key_path, part.synthesized)
        part.synthesized = None
        async with worker.device.lock:
            if not part.live:
                return None
            token = self._minter.mint()
            part.token, part.state = token, P.PROVING
            self._post(
                ev.LeaseGranted(
                    at=self._clock(), token=token, worker_id=worker.worker_id, device=worker.device.name,
                    job_id=job.job_id, partition=part.index, attempt=part.attempt,
                )
            )  # fmt: skip
            state, ms = await worker.prove_start()
        if not part.live:
            return None
        part.state = P.FINALIZING
        if part.reservation is not None:
            part.reservation.shrink(job.meta.abc_bytes)
        self._post(ev.DeviceSectionFinished(at=self._clock(), token=token, prove_ms=ms))
        return state

    async def _finalize(
        self, worker: Worker, part: PartitionRun, state: Any, allocation: CachedAllocation
    ) -> None:
        held = self._held[worker.worker_id]
        try:
            proof, public, verified, ms = await worker.finish(part.job.meta.key_path, state)
        except WorkerDied as exc:
            # The worker's supervisor retries everything it held (this partition included).
            worker.die(str(exc))
            return
        except RemoteError as exc:
            held.discard(part)
            allocation.done()
            self._fail_partition(part, f"prove_finish failed: {exc}")
            return
        held.discard(part)
        allocation.done()
        if not part.live:
            self._release(part)
            return
        if not verified:
            self._post(
                ev.PartitionFailed(
                    at=self._clock(),
                    job_id=part.job.job_id,
                    partition=part.index,
                    reason="proof did not verify",
                    token=part.token,
                )
            )
            self._fail_partition(part, "its proof did not verify")
            return
        assert part.token is not None
        self._journal.save_proof(part.job.job_id, part.index, proof, public)
        part.state = P.DONE
        self._release(part)
        self._post(ev.FinalizeFinished(at=self._clock(), token=part.token, finalize_ms=ms))
        if all(p.state is P.DONE for p in part.job.partitions):
            self._end_job(part.job, JobState.DONE, None)

    async def _key_for(self, worker: Worker, meta: CircuitMeta) -> CachedAllocation:
        """The worker's cached allocation for ``meta``'s proving key, taking budget for it when new."""
        slot = (worker.worker_id, meta.key_path)
        allocation = self._keys.get(slot)
        if allocation is not None and allocation.live:
            return allocation
        name = f"key:{meta.key_name}@{worker.worker_id}"

        def evict() -> None:
            self._keys.pop(slot, None)
            if not worker.dead and self._tg is not None:
                self._tg.create_task(_quietly(worker.drop_key(meta.key_path)))

        allocation = await self._budget.cache(name, meta.key_alloc_bytes, evict)
        self._keys[slot] = allocation
        return allocation

    def _worker_died(self, worker: Worker, reason: str, *, registered: bool = True) -> None:
        """The worker's processes are gone: free its keys, retry every partition it held."""
        worker.kill()
        for slot in [s for s in self._keys if s[0] == worker.worker_id]:
            self._keys.pop(slot).release()
        held = self._held.pop(worker.worker_id, set())
        log.warning(
            "worker %s died (%s); retrying the %d partitions it held", worker.worker_id, reason, len(held)
        )
        if registered:
            self._post(ev.WorkerDied(at=self._clock(), worker_id=worker.worker_id, reason=reason))
        for part in sorted(held, key=lambda p: p.key):
            if part.live:
                self._retry(part, f"worker {worker.worker_id} died: {reason}")
            else:
                self._release(part)

    # -- outcomes -------------------------------------------------------------------------------------

    def _retry(self, part: PartitionRun, reason: str) -> None:
        """Give the partition another attempt from the start (or fail its job after max_attempts)."""
        self._release(part)
        if not part.live:
            return
        part.synthesized, part.token, part.worker_id = None, None, None
        if part.attempt >= self.config.max_attempts:
            self._fail_partition(part, f"{reason} (attempt {part.attempt} of {self.config.max_attempts})")
            return
        part.attempt += 1
        part.state = P.PENDING
        self._journal.set_partition(part.job.job_id, part.index, P.PENDING, attempts=part.attempt)
        self._post(
            ev.PartitionRetried(
                at=self._clock(),
                job_id=part.job.job_id,
                partition=part.index,
                attempt=part.attempt,
                reason=reason,
            )
        )
        self._pending.push(part.key, part)
        self._kick.set()

    def _fail_partition(self, part: PartitionRun, reason: str) -> None:
        part.error = reason
        self._release(part)
        if not part.job.state.terminal:
            part.state = P.FAILED
            self._journal.set_partition(part.job.job_id, part.index, P.FAILED, error=reason)
            self._end_job(part.job, JobState.FAILED, f"partition {part.index} failed: {reason}", part.index)

    def _end_job(self, job: JobRun, state: JobState, error: str | None, partition: int | None = None) -> None:
        """End the job once: journal first, then free its queued work, post the event, wake waiters."""
        if job.state.terminal:
            return
        job.state, job.error, job.finished_at = state, error, time.time()
        self._journal.set_job_state(job.job_id, state, error=error, finished_at=job.finished_at)
        if state is not JobState.DONE:
            self._journal.end_open_partitions(job.job_id, P.CANCELLED)
        for part in self._pending.remove_job(job.job_id) + self._ready.remove_job(job.job_id):
            self._release(part)
        for part in job.partitions:
            if not part.state.terminal:
                part.state = P.CANCELLED
            if part.task is not None:
                part.task.cancel()  # its reservation is released as the task ends
        now = self._clock()
        match state:
            case JobState.DONE:
                self._post(ev.JobDone(at=now, job_id=job.job_id))
            case JobState.FAILED:
                self._post(
                    ev.JobFailed(at=now, job_id=job.job_id, reason=error or "failed", partition=partition)
                )
            case JobState.CANCELLED:
                self._post(ev.JobCancelled(at=now, job_id=job.job_id, reason=error or "cancelled"))
            case _:
                raise AssertionError(f"expected a terminal state, got {state}")
        job.ended.set()
        asyncio.get_running_loop().call_later(self.config.live_retention_secs, self._forget, job)
        self._kick.set()

    def _forget(self, job: JobRun) -> None:
        if self._jobs.get(job.job_id) is job:
            del self._jobs[job.job_id]

    def _release(self, part: PartitionRun) -> None:
        if part.reservation is not None:
            part.reservation.release()
            part.reservation = None
        part.synthesized = None

    def _post(self, event: ev.Event) -> None:
        """Apply one event to the tracker (event loop only) and let the dispatcher look again."""
        self._tracker.apply(event)
        self._kick.set()


# -- helpers --------------------------------------------------------------------------------------------


def _share_devices(slots: list[tuple[Device, int]]) -> list[tuple[Device, int]]:
    """One Device object (one lock) per device name."""
    devices: dict[str, Device] = {}
    return [(devices.setdefault(d.name, d), i) for d, i in slots]


def _check_files(zkey: Path, wasm: Path | None) -> None:
    for label, path in (("zkey", zkey), ("wasm", wasm)):
        if path is not None and not Path(path).is_file():
            raise JobRejected(f"{label} {str(path)!r}: no such file on the daemon's machine", 422)


def _digest(*paths: Path | None) -> str:
    h = hashlib.sha256()
    for path in paths:
        h.update(path.read_bytes() if path else b"-")
    return h.hexdigest()


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _kill_pool(pool: ProcessPoolExecutor) -> None:
    # ProcessPoolExecutor has no public way to end busy processes; the engine owns these, so end them.
    processes = list(getattr(pool, "_processes", {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        with contextlib.suppress(Exception):
            process.kill()


async def _quietly(call: Any) -> None:
    with contextlib.suppress(WorkerDied, RemoteError, concurrent.futures.CancelledError):
        await call
