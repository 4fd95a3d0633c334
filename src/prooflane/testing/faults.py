"""Fault injection into a running daemon's process tree, and the samples taken meanwhile.

The process tree of `prooflane serve`, read from ``/proc`` (no daemon cooperation): the daemon, the
multiprocessing forkserver and resource tracker, the synthesis pool's processes and every worker's prover
and finalizer (each names itself by its :class:`~prooflane.devices.roles.Role`). Processes
whose forkserver died are reparented away from the daemon but stay in its session, so the tree is the
daemon's descendants plus every process of its session.

:class:`FaultInjector` SIGKILLs processes of that tree at random moments (seeded), spreading its faults
evenly over the kinds of process present; :class:`Sampler` polls ``/healthz`` and ``/status`` meanwhile;
:class:`EventLog` keeps the daemon's event stream. :mod:`prooflane.testing.chaos` runs a workload through all
three and checks what they saw. Used by ``benchmarks/chaos.py`` and ``tests/test_chaos.py``.
"""

from __future__ import annotations

import contextlib
import enum
import os
import random
import select
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..client import Client
from ..devices.roles import Role
from ..errors import ProoflaneError

__all__ = [
    "WORKER_KINDS",
    "Boot",
    "CurrentBoot",
    "EventLog",
    "Fault",
    "FaultInjector",
    "ProcessKind",
    "Sample",
    "Sampler",
    "TreeProcess",
    "daemon_tree",
    "kill_and_wait",
    "take_sample",
    "wait_gone",
]


class ProcessKind(enum.StrEnum):
    """What a process of the daemon's tree is."""

    DAEMON = "daemon"
    FORKSERVER = "forkserver"
    RESOURCE_TRACKER = "resource-tracker"
    SYNTHESIS = "synthesis"
    PROVER = "prover"
    FINALIZER = "finalizer"
    OTHER = "other"  # anything else the daemon started (a witness generator, say)


WORKER_KINDS = (ProcessKind.PROVER, ProcessKind.FINALIZER)
_BY_COMM = {
    Role.SYNTHESIS.value: ProcessKind.SYNTHESIS,
    Role.PROVER.value: ProcessKind.PROVER,
    Role.FINALIZER.value: ProcessKind.FINALIZER,
}


@dataclass(frozen=True)
class TreeProcess:
    """One live process of the daemon's tree."""

    pid: int
    kind: ProcessKind
    comm: str


@dataclass(frozen=True)
class _Stat:
    pid: int
    ppid: int
    session: int
    state: str
    comm: str


def _stat(pid: int) -> _Stat | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    # The name is in parentheses and may hold spaces or parentheses itself: split at the last one.
    comm = text[text.index("(") + 1 : text.rindex(")")]
    rest = text[text.rindex(")") + 2 :].split()
    return _Stat(pid, int(rest[1]), int(rest[3]), rest[0], comm)


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _all_stats() -> list[_Stat]:
    stats = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None:
            stats.append(stat)
    return stats


def classify(pid: int, comm: str, daemon_pid: int) -> ProcessKind:
    """The kind of a process of the daemon's tree, from its name (``/proc/PID/comm``) and command line."""
    if pid == daemon_pid:
        return ProcessKind.DAEMON
    if comm in _BY_COMM:
        return _BY_COMM[comm]
    cmdline = _cmdline(pid)
    if "multiprocessing.forkserver" in cmdline:
        return ProcessKind.FORKSERVER
    if "multiprocessing.resource_tracker" in cmdline:
        return ProcessKind.RESOURCE_TRACKER
    return ProcessKind.OTHER


def daemon_tree(daemon_pid: int, session: int | None = None) -> list[TreeProcess]:
    """Every live process of the daemon's tree: its descendants, and the processes of ``session`` (the
    daemon's session by default; a daemon started by DaemonProcess leads its own). Zombies are left out."""
    stats = _all_stats()
    by_pid = {s.pid: s for s in stats}
    if session is None:
        own = by_pid.get(daemon_pid)
        session = own.session if own is not None and own.session == daemon_pid else None
    children: dict[int, list[int]] = {}
    for s in stats:
        children.setdefault(s.ppid, []).append(s.pid)
    found: set[int] = set()
    todo = [daemon_pid] if daemon_pid in by_pid else []
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    if session is not None:
        found |= {s.pid for s in stats if s.session == session}
    tree = []
    for pid in sorted(found):
        s = by_pid[pid]
        if s.state not in ("Z", "X"):
            tree.append(TreeProcess(pid, classify(pid, s.comm, daemon_pid), s.comm))
    return tree


def kill_and_wait(pid: int, timeout: float = 30.0) -> bool:
    """SIGKILL ``pid`` through a pidfd (never a reused pid) and wait until it has ended; False when it had
    already gone."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    try:
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except ProcessLookupError:
            return False
        ready, _, _ = select.select([pidfd], [], [], timeout)
        if not ready:
            raise ProoflaneError(f"process {pid} did not end within {timeout:g} s of SIGKILL")
        return True
    finally:
        os.close(pidfd)


def wait_gone(pids: Iterable[int], timeout: float) -> list[int]:
    """Wait until none of ``pids`` is alive (zombies count as ended); return those still alive then."""
    left = set(pids)
    deadline = time.monotonic() + timeout
    while True:
        left = {pid for pid in left if (s := _stat(pid)) is not None and s.state not in ("Z", "X")}
        if not left or time.monotonic() >= deadline:
            return sorted(left)
        time.sleep(0.05)


# -- the daemon being watched -------------------------------------------------------------------------


@dataclass(frozen=True)
class Boot:
    """One run of the daemon between a start and its end: where it answers and its process."""

    index: int
    url: str
    pid: int


class CurrentBoot:
    """The boot now running (swapped when the daemon is killed and restarted); None between two boots."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # read by the sampler and injector threads, set by the run
        self._boot: Boot | None = None

    def get(self) -> Boot | None:
        with self._lock:
            return self._boot

    def set(self, boot: Boot | None) -> None:
        with self._lock:
            self._boot = boot


# -- faults -------------------------------------------------------------------------------------------


@dataclass
class Fault:
    """One SIGKILL: when (monotonic seconds), what, and what the daemon said right after it."""

    at: float
    boot: int
    kind: ProcessKind
    pid: int
    dead_at: float = 0.0  # when the process was seen ended
    probe: Sample | None = None  # /healthz, then /status, right after it ended
    recovered_at: float | None = None  # when the daemon was back at work after it (set by the checks)


class _Background:
    """A daemon thread running ``_loop`` between ``start`` and ``stop`` (``_loop`` ends when ``_stop`` is
    set)."""

    def __init__(self, name: str) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread; returns once its round in progress, if any, is done (idempotent)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        raise NotImplementedError


class FaultInjector(_Background):
    """Kills processes of the current boot's tree at random moments until stopped.

    Every ``interval`` (a range of seconds, drawn from the seeded ``rng``) it picks, among ``kinds`` with a
    process alive now, one of those killed least so far (ties drawn at random), then a random process of
    that kind, and SIGKILLs it; after it ended, ``probe`` is asked what the daemon says. ``quota`` caps the
    faults of a kind (a kind it does not name: no cap). ``on_daemon`` is called instead of a kill when the
    daemon is picked: it kills the daemon, returns when it saw it dead, and starts it again (see
    ``prooflane.testing.chaos``). ``active`` says whether to inject now.
    """

    def __init__(
        self,
        current: CurrentBoot,
        rng: random.Random,
        kinds: Iterable[ProcessKind],
        interval: tuple[float, float],
        probe: Callable[[Boot], Sample],
        *,
        quota: Mapping[ProcessKind, int] | None = None,
        active: Callable[[], bool] = lambda: True,
        on_daemon: Callable[[Boot], float] | None = None,
    ) -> None:
        self._current = current
        self._rng = rng
        self._kinds = tuple(kinds)
        self._interval = interval
        self._probe = probe
        self._quota = dict(quota or {})
        self._active = active
        self._on_daemon = on_daemon
        self.faults: list[Fault] = []
        self.errors: list[str] = []
        super().__init__("chaos-injector")

    def done(self) -> bool:
        """True when every kind has had its quota of faults (never while a kind has no quota)."""
        return all(kind in self._quota and self.count(kind) >= self._quota[kind] for kind in self._kinds)

    def _open(self, kind: ProcessKind) -> bool:
        return kind not in self._quota or self.count(kind) < self._quota[kind]

    def count(self, kind: ProcessKind) -> int:
        """Faults injected into processes of ``kind`` so far."""
        return sum(f.kind is kind for f in self.faults)

    def _loop(self) -> None:
        while not self._stop.wait(self._rng.uniform(*self._interval)):
            if self.done():
                return
            boot = self._current.get()
            if boot is None or not self._active():
                continue
            try:
                self._inject(boot)
            except (ProoflaneError, OSError) as exc:
                self.errors.append(f"fault injection failed: {exc}")

    def _inject(self, boot: Boot) -> None:
        tree = daemon_tree(boot.pid)
        present = {p.kind for p in tree} | {ProcessKind.DAEMON}
        open_kinds = [k for k in self._kinds if k in present and self._open(k)]
        if not open_kinds:
            return
        fewest = min(self.count(k) for k in open_kinds)
        kind = self._rng.choice([k for k in open_kinds if self.count(k) == fewest])
        at = time.monotonic()
        if kind is ProcessKind.DAEMON:
            assert self._on_daemon is not None, "the daemon is a target only with on_daemon"
            fault = Fault(at, boot.index, kind, boot.pid)
            self.faults.append(fault)
            fault.dead_at = self._on_daemon(boot)
            return
        victim = self._rng.choice([p for p in tree if p.kind is kind])
        if not kill_and_wait(victim.pid):
            return  # it ended by itself meanwhile: not a fault of ours
        fault = Fault(at, boot.index, kind, victim.pid, dead_at=time.monotonic())
        fault.probe = self._probe(boot)
        self.faults.append(fault)


# -- what the daemon said -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """``/healthz`` then ``/status`` of one boot, asked one after the other (monotonic seconds)."""

    boot: int
    asked_at: float  # when /healthz was asked
    healthz: int  # its HTTP status (0: no answer)
    status: dict[str, Any] | None  # the /status asked right after (None: no answer)
    healthz_secs: float = 0.0  # how long /healthz took to answer


def take_sample(boot: Boot, http: httpx.Client) -> Sample:
    """Ask ``/healthz``, then ``/status`` (``http``: a client with the boot's URL as its base)."""
    asked = time.monotonic()
    try:
        code = http.get("/healthz").status_code
    except httpx.HTTPError:  # no answer: the daemon may be down right now
        code = 0
    took = time.monotonic() - asked
    status: dict[str, Any] | None = None
    with contextlib.suppress(httpx.HTTPError, ValueError):
        answer = http.get("/status")
        if answer.status_code == 200:
            full = answer.json()
            status = {key: full[key] for key in _SAMPLED}  # what the checks read, no more
    return Sample(boot.index, asked, code, status, took)


# The parts of /status a sample keeps (the jobs' pipelines, most of its bytes, are left out).
_SAMPLED = ("seq", "invariants_ok", "invariant_violations", "illegal_events", "health", "devices", "workers")


class Sampler(_Background):
    """Samples the current boot every ``period`` seconds until stopped."""

    def __init__(self, current: CurrentBoot, period: float) -> None:
        self._current = current
        self._period = period
        self.samples: list[Sample] = []
        self._clients: dict[int, httpx.Client] = {}
        super().__init__("chaos-sampler")

    def stop(self) -> None:
        """Stop sampling; close its connections (idempotent)."""
        super().stop()
        for client in self._clients.values():
            client.close()

    def latest(self) -> Sample | None:
        """The last sample taken (read from other threads: a list append is atomic)."""
        return self.samples[-1] if self.samples else None

    def _loop(self) -> None:
        while not self._stop.wait(self._period):
            boot = self._current.get()
            if boot is None:
                continue
            client = self._clients.get(boot.index)
            if client is None:
                client = self._clients[boot.index] = httpx.Client(base_url=boot.url, timeout=10.0)
            self.samples.append(take_sample(boot, client))


@dataclass
class EventLog:
    """The event stream of one boot, from its first event, read by a thread until the stream ends."""

    boot: Boot
    events: list[dict[str, Any]] = field(default_factory=list)  # data + "_id" and "_name"
    resyncs: int = 0
    last_id: int = 0
    _thread: threading.Thread | None = None
    _client: Client | None = None

    def start(self) -> None:
        """Start reading (from event 1 of the boot)."""
        self._client = Client(self.boot.url, timeout=10.0)
        self._thread = threading.Thread(
            target=self._read, name=f"chaos-events-{self.boot.index}", daemon=True
        )
        self._thread.start()

    def wait_for(self, seq: int, timeout: float) -> bool:
        """Wait until the event with id ``seq`` was read; False if the stream ended or time ran out first."""
        deadline = time.monotonic() + timeout
        while self.last_id < seq:
            if time.monotonic() > deadline or self._thread is None or not self._thread.is_alive():
                return self.last_id >= seq
            time.sleep(0.02)
        return True

    def join(self, timeout: float) -> None:
        """Wait for the reader to end (the daemon stopped or died)."""
        if self._thread is not None:
            self._thread.join(timeout)
        if self._client is not None:
            self._client.close()

    def _read(self) -> None:
        assert self._client is not None
        resume: int | None = 0
        while resume is not None:
            resume = self._read_from(self._client, resume)

    def _read_from(self, client: Client, resume: int) -> int | None:
        """Read until the stream ends (None) or asks to resync (the id to resume from)."""
        with (
            contextlib.suppress(ProoflaneError, OSError),
            contextlib.closing(client.events(resume)) as stream,
        ):
            for event in stream:
                if event.name == "resync":  # events were missed: the checks on them are incomplete
                    self.resyncs += 1
                    seq: int = client.status()["seq"]
                    self.last_id = seq
                    return seq
                data = dict(event.data) if isinstance(event.data, dict) else {"value": event.data}
                data["_id"], data["_name"] = event.id, event.name
                self.events.append(data)
                if event.id is not None:
                    self.last_id = event.id
        return None
