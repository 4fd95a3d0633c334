"""Proof kinds: names, partition counts, priorities, memory estimates, and how a partition's inputs are built.

Built-in kinds keep the names, partition counts and priorities of Filecoin's proofs (as Curio's proving
engine names them) on prooflane's own storage-proof circuits, at the size of the configured profile; they
are not Filecoin chain proofs. The ``circom`` kind proves registered circom circuits.

Memory estimate of one partition (``CircuitMeta``), with ``N`` the key's FFT domain size, ``W`` the wires,
32 bytes per field element, and a factor 2 because each vector exists twice while it crosses a process
boundary (the pickle and the array):

- ``abc_bytes = 2 * 3 * N * 32``: the a, b, c evaluations; given back right after ``prove_start``;
- ``rest_bytes = 2 * W * 32 + 4 * N * 32``: the witness, H and the proving state; given back after
  ``prove_finish``;
- a worker's proving key (a cached allocation): ``3 * key.nbytes`` (the numpy rows, and the library point
  objects built from them, split between the worker's prover and finalizer processes).

The functions at the end (``prepare_builtin``, ``inspect_zkey``, ``synthesize_partition``) run in worker
processes (the synthesis pool).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .circuits.profiles import POREP_C2, SNAP_UPDATE, WINDOW_POST, WINNING_POST
from .states import Priority

__all__ = [
    "BUILTIN_KINDS",
    "CIRCOM",
    "CIRCOM_SPEC",
    "CircomInput",
    "CircuitMeta",
    "KindSpec",
    "StorageInput",
    "SynthesisTask",
    "inspect_zkey",
    "kind_spec",
    "prepare_builtin",
    "synthesize_partition",
]

CIRCOM = "circom"


@dataclass(frozen=True)
class KindSpec:
    """A proof kind: ``partitions`` per job (0 for circom: one per witness given) and its priority."""

    name: str
    partitions: int
    priority: Priority
    description: str


BUILTIN_KINDS: tuple[KindSpec, ...] = (
    KindSpec(
        POREP_C2, 10, Priority.NORMAL, "Replica encoding and inclusion of challenged leaves (PoRep C2)."
    ),
    KindSpec(SNAP_UPDATE, 16, Priority.NORMAL, "Re-encoding of an updated sector (SnapDeals)."),
    KindSpec(WINDOW_POST, 1, Priority.HIGH, "Inclusion of challenged leaves; one partition per request."),
    KindSpec(WINNING_POST, 1, Priority.CRITICAL, "Inclusion of a few challenged leaves, for block winning."),
)
_SPECS = {k.name: k for k in BUILTIN_KINDS}
CIRCOM_SPEC = KindSpec(CIRCOM, 0, Priority.NORMAL, "A registered circom circuit; one partition per witness.")


def kind_spec(name: str) -> KindSpec | None:
    """The spec of kind ``name``, or None when there is no such kind."""
    return CIRCOM_SPEC if name == CIRCOM else _SPECS.get(name)


@dataclass(frozen=True)
class CircuitMeta:
    """What the engine knows of one prepared circuit and its proving key (kept beside the key as JSON)."""

    key_name: str
    key_path: str
    curve: str
    constraints: int
    wires: int
    public_signals: int
    domain_size: int
    key_nbytes: int
    vk: dict[str, Any]

    @property
    def abc_bytes(self) -> int:
        """Part of a partition's reservation given back after ``prove_start``."""
        return 2 * 3 * self.domain_size * 32

    @property
    def partition_bytes(self) -> int:
        """A partition's whole reservation (taken before its synthesis)."""
        return self.abc_bytes + 2 * self.wires * 32 + 4 * self.domain_size * 32

    @property
    def key_alloc_bytes(self) -> int:
        """Bytes of the cached allocation of one worker's loaded proving key."""
        return 3 * self.key_nbytes

    def to_json(self) -> dict[str, Any]:
        """As stored beside the key."""
        return asdict(self)


@dataclass(frozen=True)
class StorageInput:
    """Inputs of one partition of a built-in kind."""

    kind: str
    profile: str
    curve: str
    sector: str
    randomness: bytes


@dataclass(frozen=True)
class CircomInput:
    """Inputs of one partition of a circom job: a .wtns path, or circuit inputs for the ``wasm`` generator."""

    witness: str | dict[str, Any]
    wasm: str | None


@dataclass(frozen=True)
class SynthesisTask:
    """What the synthesis pool needs for one partition."""

    job_id: str
    partition: int
    key_path: str
    inputs: StorageInput | CircomInput


# -- in worker processes ------------------------------------------------------------------------------

_MATRICES: dict[str, Any] = {}  # key path -> ProvingKey, for circom synthesis in this process


def _key_matrices(path: str) -> Any:
    """The proving key at ``path`` (its constraint matrices are what synthesis needs), read once."""
    from .groth16 import read_zkey

    key = _MATRICES.get(path)
    if key is None:
        key = _MATRICES[path] = read_zkey(path)
    return key


def prepare_builtin(kind: str, profile: str, curve: str, keys_dir: str) -> CircuitMeta:
    """Compile kind's circuit and make its dev proving key, cached in ``keys_dir`` (reused when present)."""
    base = Path(keys_dir) / f"{kind}-{profile}-{curve}"
    meta_path = base.with_suffix(".json")
    if meta_path.exists() and base.with_suffix(".zkey").exists():
        return CircuitMeta(**json.loads(meta_path.read_text()))
    from .circuits import storage_circuit
    from .groth16 import curve_by_name, setup, write_zkey

    circuit = storage_circuit(kind, profile, curve_by_name(curve))
    seed = hashlib.sha256(f"prooflane-dev-setup:{kind}:{profile}:{curve}".encode()).digest()
    key = setup(circuit.r1cs, seed=seed)
    base.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(base.with_suffix(".zkey"), lambda p: write_zkey(p, key))
    meta = _meta(f"{kind}@{profile}/{curve}", str(base.with_suffix(".zkey")), key, circuit.r1cs.n_constraints)
    _atomic_write(meta_path, lambda p: p.write_text(json.dumps(meta.to_json())))
    return meta


def inspect_zkey(key_name: str, path: str) -> CircuitMeta:
    """Read a .zkey, validate its points in full (remembered, so workers load it fast) and describe it
    (raises the groth16 reader's error when it is not a Groth16 .zkey or a point is bad)."""
    from .groth16 import read_zkey
    from .groth16.prover import check_points

    key = read_zkey(path)
    check_points(key)
    constraints = int(key.coefficients.row.max()) + 1 - (key.n_public + 1) if key.coefficients.row.size else 0
    return _meta(key_name, path, key, max(constraints, 0))


WTNS_HEADER_BYTES = 4096
"""Room for a .wtns file's headers beside its values (circom writes 76 bytes of them)."""


def wtns_limit(wires: int) -> int:
    """The largest .wtns file accepted for a circuit of ``wires`` wires: 32 bytes each, and the headers."""
    return 32 * wires + WTNS_HEADER_BYTES


def synthesize_partition(task: SynthesisTask) -> tuple[Any, float]:
    """Build the partition's witness and synthesize it; return the Synthesized and milliseconds taken.

    Built-in kinds use the compiled circuit's one-pass synthesis (witness and A·w, B·w, C·w together,
    every constraint checked); circom partitions read (or generate) a .wtns and synthesize it against the
    key's matrices.
    """
    started = time.perf_counter()
    inputs = task.inputs
    if isinstance(inputs, StorageInput):
        from .circuits import Sector, partition_synthesize
        from .groth16 import curve_by_name

        sector = Sector.open(Path(inputs.sector))
        curve = curve_by_name(inputs.curve)
        synthesized = partition_synthesize(
            inputs.kind, inputs.profile, sector, inputs.randomness, task.partition, curve
        )
    else:
        from .groth16 import read_wtns, synthesize

        if isinstance(inputs.witness, str):
            from .files import read_limited

            # checked when the job was accepted; read as carefully now, since the file may have changed
            limit = wtns_limit(_key_matrices(task.key_path).n_vars)
            witness = read_wtns(inputs.witness, read_limited(inputs.witness, limit, "witness"))
        else:
            folder = tempfile.mkdtemp(prefix="prooflane-wtns-")
            try:
                witness = read_wtns(_generate_wtns(inputs.witness, inputs.wasm, folder))
            finally:
                shutil.rmtree(folder, ignore_errors=True)
        synthesized = synthesize(_key_matrices(task.key_path), witness)
    return synthesized, (time.perf_counter() - started) * 1000


def _generate_wtns(values: dict[str, Any], wasm: str | None, folder: str) -> str:
    if wasm is None:
        raise ValueError("circuit inputs were given but the circuit has no witness generator (.wasm)")
    snarkjs = _snarkjs()
    inputs, out = os.path.join(folder, "input.json"), os.path.join(folder, "witness.wtns")
    Path(inputs).write_text(json.dumps(values))
    done = subprocess.run([snarkjs, "wtns", "calculate", wasm, inputs, out], capture_output=True, text=True)
    if done.returncode != 0:
        # snarkjs prints the failed assertion on stdout and only a summary on stderr: keep both; the status
        # tracker shortens reasons for display, the journal keeps them whole.
        output = "\n".join(part for part in (done.stderr.strip(), done.stdout.strip()) if part)
        raise ValueError(f"witness generation failed: {output}")
    return out


def _snarkjs() -> str:
    """snarkjs on PATH, else the one `make` installs in the source tree's node_modules."""
    found = shutil.which("snarkjs")
    if found:
        return found
    for root in (Path(__file__).resolve().parents[2], Path.cwd()):
        candidate = root / "node_modules" / ".bin" / "snarkjs"
        if candidate.exists():
            return str(candidate)
    raise ValueError("witness generation needs snarkjs: put it on PATH (npm install snarkjs) or run `make`")


def _meta(key_name: str, key_path: str, key: Any, constraints: int) -> CircuitMeta:
    return CircuitMeta(
        key_name=key_name,
        key_path=key_path,
        curve=key.curve.name,
        constraints=constraints,
        wires=key.n_vars,
        public_signals=key.n_public,
        domain_size=key.domain_size,
        key_nbytes=key.nbytes,
        vk=key.verification_key.to_json(),
    )


def _atomic_write(path: Path, write: Any) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    write(tmp)
    os.replace(tmp, path)
