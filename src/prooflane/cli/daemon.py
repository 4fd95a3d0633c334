"""Daemon commands of the `prooflane` CLI: serve, submit, status, bench, demo, circuits.

Every command but `serve` and `demo` talks to a running daemon over HTTP (`--url`, or $PROOFLANE_URL),
with the bearer token from `--token` or $PROOFLANE_TOKEN when the daemon needs one.
"""

from __future__ import annotations

import contextlib
import json
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
from ..models import JobView
from ..states import JobState
from .app import app
from .daemon_process import READY_PREFIX, DaemonProcess
from .output import console, errors, fit_whole, print_error, table
from .workload import DEFAULT_MIX, parse_mix, plan, run_workload, sector_for

circuits_app = typer.Typer(
    help="Register and list circom circuits (proof kind `circom`).", no_args_is_help=True
)
app.add_typer(circuits_app, name="circuits")


Url = Annotated[str, typer.Option("--url", envvar="PROOFLANE_URL", help="The daemon's base URL.")]
Token = Annotated[
    str | None, typer.Option("--token", envvar="PROOFLANE_TOKEN", help="Bearer token for mutating routes.")
]
DEMO_SECTOR_BYTES = PROFILES_BY_NAME["tiny"].sector_bytes
DEMO_STOP_SECS = 8.0
"""How long the demo waits for its daemon's clean stop before it SIGKILLs what is left."""


# --- serve ------------------------------------------------------------------------------------


@app.command()
def serve(
    config: Annotated[Path | None, typer.Option("--config", help="TOML config file.")] = None,
    data: Annotated[Path | None, typer.Option("--data", help="Data folder (journal, keys, sectors).")] = None,
    host: Annotated[str | None, typer.Option("--host", help="Address to bind (default 127.0.0.1).")] = None,
    port: Annotated[
        int | None, typer.Option("--port", help=f"Port, 0 for any free one (default {DEFAULT_PORT}).")
    ] = None,
    profile: Annotated[
        str | None, typer.Option("--profile", help="Circuit sizes: tiny, small or medium.")
    ] = None,
    ray: Annotated[
        str | None,
        typer.Option("--ray", help="Run on a Ray cluster: auto, local or ray://HOST:PORT (docs/ray.md)."),
    ] = None,
    parent_pid: Annotated[
        int | None,
        typer.Option("--parent-pid", hidden=True, help="Shut down when this process ends (demo, bench)."),
    ] = None,
) -> None:
    """Run the daemon: the engine and its HTTP API, until SIGINT or SIGTERM."""
    from ..logs import configure_logging
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
        configure_logging(loaded.log_level, loaded.log_format)  # standard error: docs/operations.md, "Logs"
        bind_port = loaded.port if port is None else port

        def ready(url: str) -> None:
            print(f"{READY_PREFIX}{url}", flush=True)
            print(f"dashboard: {url}/", flush=True)

        run(loaded, loaded.host, bind_port, on_ready=ready, parent_pid=parent_pid)


# --- submit -----------------------------------------------------------------------------------


@app.command()
def submit(
    kind: Annotated[str, typer.Option("--kind", help="Proof kind (see `GET /v1/kinds`).")],
    sector: Annotated[Path | None, typer.Option("--sector", help="Sector folder (storage kinds).")] = None,
    priority: Annotated[str | None, typer.Option("--priority", help="critical, high or normal.")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the proof, with a progress bar.")] = False,
    url: Url = DEFAULT_URL,
    token: Token = None,
    randomness: Annotated[str | None, typer.Option("--randomness", help="Hex randomness.")] = None,
    job_id: Annotated[str | None, typer.Option("--job-id", help="Your own job id (idempotent).")] = None,
    circuit: Annotated[
        str | None, typer.Option("--circuit", help="Registered circuit (kind circom).")
    ] = None,
    witness: Annotated[
        list[str] | None, typer.Option("--witness", help="A .wtns file per partition (kind circom).")
    ] = None,
) -> None:
    """Submit a job; print its id alone on the first line (with --wait, then the proof as JSON)."""
    with errors(), Client(url, token) as client:
        witnesses: list[str | dict[str, Any]] | None = (
            [str(Path(w).resolve()) for w in witness] if witness else None
        )
        new_id = client.submit(
            kind,
            sector=sector,
            randomness=randomness,
            priority=priority,
            job_id=job_id,
            circuit=circuit,
            witnesses=witnesses,
        )
        print(new_id, flush=True)
        if wait:
            view = _follow(client, new_id)
            if view.state != "done":
                print_error(f"job {new_id} {view.state}: {view.error or 'no reason given'}")
                raise typer.Exit(1)
            found = client.proof(new_id, wait=60)
            assert found is not None
            print(json.dumps(found.model_dump(mode="json"), indent=2))


def _follow(client: Client, job_id: str) -> JobView:
    """Show a progress bar on standard error until the job ends; return its last view."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console(stderr=True), transient=False) as progress:
        view = client.job(job_id)
        task = progress.add_task(f"{job_id} {view.state}", total=view.total_partitions)
        while True:
            progress.update(task, completed=view.partitions_done, description=f"{job_id} {view.state}")
            if view.state.terminal:
                return view
            time.sleep(0.25)
            view = client.job(job_id)


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
    out.print(
        f"invariants {'ok' if s['invariants_ok'] else 'VIOLATED'}  stale events {s['stale_events']}  "
        f"queue depth {counters['queue_depth']}  synthesis {s['synthesis']['active']}/"
        f"{s['synthesis']['max_concurrent']}"
    )
    out.print(
        f"memory reserved {_mib(mem['reserved_bytes'])} of {_mib(mem['total_bytes'])}  "
        f"rss {_mib(mem['process_rss_bytes'])}"
    )
    out.print(
        f"completed {counters['total_completed']}  failed {counters['total_failed']}  "
        f"cancelled {counters['total_cancelled']}"
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


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def _str(value: object) -> str:
    return "" if value is None else str(value)


# --- bench ------------------------------------------------------------------------------------


@app.command()
def bench(
    jobs: Annotated[int, typer.Option("--jobs", min=1, help="How many jobs to submit.")] = 10,
    mix: Annotated[str, typer.Option("--mix", help="Kinds and weights, e.g. porep-c2=2,snap-update=1.")] = (
        DEFAULT_MIX
    ),
    url: Annotated[
        str | None, typer.Option("--url", help="A running daemon; without it, one is started (tiny).")
    ] = None,
    token: Token = None,
    sector_size: Annotated[
        int, typer.Option("--sector-size", help="Bytes per inline sector (the daemon's profile's size).")
    ] = DEMO_SECTOR_BYTES,
    out: Annotated[Path, typer.Option("--out", help="Where to write the JSON result.")] = Path(
        "prooflane-bench.json"
    ),
) -> None:
    """Submit a workload, then print throughput, per-phase times and device busy fraction; write JSON."""
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
        out.write_text(json.dumps(payload, indent=2) + "\n")
        _print_bench(payload)
        print(f"wrote {out}")


def _print_bench(r: dict[str, Any]) -> None:
    summary = table("measure", "value", title="prooflane bench")
    summary.add_row("jobs completed", f"{r['completed']}/{r['jobs']} ({r['partitions']} partitions)")
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
        Path | None, typer.Option("--data", help="Data folder (default: a temporary one).")
    ] = None,
    in_flight: Annotated[int, typer.Option("--in-flight", min=1, help="Jobs kept in flight.")] = 4,
    mix: Annotated[str, typer.Option("--mix", help="Kinds and weights of the workload.")] = DEFAULT_MIX,
) -> None:
    """Start a daemon with its embedded defaults and feed it a mixed workload until Ctrl-C or SIGTERM."""
    signal.signal(signal.SIGTERM, _interrupt)  # stopped by kill, systemd or a container runtime: as Ctrl-C
    with errors(), contextlib.ExitStack() as stack:
        weights = parse_mix(mix)
        if data is None:
            data = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="prooflane-demo-")))
        daemon = DaemonProcess(data, profile="tiny", port=DEFAULT_PORT if _port_free(DEFAULT_PORT) else 0)
        # First: Ctrl-C or SIGTERM at any moment still stops the daemon and its workers, within 10 s in all.
        stack.callback(daemon.stop, DEMO_STOP_SECS)
        print(f"starting the daemon in {data} (the first start makes the dev keys; it takes a moment)")
        try:
            url = daemon.start()
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


# --- circuits ---------------------------------------------------------------------------------


@circuits_app.command("register")
def circuits_register(
    name: Annotated[str, typer.Argument(help="Name jobs will use in `circuit`.")],
    zkey: Annotated[Path, typer.Option("--zkey", help="snarkjs Groth16 .zkey.")],
    wasm: Annotated[Path | None, typer.Option("--wasm", help="circom witness generator (.wasm).")] = None,
    priority: Annotated[str, typer.Option("--priority", help="critical, high or normal.")] = "normal",
    url: Url = DEFAULT_URL,
    token: Token = None,
) -> None:
    """Register a circom circuit with the daemon (the files must be readable by the daemon)."""
    with errors(), Client(url, token) as client:
        info = client.register_circuit(name, zkey, wasm=wasm, priority=priority)
        print(json.dumps(info.model_dump(mode="json"), indent=2))


@circuits_app.command("list")
def circuits_list(url: Url = DEFAULT_URL) -> None:
    """List the registered circom circuits."""
    with errors(), Client(url) as client:
        for info in client.circuits():
            print(
                f"{info.name}  {info.curve}  {info.constraints} constraints  priority {info.priority.value}"
            )
