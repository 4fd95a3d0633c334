"""Devices and their workers: a device lock, and per worker a prover process and a finalizer process.

A ``cpu`` device is one core's worth of proving. Each device has ``workers_per_device`` workers that share
its lock; the lock covers only ``prove_start`` (the device section). A worker is two processes:

- the *prover* stages the next partition (unpickles it, loads its key) outside the lock, then runs
  ``prove_start`` under it;
- the *finalizer* runs ``prove_finish`` and verifies the partition proof.

Why a separate finalizer process, not a thread: zksnake's BN254 MSMs hold the GIL, so a finalizer thread
beside the prover would serialize with the next ``prove_start``. A sibling process per worker (rather than
one per device) keeps a worker's keys and its finalizer together: both load the same key once, and a
worker that dies takes down only its own pair, whose partitions are retried elsewhere.

The device lock lives in the parent (an ``asyncio.Lock``), not in shared memory: a process killed while
proving can never leave it held. Both processes keep every proving key they loaded until told to drop it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import multiprocessing.connection
import os
import select
import signal
import threading
import time
from collections.abc import Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.context import ForkServerContext
from typing import Any

from .errors import WorkerDied

__all__ = [
    "ChildProcess",
    "Device",
    "RemoteError",
    "Worker",
    "WorkerInfo",
    "exit_with",
    "ignore_interrupts",
    "limit_native_threads",
    "mp_context",
]

Connection = multiprocessing.connection.Connection


class RemoteError(Exception):
    """Raised when work failed inside a worker process (the process itself is fine)."""


def mp_context() -> ForkServerContext:
    """The process start method: forkserver (a clean, thread-free parent for every worker process)."""
    ctx = multiprocessing.get_context("forkserver")
    assert isinstance(ctx, ForkServerContext)
    ctx.set_forkserver_preload(["prooflane.groth16", "prooflane.kinds", "prooflane.devices"])
    return ctx


@dataclass
class Device:
    """A device and the lock its workers share around the device section."""

    name: str
    kind: str = "cpu"
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass(frozen=True)
class WorkerInfo:
    """A worker's processes, as tests and diagnostics see them."""

    worker_id: str
    device: str
    prover_pid: int | None
    finalizer_pid: int | None


class ChildProcess:
    """A process behind a pipe that answers one request at a time (event-loop side)."""

    def __init__(
        self, name: str, target: Any, ctx: ForkServerContext, io: ThreadPoolExecutor, niceness: int = 0
    ) -> None:
        self.name = name
        self._io = io
        parent, child = ctx.Pipe(duplex=True)
        self._conn: Connection = parent
        self._proc = ctx.Process(target=target, args=(child,), name=name, daemon=True)
        self._proc.start()
        child.close()
        if niceness and self._proc.pid is not None:
            os.setpriority(os.PRIO_PROCESS, self._proc.pid, niceness)
        self._lock = asyncio.Lock()  # one request in flight per process: replies match requests in order
        self._unwatch: Callable[[], object] = lambda: None

    @property
    def pid(self) -> int | None:
        """The process id."""
        pid: int | None = self._proc.pid
        return pid

    async def request(self, *message: Any) -> Any:
        """Send ``message``, return the reply's payload; raise WorkerDied if the process is gone."""
        loop = asyncio.get_running_loop()
        async with self._lock:
            try:
                # One thread hop per request: send and wait for the reply in the same I/O thread.
                reply = await loop.run_in_executor(self._io, _round_trip, self._conn, message)
            except (EOFError, OSError) as exc:
                raise WorkerDied(f"{self.name} (pid {self.pid}) exited: {self._exit_reason(exc)}") from None
            except asyncio.CancelledError:
                # The reply would be read by the next request: the process cannot be trusted any more.
                self.kill()
                raise
        status, payload = reply
        if status == "error":
            raise RemoteError(payload)
        return payload

    def watch(self, on_exit: Callable[[str], None]) -> None:
        """Call ``on_exit(reason)`` on the event loop as soon as the process ends (once)."""
        loop = asyncio.get_running_loop()
        sentinel = self._proc.sentinel

        def ended() -> None:
            loop.remove_reader(sentinel)
            on_exit(f"{self.name} (pid {self.pid}) exited: {self._exit_reason(EOFError())}")

        loop.add_reader(sentinel, ended)
        self._unwatch = lambda: loop.remove_reader(sentinel)

    def kill(self) -> None:
        """End the process now (idempotent)."""
        self._unwatch()
        if self._proc.is_alive():
            self._proc.kill()
        # The pipe stays open: a thread may still be reading it, and it reads EOF once the process is gone.

    def join(self, timeout: float) -> None:
        """Wait for the process to end (after ``kill``); blocking."""
        self._proc.join(timeout)

    def _exit_reason(self, exc: BaseException) -> str:
        self._proc.join(1.0)
        code = self._proc.exitcode
        if code is None:
            return type(exc).__name__
        return f"killed by signal {-code}" if code < 0 else f"exit code {code}"


class Worker:
    """One device worker: a prover and a finalizer process, and the keys they hold."""

    def __init__(
        self,
        worker_id: str,
        device: Device,
        ctx: ForkServerContext,
        io: ThreadPoolExecutor,
        niceness: int = 0,
    ) -> None:
        self.worker_id = worker_id
        self.device = device
        # Lower priority than the daemon: its event loop schedules the devices and answers /status.
        self.prover = ChildProcess(f"{worker_id} prover", _prover_main, ctx, io, niceness)
        self.finalizer = ChildProcess(f"{worker_id} finalizer", _finalizer_main, ctx, io, niceness)
        self.dead = False
        self.death: str | None = None  # why it died, once it did
        self.task: asyncio.Task[None] | None = None  # the engine's task feeding this worker

    def info(self) -> WorkerInfo:
        """The worker's ids and pids."""
        return WorkerInfo(self.worker_id, self.device.name, self.prover.pid, self.finalizer.pid)

    async def ready(self) -> None:
        """Wait until both processes answer; from then on, either one ending makes the worker ``die``."""
        await asyncio.gather(self.prover.request("ping"), self.finalizer.request("ping"))
        self.prover.watch(self.die)
        self.finalizer.watch(self.die)

    async def stage(self, key_path: str, synthesized: Any) -> None:
        """Give the prover its next partition and let it load the key, outside the device lock."""
        await self.prover.request("stage", key_path, synthesized)

    async def prove_start(self) -> tuple[Any, float]:
        """Run the device section on the staged partition; return the proving state and milliseconds."""
        state, ms = await self.prover.request("start")
        return state, ms

    async def finish(self, key_path: str, state: Any) -> tuple[dict[str, Any], list[str], bool, float]:
        """Run ``prove_finish`` and verify; return (proof JSON, public signals, verified, milliseconds)."""
        proof, public, verified, ms = await self.finalizer.request("finish", key_path, state)
        return proof, public, verified, ms

    async def drop_key(self, key_path: str) -> None:
        """Make both processes forget a key (its memory was evicted)."""
        await asyncio.gather(self.prover.request("drop", key_path), self.finalizer.request("drop", key_path))

    def die(self, reason: str) -> None:
        """A process of this worker is gone: end the other, stop feeding it, remember why."""
        self.death = self.death or reason
        self.kill()
        if self.task is not None:
            self.task.cancel()

    def kill(self) -> None:
        """End both processes now."""
        self.dead = True
        self.prover.kill()
        self.finalizer.kill()


def _round_trip(conn: Connection, message: tuple[Any, ...]) -> Any:
    conn.send(message)
    return conn.recv()


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


def exit_with(daemon_pid: int, niceness: int = 0) -> None:
    """In a pool process: ignore Ctrl-C, run ``niceness`` below the daemon, and exit as soon as the daemon
    process ``daemon_pid`` is gone.

    A pool process blocks on a queue whose write end it holds itself, so it would never see the daemon
    die (``kill -9``); a thread waits on the daemon's pidfd and ends this process then.
    """
    ignore_interrupts()
    limit_native_threads()
    os.nice(niceness)
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


def _prover_main(conn: Connection) -> None:
    limit_native_threads()
    from . import kinds
    from .groth16 import prove_start

    staged: list[Any] = []  # [key, synthesized] of the partition staged for the next "start"

    def handle(op: str, *args: Any) -> Any:
        if op == "ping":
            return os.getpid()
        if op == "stage":
            key_path, synthesized = args
            staged[:] = [kinds.load_key(key_path, _PROVER_BASES), synthesized]
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
            kinds.drop_key(args[0])
            return None
        raise ValueError(f"unknown request {op!r}")

    _serve(conn, handle)


def _finalizer_main(conn: Connection) -> None:
    limit_native_threads()
    from . import kinds
    from .groth16 import ProvingState, prove_finish, verify

    def handle(op: str, *args: Any) -> Any:
        if op == "ping":
            return os.getpid()
        if op == "finish":
            key_path, fields = args
            key = kinds.load_key(key_path, _FINALIZER_BASES)
            started = time.perf_counter()
            proof = prove_finish(ProvingState(key=key, **fields))
            verified = bool(verify(key.verification_key, proof.public, proof))
            ms = (time.perf_counter() - started) * 1000
            return proof.to_json(), proof.public_json(), verified, ms
        if op == "drop":
            kinds.drop_key(args[0])
            return None
        raise ValueError(f"unknown request {op!r}")

    _serve(conn, handle)
