"""The synthesis pool: processes for the CPU-side work (synthesis, key preparation, key inspection), each
running one call at a time (a *lane*), and what the daemon must do around ``ProcessPoolExecutor`` to trust
it.

A lane is a one-process ``ProcessPoolExecutor``, so the daemon always knows which process holds which
call, and can end that one alone: a call whose caller is cancelled (its job cancelled, the daemon
stopping), or that runs past its ``limit`` (a synthesis past ``synthesis_timeout_secs``: a witness
generator that never returns), ends its process; the lane is made again, and other calls go on in
theirs. A synthesis is untrusted work (a circuit's own code, a client's inputs): ending its process is
the one bound that holds whatever it does, in WebAssembly or in a host function.

A lane's own bookkeeping is not enough on its own: a process killed while it writes its result leaves
half a message in the result pipe and the executor never says it broke, and a forkserver that ends breaks
its bookkeeping while its process lives on. So every wait also watches the process's pidfd, and a broken
lane is replaced, saying whether its process died with the work (:class:`~.backend.PoolProcessDied`, the
work is retried) or not (:class:`~.backend.PoolReplaced`, retried without blame).

The pool keeps ``size`` lanes, and grows by itself when more calls overlap than it has: a call that finds
every lane busy gets an *extra* one, up to ``most`` in all (the cores, by default); past that it waits for
a lane. Only the dispatcher lets syntheses overlap, and it does so only while the devices wait on
synthesis (docs/engine.md, "Circom circuits"); an extra lane ends once it has had no work for
``EXTRA_IDLE_SECS``, so the memory it held (a circuit's matrices, a witness generator) goes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import pickle
import select
import signal
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.context import ForkServerContext
from typing import Any, TypeVar

from .backend import PoolProcessDied, PoolReplaced, PoolTimedOut
from .cores import CoreBudget
from .in_child import exit_with
from .roles import Role

__all__ = ["SynthesisPool"]

T = TypeVar("T")
EXTRA_IDLE_SECS = 30.0  # extra lanes end after this long without work


class SynthesisPool:
    """Lanes of one process each, replaced when they break or are ended; ``run`` holds a slot of the core
    budget.

    Invariant (event loop only, no lock): every lane is in ``_lanes``; a lane not running a call is in
    ``_idle`` too; ``len(_lanes) <= most``."""

    def __init__(
        self,
        ctx: ForkServerContext,
        size: int,
        niceness: int,
        budget: CoreBudget,
        starter: Executor,
        most: int | None = None,
        *,
        threads: int = 0,
    ) -> None:
        self._ctx = ctx
        self._size = size
        self._most = max(size, (os.cpu_count() or 1) if most is None else most)
        self._niceness = niceness
        self._threads = threads
        self._budget = budget
        self._starter = starter  # the one thread that starts processes, off the event loop
        self._lanes: list[ProcessPoolExecutor] = []
        self._idle: list[ProcessPoolExecutor] = []
        self._freed = asyncio.Event()  # set when a lane goes idle or away (a waiting call looks again)
        self._retire: asyncio.TimerHandle | None = None
        self._running = False

    def start(self) -> None:
        self._running = True
        for _ in range(self._size):
            self._add_lane()

    def stop(self) -> None:
        self._running = False
        if self._retire is not None:
            self._retire.cancel()
        for lane in list(self._lanes):
            self._end(lane)

    async def run(self, call: Callable[..., T], *args: Any, limit: float | None = None) -> T:
        """``call(*args)`` in a lane's process; PoolProcessDied or PoolReplaced when its process or the
        lane broke, PoolTimedOut (its process ended) when it ran ``limit`` seconds. A cancelled caller
        ends the process that runs its call."""
        lane = await self._take()
        try:
            async with self._budget.slot():
                return await self._run_on(lane, call, args, limit)
        finally:
            self._give_back(lane)

    async def _take(self) -> ProcessPoolExecutor:
        """An idle lane, else a new one while there are fewer than ``most``, else the next to go idle."""
        while True:
            if not self._running:
                raise PoolProcessDied("the process pool is not running")
            if self._idle:
                return self._idle.pop()
            if len(self._lanes) < self._most:
                self._add_lane()
                return self._idle.pop()
            self._freed.clear()
            await self._freed.wait()

    def _give_back(self, lane: ProcessPoolExecutor) -> None:
        if lane in self._lanes:
            self._idle.append(lane)
            if len(self._lanes) > self._size and self._retire is None:
                self._retire = asyncio.get_running_loop().call_later(EXTRA_IDLE_SECS, self._retire_extra)
        self._freed.set()

    async def _run_on(
        self, lane: ProcessPoolExecutor, call: Callable[..., T], args: tuple[Any, ...], limit: float | None
    ) -> T:
        try:
            try:
                if any(_ended(pid) for pid in _pool_pids(lane)):
                    raise BrokenProcessPool("its process ended while idle")
                # Submitting may start the lane's process: in the starter thread, off the event loop.
                submit = functools.partial(lane.submit, _trimmed, call, *args)
                future = await asyncio.get_running_loop().run_in_executor(self._starter, submit)
            except (EOFError, OSError, BrokenProcessPool) as exc:
                # It never ran: its process could not be started (its forkserver ended), or the lane had
                # broken before (its process died while idle).
                self._replace(lane)
                raise PoolReplaced(
                    f"a synthesis process was replaced ({exc or type(exc).__name__})"
                ) from None
            return await _result(lane, asyncio.wrap_future(future), limit)
        except BrokenProcessPool:
            # Its bookkeeping also breaks when only the forkserver behind it ended (the process lives on):
            # then no process died with the work.
            died = any(_ended(pid) for pid in _pool_pids(lane))
            self._replace(lane)
            if not died:
                raise PoolReplaced("a synthesis process was replaced: its forkserver ended") from None
            raise PoolProcessDied("a synthesis process died") from None
        except TimeoutError:
            self._replace(lane)
            raise PoolTimedOut(
                f"it ran past its time limit of {limit:g} s, and its process was ended"
            ) from None
        except asyncio.CancelledError:
            self._replace(lane)  # its work is nobody's now: the process goes with it
            raise

    def pids(self) -> list[int]:
        """The lanes' process ids, the extra lanes' last (for diagnostics and fault tests)."""
        return [pid for lane in self._lanes for pid in _pool_pids(lane)]

    def _add_lane(self) -> None:
        lane = ProcessPoolExecutor(
            max_workers=1,
            mp_context=self._ctx,
            initializer=exit_with,
            initargs=(os.getpid(), self._niceness, Role.SYNTHESIS.value, self._threads),
        )
        self._lanes.append(lane)
        self._idle.append(lane)

    def _replace(self, lane: ProcessPoolExecutor) -> None:
        """End ``lane`` and its process; a new lane takes its place when the pool keeps fewer than
        ``size`` (made idle; its process starts with its first call)."""
        self._end(lane)
        if self._running and len(self._lanes) < self._size:
            self._add_lane()
        self._freed.set()

    def _end(self, lane: ProcessPoolExecutor) -> None:
        if lane in self._lanes:
            self._lanes.remove(lane)
        if lane in self._idle:
            self._idle.remove(lane)
        _kill_pool(lane)

    def _retire_extra(self) -> None:
        """End idle lanes beyond ``size`` (the extra ones made while calls overlapped)."""
        self._retire = None
        for lane in reversed(self._lanes[self._size :]):  # the newest first: the kept lanes stay the same
            if lane in self._idle:
                self._end(lane)


def _trimmed(call: Callable[..., T], *args: Any) -> T:
    """In a pool process: ``call(*args)``, then give free heap back to the system when it grew by more
    than ``TRIM_GROWTH_BYTES`` (a synthesis frees most of what it allocated)."""
    from .keys import give_back_when_grown

    try:
        return call(*args)
    except Exception as exc:
        raise _picklable(exc) from None
    finally:
        give_back_when_grown()


def _picklable(exc: Exception) -> Exception:
    """``exc``, or where it cannot be sent back to the daemon (an error that holds a native pointer, as
    wasmtime's do), a RuntimeError that says the same in one line."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        lines = str(exc).strip().splitlines()
        return RuntimeError(f"{type(exc).__name__}: {lines[0] if lines else 'no message'}")
    return exc


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


async def _result(pool: ProcessPoolExecutor, future: asyncio.Future[T], limit: float | None = None) -> T:
    """``future``'s result; BrokenProcessPool as soon as a process of ``pool`` ends first; TimeoutError
    when ``limit`` seconds pass first.

    The pool's own bookkeeping cannot be trusted with the first: a process killed while it writes its
    result leaves half a message in the result pipe, whose other end the daemon itself holds, so the
    pool's reader waits for the rest for ever and never says the pool broke. Each process's pidfd says when
    it ended.
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
        await asyncio.wait(waited, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        future.cancel()
        raise
    finally:
        for fd in pidfds:
            loop.remove_reader(fd)
            os.close(fd)
    if future.done():
        return future.result()
    future.cancel()
    if not ended.done():
        ended.cancel()
        raise TimeoutError
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
