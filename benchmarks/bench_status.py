"""How much the status view costs: ``/status`` at 100, 200 and 400 live jobs of 16 partitions, and the
tracker's CPU per event and per partition.

Modes:

* direct (default): drives a :class:`~prooflane.status.StatusTracker` with a synthetic engine's events (100
  jobs x 16 partitions over 8 workers on 4 devices, every partition through synth, lease, device section and
  finalize), then, for each size of ``--jobs`` (default 100,200,400 live jobs of 16 partitions in mixed
  states, see :func:`live_tracker`), times what the ``/status`` route does (``snapshot().to_json_text()``)
  while events keep arriving between samples (so every sample sees a new ``seq``: the invariants are checked
  again and the jobs that moved are encoded again), and the same bounded to 50 jobs (``/status?jobs=50``).
  ``--partition-seconds S`` (the single-threaded CPU seconds one partition takes to prove, as
  ``bench_pipeline.py`` reports it) turns the tracker's CPU per partition into a share of proving time.
* ``--keepalive``: for each size, serves such a tracker through the daemon's own app and server stack in a
  child process (two events every 10 ms keep the state moving) and times ``/healthz`` and ``/status`` through
  one :class:`prooflane.Client` (one kept-alive connection), as pollers and dashboards use it, with the
  Client's CPU per call; then through one kept-alive ``http.client`` connection (bodies unparsed), with the
  server process's CPU per request.
* ``--fresh``: for each size, serves such a tracker as ``--keepalive`` does and times ``GET /status`` on a
  fresh connection per request, plain and gzipped, against the whole live view (``/status?jobs=1000``, what
  ``/status`` answered before it was bounded); then, nothing moving, ``If-None-Match`` polls (304s).
* ``--daemon``: the operator's case. Starts a real ``prooflane serve`` with its default config at the tiny
  profile, submits ``--daemon-jobs`` jobs at once (winning-post, window-post, porep-c2 and snap-update in
  turn, 1,000 by default), and while it proves them times ``GET /status`` and ``GET /healthz`` side by side,
  each on a fresh connection every 50 ms, ``/status`` plain and gzipped in turn; every sample is checked
  (``invariants_ok``, the jobs listed in submission order, whole ids); the answer's bytes, jobs and
  partitions listed, the load and the CPU are reported. The synthetic rows above stay as the tracker's own
  cost.
* ``--url http://127.0.0.1:9821``: times ``GET /status`` on a running daemon (load it first, for example with
  ``prooflane bench --url ... --jobs 100``), and reports how many jobs and partitions each answer held.

Prints a table and writes benchmarks/results/bench_status.json. Asserts nothing about time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, cast
from urllib.parse import urlsplit

from _common import claim_cpu, print_table, write_json
from prooflane import events as ev
from prooflane.status.tracker import StatusTracker, TrackerConfig

JOBS, PARTITIONS, DEVICES, WORKERS_PER_DEVICE = 100, 16, 4, 2
FINALIZING_PER_WORKER = 2
SIZES = (100, 200, 400)
BOUNDED = (20, 20)  # the bounded rows: /status as served (every running job, 20 queued, 20 ended)
WHOLE = "/status?jobs=1000"  # the whole live view (up to 1,000 queued and ended): /status before its bound
MOVE_EVERY = 0.01  # keepalive mode: the served tracker gets two events this often


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class SyntheticEngine:
    """Emits what an engine would, in a plausible order, without proving anything."""

    def __init__(self, tracker: StatusTracker, clock: Callable[[], float]) -> None:
        self.tracker, self.clock = tracker, clock
        self.minter = ev.LeaseMinter()
        self.events = 0
        self.workers = [f"cpu{d}/w{w}" for d in range(DEVICES) for w in range(WORKERS_PER_DEVICE)]
        for worker in self.workers:
            self.post(ev.WorkerRegistered(at=clock(), worker_id=worker, device=worker.split("/")[0]))
        self.pending: list[tuple[str, int]] = []  # partitions left pending, which move() moves
        self.attempts: dict[tuple[str, int], int] = {}
        self.moves = 0

    def post(self, event: ev.Event) -> None:
        self.tracker.apply(event)
        self.events += 1

    def submit(self, prefix: str, jobs: int) -> list[str]:
        ids = [f"{prefix}-snap-update-{n:04d}" for n in range(jobs)]
        for job_id in ids:
            self.post(ev.JobSubmitted(at=self.clock(), job_id=job_id, kind="snap-update", priority="normal",
                                      partitions=PARTITIONS))  # fmt: skip
        return ids

    def advance(self, job_id: str, index: int, steps: int, worker: str, start: int = 0) -> None:
        """Take one partition through phases start+1 .. steps (1 synth start, 2 synth end, 3 lease, 4 device
        section end, 5 finalize end)."""
        at, name, token = self.clock(), f"{job_id}/{index}", None
        device = worker.split("/")[0]
        for step in range(start + 1, steps + 1):
            if step == 1:
                self.post(ev.ReservationMade(at=at, name=name, nbytes=1 << 20))
                self.post(ev.SynthesisStarted(at=at, job_id=job_id, partition=index))
            elif step == 2:
                self.post(ev.SynthesisFinished(at=at, job_id=job_id, partition=index, synth_ms=120.0))
            elif step == 3:
                token = self.minter.mint()
                self.post(ev.LeaseGranted(at=at, token=token, worker_id=worker, device=device,
                                          job_id=job_id, partition=index))  # fmt: skip
            elif step == 4 and token is not None:
                self.post(ev.DeviceSectionFinished(at=at, token=token, prove_ms=300.0))
                self.post(ev.ReservationShrunk(at=at, name=name, nbytes=1 << 19))
            elif step == 5 and token is not None:
                self.post(ev.FinalizeFinished(at=at, token=token, finalize_ms=80.0))
                self.post(ev.ReservationReleased(at=at, name=name))
        if isinstance(self.clock, _Clock):
            self.clock.now += 0.001

    def run_jobs(self, ids: list[str]) -> None:
        """Every partition of every job through the whole pipeline, then the job's end."""
        for n, job_id in enumerate(ids):
            for index in range(PARTITIONS):
                self.advance(job_id, index, 5, self.workers[(n * PARTITIONS + index) % len(self.workers)])
            self.post(ev.JobDone(at=self.clock(), job_id=job_id))

    def move(self) -> None:
        """The state moves between polls: a pending partition starts synthesis and is sent back for a retry
        (two events, one job changed)."""
        job_id, index = key = self.pending[self.moves % len(self.pending)]
        self.moves += 1
        at, attempt = self.clock(), self.attempts.get(key, 1)
        self.post(ev.SynthesisStarted(at=at, job_id=job_id, partition=index, attempt=attempt))
        self.attempts[key] = attempt + 1
        self.post(ev.PartitionRetried(at=at, job_id=job_id, partition=index, attempt=attempt + 1, reason="x"))


def live_tracker(
    jobs: int, clock: Callable[[], float] | None = None, sample_rss: bool = True
) -> tuple[StatusTracker, SyntheticEngine]:
    """A tracker with ``jobs`` live jobs of 16 partitions in mixed states: pending, synthesizing, synthesized
    and done in about equal parts, one partition proving and at most ``FINALIZING_PER_WORKER`` finalizing per
    worker (as an engine has them: a worker holds one lease at a time and hands it to its finalizer)."""
    clock = clock or _Clock()
    tracker = StatusTracker(TrackerConfig(memory_total_bytes=1 << 40, sample_rss=sample_rss), clock=clock)
    engine = SyntheticEngine(tracker, clock)
    live = engine.submit("live", jobs)
    to_prove = []
    finalizing = dict.fromkeys(engine.workers, 0)
    for n, job_id in enumerate(live):
        for index in range(PARTITIONS):
            worker = engine.workers[index % len(engine.workers)]
            steps = (n * PARTITIONS + index) % 6  # 0 pending, 1 synthesizing, 2 synthesized, 3 proving ...
            if steps == 0:
                engine.pending.append((job_id, index))
            if steps == 3:
                to_prove.append((job_id, index))
                steps = 2
            if steps == 4 and finalizing[worker] < FINALIZING_PER_WORKER:
                finalizing[worker] += 1
            elif steps == 4:
                steps = 5  # ... 4 finalizing while the worker has room, else 5 done
            engine.advance(job_id, index, steps, worker)
    for worker, (job_id, index) in zip(engine.workers, to_prove, strict=False):
        engine.advance(job_id, index, 3, worker, start=2)  # one proving partition per worker
    return tracker, engine


def queue_tracker(
    jobs: int, clock: Callable[[], float] | None = None, holding: bool = True
) -> tuple[StatusTracker, SyntheticEngine]:
    """A tracker as an engine has it after ``jobs`` jobs of 16 partitions were submitted at once: what its
    workers and synthesis slots allow holds work (job 0: a partition proving on each of the 8 workers; job 1:
    4 synthesizing, a partition finalizing for each worker), job 2 running with nothing held, the rest
    queued. Without ``holding``: every job queued, every worker idle (a daemon whose queue waits, nothing
    moving)."""
    clock = clock or _Clock()
    config = TrackerConfig(memory_total_bytes=1 << 40, synthesis_max_concurrent=4)
    tracker = StatusTracker(config, clock=clock)
    engine = SyntheticEngine(tracker, clock)
    ids = engine.submit("queued", jobs)
    if not holding:
        return tracker, engine
    for n, worker in enumerate(engine.workers):
        engine.advance(ids[1], 4 + n, 4, worker)  # finalizing
        engine.advance(ids[0], n, 3, worker)  # proving
    for index in range(4):
        engine.advance(ids[1], index, 1, engine.workers[0])  # synthesizing
    engine.advance(ids[2], 0, 5, engine.workers[0])  # done: job 2 runs, holding nothing now
    engine.pending = [(ids[2], index) for index in range(1, PARTITIONS)]  # what move() moves
    return tracker, engine


def cpu_per_event(partition_seconds: float | None) -> dict[str, Any]:
    """The tracker's CPU for a full lifecycle of 100 jobs x 16 partitions."""
    clock = _Clock()
    tracker = StatusTracker(TrackerConfig(retention_secs=1e9, memory_total_bytes=1 << 40), clock=clock)
    engine = SyntheticEngine(tracker, clock)
    ids = engine.submit("warm", JOBS)
    before, start = engine.events, time.process_time()
    engine.run_jobs(ids)
    cpu = time.process_time() - start
    events = engine.events - before
    result: dict[str, Any] = {
        "events_per_partition": events / (JOBS * PARTITIONS),
        "cpu_per_event_us": cpu / events * 1e6,
        "cpu_per_partition_us": cpu / (JOBS * PARTITIONS) * 1e6,
    }
    if partition_seconds:
        result["partition_seconds"] = partition_seconds
        result["tracker_share_of_proving"] = result["cpu_per_partition_us"] / 1e6 / partition_seconds
    return result


def direct_row(jobs: int, samples: int) -> dict[str, Any]:
    """The whole live view (``/status`` before it was bounded) and ``/status`` as the route builds it now,
    with ``jobs`` live jobs.

    A tracker without bounded snapshots (an older prooflane on ``PYTHONPATH``, for a comparison) is timed
    on ``/status`` alone, and its bounded figures repeat the whole snapshot's."""
    tracker, engine = live_tracker(jobs)
    full: list[tuple[float, float, int]] = []
    bounded: list[tuple[float, float, int]] = []
    can_bound = hasattr(tracker.snapshot(), "bounded")
    for n in range(samples):
        engine.move()
        limit = BOUNDED if n % 2 else None
        start, start_cpu = time.perf_counter(), time.process_time()
        snapshot = tracker.snapshot()
        body = (snapshot.bounded(*limit) if limit is not None and can_bound else snapshot).to_json_text()
        took = ((time.perf_counter() - start) * 1000, (time.process_time() - start_cpu) * 1000, len(body))
        (full if limit is None else bounded).append(took)
    snapshot = tracker.snapshot()
    return {
        "live_jobs": len(snapshot.pipelines),
        "live_partitions": sum(len(p.partitions) for p in snapshot.pipelines),
        "status_p50_ms": _percentile([t[0] for t in full], 50),
        "status_p99_ms": _percentile([t[0] for t in full], 99),
        "status_max_ms": max(t[0] for t in full),
        "status_cpu_p50_ms": _percentile([t[1] for t in full], 50),
        "status_cpu_p99_ms": _percentile([t[1] for t in full], 99),
        "status_bytes": int(statistics.mean(t[2] for t in full)),
        "bounded_p50_ms": _percentile([t[0] for t in bounded], 50),
        "bounded_p99_ms": _percentile([t[0] for t in bounded], 99),
        "bounded_bytes": int(statistics.mean(t[2] for t in bounded)),
        "invariants_ok": snapshot.invariants_ok,
    }


def direct(samples: int, sizes: list[int], partition_seconds: float | None) -> dict[str, Any]:
    rows = [direct_row(jobs, samples) for jobs in sizes]
    columns = ["live_jobs", "live_partitions", "status_p50_ms", "status_p99_ms", "status_max_ms",
               "status_cpu_p50_ms", "status_cpu_p99_ms", "status_bytes", "bounded_p50_ms", "bounded_p99_ms",
               "bounded_bytes", "invariants_ok"]  # fmt: skip
    print_table(columns, [[row[c] for c in columns] for row in rows])
    per_event = cpu_per_event(partition_seconds)
    print_table(["figure", "value"], [[k, v] for k, v in per_event.items()])
    return {"mode": "direct", "samples": samples, "rows": rows, **per_event}


class _ServedTracker:
    """What the HTTP API needs of an engine to serve /status and /healthz: a ready flag, snapshots, health."""

    ready = True

    def __init__(self, tracker: StatusTracker) -> None:
        self._tracker = tracker

    def snapshot(self) -> Any:
        return self._tracker.snapshot()

    def health(self) -> Any:
        return self._tracker.health()


def _serve_tracker(jobs: int, ready: Connection, moving: bool = True, queue: bool = False) -> None:
    """In a child process: serve a tracker of ``jobs`` live jobs (:func:`live_tracker`'s, or with ``queue``
    :func:`queue_tracker`'s) whose state keeps moving (unless not ``moving``), until killed."""

    from prooflane.config import Config
    from prooflane.server.api import EngineApi, create_app, holds_open
    from prooflane.server.limits import bind, http_server

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        if queue:
            tracker, engine = queue_tracker(jobs, clock=loop.time, holding=moving)
        else:
            tracker, engine = live_tracker(jobs, clock=loop.time)
        app = create_app(cast(EngineApi, _ServedTracker(tracker)), Config())
        sock = bind("127.0.0.1", 0)
        server = http_server(app, Config(), holds_open=holds_open, graceful_shutdown_secs=10.0)

        def move() -> None:
            engine.move()
            loop.call_later(MOVE_EVERY, move)

        if moving:
            move()
        ready.send(sock.getsockname()[1])  # listening already: a request sent now waits in line
        await server.serve(sockets=[sock])

    asyncio.run(serve())


def keepalive_row(jobs: int, samples: int) -> dict[str, Any]:
    """Serve ``jobs`` live jobs in a child process; time /healthz and /status through one kept-alive Client,
    then through one kept-alive ``http.client`` connection (what is left without httpx and JSON parsing),
    with the server process's CPU per request."""
    import httpx
    import psutil

    from prooflane import Client

    ours, theirs = multiprocessing.Pipe()
    child = multiprocessing.get_context("fork").Process(target=_serve_tracker, args=(jobs, theirs))
    child.start()
    try:
        if not ours.poll(120):
            raise SystemExit("the served tracker did not start in 120 s")
        port = ours.recv()
        url = f"http://127.0.0.1:{port}"
        server = psutil.Process(child.pid)
        health: list[float] = []
        status: list[float] = []
        client_cpu = {"health": 0.0, "status": 0.0}  # this process's CPU in the Client calls
        with httpx.Client(base_url=url, timeout=30) as transport, Client(url, http=transport) as client:
            client.health()
            for _ in range(samples):
                cpu = time.process_time()
                health.append(_timed(client.health))
                client_cpu["health"] += time.process_time() - cpu
                cpu = time.process_time()
                status.append(_timed(client.status))
                client_cpu["status"] += time.process_time() - cpu
            body = client.status()
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        bare: dict[str, list[float]] = {}
        server_cpu: dict[str, float] = {}
        for path in ("/healthz", WHOLE, "/status"):
            _get(connection, path)
            before = sum(server.cpu_times()[:2])
            bare[path] = [_timed(lambda p=path: _get(connection, p)) for _ in range(samples)]  # type: ignore[misc]
            server_cpu[path] = (sum(server.cpu_times()[:2]) - before) / samples * 1000
        size = len(_get(connection, "/status"))  # as served
        connection.close()
    finally:
        child.kill()
        child.join()
    return {
        "live_jobs": len(body["pipelines"]),
        "live_partitions": sum(len(p["partitions"]) for p in body["pipelines"]),
        "healthz_p50_ms": _percentile(health, 50),
        "healthz_p99_ms": _percentile(health, 99),
        "status_p50_ms": _percentile(status, 50),
        "status_p99_ms": _percentile(status, 99),
        "status_max_ms": max(status),
        "client_cpu_healthz_ms": client_cpu["health"] / samples * 1000,
        "client_cpu_status_ms": client_cpu["status"] / samples * 1000,
        "bare_healthz_p50_ms": _percentile(bare["/healthz"], 50),
        "bare_status_p50_ms": _percentile(bare[WHOLE], 50),
        "bare_status_p99_ms": _percentile(bare[WHOLE], 99),
        "bare_bounded_p50_ms": _percentile(bare["/status"], 50),
        "server_cpu_healthz_ms": server_cpu["/healthz"],
        "server_cpu_status_ms": server_cpu[WHOLE],
        "server_cpu_bounded_ms": server_cpu["/status"],
        "status_bytes": size,
    }


def _get(connection: http.client.HTTPConnection, path: str) -> bytes:
    connection.request("GET", path)
    response = connection.getresponse()
    body = response.read()
    if response.status != 200:
        raise SystemExit(f"GET {path} answered {response.status}: {body[:200]!r}")
    return body


def keepalive(samples: int, sizes: list[int]) -> dict[str, Any]:
    rows = [keepalive_row(jobs, samples) for jobs in sizes]
    client = ["live_jobs", "live_partitions", "healthz_p50_ms", "healthz_p99_ms", "status_p50_ms",
              "status_p99_ms", "status_max_ms", "status_bytes", "client_cpu_healthz_ms",
              "client_cpu_status_ms"]  # fmt: skip
    print("through one kept-alive prooflane.Client (httpx; /status parsed as JSON), with the Client's CPU:")
    print_table(client, [[row[c] for c in client] for row in rows])
    bare = ["live_jobs", "bare_healthz_p50_ms", "bare_status_p50_ms", "bare_status_p99_ms",
            "bare_bounded_p50_ms", "server_cpu_healthz_ms", "server_cpu_status_ms",
            "server_cpu_bounded_ms"]  # fmt: skip
    print(
        f"through one kept-alive http.client connection (bodies unparsed; status: {WHOLE}, bounded: /status),"
    )
    print("and the server process's CPU per request (two events every 10 ms included):")
    print_table(bare, [[row[c] for c in bare] for row in rows])
    return {"mode": "keepalive", "samples": samples, "rows": rows}


@contextlib.contextmanager
def _served(jobs: int, moving: bool) -> Any:
    """A child process serving a :func:`queue_tracker` of ``jobs`` live jobs; its port."""
    ours, theirs = multiprocessing.Pipe()
    process = multiprocessing.get_context("fork").Process
    child = process(target=_serve_tracker, args=(jobs, theirs, moving, True))
    child.start()
    try:
        if not ours.poll(120):
            raise SystemExit("the served tracker did not start in 120 s")
        yield ours.recv()
    finally:
        child.kill()
        child.join()


def _fresh_get(port: int, path: str, headers: dict[str, str]) -> tuple[float, int, int]:
    """One GET on a new connection: milliseconds to the last byte, the status, the bytes sent."""
    start = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request("GET", path, headers={"Connection": "close", **headers})
    response = connection.getresponse()
    body = response.read()
    took = (time.perf_counter() - start) * 1000
    connection.close()
    return took, response.status, len(body)


def fresh_row(jobs: int, samples: int) -> dict[str, Any]:
    """``jobs`` jobs submitted at once (:func:`queue_tracker`), served in a child process whose state moves
    (two events every 10 ms, so every answer is a new snapshot): the whole view and ``/status`` on fresh
    connections, plain and gzipped; then, nothing moving, ``/status`` with ``If-None-Match`` on one
    kept-alive connection."""
    result: dict[str, Any] = {"live_jobs": jobs}
    with _served(jobs, moving=True) as port:
        for name, path in (("whole", WHOLE), ("status", "/status")):
            for coding in ("identity", "gzip"):
                _fresh_get(port, path, {"Accept-Encoding": coding})
                got = [_fresh_get(port, path, {"Accept-Encoding": coding}) for _ in range(samples)]
                key = f"{name}_{'gzip' if coding == 'gzip' else 'plain'}"
                result[f"{key}_p50_ms"] = _percentile([g[0] for g in got], 50)
                result[f"{key}_p99_ms"] = _percentile([g[0] for g in got], 99)
                result[f"{key}_max_bytes"] = max(g[2] for g in got)
    with _served(jobs, moving=False) as port:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.request("GET", "/status")
        first = connection.getresponse()
        first.read()
        tag = first.getheader("ETag") or ""
        latencies, statuses = [], []
        for _ in range(samples):
            start = time.perf_counter()
            connection.request("GET", "/status", headers={"If-None-Match": tag})
            response = connection.getresponse()
            response.read()
            latencies.append((time.perf_counter() - start) * 1000)
            statuses.append(response.status)
        connection.close()
    result["unchanged_p50_ms"] = _percentile(latencies, 50)
    result["unchanged_p99_ms"] = _percentile(latencies, 99)
    result["unchanged_304_share"] = statuses.count(304) / len(statuses)
    return result


def fresh(samples: int, sizes: list[int]) -> dict[str, Any]:
    rows = [fresh_row(jobs, samples) for jobs in sizes]
    print(f"on fresh connections, the state moving: before = the whole live view ({WHOLE}), after = /status")
    for coding in ("plain", "gzip"):
        columns = ["live_jobs"] + [f"{name}_{coding}_{figure}" for name in ("whole", "status")
                                   for figure in ("p50_ms", "p99_ms", "max_bytes")]  # fmt: skip
        print_table(columns, [[row[c] for c in columns] for row in rows])
    print(
        "nothing moving (all queued, workers idle), one kept-alive connection, If-None-Match: the last ETag"
    )
    columns = ["live_jobs", "unchanged_p50_ms", "unchanged_p99_ms", "unchanged_304_share"]
    print_table(columns, [[row[c] for c in columns] for row in rows])
    return {"mode": "fresh", "samples": samples, "rows": rows}


def over_http(url: str, samples: int) -> dict[str, Any]:
    # One connection per request, as a poller that does not keep connections alive (--keepalive times the
    # other way).
    parsed = urlsplit(url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 80
    latencies, jobs, partitions, sizes = [], [], [], []
    for _ in range(samples):
        connection = http.client.HTTPConnection(host, port, timeout=10)
        start = time.perf_counter()
        connection.request("GET", "/status", headers={"Connection": "close"})
        response = connection.getresponse()
        body = response.read()
        latencies.append((time.perf_counter() - start) * 1000)
        connection.close()
        if response.status != 200:
            raise SystemExit(f"GET {url}/status answered {response.status}: {body[:200]!r}")
        status = json.loads(body)
        jobs.append(len(status["pipelines"]))
        partitions.append(sum(len(p["partitions"]) for p in status["pipelines"]))
        sizes.append(len(body))
    result = {
        "mode": "http",
        "url": url,
        "live_jobs": max(jobs),
        "live_partitions": max(partitions),
        "status_p50_ms": _percentile(latencies, 50),
        "status_p99_ms": _percentile(latencies, 99),
        "status_max_ms": max(latencies),
        "status_bytes": int(statistics.mean(sizes)),
    }
    print_table(["figure", "value"], [[k, v] for k, v in result.items()])
    return result


def under_load(url: str, samples: int, jobs: int, kind: str, sector: str) -> dict[str, Any]:
    """Submit ``jobs`` jobs, time /status while the engine proves them, then cancel what is left."""
    from prooflane import Client
    from prooflane.errors import DaemonError

    with Client(url) as client:
        ids = [client.submit(kind, sector=sector) for _ in range(jobs)]
        try:
            result = over_http(url, samples)
        finally:
            for job_id in ids:
                with contextlib.suppress(DaemonError):  # 409: it finished meanwhile
                    client.cancel(job_id)
    result["load"] = {"jobs": jobs, "kind": kind}
    return result


DAEMON_KINDS = ("winning-post", "window-post", "porep-c2", "snap-update")
DAEMON_EVERY = 0.05  # --daemon: a /status and a /healthz sample this often


def daemon_row(jobs: int, samples: int) -> dict[str, Any]:
    """A real daemon (default config, tiny profile) proving ``jobs`` jobs submitted at once; /status and
    /healthz on fresh connections while it works (see the module's docstring)."""
    import gzip
    import tempfile
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    from prooflane import Client
    from prooflane.cli.daemon_process import DaemonProcess

    with tempfile.TemporaryDirectory(prefix="prooflane-bench-status-") as tmp:
        daemon = DaemonProcess(Path(tmp) / "data", profile="tiny", log_path=Path(tmp) / "daemon.log")
        daemon.start(timeout=600)
        try:
            port = int(urlsplit(daemon.url).port or 0)
            with Client(daemon.url) as client:
                sector = client.submit("winning-post", sector={"size": 256, "seed": "07"})  # type: ignore[arg-type]
                client.proof(sector, wait=600)  # the keys made, a partition of each path warmed
                folder = str(next((Path(tmp) / "data" / "sectors").iterdir()))

                def submit(n: int) -> str:
                    return client.submit(DAEMON_KINDS[n % len(DAEMON_KINDS)], sector=folder)

                with ThreadPoolExecutor(8) as pool:
                    ids = list(pool.map(submit, range(jobs)))
            status: dict[str, list[float]] = {"plain": [], "gzip": []}
            healthz: list[float] = []
            sizes: dict[str, list[int]] = {"plain": [], "gzip": []}
            listed: list[tuple[int, int]] = []
            bad: list[str] = []
            for n in range(samples):
                coding = "gzip" if n % 2 else "plain"
                took, code, body = _fresh_body(port, "/status", {"Accept-Encoding": coding})
                status[coding].append(took)
                sizes[coding].append(len(body))
                view = json.loads(gzip.decompress(body) if coding == "gzip" else body)
                if code != 200 or not view["invariants_ok"]:
                    bad.append(f"sample {n}: {code}, invariants_ok {view.get('invariants_ok')}")
                order = [p["job_id"] for p in view["pipelines"]]
                if any(len(job) != 32 for job in order):
                    bad.append(f"sample {n}: a job id cut short")
                listed.append((len(order), sum(len(p["partitions"]) for p in view["pipelines"])))
                healthz.append(_fresh_body(port, "/healthz", {})[0])
                time.sleep(DAEMON_EVERY)
            done = sum(1 for _ in ids)  # submitted
        finally:
            daemon.stop()
    result: dict[str, Any] = {"mode": "daemon", "jobs": done, "samples": samples, "inconsistent": bad}
    for coding, times in status.items():
        result[f"status_{coding}_p50_ms"] = _percentile(times, 50)
        result[f"status_{coding}_p99_ms"] = _percentile(times, 99)
        result[f"status_{coding}_max_ms"] = max(times)
        result[f"status_{coding}_max_bytes"] = max(sizes[coding])
    result["healthz_p50_ms"] = _percentile(healthz, 50)
    result["healthz_p99_ms"] = _percentile(healthz, 99)
    result["healthz_max_ms"] = max(healthz)
    result["most_jobs_listed"] = max(jobs for jobs, _ in listed)
    result["most_partitions_listed"] = max(parts for _, parts in listed)
    print_table(["figure", "value"], [[k, v] for k, v in result.items() if k != "inconsistent"])
    print(f"inconsistent samples: {len(bad)}" + (f" (first: {bad[0]})" if bad else ""))
    return result


def _fresh_body(port: int, path: str, headers: dict[str, str]) -> tuple[float, int, bytes]:
    """One GET on a new connection: milliseconds to the last byte, the status, the body as sent."""
    start = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request("GET", path, headers={"Connection": "close", **headers})
    response = connection.getresponse()
    body = response.read()
    took = (time.perf_counter() - start) * 1000
    connection.close()
    return took, response.status, body


def _timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1000


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="time GET /status on this running daemon instead of a direct tracker")
    parser.add_argument("--samples", type=int, default=500, help="how many /status samples (default 500)")
    parser.add_argument("--jobs", default=",".join(map(str, SIZES)),
                        help="live jobs of 16 partitions, a row each (default 100,200,400)")  # fmt: skip
    parser.add_argument("--partition-seconds", type=float, default=None,
                        help="CPU seconds one partition takes to prove, for the tracker's share")  # fmt: skip
    parser.add_argument(
        "--load",
        type=int,
        default=0,
        help="with --url: first submit this many jobs (cancelled after the samples)",
    )
    parser.add_argument("--keepalive", action="store_true",
                        help="time /healthz and /status through one kept-alive prooflane.Client")  # fmt: skip
    parser.add_argument("--fresh", action="store_true",
                        help="time /status on fresh connections, before/after its bound; 304s")  # fmt: skip
    parser.add_argument(
        "--daemon", action="store_true", help="a real daemon proving --daemon-jobs jobs: /status, /healthz"
    )
    parser.add_argument("--daemon-jobs", type=int, default=1000, help="jobs for --daemon (default 1000)")
    parser.add_argument("--kind", default="snap-update", help="kind of the --load jobs (default snap-update)")
    parser.add_argument("--sector", help="sector folder for the --load jobs (prooflane sector new ...)")
    args = parser.parse_args()
    if args.load and not (args.url and args.sector):
        parser.error("--load needs --url and --sector")
    sizes = [int(n) for n in args.jobs.split(",")]
    load = os.getloadavg()
    if args.daemon:
        result = daemon_row(args.daemon_jobs, args.samples)
    elif args.keepalive:
        result = keepalive(args.samples, sizes)
    elif args.fresh:
        result = fresh(args.samples, sizes)
    elif args.url and args.load:
        result = under_load(args.url, args.samples, args.load, args.kind, args.sector)
    elif args.url:
        result = over_http(args.url, args.samples)
    else:
        result = direct(args.samples, sizes, args.partition_seconds)
    result["load_average"] = {"start": load[0], "end": os.getloadavg()[0]}
    print(f"load average (1 min): {load[0]:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")
    write_json("bench_status", result)


if __name__ == "__main__":
    with claim_cpu():
        main()
