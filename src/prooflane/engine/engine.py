"""The proving engine: the pipeline's parts composed under one asyncio task group.

submit -> admission (journal) -> scheduler queue -> dispatcher (memory budget) -> synthesis (backend pool)
-> ready queue -> device loop: prove under the device lock -> finalizer: prove_finish + verify -> journal
-> waiters. Every step posts one event to the status tracker. The parts, each one concept:

- :mod:`prooflane.engine.pipeline`: shared state and the outcomes (retry, fail, end, release);
- :mod:`prooflane.engine.registry`: built-in kinds' circuits and registered circom circuits;
- :mod:`prooflane.engine.admission`: request -> journal record -> queued partitions; resume after a restart;
- :mod:`prooflane.engine.dispatch`: the dispatcher and synthesis;
- :mod:`prooflane.engine.device_loop`: supervised device workers, the device section, finalizers, keys;
- :mod:`prooflane.devices`: the backend those run on (processes, in-process, ...).

See docs/engine.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from .. import events as ev
from ..config import Config
from ..devices import DeviceBackend, PoolProcessDied, WorkerInfo, backend_for, check_devices
from ..errors import Conflict, Invalid, NotFound, StorageFull, Unavailable
from ..groth16 import arithmetics, products
from ..memory import MemoryBudget
from ..models import CircuitInfo, JobProof, JobRequest, JobView, KindInfo, PartitionProof
from ..states import JobState
from ..status.feed import Subscription
from ..status.snapshot import Health, StatusSnapshot
from ..status.tracker import StatusTracker, TrackerConfig, TrackerTotals
from ..store import JournalUnreadable, JournalUnwritable, Store
from .admission import Admission
from .device_loop import DeviceLoop
from .dispatch import Dispatcher
from .journal_check import (
    CHECK_SECS,
    CHECK_SLICE,
    FULL_CHECK_EVERY,
    against_journal,
    jobs_against_journal,
    queue_against_journal,
)
from .logbook import HealthLog
from .pipeline import Pipeline
from .records import journal_view, live_view
from .registry import CircuitRegistry, UploadParts

__all__ = ["MAX_JOBS_PAGE", "Engine"]

MAX_JOBS_PAGE = 1000
"""The most jobs one page of :meth:`Engine.jobs` (``GET /v1/jobs``) holds."""

log = logging.getLogger("prooflane.engine")


class Engine:
    """The proving engine: accepts jobs, proves their partitions on devices, hands back verified proofs.

    Use ``async with Engine(config) as engine:`` (or ``await start()`` / ``await stop()``). Every public
    method is called on the event loop that started the engine. ``clock`` (monotonic seconds) stamps the
    status events; the journal uses wall-clock time. ``backend`` is where the work runs: by default what the
    config asks for (:func:`~prooflane.devices.backend_for`).
    """

    def __init__(
        self,
        config: Config,
        *,
        clock: Callable[[], float] = time.monotonic,
        backend: DeviceBackend | None = None,
    ) -> None:
        self.config = cfg = config.resolved()
        self.ready = False
        tracker = StatusTracker(
            TrackerConfig(
                retention_secs=cfg.live_retention_secs,
                memory_total_bytes=cfg.memory_budget_bytes,
                synthesis_max_concurrent=cfg.synthesis_workers,
                stall_secs=cfg.stall_secs,
                # which arithmetic proves each curve here: the workers inherit this process's environment
                # and install, so this is theirs too; found once, at the start
                arithmetic=arithmetics(),
                products=products(),
            ),
            clock=clock,
        )
        self._backend = backend or backend_for(cfg)
        self._pipeline = Pipeline(cfg, clock, tracker)
        self._circuits = CircuitRegistry(self._pipeline, self._backend)
        self._admission = Admission(self._pipeline, self._circuits)
        self._dispatcher = Dispatcher(self._pipeline, self._backend)
        self._devices = DeviceLoop(self._pipeline, self._backend, self._circuits.keys)
        self._pipeline.own_synthesis = self._backend.own_synthesis(cfg.devices)
        self._health_log = HealthLog(self._health_to_log, clock)
        self._pipeline.watch = self._health_log.saw
        self._runner: asyncio.Task[None] | None = None
        self.failure: BaseException | None = None  # why the pipeline stopped on its own, if it did

    # -- lifecycle ------------------------------------------------------------------------------------

    async def __aenter__(self) -> Engine:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        """Open the journal, start the backend and the device workers, resume unfinished jobs.

        Returns once the engine accepts jobs and its workers are started (``ready`` is then True).
        """
        try:
            await self._start()
        except BaseException:
            await self.stop()  # whatever did start is ended: no stray processes after a failed start
            raise
        self.ready = True
        self._health_log.look()

    async def _start(self) -> None:
        cfg, pipeline = self.config, self._pipeline
        check_devices(cfg.devices)  # a cuda device with no GPU (and no simulator) here: one line, why
        try:
            cfg.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageFull(f"cannot make the data folder {cfg.data_dir}: {exc.strerror or exc}") from None
        pipeline.store = Store(cfg.data_dir / "journal.sqlite3")
        await self._backend.start()
        pipeline.post(ev.SynthesisPoolSized(at=pipeline.clock(), max_concurrent=self._dispatcher.capacity()))
        await self._load_circuits()
        started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._runner = asyncio.create_task(self._run(started), name="prooflane-engine")
        await started
        self._admission.resume()

    async def _load_circuits(self, attempts: int = 3) -> None:
        """Prepare the kinds' keys and read the registered circuits: the pool's first work. A pool process
        that dies then (killed, out of memory) is the pool's fault, retried on a new pool; only when every
        attempt dies is it most likely the script that started the engine (see the message)."""
        for attempt in range(1, attempts + 1):
            try:
                await self._circuits.load()
                return
            except PoolProcessDied as exc:
                if attempt < attempts:
                    log.warning("a synthesis process died while the engine started (%s): trying again", exc)
                    continue
                raise PoolProcessDied(
                    f"{exc}, {attempts} times while the engine started. If a script starts the engine, the "
                    'code that starts it must run under `if __name__ == "__main__":`, since the pool\'s '
                    "processes import the script (the process's own error is printed above); otherwise the "
                    "machine may be out of memory or processes"
                ) from None

    async def stop(self) -> None:
        """Stop accepting jobs, cancel the pipeline's tasks, end every worker. Jobs in flight stay in the
        journal unfinished and resume at the next start."""
        self.ready = False
        self._pipeline.stopping = True  # from here on health says "stopping", not "starting"
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # a failure is in self.failure
                await self._runner
            self._runner = None
        for worker in self._devices.workers.values():
            worker.on_death = None  # ended by the engine's stop: not a death to report
            worker.kill()
        await self._backend.stop()
        if self._pipeline.store is not None:
            self._pipeline.store.close()
            self._pipeline.store = None

    async def _run(self, started: asyncio.Future[None]) -> None:
        cfg = self.config
        try:
            async with asyncio.TaskGroup() as tg:
                self._pipeline.tg = tg
                slots = [(name, i) for name in cfg.devices for i in range(cfg.workers_per_device)]
                ready = [asyncio.Event() for _ in slots]
                for (name, i), event in zip(slots, ready, strict=True):
                    device = self._backend.device(name)
                    tg.create_task(
                        self._devices.supervise(f"{name}/w{i}", device, event), name=f"{name}/w{i}"
                    )
                for event in ready:
                    await event.wait()
                tg.create_task(self._dispatcher.run(), name="dispatcher")
                tg.create_task(self._health_log.run(), name="health log")
                tg.create_task(self._circuits.keys.run(), name="key files")
                tg.create_task(self._check_journal_often(), name="journal check")
                started.set_result(None)
        except BaseException as exc:
            self.ready = False
            if not isinstance(exc, asyncio.CancelledError):
                self.failure = _root_cause(exc)
                log.critical("the engine stopped: %s", self.failure, exc_info=exc)
            if not started.done():
                started.set_exception(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
            raise

    async def until_failed(self) -> BaseException:
        """Wait until the pipeline stops on its own (an error of the engine's own); return that error.

        A daemon waits on this beside its server so that an engine that can no longer work ends the
        process (for its supervisor to restart) instead of answering as if it were fine.
        """
        assert self._runner is not None, "the engine is not running"
        with contextlib.suppress(BaseException):
            await asyncio.shield(self._runner)
        if self.failure is None:
            raise asyncio.CancelledError("the engine was stopped")
        return self.failure

    # -- jobs -----------------------------------------------------------------------------------------

    async def submit(self, req: JobRequest) -> str:
        """Journal a job and queue its partitions; return its id.

        Idempotent on ``req.job_id``: resubmitting an id returns it without a new job (a different request
        under the same id is refused: ``Conflict``). Raises a :class:`~prooflane.errors.Refused`:
        ``NotFound`` (an unknown kind or circuit), ``Invalid`` (a bad sector, witness or randomness),
        ``Forbidden`` (a file outside the allowed roots), ``TooLarge`` (a partition larger than the whole
        memory budget), ``Unavailable`` (not started), ``StorageFull`` (the journal cannot be written).
        """
        if not self.ready:
            raise Unavailable("the engine is not running: start it first")
        with self._journalling("no job is accepted"):
            return await self._admission.submit(req)

    async def submit_upload(
        self, circuit: str, parts: UploadParts, *, job_id: str | None = None, priority: str | None = None
    ) -> str:
        """Journal a job of kind ``circom`` on the registered ``circuit`` whose witnesses come in ``parts``
        (an upload: one part ``wtns`` per partition, in order), and queue it; return its id.

        Each .wtns is streamed into ``<data_dir>/witnesses/`` and checked as a named file is (at most 32
        bytes a wire plus 4 KiB, its header's wire count the circuit's), all together at most
        ``max_circuit_bytes``; the files are removed once no unfinished job names them, and a refused
        upload leaves none. Idempotent on ``job_id`` (the same witnesses again are the same job). Raises
        what :meth:`submit` raises, and ``TooLarge`` past a limit, ``StorageFull`` on a full disk.
        """
        if not self.ready:
            raise Unavailable("the engine is not running: start it first")
        with self._journalling("no job is accepted"):
            return await self._admission.submit_upload(circuit, parts, job_id=job_id, priority=priority)

    def _refuse_without_journal(self, what: str) -> None:
        """507 while the journal cannot be written (a disk that is full)."""
        if (problem := self._pipeline.journal_problem) is not None:
            raise StorageFull(f"{what}: {problem}")

    @contextlib.contextmanager
    def _journalling(self, what: str) -> Iterator[None]:
        """A change the journal must record: refused (507) while it cannot be written; a write that fails
        is remembered, so health says so from then on, and answered 507 (``what``: what did not happen)."""
        self._refuse_without_journal(what)
        try:
            yield
        except JournalUnwritable as exc:
            self._pipeline.journal_failed(exc)
            raise StorageFull(f"{what}: {exc}") from None

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """A read of the journal: one that fails (a damaged page, a proof changed on disk) is remembered, so
        health says so from then on, and raised for the request's answer."""
        try:
            yield
        except JournalUnreadable as exc:
            if self._pipeline.journal_unreadable is None:
                log.error("%s", exc)
                self._pipeline.journal_unreadable = str(exc)
            raise

    def job(self, job_id: str) -> JobView | None:
        """The job's state and per-partition states, or None when no such job was ever accepted."""
        if (job := self._pipeline.jobs.get(job_id)) is not None:
            return live_view(job)
        journal = self._pipeline.journal
        with self._reading():
            record = journal.job(job_id)
            return None if record is None else journal_view(journal, record)

    def jobs(self, state: str | None = None, limit: int = 100, before: str | None = None) -> list[JobView]:
        """Jobs from the journal, newest first, optionally only those in ``state`` (a JobState value): at most
        ``limit`` (up to ``MAX_JOBS_PAGE``), journalled before the job ``before`` when given (the next page
        after the last job of one). No proof is read: a page costs one read of its jobs and one of their
        partitions' states. Raises ``Invalid`` for an unknown state, ``NotFound`` for an unknown job."""
        if state is not None and state not in {s.value for s in JobState}:
            raise Invalid(f"state {state!r}: expected one of {', '.join(s.value for s in JobState)}")
        journal, live = self._pipeline.journal, self._pipeline.jobs
        after = None
        if before is not None:
            if (known := journal.job(before)) is None:
                raise NotFound(f"before={before!r}: no such job")
            after = known.seq
        with self._reading():
            records = journal.jobs(state, max(1, min(limit, MAX_JOBS_PAGE)), before=after)
            stored = journal.partition_states_of([r.job_id for r in records if r.job_id not in live])
        return [
            live_view(live[r.job_id]) if r.job_id in live else journal_view(journal, r, stored[r.job_id])
            for r in records
        ]

    async def wait_proof(self, job_id: str, timeout: float) -> JobProof | None:  # noqa: ASYNC109
        """The job's verified proofs once it is done, waiting up to ``timeout`` seconds.

        Returns None if it is not done by then. Raises ``NotFound`` for an unknown job and ``Conflict``
        for a job that failed or was cancelled, with its error.
        """
        job = self._pipeline.jobs.get(job_id)
        if job is not None and not job.state.terminal and timeout > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await job.ended.wait()
        journal = self._pipeline.journal
        with self._reading():
            record = journal.job(job_id)
            if record is None:
                raise NotFound(f"no job {job_id!r}")
            if record.state in (JobState.FAILED, JobState.CANCELLED):
                raise Conflict(f"job {job_id} {record.state}: {record.error or 'no proof'}")
            if record.state != JobState.DONE:
                return None
            stored = journal.partitions(job_id)  # each proof checked against its digest
        parts = [PartitionProof(index=p.index, proof=p.proof or {}, public=p.public or []) for p in stored]
        return JobProof(job_id=job_id, kind=record.kind, partitions=parts)

    async def cancel(self, job_id: str) -> bool:
        """Cancel a job at any stage, freeing its reservations; False when it was already finished.

        Raises ``NotFound`` for an unknown job.
        """
        job = self._pipeline.jobs.get(job_id)
        if job is None:
            if self._pipeline.journal.job(job_id) is None:
                raise NotFound(f"no job {job_id!r}")
            return False
        if job.state.terminal:
            return False
        self._refuse_without_journal("no job is cancelled")
        self._pipeline.end_job(job, JobState.CANCELLED, "cancelled by request")
        return True

    # -- kinds and circuits ---------------------------------------------------------------------------

    def kinds(self) -> list[KindInfo]:
        """Every proof kind this engine proves (the built-in ones, then ``circom``)."""
        return self._circuits.kinds()

    def verification_key(self, kind: str, circuit: str | None = None) -> dict[str, Any]:
        """The snarkjs verification_key.json of ``kind`` (for ``circom``, of the registered ``circuit``).

        Raises ``NotFound`` for an unknown kind or circuit.
        """
        return self._circuits.verification_key(kind, circuit)

    async def register_circuit(
        self, name: str, zkey_path: Path, *, wasm_path: Path | None = None, priority: str = "normal"
    ) -> CircuitInfo:
        """Register a circom circuit for kind ``circom``: its snarkjs .zkey and optionally its circom
        witness generator (.wasm), copied into the data folder so the registration survives restarts.

        Jobs then name it in ``circuit`` and give one witness per partition. Re-registering a name with the
        same files is a no-op; with different files it is refused (``Conflict``). Raises ``Invalid`` for a
        file that is missing or not a Groth16 .zkey, ``Forbidden`` for one outside the allowed roots.
        """
        with self._journalling("no circuit is registered"):
            try:
                return await self._circuits.register(name, zkey_path, wasm_path=wasm_path, priority=priority)
            except OSError as exc:  # copying its files into the data folder (nothing of it is kept)
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise StorageFull(
                        f"no circuit is registered: the disk is full ({exc.strerror}): nothing was kept"
                    ) from None
                raise

    async def register_upload(
        self, name: str, parts: UploadParts, *, digest: str | None = None, priority: str = "normal"
    ) -> CircuitInfo:
        """Register a circom circuit from an upload: ``parts`` holds a part ``zkey`` and optionally then a
        part ``wasm``, streamed into a new folder of the data folder (never held whole), checked as
        :meth:`register_circuit` checks files (the same limits, the key inspected, the .wasm against it).

        ``digest``: the SHA-256 (hex) the client computed of the .zkey followed by the .wasm (or by ``-``
        without one); a mismatch is ``Invalid``. Both files together are at most ``max_circuit_bytes``
        (``TooLarge``). The same name and digest again are the circuit registered; other files under a
        taken name are ``Conflict``. A cut, refused or failed upload leaves nothing; a full disk is
        ``StorageFull``.
        """
        if not self.ready:
            raise Unavailable("the engine is not running: start it first")
        with self._journalling("no circuit is registered"):
            return await self._circuits.register_upload(name, parts, digest=digest, priority=priority)

    def circuits(self) -> list[CircuitInfo]:
        """The registered circom circuits."""
        return self._circuits.infos()

    # -- what it is doing -----------------------------------------------------------------------------

    def snapshot(self) -> StatusSnapshot:
        """A frozen, consistent view of everything (``GET /status``)."""
        return self._pipeline.tracker.snapshot(*self._engine_reasons())

    def totals(self) -> TrackerTotals:
        """Counters since boot and gauges now (``GET /metrics``)."""
        return self._pipeline.tracker.totals(*self._engine_reasons())

    def health(self) -> Health:
        """Whether the daemon can do its work now, and if not, why (``GET /healthz``, ``status --check``):
        every device has a live worker, the queue is not stalled, the pipeline is running."""
        return self._pipeline.tracker.health(*self._engine_reasons())

    def _health_to_log(self) -> Health | None:
        """Health for the log: None unless the engine is ready (starting and stopping are not changes to
        log, and an engine that stopped on its own has said so, critical)."""
        return self.health() if self.ready else None

    def _engine_reasons(self) -> tuple[str, ...]:
        if self.failure is not None:
            return (f"the engine stopped: {self.failure}",)
        if not self.ready:
            return ("stopping",) if self._pipeline.stopping else ("starting",)
        journal = self._pipeline.journal_problem
        reasons = [f"{journal}: new jobs are refused (507) and no partition starts"] if journal else []
        if (unreadable := self._pipeline.journal_unreadable) is not None:
            reasons.append(f"{unreadable} (restore the journal from a copy, or start on a new data folder)")
        reasons += [
            f"device {name} has no live worker ({why})"
            for name, why in self._devices.devices_without_live_worker().items()
            if name not in self._pipeline.tracker.health().devices_down  # not yet posted: said here
        ]
        reasons += self._devices.hung()
        reasons += self._dispatcher.overdue()
        reasons += self._circuits.keys.problems()
        stalled = self._pipeline.stalled(*self._devices.busy())
        return (*reasons, stalled) if stalled else tuple(reasons)

    def check_journal(self) -> list[str]:
        """Compare the live view with the journal now, every job (:mod:`prooflane.engine.journal_check`):
        where they disagree, in words, kept in the snapshots (invariant violations, a reason against health)
        until the next comparison, and counted. The engine also does this every ``CHECK_SECS``, in slices
        (:meth:`_check_journal_often`)."""
        pipeline = self._pipeline
        with self._reading():
            found = against_journal(pipeline.tracker.records, pipeline.journal, len(pipeline.pending))
        self._journal_checked(found)
        return found

    def _journal_checked(self, found: list[str]) -> None:
        pipeline = self._pipeline
        if tuple(found) != pipeline.tracker.records.journal_disagreements:
            if found:
                log.error("the live view disagrees with the journal: %s", "; ".join(found))
            pipeline.post(ev.JournalChecked(at=pipeline.clock(), disagreements=tuple(found)))
        pipeline.tracker.journal_checked()

    async def _check_journal_often(self) -> None:
        """Every ``CHECK_SECS``: the jobs that changed since they last agreed with the journal (every job at
        every ``FULL_CHECK_EVERY``-th time), ``CHECK_SLICE`` of them a turn, each within one turn; then the
        queue, in one."""
        agreed: dict[str, int] = {}  # job id -> the version at which it last agreed with the journal
        for count in itertools.count(1):
            await asyncio.sleep(CHECK_SECS)
            if not self.ready:
                continue
            if count % FULL_CHECK_EVERY == 0:
                agreed.clear()
            with contextlib.suppress(JournalUnreadable):  # said in health already
                self._journal_checked(await self._check_in_slices(agreed))

    async def _check_in_slices(self, agreed: dict[str, int]) -> list[str]:
        pipeline = self._pipeline
        records = pipeline.tracker.records
        for gone in [job_id for job_id in agreed if job_id not in records.jobs]:
            del agreed[gone]
        todo = [job_id for job_id, job in records.jobs.items() if agreed.get(job_id) != job.version]
        found: list[str] = []
        for start in range(0, len(todo), CHECK_SLICE):
            jobs = [records.jobs[j] for j in todo[start : start + CHECK_SLICE] if j in records.jobs]
            with self._reading():
                found += jobs_against_journal(jobs, pipeline.journal, agreed)
            await asyncio.sleep(0)  # the next slice in a later turn: /status and /healthz answer between
        with self._reading():
            found += queue_against_journal(records, pipeline.journal, len(pipeline.pending))
        return found

    def subscribe(self, last_event_id: int | None = None) -> Subscription:
        """The event stream (``GET /v1/events``), resumed after ``last_event_id`` when given."""
        return self._pipeline.tracker.subscribe(last_event_id)

    @property
    def boot_id(self) -> str:
        """This run of the engine (a new one at every start): what event ids and snapshots carry."""
        return self._pipeline.tracker.boot_id

    @property
    def seq(self) -> int:
        """The tracker's event count: the id of the newest event (``GET /status`` gives it as ``seq``)."""
        return self._pipeline.tracker.seq

    def workers(self) -> list[WorkerInfo]:
        """The device workers and their process ids."""
        return [w.info() for w in self._devices.workers.values()]

    @property
    def backend(self) -> DeviceBackend:
        """Where the work runs."""
        return self._backend

    @property
    def budget(self) -> MemoryBudget:
        """The memory budget (read its ``stats()``; never change it from outside)."""
        return self._pipeline.budget


def _root_cause(exc: BaseException) -> BaseException:
    """The first error inside a task group's exception group (the one that stopped the others)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
