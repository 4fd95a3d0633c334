"""The ``inprocess`` backend: the whole pipeline in the daemon's own process, one step at a time.

No processes and no threads: synthesis, the device section and finalization run on the event loop, with
real Groth16 on whatever keys the engine uses; on a ``cuda`` device the device section runs on the GPU
kernels (in numba's CUDA simulator where there is no GPU), as in a prover process. Deterministic, so the
engine's scheduling, retries, cancellation and failure handling are tested fast and exactly. A ``hook``
sees every step before it runs and may wait (to hold a partition at a stage), kill a worker
(:meth:`InProcessBackend.kill`) or raise (the step fails as it would in a worker process).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import WorkerDied
from .backend import OWN_SYNTHESIS, Device, DeviceBackend, DeviceWorker, Finished, RemoteError, WorkerInfo
from .cuda import CudaDevice, device_index
from .keys import drop_key, load_key, loaded_key
from .steps import device_section, finalize

__all__ = ["InProcessBackend", "InProcessWorker", "Step"]

T = TypeVar("T")


@dataclass(frozen=True)
class Step:
    """One step about to run: ``name`` is "run" (the CPU pool; ``call`` names the function), "synthesize" (a
    worker's own), "stage", "prove_start" or "finish"; ``worker_id`` for a worker's steps; ``label`` the
    partition (``job/index``) where the engine gave one; ``args`` the pool call's arguments."""

    name: str
    worker_id: str | None = None
    label: str = ""
    call: str = ""
    args: tuple[Any, ...] = ()


Hook = Callable[[Step], Awaitable[None]]


class InProcessBackend(DeviceBackend):
    """Every step on the event loop. ``hook`` (async) runs before each step."""

    name = "inprocess"

    def __init__(self, hook: Hook | None = None, *, own_synthesis: bool = False) -> None:
        super().__init__()
        self.hook = hook
        self.workers: dict[str, InProcessWorker] = {}  # the newest worker of each id
        self.steps: list[Step] = []  # every step run, in order
        # Its workers finish their partitions and synthesize the built-in kinds' themselves, as the process
        # backend's cpu workers do (a "synthesize" step of the worker's, then stage, prove_start, finish).
        self.own = own_synthesis

    def own_synthesis(self, devices: tuple[str, ...]) -> bool:
        return self.own

    async def run(self, call: Callable[..., T], *args: Any) -> T:
        await self._before(Step("run", call=call.__name__, args=args))
        return call(*args)

    def new_worker(self, worker_id: str, device: Device) -> InProcessWorker:
        worker = InProcessWorker(worker_id, device, self)
        self.workers[worker_id] = worker
        return worker

    def kill(self, worker_id: str, reason: str = "killed", culprits: frozenset[str] | None = None) -> None:
        """End the worker as if its processes died, blaming ``culprits`` (by default the partition whose
        step it is in, if any)."""
        worker = self.workers[worker_id]
        if culprits is None:
            culprits = frozenset([worker.working_on] if worker.working_on else [])
        worker.die(reason, culprits)

    async def _before(self, step: Step) -> None:
        self.steps.append(step)
        if self.hook is not None:
            await self.hook(step)
        await asyncio.sleep(0)  # every step is a point where other tasks run


class InProcessWorker(DeviceWorker):
    """A worker whose prover and finalizer are function calls; it dies only when told to."""

    def __init__(self, worker_id: str, device: Device, backend: InProcessBackend) -> None:
        super().__init__(worker_id, device)
        self._backend = backend
        self._staged: tuple[Any, Any] | None = None
        self.keys: set[str] = set()  # the keys it holds (for tests of eviction)
        self.working_on: str | None = None  # the partition whose step runs now (from its hook to its end)
        self._cuda: CudaDevice | None = None  # its GPU, on a cuda device (selected in this process)
        self.finishes_itself = backend.own
        self._own: Any = None  # the partition it synthesized itself, for its next stage

    def info(self) -> WorkerInfo:
        return WorkerInfo(self.worker_id, self.device.name, None, None)

    async def start(self) -> None:
        self.check_alive()
        index = device_index(self.device.name)
        if index is not None:
            try:
                self._cuda = CudaDevice(index)
                self.memory_bytes = self._cuda.capacity()
            except Exception as exc:
                raise WorkerDied(f"{self.worker_id}: device {self.device.name} cannot work: {exc}") from None

    async def device_need(self, key_path: str) -> tuple[int, int] | None:
        return None if self._cuda is None else self._cuda.need(load_key(key_path))

    async def synthesize_own(self, call: Callable[[Any], tuple[Any, float]], task: Any, label: str) -> float:
        if not self.finishes_itself:
            return await super().synthesize_own(call, task, label)
        async with self._working("synthesize", label):
            self._own, ms = _remote(lambda: call(task))
            self.check_alive()
        return float(ms)

    async def _stage(self, key_path: str, synthesized: Any, label: str) -> None:
        async with self._working("stage", label):
            if synthesized == OWN_SYNTHESIS:
                synthesized, self._own = self._own, None
            self.keys.add(key_path)
            key = load_key(key_path)
            if (cuda := self._cuda) is not None:
                _remote(lambda: cuda.upload(key))
            self._staged = (key, synthesized)

    async def _prove_start(self, label: str) -> tuple[Any, float]:
        async with self._working("prove_start", label):
            assert self._staged is not None, "prove_start without a staged partition"
            key, synthesized = self._staged
            self._staged = None
            kind = "cpu" if self._cuda is None else "cuda"
            fields, ms = _remote(lambda: device_section(key, synthesized, kind))
            self.check_alive()
        return fields, ms

    async def finish(self, key_path: str, state: Any, label: str = "") -> Finished:
        async with self._working("finish", label):
            key = load_key(key_path)
            finished = _remote(lambda: finalize(key, state))
            self.check_alive()
        return finished

    @contextlib.asynccontextmanager
    async def _working(self, name: str, label: str) -> AsyncIterator[None]:
        """The step ``name`` of partition ``label``: its hook, then its work (``working_on`` meanwhile)."""
        self.working_on = label or None
        try:
            await self._step(name, label)
            yield
        finally:
            self.working_on = None

    async def drop_key(self, key_path: str) -> None:
        self.check_alive()
        self.keys.discard(key_path)
        if not any(key_path in w.keys for w in self._backend.workers.values() if w is not self):
            key = loaded_key(key_path)
            if self._cuda is not None and key is not None:
                self._cuda.release(key)  # so are their resident bases (one device cache per process)
            drop_key(key_path)  # keys are shared by every worker of this process

    async def _step(self, name: str, label: str) -> None:
        self.check_alive()
        try:
            await self._backend._before(Step(name, self.worker_id, label))
        except RemoteError:
            raise
        except Exception as exc:  # a hook's failure is the step's failure, as in a worker process
            raise RemoteError(f"{type(exc).__name__}: {exc}") from exc
        self.check_alive()  # killed while the hook held the step

    def _end(self) -> None:
        self._staged = None


def _remote(call: Callable[[], T]) -> T:
    """Run a proving step; its failure reads as a worker process's would (RemoteError, the text kept)."""
    try:
        return call()
    except RemoteError:  # a DeviceFault among them: kept as it is
        raise
    except Exception as exc:
        raise RemoteError(f"{type(exc).__name__}: {exc}") from exc
