"""The real engine on the in-process backend, for fast tests: a gate that holds, fails or kills steps, a
harness around a started engine, a clock that moves only when told, and the same engine behind the real
HTTP app and a uvicorn server.

Real Groth16 proofs at the ``tiny`` profile, a real journal, the real tracker; no processes, so every step
happens in a known order. Nothing here waits on time: every wait is on an event, bounded by ``WAIT``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import json
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvicorn

from prooflane.config import Config
from prooflane.devices import Device, DeviceBackend, Finished, InProcessBackend, Step
from prooflane.devices.inprocess import InProcessWorker
from prooflane.engine.engine import Engine
from prooflane.errors import Conflict
from prooflane.kinds import SynthesisTask
from prooflane.models import JobProof, JobRequest
from prooflane.server import bind
from prooflane.server.api import close_streams, create_app
from prooflane.states import JobState, WorkerState
from prooflane.testing.checks import check_journal

WAIT = 60.0  # the most any one condition may take before the test fails
INLINE_SECTOR = {"size": 256, "seed": "07"}  # a tiny-profile sector the engine creates from the request

T = TypeVar("T")
H = TypeVar("H")


@dataclass
class Hold:
    """Steps matching ``match`` wait here until ``release`` is set; ``reached`` is set by the first."""

    match: Callable[[Step], bool]
    release: asyncio.Event = field(default_factory=asyncio.Event)
    reached: asyncio.Event = field(default_factory=asyncio.Event)
    action: Callable[[Step], None] | None = None  # run instead of holding (kill a worker, raise...)
    times: int = 1  # how many matching steps it acts on


class Gate:
    """The backend's hook: holds, fails or kills steps by rule."""

    def __init__(self) -> None:
        self.rules: list[Hold] = []

    def hold(self, match: Callable[[Step], bool]) -> Hold:
        rule = Hold(match)
        self.rules.append(rule)
        return rule

    def act(self, match: Callable[[Step], bool], action: Callable[[Step], None], times: int = 1) -> Hold:
        rule = Hold(match, action=action, times=times)
        self.rules.append(rule)
        return rule

    async def __call__(self, step: Step) -> None:
        for rule in self.rules:
            if rule.times <= 0 or not rule.match(step):
                continue
            rule.reached.set()
            if rule.action is not None:
                rule.times -= 1
                rule.action(step)
            elif not rule.release.is_set():
                await rule.release.wait()


def synthesis_of(step: Step) -> tuple[str, int] | None:
    """(job id, partition) of a synthesis step, else None."""
    if step.call == "synthesize_partition":
        task = step.args[0]
        assert isinstance(task, SynthesisTask)
        return task.job_id, task.partition
    return None


def is_synthesis(step: Step) -> bool:
    return synthesis_of(step) is not None


@dataclass
class Harness:
    engine: Engine
    backend: InProcessBackend
    gate: Gate
    sector: str | dict[str, Any] = field(default_factory=lambda: dict(INLINE_SECTOR))
    """The sector of every job ``submit`` makes unless told otherwise: a folder, or an inline spec (which the
    engine turns into a new sector folder for each job, hashing its Merkle trees each time)."""

    def synthesized(self) -> list[tuple[str, int]]:
        return [s for s in map(synthesis_of, self.backend.steps) if s is not None]

    async def submit(self, kind: str = "winning-post", **fields: Any) -> str:
        request = {"kind": kind, "sector": self.sector} | fields
        return await self.engine.submit(JobRequest.model_validate(request))

    async def block_queue(self) -> tuple[Hold, str]:
        """Hold every synthesis and put one job (a winning-post) into it: with one synthesis slot, every job
        submitted after it stays queued until the hold is released. The hold and the blocking job's id."""
        held = self.gate.hold(is_synthesis)
        blocker = await self.submit("winning-post")
        await held.reached.wait()
        return held, blocker

    async def done(self, job_id: str) -> JobState:
        """Wait for the job to end; its final state."""
        with contextlib.suppress(Conflict):  # it failed or was cancelled
            await self.engine.wait_proof(job_id, WAIT)
        return self.state(job_id)

    def state(self, job_id: str) -> JobState:
        view = self.engine.job(job_id)
        assert view is not None
        return view.state

    def against_journal(self) -> list[str]:
        """Where the live view (``/status``) and the journal (read from its SQLite file, beside the engine)
        say different things (:func:`prooflane.testing.checks.check_journal`)."""
        status = json.loads(self.engine.snapshot().to_json_text())
        return check_journal(status, self.engine.config.data_dir / "journal.sqlite3")

    async def until(self, condition: Callable[[], bool]) -> None:
        """Wait until ``condition()`` holds (looked at once a turn of the event loop; at most ``WAIT``)."""
        async with asyncio.timeout(WAIT):
            while not condition():  # noqa: ASYNC110 (the engine's state has no event for each condition)
                await asyncio.sleep(0)

    async def assert_clean(self) -> None:
        """Once the work still running for ended jobs returns and every worker is back: nothing reserved,
        every invariant holding (the live view agreeing with the journal, by the engine's own check and read
        from the journal's file here), every worker live and idle."""
        budget = self.engine.budget
        async with asyncio.timeout(WAIT):
            while budget.reserved:
                await budget.wait_change()
        # A death decides its partitions at once; its worker is back (restarted) a few turns later.
        await self.until(lambda: {w.state for w in self.engine.snapshot().workers} == {WorkerState.IDLE})
        assert self.engine.check_journal() == []
        assert self.against_journal() == []
        snapshot = self.engine.snapshot()
        assert snapshot.invariant_violations == ()
        assert snapshot.illegal_events == 0
        assert snapshot.memory.reserved_bytes == 0 and snapshot.memory.reservations == 0
        assert {w.state for w in snapshot.workers} == {WorkerState.IDLE}


def on_long_poll(monkeypatch: pytest.MonkeyPatch, engine: Engine, then: Callable[[], None]) -> None:
    """Call ``then()`` (on the engine's loop) whenever a proof request starts waiting for its job
    (``wait_proof`` with a timeout): the engine's own ``wait_proof`` runs right after it and waits before
    anything else runs, so a job a gate holds can be let go exactly once a long-poll waits for it."""
    wait_proof = engine.wait_proof

    async def waiting(job_id: str, timeout: float) -> JobProof | None:  # noqa: ASYNC109
        if timeout > 0:
            then()
        return await wait_proof(job_id, timeout)

    monkeypatch.setattr(engine, "wait_proof", waiting)


class Unstartable(InProcessBackend):
    """After its first worker, every new worker dies as it starts (its processes cannot come up)."""

    started_one = False

    def new_worker(self, worker_id: str, device: Device) -> InProcessWorker:
        worker = super().new_worker(worker_id, device)
        if self.started_one:
            worker.die("cannot start: no processes left")
        self.started_one = True
        return worker


def tiny_config(data_dir: Path, keys_dir: Path, **overrides: object) -> Config:
    """A one-worker, one-synthesis-slot engine at the tiny profile (``overrides`` change any key)."""
    values: dict[str, object] = {
        "data_dir": data_dir,
        "keys_dir": keys_dir,
        "profile": "tiny",
        "devices": ("cpu:0",),
        "workers_per_device": 1,
        "synthesis_workers": 1,
        "prefetch_partitions": 1,
        "memory_budget_bytes": 1 << 30,
    }
    return Config(**(values | overrides))  # type: ignore[arg-type]


class AnsweringBackend(InProcessBackend):
    """An in-process backend whose workers call ``on_answer(worker, label)`` (when set) once a finalizer's
    answer is made and before the engine has it: a test kills the worker there (a prover SIGKILLed while its
    finalizer's answer was on its way), cancels the job, or holds the answer back until a later moment."""

    def __init__(self, hook: Callable[[Step], Coroutine[Any, Any, None]] | None = None) -> None:
        super().__init__(hook)
        self.on_answer: Callable[[InProcessWorker, str], Coroutine[Any, Any, None]] | None = None

    def new_worker(self, worker_id: str, device: Device) -> InProcessWorker:
        worker = _AnsweringWorker(worker_id, device, self)
        self.workers[worker_id] = worker
        return worker


class _AnsweringWorker(InProcessWorker):
    def __init__(self, worker_id: str, device: Device, backend: AnsweringBackend) -> None:
        super().__init__(worker_id, device, backend)
        self._answering = backend

    async def finish(self, key_path: str, state: Any, label: str = "") -> Finished:
        finished = await super().finish(key_path, state, label)
        if (on_answer := self._answering.on_answer) is not None:
            await on_answer(self, label)
        return finished


@contextlib.asynccontextmanager
async def running(
    config: Config,
    clock: Callable[[], float] = time.monotonic,
    sector: Path | None = None,
    backend_of: Callable[[Gate], InProcessBackend] = InProcessBackend,
) -> AsyncIterator[Harness]:
    """An engine on the in-process backend, stopped at the end of the block. ``sector``: a tiny sector folder
    for the jobs ``Harness.submit`` makes (by default each gets an inline sector). ``backend_of``: the
    backend, given the gate (an :class:`AnsweringBackend`, say)."""
    gate = Gate()
    backend = backend_of(gate)
    async with Engine(config, backend=backend, clock=clock) as engine:
        harness = Harness(engine, backend, gate)
        if sector is not None:
            harness.sector = str(sector)
        yield harness


def api_config(config: Config, token: str = "") -> Config:
    """The engine's config with the API's token and a small body limit (for the limit tests)."""
    return dataclasses.replace(config, token=token, max_request_bytes=4096)


@dataclass
class Served:
    """An engine on the in-process backend behind the real app, served by uvicorn on a free port of
    127.0.0.1, both on one event loop in a thread. The test runs code on that loop with ``run``/``call``."""

    url: str
    h: Harness
    loop: asyncio.AbstractEventLoop

    @property
    def engine(self) -> Engine:
        return self.h.engine

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the server's loop (where the engine lives) and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(WAIT)

    def call(self, fn: Callable[[], T]) -> T:
        """Call ``fn()`` on the server's loop and return its result."""

        async def call() -> T:
            return fn()

        return self.run(call())

    def hold(self, match: Callable[[Step], bool] = is_synthesis) -> Hold:
        """Hold the steps matching ``match`` (by default every synthesis) until ``release``."""
        return self.call(lambda: self.h.gate.hold(match))

    def release(self, rule: Hold) -> None:
        self.call(rule.release.set)

    def reached(self, rule: Hold) -> None:
        """Return once a step matching ``rule`` waits at it (or ran through it)."""
        self.run(rule.reached.wait())

    def block_queue(self) -> tuple[Hold, str]:
        """See :meth:`Harness.block_queue`."""
        return self.run(self.h.block_queue())

    def done(self, job_id: str) -> JobState:
        """Wait for the job to end; its final state."""
        return self.run(self.h.done(job_id))

    def submit(self, kind: str = "winning-post", **fields: Any) -> str:
        """Submit a job on the server's loop (see :meth:`Harness.submit`)."""
        return self.run(self.h.submit(kind, **fields))

    def journalled_request(self, job_id: str) -> dict[str, Any]:
        """The request of a job as the engine journalled it on receipt (read from its SQLite journal)."""
        # Read-only, beside the engine: the journal's own Store is the engine's alone (it locks the folder).
        path = self.engine.config.data_dir / "journal.sqlite3"
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            row = db.execute("SELECT request FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        assert row is not None, f"no job {job_id} in the journal"
        original: dict[str, Any] = json.loads(row[0])["original"]
        return original


@contextlib.contextmanager
def served(
    config: Config, token: str = "", clock: Callable[[], float] = time.monotonic, sector: Path | None = None
) -> Iterator[Served]:
    """Start the engine (see ``running``), then serve ``create_app(engine)`` over real HTTP until the block
    ends."""
    with _serving(running(config, clock, sector), lambda h: h.engine, api_config(config, token)) as (
        url,
        harness,
        loop,
    ):
        yield Served(url, harness, loop)


@contextlib.contextmanager
def served_on(config: Config, backend: DeviceBackend) -> Iterator[str]:
    """An engine on ``backend`` (a process backend, say) behind the real app, served as ``served`` does;
    its URL."""
    engine = Engine(config, backend=backend)
    with _serving(engine, lambda e: e, config) as (url, _, _):
        yield url


@contextlib.contextmanager
def _serving(
    started: contextlib.AbstractAsyncContextManager[H], engine_of: Callable[[H], Engine], config: Config
) -> Iterator[tuple[str, H, asyncio.AbstractEventLoop]]:
    """Enter ``started`` on a new event loop in a thread and serve the app around its engine with uvicorn
    on a free port of 127.0.0.1, until the block ends."""
    sock = bind("127.0.0.1", 0)  # listening already: a request made before uvicorn accepts waits in line
    loop = asyncio.new_event_loop()
    up: concurrent.futures.Future[H] = concurrent.futures.Future()
    stop = asyncio.Event()

    async def serve() -> None:
        try:
            async with started as entered:
                app = create_app(engine_of(entered), config)
                server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning"))
                serving = asyncio.create_task(server.serve(sockets=[sock]))
                up.set_result(entered)
                await stop.wait()
                close_streams(app)
                server.should_exit = True
                await serving
        except BaseException as exc:
            if not up.done():
                up.set_exception(exc)
            raise

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),))
    thread.start()
    try:
        entered = up.result(WAIT)
        host, port = sock.getsockname()[:2]
        yield f"http://{host}:{port}", entered, loop
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join()
        loop.close()
        sock.close()
