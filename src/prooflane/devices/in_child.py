"""What runs inside a worker's processes and the synthesis pool's: the process's own hygiene (Ctrl-C left
to the daemon, one native thread, a lower priority, its name, exit with the daemon) and the two request
servers, the prover's and the finalizer's.

A request is ``(operation, *arguments)``; the reply is ``("ok", value)``, ``("error", text)``, or
``("fault", text)`` when the device itself failed (a CUDA error: :class:`~.backend.DeviceFault`). The
operations a process serves are the public methods of its side (:class:`ProverSide`,
:class:`FinalizerSide`), and nothing else.
"""

from __future__ import annotations

import contextlib
import multiprocessing.connection
import os
import select
import signal
import threading
from collections.abc import Callable, MutableMapping
from typing import Any

import psutil

from ..groth16.arithmetic import THREADS_ENV
from . import frames
from .backend import OWN_SYNTHESIS, DeviceFault, Finished
from .cuda import CudaDevice
from .keys import drop_key, give_back_when_grown, load_key, loaded_key
from .parcel import Parcel, opened
from .roles import Role
from .steps import DEVICE_SECTION_BASES, FINALIZE_BASES, device_section, early_b2, finalize

__all__ = [
    "FinalizerSide",
    "ProverSide",
    "below_this_process",
    "exit_with",
    "finalizer_main",
    "ignore_interrupts",
    "limit_native_threads",
    "name_process",
    "prover_main",
    "serve",
]

Connection = multiprocessing.connection.Connection


def ignore_interrupts() -> None:
    """In a worker process: leave Ctrl-C and SIGTERM to the daemon, which ends its workers itself on the way
    out. A stop signals the daemon's whole process group at once (systemd's, ``prooflane service stop``,
    the fleet's): a worker that died of it first would be a death, a retry and a health alarm in the log of
    a stop that went as planned. A worker still ends with the daemon, whatever ends it (:func:`exit_with`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def limit_native_threads(environ: MutableMapping[str, str] | None = None) -> None:
    """In a worker process, before any proving: one rayon thread unless ``RAYON_NUM_THREADS`` is set.

    py-arkworks-bls12381's MSMs (where the C extension's do not run) and zksnake's rayon pool otherwise
    spread over every core by themselves, which defeats one-partition-per-core devices. Rayon reads the
    variable when its pool is first used, so this runs first thing in every prover, finalizer and synthesis
    process. An explicit value in the daemon's environment is kept.

    The C extension's threads are the daemon's ``threads_per_call`` (``exit_with`` sets
    ``PROOFLANE_THREADS``).
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


def exit_with(daemon_pid: int, niceness: int = 0, name: str = "", threads: int = 0) -> None:
    """In a child process: ignore Ctrl-C, run ``niceness`` below the daemon, show as ``name``, run the C
    extension's calls on ``threads`` threads (unless 0), and exit as soon as the daemon process
    ``daemon_pid`` is gone.

    A child blocks on a pipe or queue whose other end the daemon holds, so it would never see the daemon
    die (``kill -9``) if the end were shared; a thread waits on the daemon's pidfd and ends this process then.
    """
    ignore_interrupts()
    limit_native_threads()
    if threads > 0:
        os.environ[THREADS_ENV] = str(threads)
    os.nice(niceness)
    if name:
        name_process(name)
    try:
        pidfd = os.pidfd_open(daemon_pid)
    except (OSError, AttributeError):  # the daemon is already gone, or no pidfd on this system
        if not psutil.pid_exists(daemon_pid):
            os._exit(0)
        return

    def watch() -> None:
        select.select([pidfd], [], [])
        os._exit(0)

    threading.Thread(target=watch, name="prooflane-daemon-watch", daemon=True).start()


class _Side:
    """What both processes of a worker serve: identity, and loading and dropping keys (only the base
    sections this side uses, without the coefficient matrices: only synthesis reads those)."""

    bases: tuple[str, ...] = ()
    tables = False  # build the bases' fixed-base tables too (the config's ``msm_tables = true``)

    def __init__(self) -> None:
        self._mapped: set[str] = set()  # keys proven over their stored tables (``map_tables``)

    def ping(self) -> int:
        return os.getpid()

    def load(self, key_path: str) -> None:
        self._key(key_path)

    def map_tables(self, key_path: str) -> bool:
        """Prove the key over its stored fixed-base tables from now on (``msm_tables = "auto"``, once the
        daemon had them built); whether every section of this side that has tables is over them now."""
        from ..groth16.prover import key_table_bytes, tabulated

        self._mapped.add(key_path)
        key = self._key(key_path)
        over, shape = set(tabulated(key)), (key.curve, key.n_vars, key.n_public, key.domain_size)
        return all(name in over for name in self.bases if key_table_bytes(*shape, (name,)))

    def drop(self, key_path: str) -> None:
        self._mapped.discard(key_path)
        drop_key(key_path)

    def _key(self, key_path: str) -> Any:
        tables = self.tables or (None if key_path in self._mapped else False)  # None: the stored ones only
        return load_key(key_path, self.bases, matrices=False, tables=tables)


class ProverSide(_Side):
    """The prover: stage a partition outside the device lock, run its device section under it, on the
    device it was told of (a ``cpu`` one unless :meth:`device` said otherwise)."""

    bases: tuple[str, ...] = DEVICE_SECTION_BASES

    def __init__(self) -> None:
        super().__init__()
        self._staged: tuple[Any, Any] | None = None  # (key, synthesized) for the next ``start``
        self._cuda: CudaDevice | None = None  # the GPU, on a cuda device
        self._own: Any = None  # the partition this process synthesized itself, for the next ``stage``

    def device(self, kind: str, index: int) -> int | None:
        """Use device ``kind:index`` from now on (asked once, before any partition); its memory in bytes, or
        None for a ``cpu`` device, which has none of its own."""
        if kind != "cuda":
            return None
        self._cuda = CudaDevice(index)
        self.bases = ()  # the kernels read the key's rows: no library points for the cpu path's MSMs
        return self._cuda.capacity()

    def need(self, key_path: str) -> tuple[int, int]:
        """Device bytes of the key's resident bases and of one device section (a cuda device only)."""
        if self._cuda is None:
            raise RuntimeError("need on a device without memory of its own")
        return self._cuda.need(self._key(key_path))

    def synthesize(self, call: Callable[[Any], tuple[Any, float]], task: Any) -> float:
        """``call(task)``, a built-in kind's partition synthesized here (a worker that finishes itself),
        kept for the next ``stage``; milliseconds."""
        self._own = None
        self._own, ms = call(task)
        return float(ms)

    def stage(self, key_path: str, synthesized: Any) -> None:
        key = self._key(key_path)
        if self._cuda is not None:
            self._cuda.upload(key)  # once per key: the bases stay resident until dropped
        if synthesized == OWN_SYNTHESIS:
            if self._own is None:
                raise RuntimeError("stage of its own synthesis, but none was made")
            synthesized, self._own = self._own, None
        self._staged = (key, opened(synthesized))

    def start(self) -> tuple[dict[str, Any], float]:
        if self._staged is None:
            raise RuntimeError("start without a staged partition")
        key, synthesized = self._staged
        self._staged = None
        return device_section(key, synthesized, "cpu" if self._cuda is None else "cuda")

    def drop(self, key_path: str) -> None:
        key = loaded_key(key_path)
        if self._cuda is not None and key is not None:
            self._cuda.release(key)
        drop_key(key_path)

    def finish(self, key_path: str, fields: dict[str, Any], label: str) -> Finished:
        """``prove_finish`` and verification of the partition just proven, here (a worker with no finalizer
        beside its prover: ``finishes``), its G2 MSM with them."""
        return finalize(self._key(key_path), fields)


class FinalizerSide(_Side):
    """The finalizer: the G2 MSM during the device section, then ``prove_finish`` and verification."""

    bases = FINALIZE_BASES

    def __init__(self) -> None:
        super().__init__()
        # label -> (witness, its G2 MSM), made during the device section; at most one partition ahead
        self._early: dict[str, tuple[Any, Any]] = {}

    def b2(self, key_path: str, label: str, witness: Any) -> None:
        """``witness``: the partition's, or its whole :class:`~.parcel.Parcel`."""
        if isinstance(witness, Parcel):
            # a copy (2 MB at 62,500 rows): kept until the partition's finish, it would otherwise hold the
            # whole file's pages mapped after the daemon let go of them
            witness = witness.open().witness.copy()
        self._early = {label: (witness, early_b2(self._key(key_path), witness))}

    def finish(self, key_path: str, fields: dict[str, Any], label: str) -> Finished:
        import numpy as np

        witness, b2 = self._early.pop(label, (None, None))
        if witness is None or not np.array_equal(witness, fields["witness"]):
            b2 = None  # not computed for this partition's witness: finalize computes it
        return finalize(self._key(key_path), fields, b2)


def serve(conn: Connection, side: _Side) -> None:
    """Answer requests on ``conn`` with ``side``'s public methods until the pipe closes."""
    ignore_interrupts()
    while True:
        try:
            op, *args = frames.receive(conn)
        except (EOFError, OSError):
            return
        try:
            if op.startswith("_") or not callable(method := getattr(side, op, None)):
                raise ValueError(f"unknown request {op!r}")
            reply: tuple[str, Any] = ("ok", method(*args))
        except DeviceFault as exc:  # the device failed, not the work: the parent replaces the worker
            reply = ("fault", str(exc))
        except Exception as exc:
            reply = ("error", f"{type(exc).__name__}: {exc}")
        frames.send(conn, reply)
        del args, reply  # a partition's vectors are not kept while the process waits for the next request
        if op in _HEAVY:
            give_back_when_grown()


# Requests after which the process has freed large temporaries (a prove's vectors, a key's points): glibc
# keeps freed heap for reuse, and a 2^20 prover held 265 MB less after giving it back (once it grew by
# TRIM_GROWTH_BYTES since it last did: a prover of one partition size keeps that working memory).
_HEAVY = frozenset({"start", "b2", "finish", "drop"})  # (a synthesis here is followed by its start)


def prover_main(
    conn: Connection, daemon_pid: int, threads: int = 0, tables: bool = False, finishes: bool = False
) -> None:
    """A worker's prover process (``threads``: each MSM's and NTT's, 0 for the prover's default; ``tables``:
    keep fixed-base tables of its keys' bases; ``finishes``: it finishes its partitions itself, with the
    finalizer's bases too)."""
    exit_with(daemon_pid, name=Role.PROVER, threads=threads)
    side = ProverSide()
    side.tables = tables
    if finishes:
        side.bases = tuple(dict.fromkeys(DEVICE_SECTION_BASES + FINALIZE_BASES))
    serve(conn, side)


def finalizer_main(conn: Connection, daemon_pid: int, threads: int = 0, tables: bool = False) -> None:
    """A worker's finalizer process (``threads`` and ``tables`` as for the prover)."""
    exit_with(daemon_pid, name=Role.FINALIZER, threads=threads)
    side = FinalizerSide()
    side.tables = tables
    serve(conn, side)
