"""The device loop: one supervised slot per configured worker, proving ready partitions one at a time.

Per slot: ask the backend for a worker, start it, feed it partitions from the ready queue (the device
section under its device's lock, then a finalizer task while it takes the next partition), and when the
worker dies, retry every partition it held, release its keys, and start a new one with backoff. A worker
that cannot be brought back is reported lost and tried again later; the engine itself never stops for it.

Every lease the engine grants carries a token; a finalizer's result is applied only while its partition
still holds the lease it was proven under, so a late result of a retried partition changes nothing.

A device with memory of its own (a ``cuda`` device) has a budget of its own, a :class:`MemoryBudget` that
names the device: each worker's resident key bases are cached allocations in it, and each partition's
device section a reservation, admitted before the partition is staged (so before its lease) and released
the moment its device section ends. A partition that could never fit the device fails, naming both sizes.
A device that fails in a device section (a CUDA error) is treated as a dead worker: it is replaced, and
the partition is tried again, blamed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
import weakref
from collections.abc import Awaitable
from typing import Any

from .. import events as ev
from ..devices.backend import (
    OWN_SYNTHESIS,
    Device,
    DeviceBackend,
    DeviceFault,
    DeviceWorker,
    RemoteError,
    WorkerDied,
    WorkerInfo,
)
from ..errors import Unavailable
from ..kinds import CircuitMeta, SynthesisTask, synthesize_partition
from ..memory import CachedAllocation, MemoryBudget, Reservation
from ..states import JobState, PartitionState
from . import logbook
from .keyfiles import KeyFiles
from .pipeline import Pipeline
from .records import PartitionRun
from .tables import counted_up_front

__all__ = ["DeviceLoop"]

P = PartitionState
MAX_FAILED_STARTS = 3  # consecutive failed starts before a worker is reported lost
MAX_BACKOFF_SECS = 30.0


class DeviceLoop:
    """The configured workers and what each holds."""

    def __init__(self, pipeline: Pipeline, backend: DeviceBackend, key_files: KeyFiles) -> None:
        self._pipeline = pipeline
        self._backend = backend
        self._key_files = key_files
        self._minter = ev.LeaseMinter()
        self.workers: dict[str, DeviceWorker] = {}  # worker id -> its current worker
        self._held: dict[DeviceWorker, set[PartitionRun]] = {}  # staged..finalizing, per worker
        self._keys: dict[tuple[DeviceWorker, str], CachedAllocation] = {}  # (worker, key path) -> allocation
        self._staging: dict[str, tuple[str, float]] = {}  # worker id -> (partition, since): not yet leased
        self._reported: weakref.WeakSet[DeviceWorker] = weakref.WeakSet()  # deaths already posted
        self.device_budgets: dict[str, MemoryBudget] = {}  # device -> its memory (devices that have some)
        self._device_keys: dict[tuple[DeviceWorker, str], CachedAllocation] = {}  # resident bases
        self._admitting: dict[str, asyncio.Lock] = {}  # device -> one admission at a time (no deadlock)
        self._mapped: set[tuple[DeviceWorker, str]] = set()  # (worker, key path) told to map its tables

    async def supervise(self, worker_id: str, device: Device, registered: asyncio.Event) -> None:
        """Keep one worker slot filled: start a worker, run it, replace it when it dies."""
        failures = 0
        died: float | None = None  # when the slot's last worker died (monotonic), until one answers again
        while True:
            started = time.monotonic()
            worker, info, exc = await self._start(worker_id, device)
            if worker is None:
                assert exc is not None
                failures += 1
                if failures >= MAX_FAILED_STARTS and not registered.is_set():
                    raise RuntimeError(f"worker {worker_id} cannot start: {exc}") from None
                backoff = min(MAX_BACKOFF_SECS, 0.25 * 2**failures)
                if failures == MAX_FAILED_STARTS:  # shown lost; tried again, less and less often
                    logbook.worker_lost(info, str(exc), failures)
                    self._pipeline.post(
                        ev.WorkerLost(
                            at=self._pipeline.clock(), worker_id=worker_id, reason=str(exc),
                            device=device.name, device_kind=device.kind, node=device.node,
                        )
                    )  # fmt: skip
                else:
                    lost = failures > MAX_FAILED_STARTS
                    logbook.worker_start_failed(info, str(exc), failures, backoff, lost=lost)
                await asyncio.sleep(backoff)
                continue
            now = time.monotonic()
            down = None if died is None else now - died
            logbook.worker_started(worker.info(), now - started, down, failures)
            failures, died = 0, None
            self._pipeline.post(
                ev.WorkerRegistered(
                    at=self._pipeline.clock(),
                    worker_id=worker_id,
                    device=device.name,
                    device_kind=device.kind,
                    node=device.node,
                )
            )
            self._budget_device(worker)
            registered.set()
            worker.on_death = functools.partial(self._report_death, worker)
            self._worker_died(worker, await self._run(worker))
            died = time.monotonic()

    async def _start(
        self, worker_id: str, device: Device
    ) -> tuple[DeviceWorker | None, WorkerInfo, WorkerDied | None]:
        """A new worker of the slot, its ids, and, when it could not be made or started, why. Any failure is
        the worker's, never the engine's (no file descriptor left for its pipes, EMFILE; a forkserver that
        cannot start; a backend's bug alike): the slot is tried again with backoff."""
        try:
            worker = self._backend.new_worker(worker_id, device)
        except Exception as exc:
            unmade = WorkerInfo(worker_id, device.name, None, None)
            return None, unmade, WorkerDied(f"{worker_id} could not be made: {_said(exc)}")
        self.workers[worker_id] = worker
        self._held[worker] = set()
        try:
            await worker.start()
        except Exception as exc:
            reason = str(exc) if isinstance(exc, WorkerDied) else f"{worker_id} could not start: {_said(exc)}"
            self._worker_died(worker, reason, registered=False)
            return None, worker.info(), WorkerDied(reason)
        return worker, worker.info(), None

    def hung(self) -> list[str]:
        """Workers that have staged a partition (loaded its key, received its data) for longer than
        ``stall_secs`` without answering: the step before the lease, which the tracker cannot see (it
        watches the device sections and finalizations themselves)."""
        now, limit = self._pipeline.clock(), self._pipeline.config.stall_secs
        return [
            f"worker {worker_id} has been staging {name} for {now - since:.0f} s, longer than stall_secs "
            f"({limit:g} s): its prover does not answer"
            for worker_id, (name, since) in sorted(self._staging.items())
            if now - since > limit and not self.workers[worker_id].dead
        ]

    def devices_without_live_worker(self) -> dict[str, str]:
        """Devices none of whose workers is alive now, as the backend knows it, each with why.

        A worker's death is known here the moment its backend notices it (a process's pidfd), a few turns of
        the event loop before the supervisor posts ``WorkerDied``: health asks this too, so it never says
        ok in between.
        """
        by_device: dict[str, list[DeviceWorker]] = {}
        for worker in self.workers.values():
            by_device.setdefault(worker.device.name, []).append(worker)
        return {
            name: "; ".join(f"{w.worker_id}: {w.death or 'a process of it ended'}" for w in workers)
            for name, workers in by_device.items()
            if all(w.dead for w in workers)
        }

    def busy(self) -> tuple[int, int]:
        """(workers holding a partition, live workers)."""
        live = [w for w in self.workers.values() if not w.dead]
        return sum(bool(self._held.get(w)) for w in live), len(live)

    async def _run(self, worker: DeviceWorker) -> str:
        """Feed the worker until it dies; return why. An error of the engine's own is raised."""
        work = asyncio.create_task(self._work(worker), name=f"work {worker.worker_id}")
        death = asyncio.create_task(worker.wait_dead(), name=f"death {worker.worker_id}")
        try:
            await asyncio.wait({work, death}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            work.cancel()
            death.cancel()
            await asyncio.gather(work, death, return_exceptions=True)
        if not work.cancelled() and (exc := work.exception()) is not None:
            if not isinstance(exc, WorkerDied):
                raise exc
            worker.die(str(exc))
        return worker.death or "its processes ended"

    async def _work(self, worker: DeviceWorker) -> None:
        """Prove partitions one after another: device section under the lock, then hand to the finalizer
        (or, for a worker that finishes itself, finish it before the next; such a worker also synthesizes
        the built-in partitions it proves, :meth:`_own_synthesis`)."""
        pipeline = self._pipeline
        while True:
            part, own = await self._next_for(worker)
            pipeline.kick.set()  # a ready slot freed: the dispatcher may synthesize the next partition
            if not part.live:
                pipeline.release(part)
                continue
            held = self._held[worker]
            held.add(part)
            part.worker_id = worker.worker_id
            try:  # the key's file is there, as the daemon accepted it (a stat)
                await self._key_files.ensure(part.job.meta)
            except Unavailable as exc:
                self._fail_held(worker, part, str(exc))
                continue
            allocation = await self._key_for(worker, part.job.meta)
            allocation.use()
            if own and not await self._own_synthesis(worker, part):
                allocation.done()
                continue
            try:
                on_device = await self._admit(worker, part)
            except _NeverFits as exc:
                allocation.done()
                self._fail_held(worker, part, str(exc))
                continue
            if part not in held:  # the worker died meanwhile: the death decided the partition (retried)
                allocation.done()
                if on_device is not None:
                    on_device[0].done()
                    on_device[1].release()
                worker.check_alive()
                continue
            grant = functools.partial(self._grant, worker, part)
            self._staging[worker.worker_id] = (part.name, pipeline.clock())  # until the lease is granted
            try:
                result = await worker.prove(part.job.meta.key_path, part.synthesized, grant, part.name)
            except (
                DeviceFault
            ) as exc:  # its context may be lost: replaced as if it died, the partition blamed
                reason = f"device {worker.device.name} failed in the device section of {part.name}: {exc}"
                worker.die(reason, frozenset([part.name]))
                raise WorkerDied(reason) from None
            except RemoteError as exc:
                allocation.done()
                self._fail_held(worker, part, f"prove_start failed: {exc}")
                continue
            finally:
                self._staging.pop(worker.worker_id, None)
                if on_device is not None:  # the device section is over (or never ran): its memory is free
                    on_device[0].done()
                    on_device[1].release()
            if part not in held:  # the worker died as its device section ended: the death decided it
                allocation.done()
                worker.check_alive()
                continue
            part.synthesized = None
            if result is None or not part.live:  # the job ended meanwhile
                worker.check_alive()
                held.discard(part)
                allocation.done()
                pipeline.release(part)
                continue
            state, ms = result
            token = part.token
            assert token is not None
            part.move(P.FINALIZING)
            if part.reservation is not None:
                part.reservation.shrink(part.job.meta.abc_bytes)
            pipeline.post(ev.DeviceSectionFinished(at=pipeline.clock(), token=token, prove_ms=ms))
            finishing = pipeline.spawn(
                self._finalize(worker, part, token, state, allocation), f"finalize {part.name}"
            )
            if worker.finishes_itself:  # the next partition waits in the queue, free for any worker
                await asyncio.wait({finishing})

    async def _next_for(self, worker: DeviceWorker) -> tuple[PartitionRun, bool]:
        """The next partition for ``worker`` and whether it synthesizes it itself: a synthesized one from
        the ready queue; or, for a worker that synthesizes its own, the one the dispatcher hands it (it
        waits in ``Pipeline.takers`` until either comes)."""
        pipeline = self._pipeline
        if not worker.finishes_itself or not pipeline.own_synthesis:
            _, part = await pipeline.ready.get()
            return part, False
        while True:
            if pipeline.ready:
                return pipeline.ready.pop()[1], False
            handed: asyncio.Future[PartitionRun] = asyncio.get_running_loop().create_future()
            pipeline.takers.append((worker.worker_id, handed))
            pipeline.kick.set()
            ready = asyncio.ensure_future(pipeline.ready.wait_change())
            waited: set[asyncio.Future[Any]] = {handed, ready}
            try:
                await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:
                if handed.done() and not handed.cancelled():  # handed as the worker stopped: back it goes
                    pipeline.retry(handed.result(), f"{worker.worker_id} stopped", blame=False)
                raise
            finally:
                ready.cancel()
                if not handed.done():
                    handed.cancel()  # the dispatcher drops it from the takers
            if not handed.cancelled():
                return handed.result(), True

    async def _own_synthesis(self, worker: DeviceWorker, part: PartitionRun) -> bool:
        """``worker`` synthesizes ``part`` (handed to it, synthesizing) in its own process, kept there for its
        device section; False when the partition is decided otherwise (it failed, its job ended, the worker
        died: the death retries it)."""
        pipeline = self._pipeline
        job = part.job
        task = SynthesisTask(
            job.job_id, part.index, job.meta.key_path, job.inputs[part.index],
            pipeline.config.synthesis_key_cache_bytes,
        )  # fmt: skip
        self._staging[worker.worker_id] = (part.name, pipeline.clock())  # a hung synthesis is seen too
        try:
            ms = await worker.synthesize_own(synthesize_partition, task, part.name)
        except RemoteError as exc:
            if part in self._held[worker]:
                reason = str(exc)
                pipeline.post(
                    ev.SynthesisFailed(
                        at=pipeline.clock(), job_id=job.job_id, partition=part.index, reason=reason,
                        attempt=part.attempt,
                    )
                )  # fmt: skip
                self._fail_held(worker, part, f"synthesis failed: {reason}")
            return False
        finally:
            self._staging.pop(worker.worker_id, None)
        if part not in self._held[worker]:  # the worker died meanwhile: the death decided the partition
            return False
        if not part.live:  # its job ended meanwhile
            self._held[worker].discard(part)
            pipeline.release(part)
            return False
        pipeline.post(
            ev.SynthesisFinished(
                at=pipeline.clock(),
                job_id=job.job_id,
                partition=part.index,
                synth_ms=ms,
                attempt=part.attempt,
            )
        )
        part.move(P.SYNTHESIZED)
        part.synthesized = OWN_SYNTHESIS
        return True

    def _grant(self, worker: DeviceWorker, part: PartitionRun) -> bool:
        """Under the device lock: lease the partition to the worker, unless its job ended or it died."""
        self._staging.pop(worker.worker_id, None)  # from here the tracker watches the lease
        if not part.live or worker.dead:
            return False
        pipeline = self._pipeline
        token = self._minter.mint()
        part.token = token
        part.move(P.PROVING)
        pipeline.post(
            ev.LeaseGranted(
                at=pipeline.clock(), token=token, worker_id=worker.worker_id, device=worker.device.name,
                job_id=part.job.job_id, partition=part.index, attempt=part.attempt,
            )
        )  # fmt: skip
        return True

    async def _finalize(
        self, worker: DeviceWorker, part: PartitionRun, token: ev.LeaseToken, state: Any,
        allocation: CachedAllocation,
    ) -> None:  # fmt: skip
        pipeline = self._pipeline
        try:
            finished = await worker.finish(part.job.meta.key_path, state, part.name)
        except WorkerDied:
            return  # the worker's supervisor retries everything it held, this partition included
        except RemoteError as exc:
            allocation.done()
            if part.token == token:
                self._fail_held(worker, part, f"prove_finish failed: {exc}")
            return
        allocation.done()
        if not self._owns(worker, part, token):
            return  # retried meanwhile (its worker died): the new attempt owns it now
        self._held[worker].discard(part)
        if not part.live:
            pipeline.release(part)
            return
        if not finished.verified:
            pipeline.post(
                ev.PartitionFailed(
                    at=pipeline.clock(), job_id=part.job.job_id, partition=part.index,
                    reason="proof did not verify", token=token,
                )
            )  # fmt: skip
            pipeline.fail_partition(part, "its proof did not verify")
            return
        if not pipeline.write(
            lambda j: j.save_proof(part.job.job_id, part.index, finished.proof, finished.public)
        ):
            # Done means journalled: proven again once the journal takes writes (the dispatcher waits).
            pipeline.retry(
                part, f"its proof could not be journalled: {pipeline.journal_problem}", blame=False
            )
            return
        part.move(P.DONE)
        pipeline.release(part)
        pipeline.post(ev.FinalizeFinished(at=pipeline.clock(), token=token, finalize_ms=finished.ms))
        if all(p.state is P.DONE for p in part.job.partitions):
            pipeline.end_job(part.job, JobState.DONE, None)

    def _fail_held(self, worker: DeviceWorker, part: PartitionRun, reason: str) -> None:
        """The partition failed for good, unless the worker's death decided it first (it is not held then)."""
        held = self._held.get(worker, set())
        if part in held:
            held.discard(part)
            self._pipeline.fail_partition(part, reason)

    def _owns(self, worker: DeviceWorker, part: PartitionRun, token: ev.LeaseToken) -> bool:
        """Whether an answer made under ``token`` is still the partition's outcome: it holds that lease, and
        its worker's death (reported the moment the backend knew) has not decided it already."""
        return part.token == token and part in self._held.get(worker, ())

    async def _key_for(self, worker: DeviceWorker, meta: CircuitMeta) -> CachedAllocation:
        """The worker's cached allocation for ``meta``'s proving key, taking budget for it when new; with
        ``msm_tables = "auto"``, taken again with the key's tables once they are stored (``tables``)."""
        slot = (worker, meta.key_path)
        allocation = self._keys.get(slot)
        cpu = worker.device.kind == "cpu"
        if cpu:
            self._pipeline.tables.want(meta)
        if allocation is None or not allocation.live:
            # A cpu worker of a daemon with msm_tables = true keeps the key's tables from the start.
            up_front = counted_up_front(self._pipeline.config) and cpu
            allocation = await self._pipeline.budget.cache(
                self._key_name(worker, meta, up_front), meta.worker_key_bytes(up_front),
                functools.partial(self._forget_key, worker, meta.key_path),
            )  # fmt: skip
            self._keys[slot] = allocation
        if cpu and slot not in self._mapped and self._pipeline.tables.stored(meta):
            allocation = await self._map_tables(worker, meta, allocation)
        return allocation

    async def _map_tables(
        self, worker: DeviceWorker, meta: CircuitMeta, plain: CachedAllocation
    ) -> CachedAllocation:
        """The worker's key over its stored tables, its allocation taken again with their bytes, when those
        fit now (never waited for: else ``plain``, and tried again at the worker's next partition)."""
        slot, budget = (worker, meta.key_path), self._pipeline.budget
        evict = functools.partial(self._forget_key, worker, meta.key_path)
        plain.release()  # its bytes count as free for the larger one (in use or not: one key, one owner)
        need = meta.worker_key_bytes(True)
        # in free bytes only: the tables never evict another key
        fits = budget.total - budget.reserved - budget.cached >= need
        tabled = budget.try_cache(self._key_name(worker, meta, True), need, evict) if fits else None
        if tabled is not None:
            self._keys[slot] = tabled
            self._mapped.add(slot)
            if await worker.map_tables(meta.key_path):
                return tabled
            tabled.release()  # the worker keeps none (the files went, or it keeps no tables): as before
        again = await budget.cache(self._key_name(worker, meta, False), meta.key_alloc_bytes, evict)
        self._keys[slot] = again
        return again

    @staticmethod
    def _key_name(worker: DeviceWorker, meta: CircuitMeta, tables: bool) -> str:
        return ev.key_allocation(meta.key_name, worker.worker_id, tables=tables)

    def _forget_key(self, worker: DeviceWorker, key_path: str) -> None:
        """A budget evicted the worker's key (host or device memory): it leaves both, and the worker drops
        it (its processes' copies, its tables and its resident bases alike)."""
        self._mapped.discard((worker, key_path))
        for held in (
            self._keys.pop((worker, key_path), None),
            self._device_keys.pop((worker, key_path), None),
        ):
            if held is not None:
                held.release()  # the one being evicted is gone already: this frees only the other
        if not worker.dead and self._pipeline.tg is not None:
            self._pipeline.spawn(_quietly(worker.drop_key(key_path)), "drop key")

    def _budget_device(self, worker: DeviceWorker) -> None:
        """The device's memory budget, made when its first worker says how much memory it has (the config's
        ``device_memory_bytes`` instead, when set)."""
        name = worker.device.name
        if worker.memory_bytes is None or name in self.device_budgets:
            return
        pipeline = self._pipeline
        total = pipeline.config.device_memory_bytes or worker.memory_bytes
        self.device_budgets[name] = MemoryBudget(total, emit=pipeline.post, clock=pipeline.clock, device=name)

    async def _admit(
        self, worker: DeviceWorker, part: PartitionRun
    ) -> tuple[CachedAllocation, Reservation] | None:
        """On a device with a memory budget: the worker's key bases resident (cached, in use) and the
        partition's device section reserved, waiting for room (one admission per device at a time, so two
        never hold half of what each needs). None on a device without one. Raises ``_NeverFits``."""
        budget = self.device_budgets.get(worker.device.name)
        meta = part.job.meta
        if budget is None or (need := await worker.device_need(meta.key_path)) is None:
            return None
        key_bytes, section_bytes = need
        if not budget.could_ever_fit(key_bytes + section_bytes):
            raise _NeverFits(
                f"it needs {key_bytes + section_bytes:,} bytes of device memory ({key_bytes:,} for the key's "
                f"bases, {section_bytes:,} for the device section); device {worker.device.name} has "
                f"{budget.total:,}"
            )
        async with self._admitting.setdefault(worker.device.name, asyncio.Lock()):
            slot = (worker, meta.key_path)
            resident = self._device_keys.get(slot)
            if resident is None or not resident.live:
                name = f"key:{meta.key_name}@{worker.worker_id}"
                evict = functools.partial(self._forget_key, worker, meta.key_path)
                resident = self._device_keys[slot] = await budget.cache(name, key_bytes, evict)
            resident.use()
            try:
                return resident, await budget.reserve(part.name, section_bytes)
            except BaseException:
                resident.done()
                raise

    def _report_death(self, worker: DeviceWorker, reason: str) -> None:
        """Say (log and tracker) that a registered worker died, and decide at once what becomes of every
        partition it holds: once, as soon as its backend knows (the same turn of the event loop).

        Deciding here, not when the worker's tasks have wound down, is what keeps the journal and the live
        view together: the tracker ends the dead worker's leases now, so an answer of its finalizer that
        reaches the engine after this (made just before the death) must find its partition decided already
        (retried), and be discarded, rather than be journalled done under a lease the tracker has dropped.
        """
        if worker in self._reported:
            return
        self._reported.add(worker)
        pipeline = self._pipeline
        held = len(self._held.get(worker, ()))
        logbook.worker_died(worker.info(), reason, held, stopping=pipeline.stopping)
        pipeline.post(ev.WorkerDied(at=pipeline.clock(), worker_id=worker.worker_id, reason=reason))
        self._retry_held(worker, reason)

    def _worker_died(self, worker: DeviceWorker, reason: str, *, registered: bool = True) -> None:
        """The worker is gone: free its keys, retry every partition it still holds (what it took after its
        death was reported, or everything when it was never registered)."""
        worker.kill()
        for keys in (self._keys, self._device_keys):
            for slot in [s for s in keys if s[0] is worker]:
                keys.pop(slot).release()
        self._mapped = {slot for slot in self._mapped if slot[0] is not worker}
        if registered:
            self._report_death(worker, reason)
        self._retry_held(worker, reason)
        self._held.pop(worker, None)

    def _retry_held(self, worker: DeviceWorker, reason: str) -> None:
        """The dead worker no longer holds anything: each live partition it held is retried (blaming only
        those whose own work ran where it died, when its backend can tell); the others are released."""
        held = self._held.get(worker)
        if not held:
            return
        parts = sorted(held, key=lambda p: p.key)
        held.clear()  # from here on, nothing the worker's tasks hand back is the outcome of these
        pipeline = self._pipeline
        culprits = worker.culprits
        for part in parts:
            if part.live:
                blame = culprits is None or part.name in culprits
                pipeline.retry(part, f"worker {worker.worker_id} died: {reason}", blame=blame)
            else:
                pipeline.release(part)


class _NeverFits(Exception):
    """Raised when a partition needs more of a device's memory than the device has."""


async def _quietly(call: Awaitable[None]) -> None:
    with contextlib.suppress(WorkerDied, RemoteError):
        await call


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
