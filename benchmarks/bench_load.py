"""The status API under load: a real daemon with 1,000 jobs queued, 20 event-stream clients and 20 pollers.

A ``prooflane serve`` daemon (tiny profile, one ``cpu`` device with one worker and one synthesis process, so
the jobs queue behind it while it proves) takes ``--jobs`` jobs of the default ``prooflane bench`` mix
submitted back to back from 4 connections, against one sector folder. While they are submitted and for
``--hold`` seconds after, in this process:

* ``--sse`` clients read ``GET /v1/events`` from the seq before the first job (``Last-Event-ID``), each on its
  own connection, checking that the ids they get follow one another with no gap and no repeat, and counting
  ``resync`` events;
* ``--pollers`` pollers, each on one kept-alive connection, ask in turn ``GET /status`` (every live job),
  ``GET /status?jobs=50`` and ``GET /healthz``, then wait ``--interval`` seconds (their starts spread evenly
  over the first interval, so they do not all ask at once).

Then the daemon's ``seq`` is read: every client must have received exactly the events from its start to that
seq. The clients speak HTTP/1.1 on bare asyncio streams (no parsing of the JSON bodies, so this process takes
as little CPU from the daemon as it can: both share the machine). Peak RSS of the daemon is its VmHWM.

Prints a table and writes benchmarks/results/bench_load.json. Asserts nothing.

Usage: python benchmarks/bench_load.py [--jobs 1000] [--sse 20] [--pollers 20] [--interval 1.0] [--hold 30]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psutil

from _common import claim_cpu, print_table, write_json
from prooflane.circuits import Sector, profile_by_name
from prooflane.cli.daemon_process import DaemonProcess
from prooflane.cli.workload import DEFAULT_MIX, parse_mix, plan

SUBMITTERS = 4
BOUNDED = 50


@dataclass
class Connection:
    """One kept-alive HTTP/1.1 connection on bare asyncio streams."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    @classmethod
    async def open(cls, host: str, port: int) -> Connection:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n"
        if body:
            head += "Content-Type: application/json\r\n"
        self.writer.write(head.encode() + b"\r\n" + body)
        status, headers = await read_head(self.reader)
        length = int(headers.get("content-length", "0"))
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


async def read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split(" ", 2)[1]), headers


@dataclass
class StreamStats:
    """What one event-stream client saw."""

    start: int
    last: int = 0
    received: int = 0
    gaps: int = 0  # an id that did not follow the one before (a lost or repeated event)
    resyncs: int = 0
    heartbeats: int = 0
    reached: asyncio.Event = field(default_factory=asyncio.Event)
    target: int | None = None

    def see(self, event_id: int, name: str) -> None:
        if name == "resync":
            self.resyncs += 1
            self.last = event_id
            return
        expected = (self.last or self.start) + 1
        if event_id != expected:
            self.gaps += 1
        self.last = event_id
        self.received += 1
        if self.target is not None and self.last >= self.target:
            self.reached.set()


async def event_stream(host: str, port: int, stats: StreamStats, opened: asyncio.Event) -> None:
    """Read ``/v1/events`` from ``stats.start`` until cancelled (chunked transfer, SSE frames)."""
    reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
    request = f"GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nLast-Event-ID: {stats.start}\r\n\r\n"
    writer.write(request.encode())
    try:
        status, headers = await read_head(reader)
        if status != 200 or headers.get("transfer-encoding") != "chunked":
            raise RuntimeError(f"/v1/events answered {status} {headers}")
        opened.set()
        pending = ""
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            if size == 0:
                return
            chunk = (await reader.readexactly(size + 2))[:-2].decode()
            frames = (pending + chunk).split("\n\n")
            pending = frames.pop()
            for frame in frames:
                read_frame(frame, stats)
    finally:
        writer.close()


def read_frame(frame: str, stats: StreamStats) -> None:
    event_id, name = None, "message"
    for line in frame.split("\n"):
        if line.startswith("id: "):
            event_id = int(line[4:].rpartition(":")[2])  # <boot_id>:<seq>
        elif line.startswith("event: "):
            name = line[7:]
        elif line == ": heartbeat":
            stats.heartbeats += 1
    if event_id is not None:
        stats.see(event_id, name)


@dataclass
class PollStats:
    status_ms: list[float] = field(default_factory=list)
    bounded_ms: list[float] = field(default_factory=list)
    healthz_ms: list[float] = field(default_factory=list)
    status_bytes: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


async def poller(
    host: str, port: int, interval: float, phase: float, stats: PollStats, stop: asyncio.Event
) -> None:
    """Every ``interval`` seconds, from ``phase`` seconds on (pollers spread over the interval, not in step,
    as independent pollers are), ask for the three routes in turn."""
    connection = await Connection.open(host, port)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), phase)
    routes = (("/status", stats.status_ms), (f"/status?jobs={BOUNDED}", stats.bounded_ms),
              ("/healthz", stats.healthz_ms))  # fmt: skip
    try:
        while not stop.is_set():
            for path, times in routes:
                start = time.perf_counter()
                status, body = await connection.request("GET", path)
                times.append((time.perf_counter() - start) * 1000)
                if status != 200:
                    stats.errors.append(f"{path}: {status} {body[:200]!r}")
                if path == "/status":
                    stats.status_bytes.append(len(body))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
    finally:
        connection.close()


async def submit_all(host: str, port: int, kinds: list[str], sector: str) -> list[float]:
    """Submit every job from ``SUBMITTERS`` kept-alive connections; the latency of each submit."""
    queue: asyncio.Queue[str] = asyncio.Queue()
    for kind in kinds:
        queue.put_nowait(kind)
    latencies: list[float] = []

    async def submitter() -> None:
        connection = await Connection.open(host, port)
        try:
            while not queue.empty():
                body = json.dumps({"kind": queue.get_nowait(), "sector": sector}).encode()
                start = time.perf_counter()
                status, answer = await connection.request("POST", "/v1/jobs", body)
                latencies.append((time.perf_counter() - start) * 1000)
                if status != 202:
                    raise RuntimeError(f"POST /v1/jobs answered {status}: {answer[:300]!r}")
        finally:
            connection.close()

    await asyncio.gather(*(submitter() for _ in range(SUBMITTERS)))
    return latencies


async def status_now(host: str, port: int) -> dict[str, Any]:
    connection = await Connection.open(host, port)
    try:
        status, body = await connection.request("GET", "/status?jobs=0")
        if status != 200:
            raise RuntimeError(f"/status answered {status}")
        doc: dict[str, Any] = json.loads(body)
        return doc
    finally:
        connection.close()


async def load(url: str, args: argparse.Namespace, sector: str) -> dict[str, Any]:
    parsed = urlsplit(url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 80
    before = await status_now(host, port)
    streams = [StreamStats(start=before["seq"]) for _ in range(args.sse)]
    opened = [asyncio.Event() for _ in streams]
    readers = [
        asyncio.create_task(event_stream(host, port, s, o)) for s, o in zip(streams, opened, strict=True)
    ]
    if opened:
        await asyncio.wait_for(asyncio.gather(*(o.wait() for o in opened)), 60)
    polls, stop = PollStats(), asyncio.Event()
    pollers = [
        asyncio.create_task(poller(host, port, args.interval, n * args.interval / args.pollers, polls, stop))
        for n in range(args.pollers)
    ]
    started, started_cpu = time.perf_counter(), time.process_time()
    submits = await submit_all(host, port, plan(args.jobs, parse_mix(args.mix)), sector)
    submitted_secs = time.perf_counter() - started
    await asyncio.sleep(args.hold)
    stop.set()
    await asyncio.gather(*pollers)
    after = await status_now(host, port)
    for stats in streams:
        stats.target = after["seq"]
        if stats.last >= after["seq"]:
            stats.reached.set()
    with contextlib.suppress(TimeoutError):  # reported: what a client lacks by then counts as missing
        await asyncio.wait_for(asyncio.gather(*(s.reached.wait() for s in streams)), 60)
    for task in readers:
        task.cancel()
    await asyncio.gather(*readers, return_exceptions=True)
    emitted = after["seq"] - before["seq"]
    live, counters = live_jobs(after), after["counters"]
    ended = counters["total_completed"] + counters["total_failed"] + counters["total_cancelled"]
    return {
        "jobs": args.jobs,
        "mix": args.mix,
        "sse_clients": args.sse,
        "pollers": args.pollers,
        "poll_interval_secs": args.interval,
        "submit_secs": submitted_secs,
        "submit_p50_ms": percentile(submits, 50),
        "submit_p99_ms": percentile(submits, 99),
        "measured_secs": time.perf_counter() - started,
        "load_generator_cpu_secs": time.process_time() - started_cpu,
        "status_requests": len(polls.status_ms),
        "status_p50_ms": percentile(polls.status_ms, 50),
        "status_p99_ms": percentile(polls.status_ms, 99),
        "status_max_ms": max(polls.status_ms),
        "status_bytes_max": max(polls.status_bytes),
        "bounded_p50_ms": percentile(polls.bounded_ms, 50),
        "bounded_p99_ms": percentile(polls.bounded_ms, 99),
        "healthz_p50_ms": percentile(polls.healthz_ms, 50),
        "healthz_p99_ms": percentile(polls.healthz_ms, 99),
        "poll_errors": polls.errors[:10],
        "events_emitted": emitted,
        "events_received_min": min((min(s.received, s.last - s.start) for s in streams), default=0),
        "events_received_max": max((s.received for s in streams), default=0),
        "clients_complete": sum(s.last >= after["seq"] and s.gaps == 0 for s in streams),
        "gaps": sum(s.gaps for s in streams),
        "resyncs": sum(s.resyncs for s in streams),
        "live_jobs_end": live,
        "jobs_accounted": live["queued"] + live["running"] + ended,
        "seq_start": before["seq"],
        "seq_end": after["seq"],
    }


def live_jobs(status: dict[str, Any]) -> dict[str, int]:
    """``live_jobs`` of a ``/status`` answer; counted from ``pipelines`` for a daemon older than that field
    (which also lists every job whatever ``?jobs=`` says), so ``--url`` can load one for comparison."""
    if "live_jobs" in status:
        counts: dict[str, int] = status["live_jobs"]
        return counts
    states = [p["state"] for p in status["pipelines"]]
    counted = {s: states.count(s) for s in ("queued", "running", "done", "failed", "cancelled")}
    return {"total": len(states), "shown": len(states), **counted}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))] if ordered else float("nan")


def peak_rss_bytes(pid: int) -> int:
    """The process's peak resident set size (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000, help="jobs to submit (default 1000)")
    parser.add_argument("--mix", default=DEFAULT_MIX, help=f"kinds and weights (default {DEFAULT_MIX})")
    parser.add_argument("--sse", type=int, default=20, help="event-stream clients (default 20)")
    parser.add_argument("--pollers", type=int, default=20, help="/status pollers (default 20)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between a poller's rounds")
    parser.add_argument("--hold", type=float, default=30.0, help="seconds to go on once all are submitted")
    parser.add_argument("--keys", type=Path, help="a proving-key folder to reuse (default: made afresh)")
    parser.add_argument("--url", help="load this running daemon instead of starting one (needs --sector)")
    parser.add_argument("--sector", type=Path, help="with --url: a sector folder of the daemon's profile")
    args = parser.parse_args()
    load_start = os.getloadavg()[0]
    if args.url:
        if args.sector is None:
            parser.error("--url needs --sector")
        result = asyncio.run(load(args.url, args, str(args.sector.resolve())))
        result["daemon_peak_rss_bytes"] = result["daemon_peak_rss_ready_bytes"] = 0  # not ours to read
        result["daemon_cpu_secs"] = float("nan")
        report(args, result, load_start)
        return
    with tempfile.TemporaryDirectory(prefix="prooflane-load-") as tmp:
        folder = Path(tmp)
        sector = folder / "sector"
        Sector.create(sector, profile_by_name("tiny").sector_bytes, seed=7)
        config = folder / "daemon.toml"
        keys = f'keys_dir = "{args.keys.resolve()}"\n' if args.keys else ""
        roots = f'allowed_roots = ["{sector}"]\n'  # the sector lies outside the daemon's data folder
        layout = 'devices = ["cpu:0"]\nworkers_per_device = 1\nsynthesis_workers = 1\n'
        config.write_text(layout + keys + roots)
        with DaemonProcess(folder / "data", config_file=config) as daemon:
            rss_ready = peak_rss_bytes(daemon.pid)
            process = psutil.Process(daemon.pid)
            cpu_before = sum(process.cpu_times()[:2])
            result = asyncio.run(load(daemon.url, args, str(sector)))
            result["daemon_cpu_secs"] = sum(process.cpu_times()[:2]) - cpu_before
            result["daemon_peak_rss_bytes"] = peak_rss_bytes(daemon.pid)
            result["daemon_peak_rss_ready_bytes"] = rss_ready
    report(args, result, load_start)


def report(args: argparse.Namespace, result: dict[str, Any], load_start: float) -> None:
    result["load_average"] = {"start": load_start, "end": os.getloadavg()[0]}
    rows = [
        ["/status (every live job)", result["status_p50_ms"], result["status_p99_ms"],
         f"{result['status_requests']} requests, up to {result['status_bytes_max']:,} bytes"],
        [f"/status?jobs={BOUNDED}", result["bounded_p50_ms"], result["bounded_p99_ms"], ""],
        ["/healthz", result["healthz_p50_ms"], result["healthz_p99_ms"], ""],
        ["POST /v1/jobs", result["submit_p50_ms"], result["submit_p99_ms"],
         f"{args.jobs} jobs in {result['submit_secs']:.1f} s"],
    ]  # fmt: skip
    print_table(["request", "p50 ms", "p99 ms", "note"], rows)
    facts = [
        ["events emitted (seq start -> end)", f"{result['events_emitted']} ({result['seq_start']} -> "
                                              f"{result['seq_end']})"],
        ["events received per client (min / max)", f"{result['events_received_min']} / "
                                                   f"{result['events_received_max']}"],
        ["clients with every event, in order", f"{result['clients_complete']} of {args.sse}"],
        ["gaps / resyncs", f"{result['gaps']} / {result['resyncs']}"],
        ["jobs accounted (queued + running + ended)", f"{result['jobs_accounted']} of {args.jobs}"],
        ["live jobs at the end", json.dumps(result["live_jobs_end"])],
        ["daemon peak RSS (ready -> end)", f"{result['daemon_peak_rss_ready_bytes'] / 2**20:.0f} -> "
                                           f"{result['daemon_peak_rss_bytes'] / 2**20:.0f} MiB"],
        ["daemon process CPU (its event loop; workers are other processes)",
         f"{result['daemon_cpu_secs']:.1f} s in {result['measured_secs']:.1f} s"],
        ["this process's CPU (the clients and the submitter)",
         f"{result['load_generator_cpu_secs']:.1f} s in {result['measured_secs']:.1f} s"],
        ["poll errors", str(len(result["poll_errors"]))],
        ["load average (1 min), start -> end", f"{load_start:.2f} -> {result['load_average']['end']:.2f}"],
    ]  # fmt: skip
    print_table(["figure", "value"], facts)
    write_json("bench_load", result)


if __name__ == "__main__":
    with claim_cpu():
        main()
