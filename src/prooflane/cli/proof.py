"""``prooflane setup / export-vkey / prove / verify``: the Groth16 core from the command line.

Exit codes: 0 success (``verify``: the proof is valid), 1 the proof is invalid, 2 bad input (a file that
cannot be read or parsed, a curve or size mismatch), 3 out of memory; bad input prints one line naming the
file, and memory one line naming the stage and the key's size, never a traceback.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import FormatError, ProoflaneError
from .app import app
from .output import print_error

BAD_INPUT = 2
INVALID = 1
OUT_OF_MEMORY = 3
PROGRESS_AFTER_S = 1.0  # `prove` shows its stages on stderr once it has run this long


class _Stages:
    """Times the stages of one command (a context manager around it); once it has run ``after`` seconds,
    names each stage on stderr as it begins (and the one under way at that moment), so a short run prints
    nothing."""

    def __init__(self, after: float) -> None:
        self.start = time.perf_counter()
        self.times: dict[str, float] = {}
        self.total = 0.0  # set when the command ends
        self._current: tuple[str, float] | None = None
        self.failed_in: str | None = None  # the stage under way when the command raised
        self._lock = threading.Lock()  # the timer thread and the command's thread both print
        self._shown = False
        self._printed: tuple[str, float] | None = None
        self._stream = sys.stderr  # the timer thread prints too: both to the stream of the command's start
        self._timer = threading.Timer(after, self._show)
        self._timer.daemon = True
        with contextlib.suppress(RuntimeError):  # no thread left (a process short of memory): no progress
            self._timer.start()

    def __call__(self, name: str) -> None:
        """Begin stage ``name`` (ending the one before)."""
        now = time.perf_counter()
        with self._lock:
            self._end(now)
            self._current = (name, now)
            if self._shown:
                self._print(name, now)

    def __enter__(self) -> _Stages:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        """End the last stage and stop showing (saying "done" only when the command succeeded)."""
        self._timer.cancel()
        now = time.perf_counter()
        with self._lock:
            self._end(now)
            if kind is not None and self._current is not None:
                self.failed_in = self._current[0]
            self._current = None
            self.total = now - self.start
            if self._shown and kind is None:
                print(f"{self.total:6.2f} s  done", file=self._stream, flush=True)

    def _end(self, now: float) -> None:
        if self._current is not None:
            name, began = self._current
            self.times[name] = self.times.get(name, 0.0) + now - began

    def _show(self) -> None:
        with self._lock:
            self._shown = True
            if self._current is not None:
                self._print(*self._current)

    def _print(self, name: str, began: float) -> None:
        if self._printed == (name, began):
            return
        self._printed = (name, began)
        print(f"{began - self.start:6.2f} s  {name}", file=self._stream, flush=True)


@contextlib.contextmanager
def _bad_input(stages: _Stages | None = None, key: Path | None = None) -> Iterator[None]:
    """Turn a prooflane error into one line on stderr and exit code 2, and running out of memory into one
    line naming the stage (of ``stages``) and the size of ``key``, and exit code 3."""
    try:
        yield
    except ProoflaneError as exc:
        print_error(exc)
        raise typer.Exit(BAD_INPUT) from None
    except MemoryError:
        where = f" (stage: {stages.failed_in})" if stages is not None and stages.failed_in else ""
        size = ""
        with contextlib.suppress(OSError):
            size = f"; the key {key} is {key.stat().st_size / 2**20:,.1f} MiB" if key is not None else ""
        print_error(f"out of memory{where}{size}: free memory, or prove on a machine with more")
        raise typer.Exit(OUT_OF_MEMORY) from None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise FormatError(path, f"cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FormatError(path, f"not valid JSON ({exc})") from None


def _write_json(path: Path, data: Any) -> None:
    try:
        path.write_text(json.dumps(data, indent=1) + "\n")
    except OSError as exc:
        raise FormatError(path, f"cannot write: {exc.strerror or exc}") from None


@app.command("setup")
def setup_command(
    circuit: Annotated[Path, typer.Argument(metavar="CIRCUIT", hidden=True)],
    zkey: Annotated[
        Path, typer.Option("--zkey", metavar="FILE", help="Where to write the proving key (.zkey).")
    ],
    curve: Annotated[
        str | None,
        typer.Option("--curve", metavar="bn128|bls12381", help="Must match the circuit's field."),
    ] = None,
    seed: Annotated[
        str | None,
        typer.Option("--seed", metavar="TEXT", help="Derive the secrets from this text (tests only)."),
    ] = None,
) -> None:
    """Make an UNSAFE development proving key for CIRCUIT (a circom .r1cs file): its secrets are sampled
    here, so never use it in production."""
    from ..groth16 import curve_by_name, read_r1cs, setup, write_zkey

    with _bad_input():
        r1cs = read_r1cs(circuit)
        if curve is not None:
            try:
                wanted = curve_by_name(curve)
            except ValueError as exc:
                raise FormatError("--curve", str(exc)) from None
            if wanted != r1cs.curve:
                raise FormatError(circuit, f"the circuit is over {r1cs.curve.name}, not {wanted.name}")
        typer.echo(
            "WARNING: development setup, UNSAFE for production (the secrets were known here)", err=True
        )
        start = time.perf_counter()
        key = setup(r1cs, seed=seed.encode() if seed is not None else None)
        write_zkey(zkey, key)
    typer.echo(
        f"wrote {zkey}: {r1cs.curve.name}, {r1cs.n_constraints} constraints, domain {key.domain_size}, "
        f"{key.n_public} public signals ({time.perf_counter() - start:.2f} s)"
    )


@app.command("export-vkey")
def export_vkey(
    key: Annotated[Path, typer.Argument(metavar="KEY", hidden=True)],
    out: Annotated[Path, typer.Option("--out", metavar="FILE", help="Where to write verification_key.json.")],
) -> None:
    """Write the verification key of the Groth16 proving key KEY (.zkey), in snarkjs' verification_key.json
    shape."""
    from ..groth16 import read_zkey

    with _bad_input():
        _write_json(out, read_zkey(key).verification_key.to_json())
    typer.echo(f"wrote {out}")


@app.command("prove")
def prove_command(
    key: Annotated[Path, typer.Argument(metavar="KEY", hidden=True)],
    witness: Annotated[Path, typer.Argument(metavar="WITNESS", hidden=True)],
    proof: Annotated[Path, typer.Option("--proof", metavar="FILE", help="Where to write proof.json.")],
    public: Annotated[Path, typer.Option("--public", metavar="FILE", help="Where to write public.json.")],
    threads: Annotated[
        int,
        typer.Option(
            "--threads",
            "--processes",
            metavar="N",
            min=0,
            max=64,
            help="Threads of each MSM and the NTT (0: $PROOFLANE_THREADS, else every core it may use).",
        ),
    ] = 0,
    msm_tables: Annotated[
        bool,
        typer.Option(
            "--msm-tables",
            help="Build the key's fixed-base tables where not stored yet (about 10x the bases, on disk; "
            "10 s at 2^16), then prove with them. Without it, tables already stored are used.",
        ),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the stages' timings as JSON on stdout.")
    ] = False,
) -> None:
    """Prove WITNESS (.wtns) with the proving key KEY (.zkey); writes snarkjs-compatible proof.json and
    public.json. Runs longer than a second show their stages on stderr."""
    from ..groth16 import arithmetics, prove, read_wtns, read_zkey
    from ..groth16.arithmetic import arithmetic, cpu_threads
    from ..groth16.prover import tabulated

    stages = _Stages(PROGRESS_AFTER_S)
    with _bad_input(stages, key), stages:
        stages("reading the key")
        zkey = read_zkey(key)
        threads = threads or cpu_threads()
        stages("reading the witness")
        wtns = read_wtns(witness)
        if wtns.curve != zkey.curve:
            raise FormatError(
                witness, f"the witness is over {wtns.curve.name}, the key over {zkey.curve.name}"
            )
        if len(wtns) != zkey.n_vars:
            raise FormatError(witness, f"{len(wtns)} values, but the key {key} expects {zkey.n_vars}")
        result = prove(zkey, wtns, threads=threads, tables=msm_tables or None, on_stage=stages)
        stages("writing the proof")
        _write_json(proof, result.to_json())
        _write_json(public, result.public_json())
    total = stages.total
    if as_json:
        report = {
            "proof": str(proof),
            "public": str(public),
            "curve": zkey.curve.name,
            "domain": zkey.domain_size,
            "threads": threads,
            "arithmetic": arithmetics()[zkey.curve.name],
            "products": arithmetic(zkey.curve).products(),
            "kernels": arithmetic(zkey.curve).kernels(),
            "msm_tables": list(tabulated(zkey)),
            "timings_s": {name: round(t, 4) for name, t in stages.times.items()} | {"total": round(total, 4)},
        }
        typer.echo(json.dumps(report, indent=1))
    else:
        typer.echo(f"wrote {proof} and {public} ({total:.2f} s)")


@app.command("verify")
def verify_command(
    verification_key: Annotated[Path, typer.Argument(metavar="VERIFICATION_KEY", hidden=True)],
    public: Annotated[Path, typer.Argument(metavar="PUBLIC", hidden=True)],
    proof: Annotated[Path, typer.Argument(metavar="PROOF", hidden=True)],
) -> None:
    """Verify the Groth16 proof PROOF (proof.json) of the signals PUBLIC (public.json) with VERIFICATION_KEY
    (verification_key.json). Exit 0 valid, 1 invalid, 2 bad input."""
    from ..groth16 import Proof, VerificationKey, verify
    from ..groth16.proof import parse_public

    with _bad_input():
        vk = VerificationKey.from_json(_read_json(verification_key), source=str(verification_key))
        signals = parse_public(_read_json(public), vk.curve, source=str(public))
        parsed = Proof.from_json(_read_json(proof), curve=vk.curve, source=str(proof))
        if len(signals) != vk.n_public:
            raise FormatError(
                public, f"{len(signals)} public signals, the verification key expects {vk.n_public}"
            )
        valid = verify(vk, signals, parsed)
    if not valid:
        typer.echo("INVALID proof", err=True)
        raise typer.Exit(INVALID)
    typer.echo("OK: the proof is valid")
