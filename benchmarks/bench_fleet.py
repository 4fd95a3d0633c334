"""What following many daemons costs the fleet service: CPU of the fleet process, and the time to build
``GET /fleet/status`` and ``GET /fleet/metrics``, with 10, 50 and 100 daemons polled every second.

The daemons are stand-ins served by a child process: each port answers ``/status`` with the JSON of a real
:class:`~prooflane.status.StatusTracker` snapshot (8 workers on 4 devices, 20 live jobs of 10 partitions in
mixed states) and ``/metrics`` with that tracker's Prometheus text, over HTTP/1.1 with keep-alive; they refuse
``/v1/events`` (404), so the fleet polls, its costlier mode. The fleet runs in this process, as
:class:`~prooflane.fleet.Fleet`, and its CPU time is this process's alone.

Prints a table and writes benchmarks/results/bench_fleet.json. Asserts nothing.

Usage: python benchmarks/bench_fleet.py [--daemons 10,50,100] [--secs 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, write_json
from prooflane import events as ev
from prooflane.fleet.config import DaemonSpec, FleetConfig
from prooflane.fleet.service import Fleet
from prooflane.server.metrics import render
from prooflane.status.tracker import StatusTracker, TrackerConfig

WARMUP_SECS = 3.0


def busy_tracker() -> StatusTracker:
    """A tracker in the middle of a busy minute: 8 workers, 20 live jobs, leases and finalizers running."""
    now = [1000.0]
    tracker = StatusTracker(
        TrackerConfig(memory_total_bytes=64 << 30, sample_rss=False), clock=lambda: now[0]
    )
    minter = ev.LeaseMinter()
    workers = [(f"cpu:{d}/w{w}", f"cpu:{d}") for d in range(4) for w in range(2)]
    for worker_id, device in workers:
        tracker.apply(ev.WorkerRegistered(at=now[0], worker_id=worker_id, device=device))
    for j in range(20):
        job = f"job-{j:04d}"
        tracker.apply(
            ev.JobSubmitted(at=now[0], job_id=job, kind="porep-c2", priority="normal", partitions=10)
        )
        for p in range(10 if j < 2 else 0):
            tracker.apply(ev.SynthesisStarted(at=now[0], job_id=job, partition=p))
            now[0] += 0.01
            tracker.apply(ev.SynthesisFinished(at=now[0], job_id=job, partition=p, synth_ms=10.0))
            if p < len(workers):
                worker_id, device = workers[p]
                token = minter.mint()
                tracker.apply(ev.LeaseGranted(at=now[0], token=token, worker_id=worker_id, device=device,
                                              job_id=job, partition=p))  # fmt: skip
                if p % 2:
                    now[0] += 0.01
                    tracker.apply(ev.DeviceSectionFinished(at=now[0], token=token, prove_ms=10.0))
    return tracker


def serve(ports: multiprocessing.Queue[list[int]], count: int) -> None:
    """The child process: ``count`` stand-in daemons on free loopback ports."""
    tracker = busy_tracker()
    status = tracker.snapshot().to_json_text().encode()
    metrics = render(tracker).encode()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1]
                body, code = (status, b"200 OK") if path == b"/status" else (metrics, b"200 OK")
                if path not in (b"/status", b"/metrics"):
                    body, code = b"{}", b"404 Not Found"
                writer.write(b"HTTP/1.1 " + code + b"\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\n\r\n" + body)  # fmt: skip
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        servers = [await asyncio.start_server(answer, "127.0.0.1", 0) for _ in range(count)]
        ports.put([s.sockets[0].getsockname()[1] for s in servers])
        await asyncio.Event().wait()

    asyncio.run(main())


async def measure(count: int, secs: float) -> dict[str, Any]:
    ports_queue: multiprocessing.Queue[list[int]] = multiprocessing.Queue()
    child = multiprocessing.Process(target=serve, args=(ports_queue, count), daemon=True)
    child.start()
    try:
        ports = ports_queue.get(timeout=60)
        specs = tuple(
            DaemonSpec(name=f"d{i:03d}", url=f"http://127.0.0.1:{port}") for i, port in enumerate(ports)
        )
        fleet = Fleet(FleetConfig(port=0, poll_secs=1.0, daemons=specs))
        await fleet.start()
        await asyncio.sleep(WARMUP_SECS)
        received = {f.spec.name: f.received_at for f in fleet.followers.values()}
        cpu0, wall0 = time.process_time(), time.monotonic()
        await asyncio.sleep(secs)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        fresh = sum(1 for f in fleet.followers.values() if f.received_at != received[f.spec.name])
        up = fleet.health()["up"]
        metrics_ms = []
        for _ in range(5):
            start = time.perf_counter()
            await fleet.metrics()
            metrics_ms.append((time.perf_counter() - start) * 1000)
            await asyncio.sleep(0.2)  # the followers run between samples, as between scrapes
        status_ms, page_ms = [], []
        for _ in range(30):
            start = time.perf_counter()
            text = json.dumps(fleet.status())
            status_ms.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            page_text = json.dumps(fleet.status(snapshots=False))
            page_ms.append((time.perf_counter() - start) * 1000)
            await asyncio.sleep(0.2)
        await fleet.close()
    finally:
        child.kill()
        child.join()
    return {
        "daemons": count,
        "up": up,
        "refreshed_in_window": fresh,
        "fleet_cpu_share": cpu / wall,
        "status_build_ms_median": statistics.median(status_ms),
        "status_bytes": len(text),
        "page_status_build_ms_median": statistics.median(page_ms),
        "page_status_bytes": len(page_text),
        "metrics_ms_median": statistics.median(metrics_ms),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--daemons", default="10,50,100", help="comma-separated daemon counts")
    parser.add_argument("--secs", type=float, default=10.0, help="measuring window per count")
    args = parser.parse_args()
    rows = [asyncio.run(measure(int(n), args.secs)) for n in args.daemons.split(",")]
    headers = ["daemons", "up", "refreshed", "fleet CPU (share of one core)", "/fleet/status ms", "bytes",
               "?snapshots=false ms", "bytes", "/fleet/metrics ms"]  # fmt: skip
    print_table(headers, [[r["daemons"], r["up"], r["refreshed_in_window"], r["fleet_cpu_share"],
                           r["status_build_ms_median"], r["status_bytes"], r["page_status_build_ms_median"],
                           r["page_status_bytes"], r["metrics_ms_median"]] for r in rows])  # fmt: skip
    write_json("bench_fleet", {"poll_secs": 1.0, "window_secs": args.secs, "runs": rows})


if __name__ == "__main__":
    main()
