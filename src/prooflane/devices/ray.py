"""The ``ray`` backend: synthesis as Ray tasks, each device worker as two Ray actors, on a Ray cluster.

The daemon keeps the scheduler, the memory budget, the journal and the status tracker; Ray places the work
on nodes by the resources each piece declares:

- :meth:`RayBackend.run` runs a CPU-side call (synthesis, key preparation, key inspection) as a Ray task
  declaring ``ray_synthesis_cpus`` and ``ray_synthesis_memory_bytes``. A synthesized partition stays in
  Ray's object store: the task has two returns, the daemon waits for the small one (milliseconds taken) and
  hands the other, an ``ObjectRef``, to the worker, whose actor reads the data from the object store.
- A worker is a *prover* actor and a *finalizer* actor, both on the node of its device. The prover declares
  its share of the device (``ray_device_cpus / workers_per_device`` CPUs for a ``cpu`` device, a share of
  one GPU for ``cuda``); the finalizer declares none (it is a fraction of a partition's work, as with the
  process backend's finalizer process). Two actors, not one with two concurrency groups: zksnake's MSMs
  hold the GIL, so a finalizer thread would serialize with the next ``prove_start``. Both keep the proving
  keys they loaded (:mod:`prooflane.devices.keys`) until told to drop one. The proving state also stays in
  the object store, from the prover's return to the finalizer's argument.
- Liveness: each actor runs one call that never returns (its own concurrency group); when the actor dies
  (killed, its process or node gone) that call fails with ``RayActorError`` and the worker dies, so the
  engine retries what it held and asks for a new worker.
- Each device is placed on one node (round robin over the live nodes that have its resource); its workers
  run there, and :attr:`Device.node` names it (the Ray node id). When that node is gone, the next worker of
  the device is placed on another live node and ``Device.node`` follows.

Ray is imported only when the backend starts: without the ``ray`` extra nothing else changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

from ..config import Config, RaySettings
from ..errors import ProoflaneError, WorkerDied
from .backend import Device, DeviceBackend, DeviceWorker, Finished, PoolProcessDied, RemoteError, WorkerInfo
from .in_child import below_this_process, limit_native_threads
from .steps import DEVICE_SECTION_BASES, FINALIZE_BASES, device_section, early_b2, finalize

__all__ = ["RayBackend", "RayWorker"]

T = TypeVar("T")

# Calls whose first result is large data for a worker: it stays in the object store (an ObjectRef).
KEEP_REMOTE = frozenset({"prooflane.kinds.synthesis.synthesize_partition"})


class RayUnavailable(ProoflaneError):
    """Raised when the ray backend is configured but Ray is not installed (``pip install prooflane[ray]``)."""


class RayBackend(DeviceBackend):
    """Synthesis as Ray tasks and workers as Ray actors, on the cluster at ``settings.address``.

    ``address``: ``local`` starts a Ray instance inside the daemon's process (stopped with it); ``auto``
    joins the cluster this machine belongs to (``ray start``); ``ray://host:10001`` or ``host:6379`` joins
    that cluster. When Ray is already initialized in this process (tests, notebooks), that one is used.
    """

    name = "ray"

    def __init__(
        self, settings: RaySettings, *, workers_per_device: int, niceness: int = 0, local_cpus: float = 0
    ) -> None:
        super().__init__()
        self.settings = settings
        self._local_cpus = local_cpus  # logical CPUs of a "local" instance (0: Ray counts the cores)
        self._workers_per_device = workers_per_device
        # Absolute: the processes of Ray are not the daemon's children.
        self._niceness = below_this_process(niceness)
        self._owns_ray = False
        self._task: Any = None  # the remote functions that run pool calls, and their resources
        self._split_task: Any = None
        self._task_options: dict[str, Any] = {}
        self._actors: dict[str, Any] = {}  # "prover"/"finalizer" -> actor class
        self._nodes: list[tuple[str, dict[str, float]]] = []  # live nodes (id, resources), head first
        self._assigned: dict[str, str] = {}  # device name -> node id
        self._placing: dict[str, asyncio.Lock] = {}
        self._failed: dict[str, str] = {}  # device name -> the node its last worker failed to start on
        self.workers: dict[str, RayWorker] = {}  # the newest worker of each id (diagnostics, fault tests)

    @classmethod
    def from_config(cls, config: Config) -> RayBackend:
        """The backend a :class:`~prooflane.config.Config` with a ``[ray] address`` asks for."""
        settings = config.ray
        resolved = config.resolved()
        # A local instance gets logical CPUs for every device and every synthesis slot, so the config's
        # devices and synthesis all fit (the operating system shares the cores, as with processes).
        local_cpus = len(resolved.devices) * settings.device_cpus
        local_cpus += resolved.synthesis_workers * settings.synthesis_cpus
        return cls(
            settings,
            workers_per_device=config.workers_per_device,
            niceness=config.worker_niceness,
            local_cpus=local_cpus,
        )

    async def start(self) -> None:
        ray = _ray()
        if not ray.is_initialized():
            options: dict[str, Any] = {"log_to_driver": False}
            if self.settings.address == "local":
                # "local" makes Ray start a new instance even where `ray start` left one on this machine
                # (with no address, ray.init would join that one instead)
                options["address"] = "local"
                options["include_dashboard"] = self.settings.include_dashboard
                if self._local_cpus:
                    options["num_cpus"] = math.ceil(self._local_cpus)
            else:
                options["address"] = self.settings.address
            with _signal_handlers_kept():  # ray.init sets its own SIGTERM handler; the daemon's stays
                ray.init(**options)
            self._owns_ray = True
        self._task_options = {
            "num_cpus": self.settings.synthesis_cpus,
            "memory": self.settings.synthesis_memory_bytes or None,
            "max_retries": 2,  # a lost synthesized partition is rebuilt from its task (Ray's lineage)
        }
        self._task = ray.remote(_run_call)
        self._split_task = ray.remote(_split_first)
        groups = {"concurrency_groups": {"watch": 1}, "max_restarts": 0}
        self._actors = {
            "prover": ray.remote(**groups)(_Prover),
            "finalizer": ray.remote(**groups)(_Finalizer),
        }
        self._nodes = await asyncio.to_thread(_live_nodes)

    async def stop(self) -> None:
        for worker in self.workers.values():
            worker.kill()
        if self._owns_ray:
            _ray().shutdown()
            self._owns_ray = False

    async def run(self, call: Callable[..., T], *args: Any) -> T:
        if self._task is None:
            raise PoolProcessDied("the ray backend is not started")
        if f"{call.__module__}.{call.__qualname__}" in KEEP_REMOTE:
            options = self._task_options | {"num_returns": 2}
            data, ms = self._split_task.options(**options).remote(call, *args)
            await _pool_result(ms)  # raises what the call raised; the data itself stays in the object store
            return cast(T, (data, await ms))
        return cast(T, await _pool_result(self._task.options(**self._task_options).remote(call, *args)))

    def new_worker(self, worker_id: str, device: Device) -> RayWorker:
        worker = RayWorker(worker_id, device, self)
        self.workers[worker_id] = worker
        return worker

    def node_of(self, device: str) -> str | None:
        """The Ray node id the device's workers run on (assigned round robin over live nodes)."""
        if device not in self._assigned:
            node = self._pick(device, avoid=None)
            if node is not None:
                self._assigned[device] = node
        return self._assigned.get(device)

    async def place(self, device: Device, *, avoid: str | None) -> str | None:
        """The node for a new worker of ``device``: its node while that is live, else another live one."""
        lock = self._placing.setdefault(device.name, asyncio.Lock())
        async with lock:
            self._nodes = await asyncio.to_thread(_live_nodes)
            live = {node for node, _ in self._nodes}
            if device.node not in live or device.node == avoid:
                node = self._pick(device.name, avoid=avoid)
                if node is not None:
                    device.node = self._assigned[device.name] = node
            return device.node

    def actor_options(self, device: Device, role: str, node: str | None) -> dict[str, Any]:
        """Resources and placement of a worker's ``role`` actor ("prover" or "finalizer")."""
        share = 1 / self._workers_per_device
        options: dict[str, Any] = {"num_cpus": 0}
        if role == "prover":
            if device.kind == "cuda":
                options["num_gpus"] = share
            else:
                options["num_cpus"] = self.settings.device_cpus * share
            if self.settings.worker_memory_bytes:
                options["memory"] = self.settings.worker_memory_bytes
        if node is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
                node, soft=False, _fail_on_unavailable=True
            )
        return options

    def _pick(self, device: str, avoid: str | None) -> str | None:
        resource = "GPU" if device.split(":")[0] == "cuda" else "CPU"
        nodes = [n for n, res in self._nodes if res.get(resource, 0) > 0 and n != avoid]
        nodes = nodes or [n for n, res in self._nodes if res.get(resource, 0) > 0]
        if not nodes:
            return None
        load = {n: sum(1 for d, m in self._assigned.items() if m == n and d != device) for n in nodes}
        return min(nodes, key=lambda n: (load[n], nodes.index(n)))


class RayWorker(DeviceWorker):
    """One device worker: a prover actor and a finalizer actor on its device's node."""

    def __init__(self, worker_id: str, device: Device, backend: RayBackend) -> None:
        super().__init__(worker_id, device)
        self._backend = backend
        self.prover: Any = None
        self.finalizer: Any = None
        self.node: str | None = None  # the node its actors run on, once started
        self._pids: dict[str, int] = {}
        self._watches: list[asyncio.Task[None]] = []
        self._staged: tuple[str, Any] = ("", None)  # key path and data of the partition staged last
        self._early: dict[str, Any] = {}  # label -> the finalizer's G2 MSM of that partition (an ObjectRef)

    def info(self) -> WorkerInfo:
        return WorkerInfo(
            self.worker_id, self.device.name, self._pids.get("prover"), self._pids.get("finalizer")
        )

    async def start(self) -> None:
        """Place both actors on the device's node and wait until they answer; then watch them."""
        backend = self._backend
        node = await backend.place(self.device, avoid=backend._failed.get(self.device.name))
        niceness = backend._niceness
        for role in ("prover", "finalizer"):
            actor = backend._actors[role].options(**backend.actor_options(self.device, role, node))
            setattr(self, role, actor.remote(niceness))
        try:
            async with asyncio.timeout(backend.settings.start_timeout_secs):
                answers = await asyncio.gather(self.prover.ping.remote(), self.finalizer.ping.remote())
        except (TimeoutError, _ray().exceptions.RayError) as exc:
            if node is not None:
                backend._failed[self.device.name] = node  # the next worker of the device tries elsewhere
            reason = "did not start in time" if isinstance(exc, TimeoutError) else _first_line(exc)
            self.die(f"{self.worker_id} on node {node}: {reason}")
            raise WorkerDied(f"worker {self.worker_id} cannot start: {reason}") from None
        backend._failed.pop(self.device.name, None)
        (self._pids["prover"], self.node), (self._pids["finalizer"], _) = answers
        for role in ("prover", "finalizer"):
            self._watches.append(
                asyncio.create_task(self._watch(role), name=f"watch {self.worker_id} {role}")
            )

    async def _stage(self, key_path: str, synthesized: Any, label: str) -> None:
        await self._call(self.prover.stage.remote(key_path, synthesized))
        self._staged = (key_path, synthesized)

    async def _prove_start(self, label: str) -> tuple[Any, float]:
        self.check_alive()
        state, ms = self.prover.start.options(num_returns=2).remote()
        # The finalizer computes the G2 MSM meanwhile (it needs only the witness); its result reaches the
        # partition's finish as an argument, so a failure here is that finish's failure.
        key_path, synthesized = self._staged
        self._early[label] = self.finalizer.b2.remote(key_path, synthesized)
        return state, await self._call(ms)  # the proving state stays in the object store

    async def finish(self, key_path: str, state: Any, label: str = "") -> Finished:
        self.check_alive()
        b2 = self._early.pop(label, None)
        finished: Finished = await self._call(self.finalizer.finish.remote(key_path, state, b2))
        return finished

    async def drop_key(self, key_path: str) -> None:
        self.check_alive()
        await asyncio.gather(
            self._call(self.prover.drop.remote(key_path)), self._call(self.finalizer.drop.remote(key_path))
        )

    async def _call(self, ref: Any) -> Any:
        """Await a call's result: the worker's failure is RemoteError, the actor's death WorkerDied."""
        exceptions = _ray().exceptions
        try:
            return await ref
        except exceptions.RayTaskError as exc:
            cause = exc.cause if isinstance(exc.cause, Exception) else exc
            raise RemoteError(f"{type(cause).__name__}: {_first_line(cause)}") from None
        except exceptions.RayError as exc:  # the actor died, or data it needed was lost with a node
            self.die(f"{self.worker_id}: {_first_line(exc)}")
            raise WorkerDied(f"worker {self.worker_id} died: {_first_line(exc)}") from None

    async def _watch(self, role: str) -> None:
        actor = getattr(self, role)
        try:
            await actor.hold.options(concurrency_group="watch").remote()
        except _ray().exceptions.RayError as exc:
            self.die(f"{self.worker_id} {role} actor died: {_first_line(exc)}")

    def _end(self) -> None:
        for watch in self._watches:
            if watch is not asyncio.current_task():
                watch.cancel()
        if self.prover is None:
            return
        ray = _ray()
        for actor in (self.prover, self.finalizer):
            with contextlib.suppress(Exception):  # already gone, or Ray itself stopped
                ray.kill(actor, no_restart=True)


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayUnavailable("the ray backend needs Ray: pip install 'prooflane[ray]'") from None
    return ray


@contextlib.contextmanager
def _signal_handlers_kept() -> Iterator[None]:
    """Put back the SIGINT and SIGTERM handlers as they were (the daemon's orderly shutdown)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in kept.items():
            if handler is not None:
                signal.signal(sig, handler)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _live_nodes() -> list[tuple[str, dict[str, float]]]:
    """The live nodes (id, resources), the head node first (blocking: asks Ray's control store)."""
    nodes = [n for n in _ray().nodes() if n.get("Alive")]
    nodes.sort(key=lambda n: ("node:__internal_head__" not in n["Resources"], n["NodeID"]))
    return [(n["NodeID"], dict(n["Resources"])) for n in nodes]


async def _pool_result(ref: Any) -> Any:
    """A pool task's result: what the call raised is raised again; a lost task is PoolProcessDied; a
    cancelled wait ends the task."""
    exceptions = _ray().exceptions
    try:
        return await ref
    except asyncio.CancelledError:  # its work is nobody's now: the task (and its process) is ended
        with contextlib.suppress(Exception):
            _ray().cancel(ref, force=True)
        raise
    except exceptions.RayTaskError as exc:
        if isinstance(exc.cause, Exception):
            raise exc.cause from None
        raise
    except exceptions.RayError as exc:  # its worker process or node died, beyond Ray's own retries
        raise PoolProcessDied(f"a synthesis task was lost: {_first_line(exc)}") from None


# -- on the cluster --------------------------------------------------------------------------------------


def _prepare_process(niceness: int) -> None:
    """In a Ray worker process: one rayon thread (unless set), below the daemon's priority (absolute, so a
    reused task process does not sink further)."""
    limit_native_threads()
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, niceness)


def _run_call(call: Callable[..., Any], *args: Any) -> Any:
    limit_native_threads()
    return call(*args)


def _split_first(call: Callable[..., Any], *args: Any) -> tuple[Any, Any]:
    """Run ``call`` (which returns a pair) as a two-return task: the first part stays in the object store."""
    limit_native_threads()
    first, second = call(*args)
    return first, second


class _Actor:
    """What both actors share: identity, the never-returning liveness call, dropping keys."""

    def __init__(self, niceness: int) -> None:
        _prepare_process(niceness)
        self._forever = threading.Event()  # never set: ``hold`` returns only by the actor's death

    def ping(self) -> tuple[int, str]:
        import ray

        return os.getpid(), ray.get_runtime_context().get_node_id()

    def hold(self) -> None:
        self._forever.wait()

    def drop(self, key_path: str) -> None:
        from .keys import drop_key

        drop_key(key_path)


class _Prover(_Actor):
    def __init__(self, niceness: int) -> None:
        super().__init__(niceness)
        self._staged: tuple[Any, Any] | None = None

    def stage(self, key_path: str, synthesized: Any) -> None:
        from .keys import load_key

        self._staged = (load_key(key_path, DEVICE_SECTION_BASES), synthesized)

    def start(self) -> tuple[dict[str, Any], float]:
        assert self._staged is not None, "start without a staged partition"
        key, synthesized = self._staged
        self._staged = None
        return device_section(key, synthesized)


class _Finalizer(_Actor):
    def b2(self, key_path: str, synthesized: Any) -> Any:
        from .keys import load_key

        return early_b2(load_key(key_path, FINALIZE_BASES), synthesized.witness)

    def finish(self, key_path: str, fields: dict[str, Any], b2: Any = None) -> Finished:
        from .keys import load_key

        return finalize(load_key(key_path, FINALIZE_BASES), fields, b2)
