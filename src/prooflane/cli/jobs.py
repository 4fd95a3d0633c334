"""Job commands of the `prooflane` CLI: submit, job, proof, cancel, and circuits register / list.

Each talks to a running daemon over HTTP (`--url`, or $PROOFLANE_URL), with the bearer token from `--token`
or $PROOFLANE_TOKEN when the daemon needs one. Files (`--zkey`, `--wasm`, `--witness`) are on this machine and
uploaded, with a progress bar on standard error for large ones; with `--on-daemon` they are paths on the
daemon's machine instead. A request the models refuse is one line naming the option
(exit 2), a request the daemon refuses one line with its answer (exit 1).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)

from ..client import Client
from ..client import Progress as UploadProgress
from ..config import DEFAULT_URL
from ..kinds import CIRCOM
from ..models import CircuitRegistration, JobView
from .app import app
from .options import OnDaemon, Token, Url
from .output import REFUSED, console, errors, fit_whole, print_error, table, usage_error

circuits_app = typer.Typer(
    help="Register and list circom circuits (proof kind `circom`).", no_args_is_help=True
)
app.add_typer(circuits_app, name="circuits")

PRIORITY_METAVAR = "critical|high|normal"
SUBMIT_OPTIONS = {
    "kind": "--kind",
    "sector": "--sector",
    "randomness": "--randomness",
    "priority": "--priority",
    "job_id": "--job-id",
    "circuit": "--circuit",
    "witnesses": "--input/--witness",
}
"""The option that sets each field of a job request (errors name the option, not the field)."""
REGISTER_OPTIONS = {"name": "NAME", "zkey": "--zkey", "wasm": "--wasm", "priority": "--priority"}
PROGRESS_FROM_BYTES = 8 << 20
"""Uploads of at least this many bytes show a progress bar on standard error."""


# --- submit -----------------------------------------------------------------------------------


Kind = Annotated[
    str,
    typer.Option(
        "--kind",
        metavar="KIND",
        help="porep-c2, snap-update, window-post, winning-post, or circom (see GET /v1/kinds).",
    ),
]
SectorOption = Annotated[
    str | None,
    typer.Option(
        "--sector",
        metavar="NAME|DIR",
        help="The sector (storage kinds), on the daemon's machine: NAME, the sector DATA/sectors/NAME "
        "(DATA: the daemon's --data folder); or DIR, an absolute folder inside its allowed folders.",
    ),
]
PriorityOption = Annotated[
    str | None, typer.Option("--priority", metavar=PRIORITY_METAVAR, help="Instead of the kind's priority.")
]
Wait = Annotated[bool, typer.Option("--wait", help="Wait for the proof, with a progress bar.")]
Randomness = Annotated[
    str | None, typer.Option("--randomness", metavar="HEX", help="Challenge randomness (default random).")
]
OwnJobId = Annotated[
    str | None,
    typer.Option("--job-id", metavar="ID", help="Your own job id (submitting it again is harmless)."),
]
Circuit = Annotated[
    str | None, typer.Option("--circuit", metavar="NAME", help="A registered circuit (kind circom).")
]
Inputs = Annotated[
    list[Path] | None,
    typer.Option(
        "--input",
        metavar="FILE",
        help="Circuit inputs as JSON (kind circom; repeat it): an object is one partition, a list of "
        "objects one partition each.",
    ),
]


@app.command()
def submit(
    kind: Kind,
    sector: SectorOption = None,
    priority: PriorityOption = None,
    wait: Wait = False,
    url: Url = DEFAULT_URL,
    token: Token = None,
    randomness: Randomness = None,
    job_id: OwnJobId = None,
    circuit: Circuit = None,
    inputs: Inputs = None,
    witness: Annotated[
        list[str] | None,
        typer.Option(
            "--witness",
            metavar="FILE",
            help="A .wtns file, one partition each (kind circom; repeat it): on this machine, uploaded; "
            "with --on-daemon, on the daemon's machine inside its allowed folders.",
        ),
    ] = None,
    on_daemon: OnDaemon = False,
) -> None:
    """Submit a job; print its id alone on the first line (with --wait, then the proof as JSON)."""
    with errors(SUBMIT_OPTIONS):
        _check_submit(kind, sector, circuit, inputs, witness)
        witnesses: list[str | dict[str, Any]] | None = None
        if inputs:
            witnesses = list[str | dict[str, Any]](_read_inputs(inputs))
        elif witness and on_daemon:
            witnesses = [str(Path(w).resolve()) for w in witness]
        with Client(url, token) as client:
            if witness and not on_daemon:
                local = [_local_file("--witness", w) for w in witness]
                with _upload_progress("witnesses", local) as progress:
                    new_id = client.submit_witnesses(
                        circuit or "", local, job_id=job_id, priority=priority, progress=progress
                    )
                print(new_id, flush=True)
                if wait:
                    _wait_and_print(client, new_id)
                return
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
                _wait_and_print(client, new_id)


def _check_submit(
    kind: str, sector: str | None, circuit: str | None, inputs: list[Path] | None, witness: list[str] | None
) -> None:
    """The options a kind needs and takes, as usage errors that say what to give."""
    if kind == CIRCOM:
        if sector is not None:
            usage_error(
                "--sector is for the storage kinds: --kind circom takes --circuit and --input or --witness"
            )
        if not circuit:
            usage_error(
                "--kind circom needs --circuit NAME (a circuit registered with `prooflane circuits register`)"
            )
        if not inputs and not witness:
            usage_error(
                "--kind circom needs --input FILE (circuit inputs as JSON) or --witness FILE (a .wtns)"
            )
        if inputs and witness:
            usage_error("give --input or --witness, not both")
        return
    if sector is None:
        usage_error(
            f"--kind {kind} needs --sector NAME (a sector in the daemon's sector folder) or --sector DIR "
            "(an absolute folder on the daemon's machine)"
        )
    given = [
        name for name, value in (("--circuit", circuit), ("--input", inputs), ("--witness", witness)) if value
    ]
    if given:
        usage_error(f"{', '.join(given)}: only for --kind circom, not {kind}")


def _read_inputs(paths: list[Path]) -> list[dict[str, Any]]:
    """The circuit inputs of ``--input`` files, in order: a file holds one object (one partition) or a list
    of them; anything else is a usage error naming the file."""
    found: list[dict[str, Any]] = []
    for path in paths:
        try:
            data = json.loads(path.read_text())
        except OSError as exc:
            usage_error(f"--input {path}: cannot read it ({exc.strerror or exc})")
        except (UnicodeDecodeError, ValueError) as exc:
            usage_error(f"--input {path}: not valid JSON ({exc})")
        items = data if isinstance(data, list) else [data]
        if not items or not all(isinstance(item, dict) for item in items):
            usage_error(
                f'--input {path}: expected an object of circuit inputs ({{"a": 3}}) or a list of them'
            )
        found.extend(items)
    return found


def _wait_and_print(client: Client, job_id: str) -> None:
    """Follow the job to its end; print its proof as JSON, or exit 1 with why it has none."""

    def proof() -> dict[str, Any] | None:
        found = client.proof(job_id, wait=60)
        return None if found is None else found.model_dump(mode="json")

    follow_and_print(job_id, lambda: client.job(job_id), proof)


def follow_and_print(
    job_id: str, view_of: Callable[[], JobView], proof_of: Callable[[], dict[str, Any] | None]
) -> None:
    """Show a progress bar on standard error until the job (its view read by ``view_of``) ends; then print
    its proof (``proof_of``, None when it did not come) as JSON, or exit 1 with why it has none."""
    view = _follow(job_id, view_of)
    if view.state != "done":
        print_error(f"job {job_id} {view.state}: {view.error or 'no reason given'}")
        raise typer.Exit(REFUSED)
    found = proof_of()
    if found is None:
        print_error(
            f"job {job_id} is done, but its proof did not come within 60 s: GET /v1/jobs/{job_id}/proof"
        )
        raise typer.Exit(REFUSED)
    print(json.dumps(found, indent=2))


def _follow(job_id: str, view_of: Callable[[], JobView]) -> JobView:
    """Show a progress bar on standard error until the job ends; return its last view."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console(stderr=True), transient=False) as progress:
        view = view_of()
        task = progress.add_task(f"{job_id} {view.state}", total=view.total_partitions)
        while True:
            progress.update(task, completed=view.partitions_done, description=f"{job_id} {view.state}")
            if view.state.terminal:
                return view
            time.sleep(0.25)
            view = view_of()


# --- job, proof, cancel -----------------------------------------------------------------------

JobId = Annotated[str, typer.Argument(metavar="JOB_ID", hidden=True)]
AsJson = Annotated[bool, typer.Option("--json", help="Print the daemon's JSON answer.")]
PARTITION_COLUMNS = ("partition", "state", "attempt", "worker", "error")


@app.command()
def job(job_id: JobId, as_json: AsJson = False, url: Url = DEFAULT_URL) -> None:
    """Print job JOB_ID's state and each partition's (state, attempt, worker, error)."""
    with errors(), Client(url) as client:
        view = client.job(job_id)
    if as_json:
        print(json.dumps(view.model_dump(mode="json"), indent=2))
        return
    print(_job_line(view))
    if view.error:
        print(f"error: {view.error}")
    made = table(*PARTITION_COLUMNS, whole=("worker",))
    for part in view.partitions:
        made.add_row(
            str(part.index), part.state.value, str(part.attempt), part.worker_id or "", part.error or ""
        )
    fit_whole(made, ("worker",))
    console().print(made)


def _job_line(view: JobView) -> str:
    """``ID KIND [CIRCUIT] STATE, D/N partitions, priority P, submitted WHEN[, took S s]``."""
    kind = f"{view.kind} {view.circuit}" if view.circuit else view.kind
    submitted = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(view.submitted_at))
    took = f", took {view.finished_at - view.submitted_at:.1f} s" if view.finished_at is not None else ""
    return (
        f"{view.job_id}  {kind}  {view.state.value}, {view.partitions_done}/{view.total_partitions} "
        f"partitions, priority {view.priority.value}, submitted {submitted}{took}"
    )


@app.command()
def proof(
    job_id: JobId,
    wait: Annotated[
        float,
        typer.Option(
            "--wait",
            metavar="SECS",
            min=0,
            show_default=False,
            help="Wait up to SECS for the proof (default: not at all).",
        ),
    ] = 0.0,
    out: Annotated[
        Path | None,
        typer.Option("--out", metavar="FILE", help="Write the proof JSON to FILE, not standard output."),
    ] = None,
    url: Url = DEFAULT_URL,
) -> None:
    """Print job JOB_ID's proof as JSON (every partition's proof and public signals); exit 1 with why when
    it has none (failed, cancelled, not done within --wait)."""
    with errors(), Client(url) as client:
        found = client.proof(job_id, wait=wait)
        if found is None:
            view = client.job(job_id)
            hint = "" if wait else "; --wait SECS waits for it"
            done = f"{view.partitions_done}/{view.total_partitions} partitions"
            print_error(f"job {job_id} is {view.state.value} ({done}): no proof yet{hint}")
            raise typer.Exit(REFUSED)
    text = json.dumps(found.model_dump(mode="json"), indent=2)
    if out is None:
        print(text)
        return
    try:
        out.write_text(text + "\n")
    except OSError as exc:
        print_error(f"--out {out}: cannot write it ({exc.strerror or exc})")
        raise typer.Exit(REFUSED) from None


@app.command()
def cancel(job_id: JobId, url: Url = DEFAULT_URL, token: Token = None) -> None:
    """Cancel job JOB_ID at whatever stage it is (one that already finished stays as it is: exit 1)."""
    with errors(), Client(url, token) as client:
        view = client.cancel(job_id)
    print(_job_line(view))


# --- circuits ---------------------------------------------------------------------------------


CircuitName = Annotated[str, typer.Argument(metavar="NAME", hidden=True)]
ZkeyFile = Annotated[Path, typer.Option("--zkey", metavar="FILE", help="snarkjs Groth16 .zkey (uploaded).")]
WasmFile = Annotated[
    Path | None, typer.Option("--wasm", metavar="FILE", help="circom witness generator (.wasm) (uploaded).")
]
CircuitPriority = Annotated[
    str, typer.Option("--priority", metavar=PRIORITY_METAVAR, help="The circuit's jobs' priority.")
]


@circuits_app.command("register")
def circuits_register(
    name: CircuitName,
    zkey: ZkeyFile,
    wasm: WasmFile = None,
    priority: CircuitPriority = "normal",
    on_daemon: OnDaemon = False,
    url: Url = DEFAULT_URL,
    token: Token = None,
) -> None:
    """Register a circom circuit with the daemon as NAME, the name jobs give as --circuit: its files are
    uploaded from this machine (with --on-daemon: read on the daemon's machine, inside its allowed
    folders)."""
    with errors(REGISTER_OPTIONS), Client(url, token) as client:
        if on_daemon:
            info = client.register_circuit(name, zkey, wasm=wasm, priority=priority)
        else:
            CircuitRegistration.model_validate({"name": name, "zkey": str(zkey), "priority": priority})
            files = [_local_file("--zkey", zkey)] + ([_local_file("--wasm", wasm)] if wasm else [])
            with _upload_progress(name, files) as progress:
                info = client.upload_circuit(
                    name, files[0], wasm=files[1] if wasm else None, priority=priority, progress=progress
                )
        print(json.dumps(info.model_dump(mode="json"), indent=2))


def _local_file(option: str, path: str | Path) -> Path:
    """A file of this machine to upload; a usage error when there is none (it may be the daemon's)."""
    local = Path(path).expanduser()
    if not local.is_file():
        usage_error(
            f"{option} {path}: no such file on this machine (to name a file on the daemon's machine, add "
            "--on-daemon)"
        )
    return local


@contextlib.contextmanager
def _upload_progress(what: str, files: list[Path]) -> Iterator[UploadProgress | None]:
    """A progress bar on standard error for an upload of at least ``PROGRESS_FROM_BYTES``; None for less."""
    if sum(f.stat().st_size for f in files) < PROGRESS_FROM_BYTES:
        yield None
        return
    columns = (
        TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
        TimeElapsedColumn(),
    )  # fmt: skip
    with Progress(*columns, console=console(stderr=True), transient=False) as progress:
        task = progress.add_task(f"uploading {what}", total=None)

        def advance(sent: int, total: int) -> None:
            progress.update(task, completed=sent, total=total)

        yield advance


@circuits_app.command("list")
def circuits_list(url: Url = DEFAULT_URL) -> None:
    """List the registered circom circuits (the digest: SHA-256 of the .zkey then the .wasm)."""
    with errors(), Client(url) as client:
        for info in client.circuits():
            print(
                f"{info.name}  {info.curve}  {info.constraints} constraints  priority {info.priority.value}"
                f"  sha256 {info.digest}"
            )
