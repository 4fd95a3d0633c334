"""How much the status view costs: ``/status`` latency with 100 live jobs of 16 partitions, and the tracker's
CPU per event and per partition.

Two modes:

* direct (default): drives a :class:`~prooflane.status.StatusTracker` with a synthetic engine's events (100
  jobs x 16 partitions over 8 workers on 4 devices, every partition through synth, lease, device section and
  finalize), then, with 100 jobs live in mixed states, times what the ``/status`` route does
  (``snapshot().to_json_text()``) while events keep arriving between samples.
  ``--partition-seconds S`` (the single-threaded CPU seconds one partition takes to prove, as
  ``bench_pipeline.py`` reports it) turns the tracker's CPU per partition into a share of proving time.
* ``--keepalive``: serves the same 100 x 16 tracker through the daemon's own app and server stack on a free
  port and times ``/healthz`` and ``/status`` through one :class:`prooflane.Client` (one kept-alive
  connection), as pollers and dashboards use it.
* ``--url http://127.0.0.1:9821``: times ``GET /status`` on a running daemon (load it first, for example with
  ``prooflane bench --url ... --jobs 100``), and reports how many jobs and partitions each answer held.

Prints a table and writes benchmarks/results/bench_status.json. Asserts nothing about time.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import statistics
import time
from typing import Any
from urllib.parse import urlsplit

from _common import print_table, write_json
from prooflane import events as ev
from prooflane.status import StatusTracker, TrackerConfig

JOBS, PARTITIONS, DEVICES, WORKERS_PER_DEVICE = 100, 16, 4, 2


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class SyntheticEngine:
    """Emits what an engine would, in a plausible order, without proving anything."""

    def __init__(self, tracker: StatusTracker, clock: _Clock) -> None:
        self.tracker, self.clock = tracker, clock
        self.minter = ev.LeaseMinter()
        self.events = 0
        self.workers = [f"cpu{d}/w{w}" for d in range(DEVICES) for w in range(WORKERS_PER_DEVICE)]
        for worker in self.workers:
            self.post(ev.WorkerRegistered(at=clock.now, worker_id=worker, device=worker.split("/")[0]))

    def post(self, event: ev.Event) -> None:
        self.tracker.apply(event)
        self.events += 1

    def submit(self, prefix: str, jobs: int) -> list[str]:
        ids = [f"{prefix}-snap-update-{n:04d}" for n in range(jobs)]
        for job_id in ids:
            self.post(ev.JobSubmitted(at=self.clock.now, job_id=job_id, kind="snap-update", priority="normal",
                                      partitions=PARTITIONS))  # fmt: skip
        return ids

    def advance(self, job_id: str, index: int, steps: int, worker: str, start: int = 0) -> None:
        """Take one partition through phases start+1 .. steps (1 synth start, 2 synth end, 3 lease, 4 device
        section end, 5 finalize end)."""
        at, name, token = self.clock.now, f"{job_id}/{index}", None
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
        self.clock.now += 0.001

    def run_jobs(self, ids: list[str]) -> None:
        """Every partition of every job through the whole pipeline, then the job's end."""
        for n, job_id in enumerate(ids):
            for index in range(PARTITIONS):
                self.advance(job_id, index, 5, self.workers[(n * PARTITIONS + index) % len(self.workers)])
            self.post(ev.JobDone(at=self.clock.now, job_id=job_id))


def _live_tracker() -> tuple[_Clock, StatusTracker, SyntheticEngine, list[str]]:
    """A tracker with 100 live jobs of 16 partitions in mixed states."""
    clock = _Clock()
    tracker = StatusTracker(TrackerConfig(memory_total_bytes=1 << 40), clock=clock)
    engine = SyntheticEngine(tracker, clock)
    live = engine.submit("live", JOBS)
    to_prove = []
    for n, job_id in enumerate(live):
        for index in range(PARTITIONS):
            # pending, synthesizing, synthesized, proving, finalizing, done: one sixth each
            steps = (n * PARTITIONS + index) % 6
            if steps == 3:
                to_prove.append((job_id, index))
                steps = 2
            engine.advance(job_id, index, steps, engine.workers[index % len(engine.workers)])
    for worker, (job_id, index) in zip(engine.workers, to_prove, strict=False):
        engine.advance(job_id, index, 3, worker, start=2)  # one proving partition per worker
    return clock, tracker, engine, live


def direct(samples: int, partition_seconds: float | None) -> dict[str, Any]:
    clock = _Clock()
    tracker = StatusTracker(TrackerConfig(retention_secs=1e9, memory_total_bytes=1 << 40), clock=clock)
    engine = SyntheticEngine(tracker, clock)

    # 1. CPU per event: a full lifecycle of 100 x 16 partitions.
    ids = engine.submit("warm", JOBS)
    before, start = engine.events, time.process_time()
    engine.run_jobs(ids)
    cpu = time.process_time() - start
    lifecycle_events = engine.events - before
    per_event_us = cpu / lifecycle_events * 1e6
    per_partition_us = cpu / (JOBS * PARTITIONS) * 1e6

    # 2. /status with 100 live jobs of 16 partitions in mixed states (the finished ones above leave the view).
    clock, tracker, engine, live = _live_tracker()
    latencies, cpu_ms, sizes = [], [], []
    pending = [(j, i) for j in live for i in range(PARTITIONS) if (live.index(j) * PARTITIONS + i) % 6 == 0]
    attempts = dict.fromkeys(pending, 1)
    for n in range(samples):
        # The state moves between polls: a pending partition starts synthesis and is sent back for a retry.
        job_id, index = key = pending[n % len(pending)]
        at = clock.now
        engine.post(ev.SynthesisStarted(at=at, job_id=job_id, partition=index, attempt=attempts[key]))
        attempts[key] += 1
        engine.post(
            ev.PartitionRetried(at=at, job_id=job_id, partition=index, attempt=attempts[key], reason="x")
        )
        start, start_cpu = time.perf_counter(), time.process_time()
        body = tracker.snapshot().to_json_text()
        latencies.append((time.perf_counter() - start) * 1000)
        cpu_ms.append((time.process_time() - start_cpu) * 1000)
        sizes.append(len(body))
    snapshot = tracker.snapshot()
    result = {
        "mode": "direct",
        "live_jobs": len(snapshot.pipelines),
        "live_partitions": sum(len(p.partitions) for p in snapshot.pipelines),
        "status_p50_ms": _percentile(latencies, 50),
        "status_p99_ms": _percentile(latencies, 99),
        "status_max_ms": max(latencies),
        "status_cpu_p50_ms": _percentile(cpu_ms, 50),
        "status_cpu_p99_ms": _percentile(cpu_ms, 99),
        "status_bytes": int(statistics.mean(sizes)),
        "events_per_partition": lifecycle_events / (JOBS * PARTITIONS),
        "cpu_per_event_us": per_event_us,
        "cpu_per_partition_us": per_partition_us,
        "invariants_ok": snapshot.invariants_ok,
    }
    if partition_seconds:
        result["partition_seconds"] = partition_seconds
        result["tracker_share_of_proving"] = per_partition_us / 1e6 / partition_seconds
    return result


class _ServedTracker:
    """What the HTTP API needs of an engine to serve /status and /healthz: a ready flag and snapshots."""

    ready = True

    def __init__(self, tracker: StatusTracker) -> None:
        self._tracker = tracker

    def snapshot(self) -> Any:
        return self._tracker.snapshot()


def keepalive(samples: int) -> dict[str, Any]:
    """Serve the 100 x 16 tracker through the daemon's own app and server stack, then time /healthz and
    /status through one `prooflane.Client` (one kept-alive connection), as pollers and dashboards do."""
    import asyncio
    import threading
    from typing import cast

    import uvicorn

    from prooflane import Client
    from prooflane.api import EngineApi, create_app
    from prooflane.config import Config
    from prooflane.server import MAX_HEADER_BYTES, _connection_class, _Server, bind

    _, tracker, _, _ = _live_tracker()
    app = create_app(cast(EngineApi, _ServedTracker(tracker)), Config())
    sock = bind("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = _Server(
        uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False,
                       http=_connection_class(30.0), h11_max_incomplete_event_size=MAX_HEADER_BYTES)
    )  # fmt: skip
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    health, status = [], []
    try:
        with Client(url) as client:
            client.health()
            for _ in range(samples):
                start = time.perf_counter()
                client.health()
                health.append((time.perf_counter() - start) * 1000)
                start = time.perf_counter()
                body = client.status()
                status.append((time.perf_counter() - start) * 1000)
    finally:
        server.should_exit = True
        thread.join()
    return {
        "mode": "keepalive",
        "live_jobs": len(body["pipelines"]),
        "live_partitions": sum(len(p["partitions"]) for p in body["pipelines"]),
        "healthz_p50_ms": _percentile(health, 50),
        "healthz_p99_ms": _percentile(health, 99),
        "status_p50_ms": _percentile(status, 50),
        "status_p99_ms": _percentile(status, 99),
        "status_max_ms": max(status),
    }


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
    return {
        "mode": "http",
        "url": url,
        "live_jobs": max(jobs),
        "live_partitions": max(partitions),
        "status_p50_ms": _percentile(latencies, 50),
        "status_p99_ms": _percentile(latencies, 99),
        "status_max_ms": max(latencies),
        "status_bytes": int(statistics.mean(sizes)),
    }


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


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="time GET /status on this running daemon instead of a direct tracker")
    parser.add_argument("--samples", type=int, default=500, help="how many /status samples (default 500)")
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
    parser.add_argument("--kind", default="snap-update", help="kind of the --load jobs (default snap-update)")
    parser.add_argument("--sector", help="sector folder for the --load jobs (prooflane sector new ...)")
    args = parser.parse_args()
    if args.load and not (args.url and args.sector):
        parser.error("--load needs --url and --sector")
    if args.keepalive:
        result = keepalive(args.samples)
    elif args.url and args.load:
        result = under_load(args.url, args.samples, args.load, args.kind, args.sector)
    elif args.url:
        result = over_http(args.url, args.samples)
    else:
        result = direct(args.samples, args.partition_seconds)
    print_table(["figure", "value"], [[k, v] for k, v in result.items()])
    write_json("bench_status", result)


if __name__ == "__main__":
    main()
