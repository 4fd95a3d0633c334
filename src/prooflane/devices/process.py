"""The ``process`` backend: a prover and a finalizer process per worker, and a process pool for synthesis.

A ``cpu`` device is one core's worth of proving. Each device has ``workers_per_device`` workers that share
its lock; the lock covers only ``prove_start`` (the device section). A worker is two processes:

- the *prover* stages the next partition (unpickles it, loads its key) outside the lock, then runs
  ``prove_start`` under it;
- the *finalizer* runs ``prove_finish`` and verifies the partition proof.

Why a separate finalizer process, not a thread: zksnake's BN254 MSMs hold the GIL, so a finalizer thread
beside the prover would serialize with the next ``prove_start``. A sibling process per worker (rather than
one per device) keeps a worker's keys and its finalizer together: both load the same key once, and a
worker that dies takes down only its own pair, whose partitions are retried elsewhere.

Liveness comes from each process's own pidfd (opened from the pid it reports when it first answers), not
from the multiprocessing sentinel: processes are forked by the forkserver, and if the forkserver dies the
sentinels close while the processes live on. The pidfd says exactly when the process ends, and ending a
worker signals the process itself, so none is left behind.

The device lock lives in the parent (an ``asyncio.Lock``), not in shared memory: a process killed while
proving can never leave it held. Both processes keep every proving key they loaded until told to drop it,
without its coefficient matrices (only synthesis uses those).

The core budget (:class:`CoreBudget`) is the parent's count of CPU-heavy steps running at once across all
workers and the synthesis pool: device sections, finalizations and syntheses each hold one of its slots
while they compute, so no more of them are runnable than the budget allows (by default there is no limit). A
device section takes its slot under the device lock and before its lease is granted, so a partition shown
"proving" is computing, never waiting for a core.

Each process names itself (``/proc/self/comm``: ``prooflane-prove``, ``prooflane-final``,
``prooflane-synth``), so ``ps``, ``top`` and the benchmarks can tell them apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import multiprocessing
import multiprocessing.connection
import os
import select
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable, MutableMapping
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.context import ForkServerContext
from typing import Any, TypeVar

from ..errors import WorkerDied
from .backend import (
    Device,
    DeviceBackend,
    DeviceWorker,
    Finished,
    PoolProcessDied,
    PoolReplaced,
    RemoteError,
    WorkerInfo,
)

__all__ = [
    "ChildProcess",
    "CoreBudget",
    "ProcessBackend",
    "ProcessWorker",
    "exit_with",
    "ignore_interrupts",
    "limit_native_threads",
    "mp_context",
    "name_process",
]

Connection = multiprocessing.connection.Connection
T = TypeVar("T")


def mp_context() -> ForkServerContext:
    """The process start method: forkserver (a clean, thread-free parent for every worker process)."""
    ctx = multiprocessing.get_context("forkserver")
    assert isinstance(ctx, ForkServerContext)
    ctx.set_forkserver_preload(["prooflane.groth16", "prooflane.kinds", "prooflane.devices"])
    return ctx


class CoreBudget:
    """At most ``cores`` CPU-heavy steps at once (0: no limit). Event-loop side only, so no lock: the
    counters change only between awaits. Invariant: ``0 <= running <= cores`` whenever ``cores > 0``."""

    def __init__(self, cores: int) -> None:
        self.cores = cores
        self.running = 0  # steps holding a slot now
        self.peak = 0  # the most that ever held one at once
        self.steps = 0  # steps that held one, in all
        self._slots = asyncio.Semaphore(cores) if cores > 0 else None

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one slot (waiting, first come first served, for one to be free) while the step computes."""
        async with self._slots if self._slots is not None else contextlib.nullcontext():
            self.running += 1
            self.steps += 1
            self.peak = max(self.peak, self.running)
            try:
                yield
            finally:
                self.running -= 1


class ProcessBackend(DeviceBackend):
    """Workers as process pairs, synthesis in a process pool; all below the daemon's priority, and no
    more CPU-heavy steps at once than the core budget (``cores``; 0: no limit)."""

    name = "process"

    def __init__(self, *, pool_size: int, workers: int, niceness: int = 0, cores: int = 0) -> None:
        super().__init__()
        self._ctx = mp_context()
        self._pool_size = pool_size
        self._niceness = niceness
        self.budget = CoreBudget(cores)
        self._io = ThreadPoolExecutor(max_workers=4 * workers + 4, thread_name_prefix="prooflane-io")
        # Processes are started in one thread of their own, off the event loop (see ChildProcess.start).
        self._starter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prooflane-start")
        self._pool: ProcessPoolExecutor | None = None

    async def start(self) -> None:
        self._pool = self._new_pool()

    async def stop(self) -> None:
        if self._pool is not None:
            _kill_pool(self._pool)
            self._pool = None
        self._io.shutdown(wait=False, cancel_futures=True)
        self._starter.shutdown(wait=False, cancel_futures=True)

    async def run(self, call: Callable[..., T], *args: Any) -> T:
        pool = self._pool
        if pool is None:
            raise PoolProcessDied("the process pool is not running")
        try:
            async with self.budget.slot():
                try:
                    if any(_ended(pid) for pid in _pool_pids(pool)):
                        raise BrokenProcessPool("a process of it ended while idle")
                    # Submitting may start a pool process: in the starter thread, off the event loop.
                    submit = functools.partial(pool.submit, _trimmed, call, *args)
                    future = await asyncio.get_running_loop().run_in_executor(self._starter, submit)
                except (EOFError, OSError, BrokenProcessPool) as exc:
                    # It never ran: a process could not be started (its forkserver ended), or the pool had
                    # broken before (a process of it died while idle).
                    self._replace(pool)
                    raise PoolReplaced(
                        f"the synthesis pool was replaced ({exc or type(exc).__name__})"
                    ) from None
                return await _result(pool, asyncio.wrap_future(future))
        except BrokenProcessPool:
            # Its bookkeeping also breaks when only the forkserver behind it ended (the processes live on):
            # then no process died with the work.
            died = any(_ended(pid) for pid in _pool_pids(pool))
            self._replace(pool)
            if not died:
                raise PoolReplaced("the synthesis pool was replaced: its forkserver ended") from None
            raise PoolProcessDied("a synthesis process died") from None

    def _replace(self, pool: ProcessPoolExecutor) -> None:
        if self._pool is pool:  # the first to notice replaces the pool; the others just retry
            _kill_pool(pool)
            self._pool = self._new_pool()

    def new_worker(self, worker_id: str, device: Device) -> ProcessWorker:
        return ProcessWorker(
            worker_id, device, self._ctx, self._io, self._niceness, self.budget, starter=self._starter
        )

    def pool_pids(self) -> list[int]:
        """The pool's process ids (for diagnostics and fault tests)."""
        return _pool_pids(self._pool)

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            max_workers=self._pool_size,
            mp_context=self._ctx,
            initializer=exit_with,
            initargs=(os.getpid(), self._niceness, "prooflane-synth"),
        )


class ChildProcess:
    """A process behind a pipe that answers one request at a time (event-loop side)."""

    def __init__(
        self,
        name: str,
        target: Any,
        ctx: ForkServerContext,
        io: ThreadPoolExecutor,
        niceness: int = 0,
        budget: CoreBudget | None = None,
    ) -> None:
        self.name = name
        self._io = io
        self._budget = budget or CoreBudget(0)
        self._niceness = niceness
        parent, self._child = ctx.Pipe(duplex=True)
        self._conn: Connection = parent
        self._proc = ctx.Process(target=target, args=(self._child, os.getpid()), name=name, daemon=True)
        self._lock = asyncio.Lock()  # one request in flight per process: replies match requests in order
        self._pidfd: int | None = None
        self._unwatch: Callable[[], object] = lambda: None
        self._ended = False
        self._start_error: str | None = None
        self.working_on: str | None = None  # the partition whose own work the request in flight does

    async def start(self, starter: Executor) -> None:
        """Start the process in ``starter`` (one thread): off the event loop, because starting one waits for
        the forkserver, and a forkserver that ended is started again first (seconds: it imports prooflane)."""
        await asyncio.get_running_loop().run_in_executor(starter, self._start)

    def _start(self) -> None:
        """In the starter thread: start the process; end it at once if it was ended meanwhile."""
        try:
            self._proc.start()
        except (EOFError, OSError) as exc:  # the forkserver ended while it started this one
            self._start_error = f"{self.name} could not be started ({exc or type(exc).__name__})"
            self._ended = True
        finally:
            self._child.close()
        pid = self._proc.pid
        if pid is not None and self._niceness:
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, pid, below_this_process(self._niceness))
        if pid is not None and self._ended:  # killed while it started
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    @property
    def pid(self) -> int | None:
        """The process id."""
        pid: int | None = self._proc.pid
        return pid

    async def request(self, *message: Any, compute: bool = False, label: str | None = None) -> Any:
        """Send ``message``, return the reply's payload; raise WorkerDied if the process is gone. A
        ``compute`` request holds a slot of the core budget while it runs (taken once this process is
        free, so a request queued behind another never holds a slot it cannot use). ``label``: the
        partition whose own work the request does (``working_on`` until the reply)."""
        loop = asyncio.get_running_loop()
        async with self._lock:
            if self._ended:
                raise WorkerDied(self._start_error or f"{self.name} (pid {self.pid}) was ended")
            self.working_on = label
            try:
                # One thread hop per request: send and wait for the reply in the same I/O thread.
                if compute:
                    async with self._budget.slot():
                        reply = await loop.run_in_executor(self._io, _round_trip, self._conn, message)
                else:
                    reply = await loop.run_in_executor(self._io, _round_trip, self._conn, message)
            except (EOFError, OSError) as exc:
                raise WorkerDied(f"{self.name} (pid {self.pid}) exited: {self._exit_reason(exc)}") from None
            except asyncio.CancelledError:
                # The reply would be read by the next request: the process cannot be trusted any more.
                self.kill()
                raise
            self.working_on = None
        status, payload = reply
        if status == "error":
            raise RemoteError(payload)
        return payload

    async def ping(self) -> None:
        """Wait for the first answer, and from then on follow the process through its pidfd."""
        pid = await self.request("ping")
        if self._pidfd is None:
            with contextlib.suppress(OSError):
                self._pidfd = os.pidfd_open(pid)

    def watch(self, on_exit: Callable[[str], None]) -> None:
        """Call ``on_exit(reason)`` on the event loop as soon as the process ends (once)."""
        loop = asyncio.get_running_loop()
        fd = self._pidfd if self._pidfd is not None else self._proc.sentinel

        def ended() -> None:
            loop.remove_reader(fd)
            on_exit(f"{self.name} (pid {self.pid}) exited: {self._exit_reason(EOFError())}")

        loop.add_reader(fd, ended)
        self._unwatch = lambda: loop.remove_reader(fd)

    def kill(self) -> None:
        """End the process now (idempotent), through its pidfd when it has one."""
        self._ended = True
        self._unwatch()
        self._unwatch = lambda: None
        if self._pidfd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.close(self._pidfd)
            self._pidfd = None
        elif self._proc.pid is not None and self._proc.is_alive():
            self._proc.kill()
        # The pipe stays open: a thread may still be reading it, and it reads EOF once the process is gone.

    def join(self, timeout: float) -> None:
        """Wait for the process to end (after ``kill``); blocking."""
        if self._proc.pid is not None:
            self._proc.join(timeout)

    def _exit_reason(self, exc: BaseException) -> str:
        if self._start_error is not None:
            return self._start_error
        pid = self._proc.pid
        if pid is None:
            return "it was ended before it started"
        # Never waited for on the event loop: what its forkserver reported, else what its zombie still shows.
        code = self._proc.exitcode
        if code is None:
            code = _zombie_status(pid)
        if code is None:
            return f"{type(exc).__name__} (its exit status was not known yet)"
        if code == _STATUS_LOST:
            return "its exit status is lost (the forkserver that started it, which reports it, has ended)"
        return f"killed by signal {-code}" if code < 0 else f"exit code {code}"


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
    ) -> None:
        super().__init__(worker_id, device)
        self._budget = budget or CoreBudget(0)
        self._starter = starter or io
        # Lower priority than the daemon: its event loop schedules the devices and answers /status.
        self.prover = ChildProcess(f"{worker_id} prover", _prover_main, ctx, io, niceness)
        self.finalizer = ChildProcess(
            f"{worker_id} finalizer", _finalizer_main, ctx, io, niceness, self._budget
        )
        self._pending: set[asyncio.Task[Any]] = set()  # requests nobody awaits (see _early_b2)
        # A partition's early G2 MSM and its finish each send the finalizer two requests (the key's load,
        # then the work); taking turns keeps each pair together, so the MSM is done before its finish.
        self._finalizer_turn = asyncio.Lock()
        # The keys each process has loaded: a key is loaded by a request of its own, so that a death while
        # it loads (most of a fresh worker's first partition of a kind) blames no partition.
        self._loaded: dict[ChildProcess, set[str]] = {self.prover: set(), self.finalizer: set()}

    def info(self) -> WorkerInfo:
        return WorkerInfo(self.worker_id, self.device.name, self.prover.pid, self.finalizer.pid)

    async def start(self) -> None:
        """Wait until both processes answer; from then on, either one ending makes the worker die."""
        try:
            await asyncio.gather(self.prover.start(self._starter), self.finalizer.start(self._starter))
            await asyncio.gather(self.prover.ping(), self.finalizer.ping())
        except WorkerDied as exc:
            self.die(str(exc))
            raise
        self.prover.watch(functools.partial(self._died, self.prover))
        self.finalizer.watch(functools.partial(self._died, self.finalizer))

    async def prove(
        self, key_path: str, synthesized: Any, grant: Callable[[], bool], label: str = ""
    ) -> tuple[Any, float] | None:
        """As :meth:`DeviceWorker.prove`, with a slot of the core budget taken under the device lock and
        before ``grant()``: the lease starts when the device section can compute."""
        await self._stage(key_path, synthesized, label)
        async with self.device.lock, self._budget.slot():
            if not grant():
                return None
            self._early_b2(key_path, synthesized, label)
            return await self._prove_start(label)

    def _early_b2(self, key_path: str, synthesized: Any, label: str) -> None:
        """Have the finalizer compute the partition's G2 MSM during the device section: it needs only the
        witness, so on a ``cpu`` device the two run on two cores, and finishing the partition afterwards is
        only assembly and verification. Requests to the finalizer are served in order, so this one is done
        before the partition's ``finish``; its failure (the finalizer died or cannot load the key) is met
        again by that ``finish``."""
        task = asyncio.create_task(self._b2(key_path, synthesized.witness, label), name=f"b2 {label}")
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

    async def _stage(self, key_path: str, synthesized: Any, label: str) -> None:
        await self._load(self.prover, key_path)
        await self._call(self.prover, "stage", key_path, synthesized, label=label)

    async def _prove_start(self, label: str) -> tuple[Any, float]:
        state, ms = await self._call(self.prover, "start", label=label)
        return state, ms

    async def finish(self, key_path: str, state: Any, label: str = "") -> Finished:
        async with self._finalizer_turn:
            await self._load(self.finalizer, key_path, compute=True)
            proof, public, verified, ms = await self._call(
                self.finalizer, "finish", key_path, state, label, compute=True, label=label
            )
        return Finished(proof, public, verified, ms)

    async def drop_key(self, key_path: str) -> None:
        for loaded in self._loaded.values():
            loaded.discard(key_path)
        await asyncio.gather(
            self._call(self.prover, "drop", key_path), self._call(self.finalizer, "drop", key_path)
        )

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
        self.prover.kill()
        self.finalizer.kill()


_TRIM_GROWTH_BYTES = 32 << 20  # heap growth since the last trim that makes a pool process trim again
_trimmed_at = 0  # in a pool process: its resident bytes after the last trim


def _trimmed(call: Callable[..., T], *args: Any) -> T:
    """In a pool process: ``call(*args)``, then give free heap back to the system when it grew by more
    than ``_TRIM_GROWTH_BYTES`` (a synthesis frees most of what it allocated)."""
    global _trimmed_at
    try:
        return call(*args)
    finally:
        resident = _resident_bytes()
        if resident - _trimmed_at > _TRIM_GROWTH_BYTES:
            from .keys import give_back_free_memory

            give_back_free_memory()
            _trimmed_at = _resident_bytes()


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


_STATUS_LOST = 255  # multiprocessing's exit code for a process whose forkserver ended before reporting it


def _zombie_status(pid: int) -> int | None:
    """The exit code (negative: the signal) of ``pid`` while it is a zombie not yet reaped, else None."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] != "Z" or len(fields) < 50:
        return None
    return os.waitstatus_to_exitcode(int(fields[-1]))


def _pool_pids(pool: ProcessPoolExecutor | None) -> list[int]:
    processes = getattr(pool, "_processes", None) or {}
    return [p.pid for p in processes.values() if p.pid is not None]


def _ended(pid: int) -> bool:
    """True when process ``pid`` has ended (a zombie counts as ended)."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    try:
        ready, _, _ = select.select([pidfd], [], [], 0)
        return bool(ready)
    finally:
        os.close(pidfd)


def _round_trip(conn: Connection, message: tuple[Any, ...]) -> Any:
    conn.send(message)
    return conn.recv()


async def _result(pool: ProcessPoolExecutor, future: asyncio.Future[T]) -> T:
    """``future``'s result, or BrokenProcessPool as soon as a process of ``pool`` ends first.

    The pool's own bookkeeping cannot be trusted with that: a process killed while it writes its result
    leaves half a message in the result pipe, whose other end the daemon itself holds, so the pool's reader
    waits for the rest for ever and never says the pool broke. Each process's pidfd says when it ended.
    """
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[Any] = loop.create_future()

    def end() -> None:
        if not ended.done():
            ended.set_result(None)

    pidfds = []
    for pid in _pool_pids(pool):
        with contextlib.suppress(OSError):
            pidfds.append(os.pidfd_open(pid))
    try:
        for fd in pidfds:
            loop.add_reader(fd, end)
        waited: set[asyncio.Future[Any]] = {future, ended}
        await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        future.cancel()  # the daemon stops: the pool's later failure is nobody's to read
        raise
    finally:
        for fd in pidfds:
            loop.remove_reader(fd)
            os.close(fd)
    if future.done():
        return future.result()
    future.cancel()
    ended.cancel()
    raise BrokenProcessPool("a process of the pool ended while it held the work")


def _kill_pool(pool: ProcessPoolExecutor) -> None:
    # ProcessPoolExecutor has no public way to end busy processes; the backend owns these, so end them. The
    # pids are signalled directly: a process whose forkserver died reads as exited while it still runs.
    pids = _pool_pids(pool)
    # Its reader may wait for the rest of a half-written result (see _result) on a pipe whose writing end is
    # the daemon's own: closing that end gives the reader EOF, so the pool's thread ends (and the daemon can
    # exit: the interpreter joins that thread on the way out). Taken now: shutdown forgets the queue.
    writer = getattr(getattr(pool, "_result_queue", None), "_writer", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    if writer is not None:
        with contextlib.suppress(OSError):
            writer.close()


# -- in worker processes ------------------------------------------------------------------------------

_PROVER_BASES = ("a", "b1", "c", "h")  # the G1 sections prove_start uses
_FINALIZER_BASES = ("b2",)  # the G2 section prove_finish uses


def ignore_interrupts() -> None:
    """In a worker process: leave Ctrl-C to the daemon, which ends its workers itself on the way out."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def limit_native_threads(environ: MutableMapping[str, str] | None = None) -> None:
    """In a worker process, before any proving: one rayon thread unless ``RAYON_NUM_THREADS`` is set.

    py-arkworks-bls12381's MSMs (and zksnake's rayon pool) otherwise spread over every core by themselves,
    which defeats one-partition-per-core devices. Rayon reads the variable when its pool is first used, so
    this runs first thing in every prover, finalizer and synthesis process. An explicit value in the
    daemon's environment is kept.
    """
    (os.environ if environ is None else environ).setdefault("RAYON_NUM_THREADS", "1")


def name_process(name: str) -> None:
    """In a child process: show as ``name`` (at most 15 characters) in ``ps``, ``top`` and ``/proc``."""
    with contextlib.suppress(OSError), open("/proc/self/comm", "w") as comm:
        comm.write(name[:15])


def below_this_process(niceness: int) -> int:
    """The absolute nice value ``niceness`` steps below this process's own (so a daemon started with
    ``nice -n 10`` runs its workers at 15, not 5), at most 19."""
    return min(19, os.getpriority(os.PRIO_PROCESS, 0) + niceness)


def exit_with(daemon_pid: int, niceness: int = 0, name: str = "") -> None:
    """In a child process: ignore Ctrl-C, run ``niceness`` below the daemon, show as ``name``, and exit as
    soon as the daemon process ``daemon_pid`` is gone.

    A child blocks on a pipe or queue whose other end the daemon holds, so it would never see the daemon
    die (``kill -9``) if the end were shared; a thread waits on the daemon's pidfd and ends this process then.
    """
    ignore_interrupts()
    limit_native_threads()
    os.nice(niceness)
    if name:
        name_process(name)
    try:
        pidfd = os.pidfd_open(daemon_pid)
    except (OSError, AttributeError):  # the daemon is already gone, or no pidfd on this system
        if not _alive(daemon_pid):
            os._exit(0)
        return

    def watch() -> None:
        select.select([pidfd], [], [])
        os._exit(0)

    threading.Thread(target=watch, name="prooflane-daemon-watch", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _serve(conn: Connection, handle: Any) -> None:
    ignore_interrupts()
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply: tuple[str, Any] = ("ok", handle(*message))
        except Exception as exc:
            reply = ("error", f"{type(exc).__name__}: {exc}")
        conn.send(reply)


def _prover_main(conn: Connection, daemon_pid: int) -> None:
    exit_with(daemon_pid, name="prooflane-prove")
    from ..groth16 import prove_start
    from .keys import drop_key, load_key

    staged: list[Any] = []  # [key, synthesized] of the partition staged for the next "start"

    def handle(op: str, *args: Any) -> Any:
        if op == "ping":
            return os.getpid()
        if op == "load":
            load_key(args[0], _PROVER_BASES, matrices=False)
            return None
        if op == "stage":
            key_path, synthesized = args
            staged[:] = [load_key(key_path, _PROVER_BASES, matrices=False), synthesized]
            return None
        if op == "start":
            key, synthesized = staged
            staged.clear()
            started = time.perf_counter()
            state = prove_start(key, synthesized)
            ms = (time.perf_counter() - started) * 1000
            # The state refers to its key; the finalizer has its own copy, so send the rest only.
            fields = {f.name: getattr(state, f.name) for f in dataclasses.fields(state) if f.name != "key"}
            return fields, ms
        if op == "drop":
            drop_key(args[0])
            return None
        raise ValueError(f"unknown request {op!r}")

    _serve(conn, handle)


def _finalizer_main(conn: Connection, daemon_pid: int) -> None:
    exit_with(daemon_pid, name="prooflane-final")
    import numpy as np

    from ..groth16 import ProvingState, prove_b2, prove_finish, verify
    from .keys import drop_key, load_key

    early: dict[str, tuple[Any, Any]] = {}  # label -> (witness, its G2 MSM), made during the device section

    def handle(op: str, *args: Any) -> Any:
        if op == "ping":
            return os.getpid()
        if op == "load":
            load_key(args[0], _FINALIZER_BASES, matrices=False)
            return None
        if op == "b2":
            key_path, label, witness = args
            key = load_key(key_path, _FINALIZER_BASES, matrices=False)
            early.clear()  # at most one partition ahead: the one its worker proves now
            early[label] = (witness, prove_b2(key, witness))
            return None
        if op == "finish":
            key_path, fields, label = args
            key = load_key(key_path, _FINALIZER_BASES, matrices=False)
            started = time.perf_counter()
            witness, b2 = early.pop(label, (None, None))
            if witness is None or not np.array_equal(witness, fields["witness"]):
                b2 = None  # not computed for this partition's witness: compute it now
            proof = prove_finish(ProvingState(key=key, **fields), b2=b2)
            verified = bool(verify(key.verification_key, proof.public, proof))
            ms = (time.perf_counter() - started) * 1000
            return proof.to_json(), proof.public_json(), verified, ms
        if op == "drop":
            drop_key(args[0])
            return None
        raise ValueError(f"unknown request {op!r}")

    _serve(conn, handle)
