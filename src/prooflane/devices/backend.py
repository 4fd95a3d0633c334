"""Devices behind one backend interface: the engine talks to :class:`DeviceBackend` and nothing else.

A backend owns everything that computes: the CPU-side pool (synthesis, key preparation, key inspection,
through :meth:`DeviceBackend.run`) and the device workers (:meth:`DeviceBackend.new_worker`). A worker proves
one partition at a time in two steps, mirroring a GPU prover:

- :meth:`DeviceWorker.prove`: stage the partition (load its key) outside the device lock, then, under the
  lock its device's workers share, ask the engine for a lease (``grant``) and run ``prove_start`` (the
  device section);
- :meth:`DeviceWorker.finish`: ``prove_finish`` and verification on the worker's finalizer, while the
  worker already proves its next partition.

A worker that dies (any of its processes, actors or threads) resolves :meth:`DeviceWorker.wait_dead` with a
reason, and every call on it raises :class:`~prooflane.errors.WorkerDied`; the engine then retries what it
held and asks the backend for a new worker. Backends:

- ``process`` (:class:`ProcessBackend`): a prover and a finalizer process per worker, a process pool for
  synthesis. The default.
- ``ray`` (:class:`RayBackend`): synthesis as Ray tasks, each worker a prover and a finalizer actor on a
  Ray cluster's node; large data through Ray's object store (the ``ray`` extra; docs/ray.md).
- ``inprocess`` (:class:`InProcessBackend`): everything in the daemon's own process, one step at a time on the
  event loop, deterministic: for fast tests, with hooks to pause steps and kill workers.

Devices are of two kinds, on the same backends: ``cpu`` (a core's worth of proving) and ``cuda`` (a GPU: the
prover runs the device section on the kernels, :mod:`.cuda`). A worker of a device with memory of its own
says how much (``memory_bytes``, once started) and what a key needs of it (:meth:`DeviceWorker.device_need`),
so the engine budgets each such device's memory as it budgets the host's.

A new backend subclasses :class:`DeviceBackend` and :class:`DeviceWorker`; the
engine does not change. See docs/engine.md.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..errors import ProoflaneError, WorkerDied

__all__ = [
    "OWN_SYNTHESIS",
    "Device",
    "DeviceBackend",
    "DeviceFault",
    "DeviceWorker",
    "Finished",
    "PoolProcessDied",
    "PoolReplaced",
    "PoolTimedOut",
    "RemoteError",
    "WorkerDied",
    "WorkerInfo",
]

T = TypeVar("T")


OWN_SYNTHESIS = "own"
"""What the engine gives a worker's ``prove`` for the partition the worker synthesized itself."""


class RemoteError(ProoflaneError):
    """Raised when work failed inside a worker (the worker itself is fine); carries the failure's text."""


class DeviceFault(RemoteError):
    """Raised when the device itself failed in a worker (a CUDA error): the worker is replaced, since its
    device context may be lost, and the partition is tried again."""


class PoolProcessDied(ProoflaneError):
    """Raised when a process of the CPU-side pool died while it held work; the work may be retried."""


class PoolTimedOut(ProoflaneError):
    """Raised when a call on the CPU-side pool ran past its time limit and its process was ended; the work
    is not retried (it would run as long again)."""


class PoolReplaced(PoolProcessDied):
    """Raised when the CPU-side pool was replaced though none of its processes died with the work (a process
    could not be started, or the forkserver behind the pool ended): the work is retried, blaming nothing."""


@dataclass(eq=False)
class Device:
    """A device (``cpu:0``, ``cuda:1``), the node it is on, and the lock its workers share."""

    name: str
    kind: str = "cpu"
    node: str | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)


@dataclass(frozen=True)
class WorkerInfo:
    """A worker's identity and its processes, as tests and diagnostics see them."""

    worker_id: str
    device: str
    prover_pid: int | None
    finalizer_pid: int | None


@dataclass(frozen=True)
class Finished:
    """What a finalizer hands back: the proof (snarkjs JSON), its public signals, whether it verified."""

    proof: dict[str, Any]
    public: list[str]
    verified: bool
    ms: float


class DeviceWorker(ABC):
    """One worker of a device. Calls come from the engine's event loop, one ``prove`` at a time.

    Subclasses implement :meth:`start`, :meth:`_stage`, :meth:`_prove_start`, :meth:`finish`,
    :meth:`drop_key` and :meth:`_end`; the device lock and the death bookkeeping live here.
    """

    finishes_itself = False
    """Whether the worker finishes each partition itself before it takes the next (a ``cpu`` worker of the
    process backend: its prover, with no finalizer beside it): the engine waits for a partition's finish
    before it hands the worker another, which would otherwise wait in the worker while another is free.
    Such a worker also synthesizes the built-in kinds' partitions it proves (:meth:`synthesize_own`): the
    whole partition runs in one process, as a plain prover runs it."""

    async def synthesize_own(self, call: Callable[[Any], tuple[Any, float]], task: Any, label: str) -> float:
        """``call(task)``, a built-in kind's partition synthesized in the worker itself, kept there for the
        next ``prove``, which is given ``OWN_SYNTHESIS`` instead of a synthesized partition; milliseconds.
        Only a worker that ``finishes_itself`` does."""
        raise NotImplementedError(f"{type(self).__name__} synthesizes nothing of its own")

    def __init__(self, worker_id: str, device: Device) -> None:
        self.worker_id = worker_id
        self.device = device
        self.death: str | None = None  # why it died, once it did
        # The partitions (labels) whose own work ran in the part of the worker that died, set with the death;
        # None: not known, so each partition the worker held may be to blame.
        self.culprits: frozenset[str] | None = None
        self._dead = asyncio.Event()
        # Called once, with the reason, the moment the worker dies (on the event loop, where its backend
        # notices): the engine reports the death at once, so no view shows it alive in between.
        self.on_death: Callable[[str], None] | None = None
        # The device's own memory in bytes, as the worker found it when it started (None: a device without
        # memory of its own to budget, a cpu one).
        self.memory_bytes: int | None = None

    @property
    def dead(self) -> bool:
        """True once the worker died or was ended, or a part of it was seen to end: its death is reported a
        moment later, once the reason is known (a process's exit status), and health and the lease ask this
        meanwhile."""
        return self._dead.is_set() or self._part_ended()

    def _part_ended(self) -> bool:
        """Whether a part of the worker (a process) has been seen to end before its death is reported."""
        return False

    @abstractmethod
    async def start(self) -> None:
        """Bring the worker up; returns once it can prove. Raises WorkerDied when it cannot start."""

    async def prove(
        self, key_path: str, synthesized: Any, grant: Callable[[], bool], label: str = ""
    ) -> tuple[Any, float] | None:
        """Stage the partition outside the device lock, then under it call ``grant()`` and, when it says
        yes, run the device section. Returns (proving state, milliseconds), or None when not granted."""
        await self._stage(key_path, synthesized, label)
        async with self.device.lock:
            if not grant():
                return None
            return await self._prove_start(label)

    @abstractmethod
    async def _stage(self, key_path: str, synthesized: Any, label: str) -> None: ...

    @abstractmethod
    async def _prove_start(self, label: str) -> tuple[Any, float]: ...

    @abstractmethod
    async def finish(self, key_path: str, state: Any, label: str = "") -> Finished:
        """Run ``prove_finish`` and verify on the worker's finalizer."""

    @abstractmethod
    async def drop_key(self, key_path: str) -> None:
        """Forget a proving key (its memory was evicted from the budget)."""

    async def map_tables(self, key_path: str) -> bool:
        """Prove the key over the fixed-base tables stored for it (``msm_tables = "auto"``, once they are
        built); whether it does now. A worker that keeps no tables (in the daemon's process, on Ray, on a
        cuda device) answers False and proves as before."""
        return False

    async def device_need(self, key_path: str) -> tuple[int, int] | None:
        """(device bytes of the key's resident bases, device bytes one device section needs beside them),
        for a device whose memory is budgeted (``memory_bytes`` set); None for any other."""
        return None

    async def wait_dead(self) -> str:
        """Return, with the reason, once the worker has died."""
        await self._dead.wait()
        return self.death or "ended"

    def die(self, reason: str, culprits: frozenset[str] | None = None) -> None:
        """The worker is gone (a process of it ended, or the engine gave up on it): end the rest of it.
        ``culprits``: the partitions whose own work was running where it died (None: not known)."""
        first = self.death is None
        if first:
            self.death, self.culprits = reason, culprits
        self._dead.set()
        self._end()
        if first and self.on_death is not None:
            self.on_death(reason)

    def kill(self) -> None:
        """End the worker now (idempotent)."""
        self.die(self.death or "ended by the engine")

    def check_alive(self) -> None:
        """Raise WorkerDied if the worker is dead."""
        if self.dead:
            raise WorkerDied(f"worker {self.worker_id} is dead: {self.death or 'a process of it ended'}")

    @abstractmethod
    def _end(self) -> None: ...

    @abstractmethod
    def info(self) -> WorkerInfo:
        """The worker's ids (and process ids where it has processes)."""


class DeviceBackend(ABC):
    """Where the engine's work runs. Started once, before any worker; stopped once, after all."""

    name: str = "backend"

    def __init__(self) -> None:
        self._devices: dict[str, Device] = {}

    def device(self, name: str) -> Device:
        """The one :class:`Device` (and lock) of ``name``."""
        device = self._devices.get(name)
        if device is None:
            device = self._devices[name] = Device(name, name.split(":")[0], self.node_of(name))
        return device

    def node_of(self, device: str) -> str | None:
        """The node a device is on (None: this machine)."""
        return None

    async def start(self) -> None:  # noqa: B027  (a backend without a pool has nothing to start)
        """Start the CPU-side pool and whatever workers need before they can start."""

    async def stop(self) -> None:  # noqa: B027
        """End every process or thread the backend started."""

    @abstractmethod
    async def run(self, call: Callable[..., T], *args: Any) -> T:
        """Run ``call(*args)`` on the CPU-side pool (module-level functions and picklable arguments).

        Raises what ``call`` raised, or :class:`PoolProcessDied` when the process running it died.
        """

    async def synthesize(
        self, call: Callable[[Any], tuple[Any, float]], task: Any, *, limit: float | None = None
    ) -> tuple[Any, float]:
        """``call(task)``, a partition's synthesis, as :meth:`run` does it: (the synthesized partition,
        milliseconds). The engine hands what comes back to a worker's ``prove`` as it is; a backend may
        give it in a form of its own that its workers open (the process backend's :mod:`.parcel`).

        Past ``limit`` seconds the synthesis is ended (its process, where the backend has one of its own)
        and :class:`PoolTimedOut` raised."""
        try:
            async with asyncio.timeout(limit):
                return await self.run(call, task)
        except TimeoutError:
            raise PoolTimedOut(f"it ran past its time limit of {limit:g} s, and was ended") from None

    def own_synthesis(self, devices: tuple[str, ...]) -> bool:
        """Whether every worker of ``devices`` synthesizes the built-in kinds' partitions it proves itself
        (:attr:`DeviceWorker.finishes_itself`): the engine then hands those partitions to free workers instead
        of the synthesis pool."""
        return False

    @abstractmethod
    def new_worker(self, worker_id: str, device: Device) -> DeviceWorker:
        """A new, not yet started worker of ``device``."""
