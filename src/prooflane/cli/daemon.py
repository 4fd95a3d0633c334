"""Daemon commands of the `prooflane` CLI: serve, status, bench, demo (submit and circuits: :mod:`.jobs`).

`status` and `bench` talk to a running daemon over HTTP (`--url`, or $PROOFLANE_URL), with the bearer token
from `--token` or $PROOFLANE_TOKEN when the daemon needs one; `bench` without either starts its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..circuits.profiles import PROFILES as PROFILES_BY_NAME
from ..client import Client
from ..config import DEFAULT_PORT, DEFAULT_URL, Config
from ..errors import ConfigError
from ..states import JobState
from .app import app
from .daemon_process import READY_PREFIX, DaemonProcess
from .options import Mix, OptionalUrl, Token, Url
from .output import REFUSED, console, errors, fit_whole, print_error, table, usage_error
from .workload import DEFAULT_MIX, parse_mix, plan, run_workload, sector_for

DEMO_SECTOR_BYTES = PROFILES_BY_NAME["tiny"].sector_bytes
DEMO_STOP_SECS = 8.0
"""How long the demo waits for its daemon's clean stop before it SIGKILLs what is left."""


# --- serve ------------------------------------------------------------------------------------


@app.command()
def serve(
    config: Annotated[
        Path | None, typer.Option("--config", metavar="FILE", help="TOML config file (docs/config.md).")
    ] = None,
    data: Annotated[
        Path | None,
        typer.Option(
            "--data",
            metavar="DIR",
            help="Data folder: journal, keys, and sectors/ (where --sector NAME is looked up).",
        ),
    ] = None,
    host: Annotated[
        str | None, typer.Option("--host", metavar="ADDRESS", help="Address to bind (default 127.0.0.1).")
    ] = None,
    port: Annotated[
        int | None,
        typer.Option("--port", metavar="PORT", help=f"Port, 0 for any free one (default {DEFAULT_PORT})."),
    ] = None,
    profile: Annotated[
        str | None,
        typer.Option("--profile", metavar="tiny|small|medium", help="Circuit sizes (default tiny)."),
    ] = None,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            metavar="ADDRESS",
            help="Run on a Ray cluster: auto, local or ray://HOST:PORT (docs/ray.md).",
        ),
    ] = None,
    parent_pid: Annotated[
        int | None,
        typer.Option("--parent-pid", hidden=True, help="Shut down when this process ends (demo, bench)."),
    ] = None,
) -> None:
    """Run the daemon: the engine and its HTTP API, until SIGINT or SIGTERM."""
    from ..logs import LogFile, configure_logging
    from ..server.daemon import serve as run

    with errors():
        if profile is not None and profile not in PROFILES_BY_NAME:
            raise typer.BadParameter(f"expected one of {', '.join(PROFILES_BY_NAME)}", param_hint="--profile")
        overrides: dict[str, Any] = {
            "data_dir": str(data) if data else None,
            "profile": profile,
            "host": host,
            "ray_address": ray,
        }
        if port:
            overrides["port"] = port
        loaded = Config.load(config, **overrides)
        _check_writable(loaded.data_dir)
        # Standard error, and data_dir/prooflane.log rotated: docs/operations.md, "Logs".
        file = None
        if loaded.log_file is not None:
            file = LogFile(loaded.log_file, loaded.log_file_bytes, loaded.log_file_backups)
        configure_logging(loaded.log_level, loaded.log_format, file=file)
        bind_port = loaded.port if port is None else port

        def ready(url: str) -> None:
            print(f"{READY_PREFIX}{url}", flush=True)
            print(f"dashboard: {url}/", flush=True)

        run(loaded, loaded.host, bind_port, on_ready=ready, parent_pid=parent_pid)


def _check_writable(data_dir: Path) -> None:
    """Refuse, in one line, a data folder the daemon could not write (a read-only file system, a folder of
    another user's), before anything is made, so nothing is left behind."""
    target = data_dir.absolute()
    folder = target
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if folder.is_dir() and os.access(folder, os.W_OK | os.X_OK):
        return
    what = "cannot be written (read-only, or not yours)" if folder.is_dir() else "is not a folder"
    if folder == target:
        raise ConfigError(f"data_dir {data_dir} {what}: the daemon keeps its journal, keys and log there")
    raise ConfigError(f"data_dir {data_dir} cannot be made: {folder} {what}")


# --- status -----------------------------------------------------------------------------------


@app.command()
def status(
    url: Url = DEFAULT_URL,
    check: Annotated[
        bool, typer.Option("--check", help="Exit 0 if the daemon can do its work, else 1 with the reason.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the raw /status JSON.")] = False,
) -> None:
    """Print a readable summary of the daemon's state (or, with --check, just its health)."""
    with Client(url, timeout=5.0) as client:
        if check:
            problem = client.health_reason()
            print(f"ok: {url} can do its work" if problem is None else f"down: {url} {problem}")
            raise typer.Exit(0 if problem is None else 1)
        with errors():
            snapshot = client.status()
        if as_json:
            print(json.dumps(snapshot, indent=2))
            return
        _print_summary(console(), url, snapshot)


def _print_summary(out: Console, url: str, s: dict[str, Any]) -> None:
    mem, counters = s["memory"], s["counters"]
    out.print(
        f"prooflane {s['version']} at {url}  up {s['uptime_secs']:.0f} s  boot {s['boot_id']}  seq {s['seq']}"
    )
    _print_arithmetic(out, s)
    out.print(
        f"invariants {'ok' if s['invariants_ok'] else 'VIOLATED'}  stale events {s['stale_events']}  "
        f"queue depth {counters['queue_depth']}  synthesis {s['synthesis']['active']}/"
        f"{s['synthesis']['max_concurrent']}"
    )
    out.print(
        f"memory held {_mib(mem['used_bytes'])} of {_mib(mem['total_bytes'])} (reserved "
        f"{_mib(mem['reserved_bytes'])}, cached keys {_mib(mem['cached_bytes'])})  "
        f"RSS {_mib(mem['tree_rss_bytes'])} (daemon and workers)"
    )
    out.print(
        f"completed {counters['total_completed']}  failed {counters['total_failed']}  "
        f"cancelled {counters['total_cancelled']}"
    )
    for t in s.get("tables") or []:  # a key's fixed-base tables, each on a line, the reason whole
        said = {"stored": f"stored ({_mib(t['bytes'])} a worker)", "unused": f"not used ({t['reason']})"}
        out.print(
            f"msm tables of {t['key']}: {said.get(t['state'], t['state'])}", markup=False, overflow="fold"
        )
    devices = "  ".join(f"{d['device']} {d['busy_fraction_1m']:.0%}" for d in s["devices"])
    out.print(f"device busy (last minute): {devices or 'no devices'}")
    workers = table("worker", "device", "state", "job", "partition", "finalizing", "busy s", title="workers",
                    whole=("worker", "device", "job", "finalizing"))  # fmt: skip
    for w in s["workers"]:
        finalizing = ", ".join(f"{f['job_id']}/{f['partition']}" for f in w["finalizing"])
        workers.add_row(
            w["worker_id"], w["device"], w["state"], w["current_job"] or "", _str(w["current_partition"]),
            finalizing, f"{w['busy_seconds_total']:.1f}",
        )  # fmt: skip
    fit_whole(workers, ("worker", "device", "job", "finalizing"))
    out.print(workers)
    jobs = table("job", "kind", "priority", "state", "done", title="jobs", whole=("job", "kind"))
    for p in s["pipelines"]:
        jobs.add_row(
            p["job_id"], p["proof_kind"], p["priority"], p["state"],
            f"{p['partitions_done']}/{p['total_partitions']}",
        )  # fmt: skip
    fit_whole(jobs, ("job", "kind"))
    out.print(jobs)
    live = s.get("live_jobs") or {}
    if live and live.get("shown", 0) < live.get("total", 0):
        out.print(
            f"listed {live['shown']:,} of {live['total']:,} live jobs ({live['queued']:,} queued, "
            f"{live['running']:,} running): every job holding work, the next to run and the last ended; "
            "GET /v1/jobs lists the rest",
            markup=False,
            overflow="fold",
        )


def _print_arithmetic(out: Console, s: dict[str, Any]) -> None:
    """What proves each curve there, and the health's warnings (a curve on the libraries), whole; nothing
    from a daemon that does not say."""
    arithmetic, products = s.get("arithmetic") or {}, s.get("products") or {}
    if arithmetic:
        said = ", ".join(
            f"{curve} {how}"
            + (f" ({products[curve]})" if products.get(curve, "libraries") != "libraries" else "")
            for curve, how in arithmetic.items()
        )
        out.print(f"arithmetic: {said}", markup=False, overflow="fold")
    for warning in (s.get("health") or {}).get("warnings") or []:
        out.print(f"warning: {warning}", markup=False, overflow="fold")


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def _str(value: object) -> str:
    return "" if value is None else str(value)


# --- bench ------------------------------------------------------------------------------------


@app.command()
def bench(
    jobs: Annotated[int, typer.Option("--jobs", metavar="N", min=1, help="How many jobs to submit.")] = 10,
    mix: Mix = DEFAULT_MIX,
    url: OptionalUrl = None,
    token: Token = None,
    sector_size: Annotated[
        int,
        typer.Option(
            "--sector-size", metavar="BYTES", help="Bytes per inline sector (the daemon's profile's size)."
        ),
    ] = DEMO_SECTOR_BYTES,
    out: Annotated[
        Path, typer.Option("--out", metavar="FILE", help="Where to write the JSON result.")
    ] = Path("prooflane-bench.json"),
) -> None:
    """Submit a workload, then print throughput, per-phase times and device busy fraction; write JSON."""
    if not out.parent.is_dir():
        usage_error(f"--out {out}: no folder {out.parent} to write it in")
    with errors():
        kinds = plan(jobs, parse_mix(mix))
        with contextlib.ExitStack() as stack:
            if url is None:
                data = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="prooflane-bench-")))
                daemon = stack.enter_context(DaemonProcess(data / "data", log_path=data / "daemon.log"))
                url = daemon.url
                typer.echo(f"started a daemon at {url}", err=True)
            client = stack.enter_context(Client(url, token))
            columns = (TextColumn("jobs"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
            with Progress(*columns, console=console(stderr=True)) as progress:
                task = progress.add_task("jobs", total=len(kinds))
                result = run_workload(
                    client,
                    kinds,
                    sector_size=sector_size,
                    on_progress=lambda done, _total: progress.update(task, completed=done),
                )
        payload = {"url": url, "mix": parse_mix(mix), **result.to_json()}
        _print_bench(payload)
        try:
            out.write_text(json.dumps(payload, indent=2) + "\n")
        except OSError as exc:
            print_error(f"--out {out}: cannot write it ({exc.strerror or exc})")
            raise typer.Exit(REFUSED) from None
        print(f"wrote {out}")


def _print_bench(r: dict[str, Any]) -> None:
    summary = table("measure", "value", title="prooflane bench")
    proven = f"{r['partitions_proven']} of {r['partitions']} partitions proven"
    summary.add_row("jobs completed", f"{r['completed']}/{r['jobs']} ({proven})")
    summary.add_row("wall time", f"{r['wall_secs']:.1f} s")
    summary.add_row("throughput", f"{r['jobs_per_hour']:.1f} jobs/hour")
    summary.add_row("partition proofs", f"{r['partitions_per_hour']:.1f} partitions/hour")
    summary.add_row("device busy fraction", f"{r['device_busy_fraction']:.3f}")
    for phase, numbers in r["phase_ms"].items():
        summary.add_row(
            f"{phase} per partition", f"mean {numbers['mean_ms']:.1f} ms, p50 {numbers['p50_ms']:.1f} ms"
        )
    console().print(summary)


# --- demo -------------------------------------------------------------------------------------


@app.command()
def demo(
    data: Annotated[
        Path | None, typer.Option("--data", metavar="DIR", help="Data folder (default: a temporary one).")
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            "--port",
            metavar="PORT",
            min=0,
            max=65535,
            help=f"The daemon's port (default {DEFAULT_PORT}, or a free one if taken; 0: any free one).",
        ),
    ] = None,
    in_flight: Annotated[
        int, typer.Option("--in-flight", metavar="N", min=1, help="Jobs kept in flight.")
    ] = 4,
    mix: Mix = DEFAULT_MIX,
) -> None:
    """Start a daemon with its embedded defaults and feed it a mixed workload until Ctrl-C or SIGTERM."""
    signal.signal(signal.SIGTERM, _interrupt)  # stopped by kill, systemd or a container runtime: as Ctrl-C
    weights = parse_mix(mix)
    if data is not None and data.exists() and not data.is_dir():
        usage_error(f"--data {data}: not a folder")
    if port and not _port_free(port):
        print_error(f"port {port} is taken: give another --port, or --port 0 for any free one")
        raise typer.Exit(REFUSED)
    moved = port is None and not _port_free(DEFAULT_PORT)
    with errors(), contextlib.ExitStack() as stack:
        if data is None:
            data = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="prooflane-demo-")))
        wanted = DEFAULT_PORT if port is None else port
        daemon = DaemonProcess(data, profile="tiny", port=0 if moved else wanted)
        # First: Ctrl-C or SIGTERM at any moment still stops the daemon and its workers, within 10 s in all.
        stack.callback(daemon.stop, DEMO_STOP_SECS)
        print(f"starting the daemon in {data} (the first start makes the dev keys; it takes a moment)")
        try:
            url = daemon.start()
            if moved:
                typer.echo(f"port {DEFAULT_PORT} is taken: the dashboard is on {url}/", err=True)
            print(f"dashboard: {url}/   (Ctrl-C to stop)", flush=True)
            with Client(url) as client:
                _feed(client, weights, in_flight)
        except KeyboardInterrupt:
            print("\nstopping the daemon", flush=True)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _port_free(port: int) -> bool:
    """Whether 127.0.0.1:``port`` can be bound now (the demo takes the default port when it can).

    The probe binds as the server does (SO_REUSEADDR), so connections of a stopped daemon that linger in
    TIME_WAIT do not make the port look busy."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _feed(client: Client, weights: dict[str, int], in_flight: int) -> None:
    """Keep ``in_flight`` jobs queued, cycling through the mix, and print progress every few seconds."""
    live: list[str] = []
    done: dict[str, int] = {}
    partitions_done = 0  # partition proofs of the jobs done: a snap-update job is 16 of them
    submitted = 0
    started = last_print = time.monotonic()
    while True:
        for view in [client.job(job_id) for job_id in live]:
            if view.state.terminal:
                live.remove(view.job_id)
                done[view.state.value] = done.get(view.state.value, 0) + 1
                partitions_done += view.total_partitions if view.state is JobState.DONE else 0
        while len(live) < in_flight:
            kind = plan(submitted + 1, weights)[-1]
            live.append(client.submit(kind, sector=sector_for(submitted, DEMO_SECTOR_BYTES)))
            submitted += 1
        if time.monotonic() - last_print >= 5:
            last_print = time.monotonic()
            hours = (last_print - started) / 3600
            jobs_rate = done.get("done", 0) / hours if hours else 0.0
            partitions_rate = partitions_done / hours if hours else 0.0
            ended = "  ".join(f"{state} {count}" for state, count in sorted(done.items()))
            line = (
                f"submitted {submitted}  {ended}  in flight {len(live)}  {jobs_rate:.0f} jobs/hour "
                f"({partitions_rate:.0f} partition proofs/hour)"
            )
            print(line, flush=True)
        time.sleep(0.5)
