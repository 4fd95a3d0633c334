"""The synthesis pool: a process pool for the CPU-side work (synthesis, key preparation, key inspection),
and what the daemon must do around ``ProcessPoolExecutor`` to trust it.

The pool's own bookkeeping is not enough on its own: a process killed while it writes its result leaves
half a message in the result pipe and the pool never says it broke, and a forkserver that ends breaks the
pool's bookkeeping while its processes live on. So every wait also watches each process's pidfd, and a
broken pool is replaced by a new one (:class:`SynthesisPool`), saying whether a process died with the work
(:class:`~.backend.PoolProcessDied`, the work is retried) or not (:class:`~.backend.PoolReplaced`, retried
without blame).

The pool has ``size`` processes, and grows by itself when more calls overlap than it has: a call that
finds every one of them busy runs on an *extra* process, made then, up to ``most`` processes in all (the
cores, by default). Only the dispatcher lets syntheses overlap, and it does so only while the devices
wait on synthesis (docs/engine.md, "Circom circuits"); the extra processes end once none of them has had
work for ``EXTRA_IDLE_SECS``, so the memory they held (a circuit's matrices, a witness helper) goes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import select
import signal
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.context import ForkServerContext
from typing import Any, TypeVar

from .backend import PoolProcessDied, PoolReplaced
from .cores import CoreBudget
from .in_child import exit_with
from .roles import Role

__all__ = ["SynthesisPool"]

T = TypeVar("T")
EXTRA_IDLE_SECS = 30.0  # extra processes end after this long without work


class SynthesisPool:
    """A process pool that is replaced when it breaks; ``run`` holds a slot of the core budget.

    Invariant (event loop only, no lock): ``_busy`` calls run on the ``size`` processes of ``_pool`` and
    ``_extra_busy`` on ``_extra``; a call goes to ``_extra`` only while ``_busy == size``."""

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
        self._pool: ProcessPoolExecutor | None = None
        self._extra: ProcessPoolExecutor | None = None  # made when calls overlap beyond ``size``
        self._busy = 0
        self._extra_busy = 0
        self._extra_retire: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._pool = self._new_pool(self._size)

    def stop(self) -> None:
        if self._pool is not None:
            _kill_pool(self._pool)
            self._pool = None
        self._retire_extra()

    async def run(self, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)`` in a pool process; PoolProcessDied or PoolReplaced when the pool broke."""
        if self._pool is None:
            raise PoolProcessDied("the process pool is not running")
        if self._busy < self._size or self._most <= self._size:
            self._busy += 1
            try:
                return await self._run_on(self._pool, call, *args)
            finally:
                self._busy -= 1
        if self._extra_retire is not None:
            self._extra_retire.cancel()
            self._extra_retire = None
        if self._extra is None:
            self._extra = self._new_pool(self._most - self._size)
        self._extra_busy += 1
        try:
            return await self._run_on(self._extra, call, *args)
        finally:
            self._extra_busy -= 1
            if self._extra_busy == 0 and self._extra is not None:
                loop = asyncio.get_running_loop()
                self._extra_retire = loop.call_later(EXTRA_IDLE_SECS, self._retire_extra)

    async def _run_on(self, pool: ProcessPoolExecutor, call: Callable[..., T], *args: Any) -> T:
        try:
            async with self._budget.slot():
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

    def pids(self) -> list[int]:
        """The pool's process ids, its extra ones last (for diagnostics and fault tests)."""
        return _pool_pids(self._pool) + _pool_pids(self._extra)

    def _replace(self, pool: ProcessPoolExecutor) -> None:
        # The first to notice replaces the pool; the others just retry. Extra processes are made again
        # when calls overlap again.
        if self._pool is pool:
            _kill_pool(pool)
            self._pool = self._new_pool(self._size)
        elif self._extra is pool:
            _kill_pool(pool)
            self._extra = None

    def _retire_extra(self) -> None:
        if self._extra_retire is not None:
            self._extra_retire.cancel()
            self._extra_retire = None
        if self._extra is not None:
            _kill_pool(self._extra)
            self._extra = None

    def _new_pool(self, size: int) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            max_workers=size,
            mp_context=self._ctx,
            initializer=exit_with,
            initargs=(os.getpid(), self._niceness, Role.SYNTHESIS.value, self._threads),
        )


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
