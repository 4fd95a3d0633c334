"""A child process behind a pipe, seen from the daemon's event loop: started off the loop, one request at a
time, followed through its pidfd, ended by a signal to the process itself.

Liveness comes from the process's own pidfd (opened from the pid it reports when it first answers), not
from the multiprocessing sentinel: processes are forked by the forkserver, and if the forkserver dies the
sentinels close while the processes live on. The pidfd says exactly when the process ends, and ending it
signals the process itself, so none is left behind. What runs on the other end is :mod:`.in_child`.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing.connection
import os
import signal
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from multiprocessing.context import ForkServerContext
from typing import Any

from ..errors import WorkerDied
from . import frames
from .backend import DeviceFault, RemoteError
from .cores import CoreBudget
from .in_child import below_this_process

__all__ = ["ChildProcess"]

Connection = multiprocessing.connection.Connection


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
        *,
        threads: int = 0,
        tables: bool = False,
        extra: tuple[Any, ...] = (),
    ) -> None:
        self.name = name
        self._io = io
        self._budget = budget or CoreBudget(0)
        self._niceness = niceness
        parent, self._child = ctx.Pipe(duplex=True)
        self._conn: Connection = parent
        self._proc = ctx.Process(
            target=target, args=(self._child, os.getpid(), threads, tables, *extra), name=name, daemon=True
        )
        self._lock = asyncio.Lock()  # one request in flight per process: replies match requests in order
        self._pidfd: int | None = None
        self._unwatch: Callable[[], object] = lambda: None
        self._ended = False
        # Set the moment the watch sees the process end, before the exit is reported (the reason waits for
        # its exit status): the worker is dead from then on (ProcessWorker.dead).
        self.exited = False
        self._reports: set[asyncio.Task[None]] = set()  # exits being reported (kept from the collector)
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
                reason = await self._exit_reason_soon(exc)
                raise WorkerDied(f"{self.name} (pid {self.pid}) exited: {reason}") from None
            except asyncio.CancelledError:
                # The reply would be read by the next request: the process cannot be trusted any more.
                self.kill()
                raise
            self.working_on = None
        status, payload = reply
        if status == "fault":
            raise DeviceFault(payload)
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

        async def report() -> None:
            on_exit(f"{self.name} (pid {self.pid}) exited: {await self._exit_reason_soon(EOFError())}")

        def ended() -> None:
            self.exited = True
            loop.remove_reader(fd)
            task = loop.create_task(report(), name=f"{self.name} exit")
            self._reports.add(task)
            task.add_done_callback(self._reports.discard)

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

    async def _exit_reason_soon(self, exc: BaseException) -> str:
        """Why the process ended, once its exit status is known: the pipe's end and the pidfd can be seen
        before the status is (the forkserver reaps the process and reports its status a moment later), so
        it is awaited for up to ``EXIT_STATUS_WAIT_SECS`` before the reason says it was not known yet."""
        if self._start_error is not None:
            return self._start_error
        if self._proc.pid is None:
            return "it was ended before it started"
        code = self._exit_status()
        for _ in range(int(EXIT_STATUS_WAIT_SECS / EXIT_STATUS_POLL_SECS)):  # nothing to wait on but this
            if code is not None:
                break
            await asyncio.sleep(EXIT_STATUS_POLL_SECS)
            code = self._exit_status()
        if code is None:
            return f"{type(exc).__name__} (its exit status was not known yet)"
        if code == _STATUS_LOST:
            return "its exit status is lost (the forkserver that started it, which reports it, has ended)"
        return f"killed by signal {-code}" if code < 0 else f"exit code {code}"

    def _exit_status(self) -> int | None:
        """What its forkserver reported, else what its zombie still shows (read once: the forkserver may reap
        the zombie between two reads, before it reports); never waited for on the event loop."""
        pid = self._proc.pid
        if pid is None:
            return None
        code: int | None = self._proc.exitcode
        return code if code is not None else _zombie_status(pid)


def _round_trip(conn: Connection, message: tuple[Any, ...]) -> Any:
    frames.send(conn, message)
    return frames.receive(conn)


EXIT_STATUS_WAIT_SECS = 1.0
"""How long a death's report waits for the process's exit status, to name the signal or the exit code."""
EXIT_STATUS_POLL_SECS = 0.005

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
