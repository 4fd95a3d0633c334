"""The ``process`` backend: a prover and a finalizer process per worker, and a process pool for synthesis.

A ``cpu`` device is one core's worth of proving; on a ``cuda`` device the prover runs the device section on
the GPU it is told of (:mod:`.cuda`), with everything else the same. Each device has ``workers_per_device``
workers that share its lock; the lock covers only ``prove_start`` (the device section). A worker is two
processes:

- the *prover* stages the next partition (unpickles it, loads its key) outside the lock, then runs
  ``prove_start`` under it;
- the *finalizer* runs ``prove_finish`` and verifies the partition proof.

Why a separate finalizer process, not a thread: the C extension releases the GIL in its MSMs, so a thread
would overlap there too, but the libraries' MSMs (zksnake's BN254 ones, where the extension is not used)
hold it, so a finalizer thread would serialize with the next ``prove_start``; and a finalizer that dies
(a library's panic, a key's pages gone) takes no staged partition with it. A sibling process per worker
(rather than one per device) keeps a worker's keys and its finalizer together: with the extension both map
the same key file (the page cache holds its rows once), and a worker that dies takes down only its own
pair, whose partitions are retried elsewhere. Each process runs each MSM and NTT on the config's
``threads_per_call`` threads (``PROOFLANE_THREADS`` in its environment).

Each process is a :class:`~.child.ChildProcess` (followed through its pidfd, one request at a time); what
runs in it is :mod:`.in_child`; the synthesis pool is :class:`~.pool.SynthesisPool`.

The device lock lives in the parent (an ``asyncio.Lock``), not in shared memory: a process killed while
proving can never leave it held. Both processes keep every proving key they loaded until told to drop it,
without its coefficient matrices (only synthesis uses those).

The core budget (:class:`~.cores.CoreBudget`) is the parent's count of CPU-heavy steps running at once
across all workers and the synthesis pool (by default there is no limit). Each process names itself by its
:class:`~.roles.Role`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import multiprocessing
import os
import secrets
import shutil
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from multiprocessing.context import ForkServerContext
from typing import Any, TypeVar

from ..errors import WorkerDied
from ..shm import SHARED_ROOT, shared_folder
from .backend import Device, DeviceBackend, DeviceWorker, Finished, RemoteError, WorkerInfo
from .child import ChildProcess
from .cores import CoreBudget
from .cuda import device_index
from .in_child import finalizer_main, prover_main
from .parcel import Parcel, park, unpark
from .pool import SynthesisPool

__all__ = ["ProcessBackend", "ProcessWorker", "mp_context", "splits"]

T = TypeVar("T")
log = logging.getLogger("prooflane.engine")


def mp_context() -> ForkServerContext:
    """The process start method: forkserver (a clean, thread-free parent for every worker process)."""
    ctx = multiprocessing.get_context("forkserver")
    assert isinstance(ctx, ForkServerContext)
    ctx.set_forkserver_preload(["prooflane.groth16", "prooflane.kinds", "prooflane.devices"])
    return ctx


class ProcessBackend(DeviceBackend):
    """Workers as process pairs, synthesis in a process pool; all below the daemon's priority, and no
    more CPU-heavy steps at once than the core budget (``cores``; 0: no limit)."""

    name = "process"

    def __init__(
        self,
        *,
        pool_size: int,
        workers: int,
        niceness: int = 0,
        cores: int = 0,
        threads: int = 0,
        tables: bool = False,
        split_prove: bool | str = "auto",
    ) -> None:
        super().__init__()
        self._ctx = mp_context()
        self._split = split_prove  # "auto": a finalizer beside each cuda worker, none beside a cpu one
        self._niceness = niceness
        self._threads = threads  # each MSM's and NTT's threads in a worker (0: the prover's default)
        self._tables = tables  # workers keep fixed-base tables of their keys' bases (``msm_tables``)
        self.budget = CoreBudget(cores)
        self._io = ThreadPoolExecutor(max_workers=4 * workers + 4, thread_name_prefix="prooflane-io")
        # Processes are started in one thread of their own, off the event loop (see ChildProcess.start).
        self._starter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prooflane-start")
        # Lanes beyond the cores: a synthesis that runs long leaves its slot to other jobs while its process
        # goes on (engine/dispatch.py), until synthesis_timeout_secs ends it.
        most = max(pool_size, 2 * (os.cpu_count() or 1), 4)
        self._pool = SynthesisPool(
            self._ctx, pool_size, niceness, self.budget, self._starter, most, threads=threads
        )
        self.parcels: str | None = None  # the folder of synthesized partitions in shared memory
        self._parcel_problem = ""  # why parcels last travelled inline (logged once a cause)

    async def start(self) -> None:
        self.parcels = shared_folder()
        if self.parcels is None:
            log.warning(
                "synthesized partitions go through pipes: %s cannot hold a folder of them", SHARED_ROOT
            )
        self._pool.start()

    async def stop(self) -> None:
        self._pool.stop()
        self._io.shutdown(wait=False, cancel_futures=True)
        self._starter.shutdown(wait=False, cancel_futures=True)
        if self.parcels is not None:
            shutil.rmtree(self.parcels, ignore_errors=True)

    async def run(self, call: Callable[..., T], *args: Any) -> T:
        return await self._pool.run(call, *args)

    async def synthesize(
        self, call: Callable[[Any], tuple[Any, float]], task: Any, *, limit: float | None = None
    ) -> tuple[Any, float]:
        """As :meth:`DeviceBackend.synthesize` (past ``limit`` its process is ended and another takes its
        place), the partition coming back as a :class:`~.parcel.Parcel` in shared memory (inline, logged
        once a cause, where the folder cannot hold it)."""
        if self.parcels is None:
            return await self._pool.run(call, task, limit=limit)
        name = f"{secrets.token_hex(8)}.parcel"
        try:
            parcel, ms = await self._pool.run(_parked, self.parcels, name, call, task, limit=limit)
        except BaseException:  # its process may have been ended while it wrote the file
            unpark(self.parcels, name)
            raise
        parcel.claim()
        if parcel.problem and parcel.problem != self._parcel_problem:
            log.warning(
                "synthesized partitions go through pipes: %s cannot hold them (%s)",
                self.parcels, parcel.problem,
            )  # fmt: skip
        self._parcel_problem = parcel.problem
        return parcel, ms

    def new_worker(self, worker_id: str, device: Device) -> ProcessWorker:
        return ProcessWorker(
            worker_id,
            device,
            self._ctx,
            self._io,
            self._niceness,
            self.budget,
            starter=self._starter,
            threads=self._threads,
            tables=self._tables,
            finishes_itself=not splits(self._split, device.kind),
        )

    def own_synthesis(self, devices: tuple[str, ...]) -> bool:
        return bool(devices) and not any(splits(self._split, d.split(":")[0]) for d in devices)

    def pool_pids(self) -> list[int]:
        """The pool's process ids (for diagnostics and fault tests)."""
        return self._pool.pids()


class ProcessWorker(DeviceWorker):
    """One device worker: a prover and a finalizer process, and the keys they hold."""

    def __init__(
        self,
        worker_id: str,
        device: Device,
        ctx: ForkServerContext,
        io: ThreadPoolExecutor,
        niceness: int,
        budget: CoreBudget | None = None,
        *,
        starter: Executor | None = None,
        threads: int = 0,
        tables: bool = False,
        finishes_itself: bool = False,
    ) -> None:
        super().__init__(worker_id, device)
        self._budget = budget or CoreBudget(0)
        self._starter = starter or io
        self.finishes_itself = finishes_itself
        # Lower priority than the daemon: its event loop schedules the devices and answers /status.
        self.prover = ChildProcess(
            f"{worker_id} prover", prover_main, ctx, io, niceness, self._budget, threads=threads,
            tables=tables, extra=(finishes_itself,),
        )  # fmt: skip
        # Without a finalizer of its own, the prover finishes each partition itself (``finalizer`` is it).
        self.finalizer = self.prover
        if not finishes_itself:
            self.finalizer = ChildProcess(
                f"{worker_id} finalizer", finalizer_main, ctx, io, niceness, self._budget, threads=threads,
                tables=tables,
            )  # fmt: skip
        self._processes = tuple(dict.fromkeys((self.prover, self.finalizer)))
        self._pending: set[asyncio.Task[Any]] = set()  # requests nobody awaits (see _early_b2)
        # A partition's early G2 MSM and its finish each send the finalizer two requests (the key's load,
        # then the work); taking turns keeps each pair together, so the MSM is done before its finish.
        self._finalizer_turn = asyncio.Lock()
        # The keys each process has loaded: a key is loaded by a request of its own, so that a death while
        # it loads (most of a fresh worker's first partition of a kind) blames no partition.
        self._loaded: dict[ChildProcess, set[str]] = {process: set() for process in self._processes}
        self._needs: dict[str, tuple[int, int]] = {}  # key path -> its device bytes (a cuda device)

    def info(self) -> WorkerInfo:
        finalizer = None if self.finishes_itself else self.finalizer.pid
        return WorkerInfo(self.worker_id, self.device.name, self.prover.pid, finalizer)

    async def start(self) -> None:
        """Wait until its processes answer; from then on, any one ending makes the worker die."""
        try:
            await asyncio.gather(*(process.start(self._starter) for process in self._processes))
            await asyncio.gather(*(process.ping() for process in self._processes))
            self.memory_bytes = await self._device()
        except WorkerDied as exc:
            self.die(str(exc))
            raise
        for process in self._processes:
            process.watch(functools.partial(self._died, process))

    def _part_ended(self) -> bool:
        return any(process.exited for process in self._processes)

    async def prove(
        self, key_path: str, synthesized: Any, grant: Callable[[], bool], label: str = ""
    ) -> tuple[Any, float] | None:
        """As :meth:`DeviceWorker.prove`, with a slot of the core budget taken under the device lock and
        before ``grant()``: the lease starts when the device section can compute."""
        await self._stage(key_path, synthesized, label)
        async with self.device.lock, self._budget.slot():
            if not grant():
                return None
            if not self.finishes_itself:
                self._early_b2(key_path, synthesized, label)
            return await self._prove_start(label)

    async def _device(self) -> int | None:
        """Tell the prover its device (a ``cuda`` one selects its GPU); the device's memory, if it has any.
        A device that cannot work here (no GPU, no such index) makes the start fail, saying why."""
        index = device_index(self.device.name)
        if index is None:
            return None
        try:
            memory: int | None = await self._call(self.prover, "device", self.device.kind, index)
        except RemoteError as exc:
            raise WorkerDied(f"{self.worker_id}: device {self.device.name} cannot work: {exc}") from None
        return memory

    async def device_need(self, key_path: str) -> tuple[int, int] | None:
        if self.memory_bytes is None:
            return None
        if key_path not in self._needs:
            await self._load(self.prover, key_path)
            need = await self._call(self.prover, "need", key_path)
            self._needs[key_path] = (int(need[0]), int(need[1]))
        return self._needs[key_path]

    def _early_b2(self, key_path: str, synthesized: Any, label: str) -> None:
        """Have the finalizer compute the partition's G2 MSM during the device section: it needs only the
        witness, so on a ``cpu`` device the two run on two cores, and finishing the partition afterwards is
        only assembly and verification. Requests to the finalizer are served in order, so this one is done
        before the partition's ``finish``; its failure (the finalizer died or cannot load the key) is met
        again by that ``finish``."""
        # A parcel goes as it is (the finalizer maps its witness); a partition in memory sends its witness.
        witness = synthesized if isinstance(synthesized, Parcel) else synthesized.witness
        task = asyncio.create_task(self._b2(key_path, witness, label), name=f"b2 {label}")
        self._pending.add(task)  # the loop keeps only a weak reference to a task
        task.add_done_callback(self._settled)

    async def _b2(self, key_path: str, witness: Any, label: str) -> None:
        async with self._finalizer_turn:
            await self._load(self.finalizer, key_path, compute=True)
            await self._call(self.finalizer, "b2", key_path, label, witness, compute=True, label=label)

    def _settled(self, task: asyncio.Task[Any]) -> None:
        """Done-callback of a request whose outcome matters only to a later one: forget it, mark its
        exception seen."""
        self._pending.discard(task)
        if not task.cancelled():
            task.exception()

    async def synthesize_own(self, call: Callable[[Any], tuple[Any, float]], task: Any, label: str) -> float:
        if not self.finishes_itself:
            return await super().synthesize_own(call, task, label)
        ms: float = await self._call(self.prover, "synthesize", call, task, compute=True, label=label)
        return ms

    async def _stage(self, key_path: str, synthesized: Any, label: str) -> None:
        await self._load(self.prover, key_path)
        await self._call(self.prover, "stage", key_path, synthesized, label=label)

    async def _prove_start(self, label: str) -> tuple[Any, float]:
        state, ms = await self._call(self.prover, "start", label=label)
        return state, ms

    async def finish(self, key_path: str, state: Any, label: str = "") -> Finished:
        async with self._finalizer_turn:
            await self._load(self.finalizer, key_path, compute=True)
            finished: Finished = await self._call(
                self.finalizer, "finish", key_path, state, label, compute=True, label=label
            )
        return finished

    async def map_tables(self, key_path: str) -> bool:
        mapped = await asyncio.gather(*(self._call(p, "map_tables", key_path) for p in self._processes))
        for process in self._processes:
            self._loaded[process].add(key_path)  # mapping them loaded the key
        return all(mapped)

    async def drop_key(self, key_path: str) -> None:
        for loaded in self._loaded.values():
            loaded.discard(key_path)
        await asyncio.gather(*(self._call(process, "drop", key_path) for process in self._processes))

    async def _load(self, process: ChildProcess, key_path: str, compute: bool = False) -> None:
        """Have ``process`` load the key by a request of its own, once: a request sent after this one (the
        process serves them in order) finds the key loaded, or loads it itself if this load failed."""
        loaded = self._loaded[process]
        if key_path not in loaded:
            loaded.add(key_path)
            try:
                await self._call(process, "load", key_path, compute=compute)
            except BaseException:
                loaded.discard(key_path)
                raise

    async def _call(
        self, process: ChildProcess, *message: Any, compute: bool = False, label: str | None = None
    ) -> Any:
        self.check_alive()
        try:
            return await process.request(*message, compute=compute, label=label)
        except WorkerDied as exc:
            self._died(process, str(exc))
            raise

    def _died(self, process: ChildProcess, reason: str) -> None:
        """``process`` ended: the worker dies, blaming the partition whose own work ran there, if any."""
        working_on = process.working_on
        self.die(reason, frozenset([working_on] if working_on is not None else []))

    def _end(self) -> None:
        for process in self._processes:
            process.kill()


def splits(split_prove: bool | str, device_kind: str) -> bool:
    """Whether a worker of a ``device_kind`` device has a finalizer beside its prover (``split_prove``).

    "auto": on a ``cuda`` device, yes (the GPU's device section overlaps the finalization on a core); on a
    ``cpu`` device, no: the device is a core, which would run both, so the prover finishes each partition
    itself before it takes the next, as a plain prover does (docs/engine.md, "What the layout is")."""
    return device_kind == "cuda" if split_prove == "auto" else bool(split_prove)


def _parked(
    folder: str, name: str, call: Callable[[Any], tuple[Any, float]], task: Any
) -> tuple[Parcel, float]:
    """In a pool process: ``call(task)``, its partition parked in ``folder`` as ``name``."""
    synthesized, ms = call(task)
    return park(synthesized, folder, name), ms
