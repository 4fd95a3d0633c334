"""`prooflane fleet`: watch many daemons from one page (see docs/fleet.md), and manage them through it.

`prooflane fleet --config FILE` runs the fleet service. `fleet deploy`, `fleet stop`, `fleet restart`,
`fleet logs`, `fleet submit` and `fleet circuits register` are clients of a running fleet service's HTTP
API (`--fleet URL`, or $PROOFLANE_FLEET_URL; the fleet's token from `--token` or $PROOFLANE_FLEET_TOKEN):
the fleet does the work over its own SSH connections and with each daemon's own token, so the command
line, the page and the API take one path.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode

import httpx
import typer

from ..client import circuit_digest, job_request, multipart_upload
from ..config import DEFAULT_PORT
from ..fleet.config import DEFAULT_FLEET_PORT, FleetConfig
from ..logs import LOG_FORMATS, LOG_LEVELS, configure_logging
from ..models import JobView
from .app import app
from .jobs import (
    SUBMIT_OPTIONS,
    Circuit,
    CircuitName,
    CircuitPriority,
    Inputs,
    Kind,
    OwnJobId,
    PriorityOption,
    Randomness,
    SectorOption,
    Wait,
    WasmFile,
    ZkeyFile,
    _check_submit,
    _local_file,
    _read_inputs,
    follow_and_print,
)
from .options import check_url
from .output import REFUSED, errors, print_error, usage_error

FLEET_READY_PREFIX = "prooflane fleet listening on "
"""`prooflane fleet` prints this, then its URL, on standard output once it serves."""
DEFAULT_FLEET_URL = f"http://127.0.0.1:{DEFAULT_FLEET_PORT}"
MANAGE_TIMEOUT_SECS = 3600.0
"""How long `fleet deploy` and `fleet restart` wait for the fleet's answer (the fleet bounds each step)."""

fleet_app = typer.Typer(
    help="Follow the daemons listed in the fleet config and serve the fleet page; or manage its daemons.",
    invoke_without_command=True,
)
app.add_typer(fleet_app, name="fleet")

FleetUrl = Annotated[
    str,
    typer.Option("--fleet", envvar="PROOFLANE_FLEET_URL", metavar="URL", callback=check_url,
                 help="The fleet service: http(s)://HOST:PORT, HOST:PORT or :PORT."),
]  # fmt: skip
FleetToken = Annotated[
    str | None,
    typer.Option("--token", envvar="PROOFLANE_FLEET_TOKEN", metavar="TOKEN", help="The fleet's token."),
]
Name = Annotated[str, typer.Argument(metavar="NAME", hidden=True)]  # the daemon's name in the fleet


@fleet_app.callback()
def fleet(
    ctx: typer.Context,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", metavar="FILE", help="Fleet TOML file (created when daemons are added at run time)."
        ),
    ] = None,
    host: Annotated[
        str | None, typer.Option("--host", metavar="ADDRESS", help="Address to bind (default 127.0.0.1).")
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            "--port", metavar="PORT", help=f"Port, 0 for any free one (default {DEFAULT_FLEET_PORT})."
        ),
    ] = None,
    log_format: Annotated[
        str,
        typer.Option(
            "--log-format",
            metavar="text|json",
            help="Log on standard error as text, or json (one object a line).",
        ),
    ] = "text",
    log_level: Annotated[
        str, typer.Option("--log-level", metavar="debug|info|warning|error", help="What to log.")
    ] = "info",
) -> None:
    """Follow the daemons listed in the fleet config and serve the fleet page, until SIGINT or SIGTERM."""
    if ctx.invoked_subcommand is not None:
        return
    from ..fleet import run_fleet
    from .output import errors

    if config is None:
        usage_error("Missing option '--config' (see 'prooflane fleet --help')")
    if log_format not in LOG_FORMATS:
        raise typer.BadParameter(f"expected one of {', '.join(LOG_FORMATS)}", param_hint="--log-format")
    if log_level not in LOG_LEVELS:
        raise typer.BadParameter(f"expected one of {', '.join(LOG_LEVELS)}", param_hint="--log-level")
    configure_logging(log_level, log_format)  # httpx's line per request to every daemon left out
    with errors():
        loaded = FleetConfig.load(config, host=host, port=port)

        def ready(url: str) -> None:
            print(f"{FLEET_READY_PREFIX}{url}", flush=True)
            print(f"fleet page: {url}/ ({len(loaded.daemons)} daemons)", flush=True)

        asyncio.run(run_fleet(loaded, config, on_ready=ready))


# --- managing daemons through the fleet ---------------------------------------------------------------


def _ask(
    method: str,
    url: str,
    token: str | None,
    *,
    body: Any = None,
    wait: float = 30.0,
    content: Iterator[bytes] | None = None,
    headers: dict[str, str] | None = None,
    ok: tuple[int, ...] = (),
) -> Any:
    """One request to the fleet; its JSON answer, or one line and exit 1 when it is refused (an answer
    of a status in ``ok`` is returned as it is)."""
    headers = dict(headers or {}) | ({"Authorization": f"Bearer {token}"} if token else {})
    try:
        bound = httpx.Timeout(wait, connect=5.0)
        answer = httpx.request(method, url, headers=headers, json=body, content=content, timeout=bound)
    except httpx.HTTPError as exc:
        print_error(f"cannot reach the fleet at {url.split('/fleet/')[0]} ({type(exc).__name__})")
        raise typer.Exit(REFUSED) from None
    try:
        found = answer.json()
    except ValueError:
        found = {"detail": answer.text.strip()[:300]}
    if answer.status_code >= 400 and answer.status_code not in ok:
        detail = found.get("detail") if isinstance(found, dict) else found
        print_error(f"the fleet answered {answer.status_code}: {detail}")
        raise typer.Exit(REFUSED)
    return found


def _route(fleet_url: str, name: str, verb: str) -> str:
    return f"{fleet_url}/fleet/daemons/{quote(name, safe='')}/{verb}"


def _split(option: str, value: str | None) -> list[str] | None:
    if value is None:
        return None
    try:
        return shlex.split(value)
    except ValueError as exc:
        usage_error(f"{option}: {exc}")


def _daemon_config(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        return tomllib.loads(path.read_text())
    except OSError as exc:
        usage_error(f"--daemon-config {path}: cannot read it ({exc.strerror})")
    except tomllib.TOMLDecodeError as exc:
        usage_error(f"--daemon-config {path}: not valid TOML ({exc})")


@fleet_app.command()
def deploy(
    name: Name,
    ssh: Annotated[
        str | None, typer.Option("--ssh", metavar="USER@HOST", help="The host (kept from the last deploy).")
    ] = None,
    ssh_options: Annotated[
        str | None,
        typer.Option("--ssh-options", metavar="'-p PORT -i FILE'", help="ssh options, as one string."),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option("--port", metavar="PORT", help=f"The daemon's port on the host ({DEFAULT_PORT})."),
    ] = None,
    folder: Annotated[
        str | None,
        typer.Option("--dir", metavar="DIR", help="Its folder on the host (default .prooflane/NAME)."),
    ] = None,
    python: Annotated[
        str | None, typer.Option("--python", metavar="PYTHON", help="The host's Python 3 (python3).")
    ] = None,
    pip_args: Annotated[
        str | None,
        typer.Option("--pip-args", metavar="'ARGS'", help="Arguments for pip install, as one string."),
    ] = None,
    daemon_config: Annotated[
        Path | None,
        typer.Option("--daemon-config", metavar="FILE", help="TOML of the daemon's own config keys."),
    ] = None,
    daemon_token: Annotated[
        str | None,
        typer.Option("--daemon-token", metavar="TOKEN", help="The daemon's token (default: a new one)."),
    ] = None,
    cost_per_hour: Annotated[
        float | None, typer.Option("--cost-per-hour", metavar="AMOUNT", help="What the host costs an hour.")
    ] = None,
    fleet_url: FleetUrl = DEFAULT_FLEET_URL,
    token: FleetToken = None,
) -> None:
    """Install this prooflane on a host over SSH, start daemon NAME there and follow it (again: upgrade)."""
    body = {
        "ssh": ssh,
        "ssh_options": _split("--ssh-options", ssh_options),
        "remote_port": port,
        "deploy_dir": folder,
        "python": python,
        "pip_args": _split("--pip-args", pip_args),
        "config": _daemon_config(daemon_config),
        "token": daemon_token,
        "cost_per_hour": cost_per_hour,
    }
    sent = {k: v for k, v in body.items() if v is not None}
    done = _ask("POST", _route(fleet_url, name, "deploy"), token, body=sent, wait=MANAGE_TIMEOUT_SECS)
    print(f"deployed {done['name']} ({done['version']}) at {done['where']}, folder {done['deploy_dir']}")
    print(done["started"])
    if done.get("arithmetic_note"):  # the host proves on the libraries: said in one line
        print(done["arithmetic_note"])


@fleet_app.command()
def stop(name: Name, fleet_url: FleetUrl = DEFAULT_FLEET_URL, token: FleetToken = None) -> None:
    """Stop the deployed daemon NAME; returns once no process of it is left and its port is free."""
    done = _ask("POST", _route(fleet_url, name, "stop"), token, wait=MANAGE_TIMEOUT_SECS)
    print(f"{name}: {done['stopped']}")


@fleet_app.command()
def restart(name: Name, fleet_url: FleetUrl = DEFAULT_FLEET_URL, token: FleetToken = None) -> None:
    """Stop the deployed daemon NAME as stop does, start it again and wait until it can work."""
    done = _ask("POST", _route(fleet_url, name, "restart"), token, wait=MANAGE_TIMEOUT_SECS)
    print(f"{name}: {done['restarted']}")


@fleet_app.command()
def logs(
    name: Name,
    lines: Annotated[int, typer.Option("--lines", metavar="N", min=1, help="How many last lines.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Print the fleet's JSON answer.")] = False,
    fleet_url: FleetUrl = DEFAULT_FLEET_URL,
    token: FleetToken = None,
) -> None:
    """Print the last lines of daemon NAME's log file, read through the fleet.

    While NAME does not answer: its file read over SSH (a daemon the fleet deployed), or else the last lines
    the fleet read of it, their age said first on standard error."""
    done = _ask("GET", f"{_route(fleet_url, name, 'logs')}?lines={lines}", token)
    if as_json:
        print(json.dumps(done, indent=2))
        return
    note = _logs_note(done)
    if note:
        print(note, file=sys.stderr)
    for line in done["lines"]:
        print(line)


def _logs_note(done: dict[str, Any]) -> str:
    """Where the lines come from, when not from the daemon itself (empty then)."""
    source = done.get("source", "daemon")
    if source == "ssh":
        return f"# {done.get('error')}; read over SSH from {done['file']}"
    if source == "fleet":
        age = float(done.get("read_secs_ago") or 0.0)
        return f"# {done.get('error')}; the last lines the fleet read of it, {age:.0f} s ago"
    return ""


# --- jobs and circuits through the fleet ---------------------------------------------------------------


@fleet_app.command("submit")
def fleet_submit(
    name: Name,
    kind: Kind,
    sector: SectorOption = None,
    priority: PriorityOption = None,
    wait: Wait = False,
    randomness: Randomness = None,
    job_id: OwnJobId = None,
    circuit: Circuit = None,
    inputs: Inputs = None,
    fleet_url: FleetUrl = DEFAULT_FLEET_URL,
    token: FleetToken = None,
) -> None:
    """Submit a job to daemon NAME through the fleet (its connection and the daemon's token; the fleet's
    token, of scope manage): print its id alone on the first line (with --wait, then the proof as JSON)."""
    with errors(SUBMIT_OPTIONS):
        _check_submit(kind, sector, circuit, inputs, None)
        witnesses = list[str | dict[str, Any]](_read_inputs(inputs)) if inputs else None
        body = job_request(kind, sector=sector, randomness=randomness, priority=priority, job_id=job_id,
                           circuit=circuit, witnesses=witnesses)  # fmt: skip
    done = _ask("POST", _route(fleet_url, name, "jobs"), token, body=body)
    new_id = str(done["job_id"])
    print(new_id, flush=True)
    if wait:
        _wait_through(fleet_url, name, new_id)


def _wait_through(fleet_url: str, name: str, job_id: str) -> None:
    """Follow the job through the fleet's reads of daemon NAME until it ends; print its proof or exit 1."""
    base = f"{fleet_url}/d/{quote(name, safe='')}/v1/jobs/{quote(job_id, safe='')}"
    follow_and_print(
        job_id,
        lambda: JobView.model_validate(_ask("GET", base, None)),
        lambda: _ask("GET", f"{base}/proof", None),
    )


fleet_circuits = typer.Typer(help="Register circom circuits on the fleet's daemons.", no_args_is_help=True)
fleet_app.add_typer(fleet_circuits, name="circuits")


@fleet_circuits.command("register")
def fleet_register(
    name: CircuitName,
    zkey: ZkeyFile,
    wasm: WasmFile = None,
    daemons: Annotated[
        str | None,
        typer.Option("--daemons", metavar="A,B", help="Only these daemons (default: every one followed)."),
    ] = None,
    priority: CircuitPriority = "normal",
    fleet_url: FleetUrl = DEFAULT_FLEET_URL,
    token: FleetToken = None,
) -> None:
    """Register circuit NAME on every daemon the fleet follows (or --daemons) from one upload of its files:
    one line per daemon, what it did; exit 1 unless every one registered it."""
    files = [("zkey", _local_file("--zkey", zkey))] + (
        [("wasm", _local_file("--wasm", wasm))] if wasm else []
    )
    params = {"digest": circuit_digest(zkey, wasm), "priority": priority} | (
        {"daemons": daemons} if daemons else {}
    )
    with errors():
        headers, body = multipart_upload(files)
    url = f"{fleet_url}/fleet/circuits/{quote(name, safe='')}?{urlencode(params)}"
    done = _ask("PUT", url, token, content=body, headers=headers, wait=MANAGE_TIMEOUT_SECS, ok=(502,))
    for daemon, outcome in done.get("daemons", {}).items():
        print(f"{daemon}: {_outcome(outcome)}")
    if not done.get("ok"):
        raise typer.Exit(REFUSED)


def _outcome(outcome: Any) -> str:
    """One daemon's outcome in a line: ``registered (digest ...)`` or why not (``refused 409: ...``)."""
    if not isinstance(outcome, dict):
        return str(outcome)
    if outcome.get("ok"):
        circuit = outcome.get("circuit") or {}
        return f"registered (sha256 {circuit.get('digest', '?')})"
    status = outcome.get("status")
    return f"refused {status}: {outcome.get('detail')}" if status else f"not reached: {outcome.get('detail')}"
