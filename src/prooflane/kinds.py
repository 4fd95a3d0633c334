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

import contextlib
import hashlib
import json
import os
import shutil
import struct
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
    "WTNS_HEADER_BYTES",
    "CircomInput",
    "CircuitMeta",
    "KindSpec",
    "StorageInput",
    "SynthesisTask",
    "WitnessGenerator",
    "inspect_wasm",
    "inspect_zkey",
    "kind_spec",
    "prepare_builtin",
    "synthesize_partition",
    "wtns_limit",
    "wtns_wires",
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
    if meta_path.exists() and base.with_suffix(".zkey").exists():  # the key where it is now (a folder moved)
        return CircuitMeta(**json.loads(meta_path.read_text()) | {"key_path": str(base.with_suffix(".zkey"))})
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


@dataclass(frozen=True)
class WitnessGenerator:
    """What a circom witness generator (.wasm) says of its circuit: read from the module, never run."""

    circom_version: int
    wires: int
    inputs: int
    prime: int


def inspect_wasm(path: str) -> WitnessGenerator | None:
    """Read what circom's witness generator at ``path`` exports: the wires it computes
    (``getWitnessSize``), its input signals (``getInputSize``), its version and its field's prime (the
    constants ``getRawPrime`` copies). None for a WebAssembly module whose exports say none of that (a
    circom 1 generator, say: snarkjs still runs those); ValueError for a file that is no module at all."""
    from .files import read_limited

    data = read_limited(path, 1 << 31, "wasm")
    if data[:8] != b"\0asm\x01\0\0\0":
        raise ValueError("not a WebAssembly module (no \\0asm magic and version 1)")
    try:
        module = _WasmModule(data)
        constant = {name: module.returned_constants(name) for name in _GENERATOR_EXPORTS}
        (version,), (wires,), (inputs,), (n32,) = (
            constant[n] for n in ("getVersion", "getWitnessSize", "getInputSize", "getFieldNumLen32")
        )
        source = constant["getRawPrime"][0]  # getRawPrime: i32.const <prime's address>, i32.const <to>, call
        prime = int.from_bytes(module.memory(source, 4 * n32), "little")
    except (IndexError, UnicodeDecodeError, ValueError):
        return None
    return WitnessGenerator(version, wires, inputs, prime)


_GENERATOR_EXPORTS = ("getVersion", "getWitnessSize", "getInputSize", "getFieldNumLen32", "getRawPrime")


class _WasmModule:
    """The few sections of a WebAssembly module that say what circom's generated constants are."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._sections: dict[int, tuple[int, int]] = {}
        pos = 8
        while pos < len(data):
            kind = data[pos]
            size, pos = _leb(data, pos + 1)
            if kind != 0:  # custom sections (0) may repeat; circom's names are not needed
                self._sections[kind] = (pos, pos + size)
            pos += size

    def returned_constants(self, export: str) -> list[int]:
        """The ``i32.const`` operands of exported function ``export``, whose body must hold nothing else but
        a call and its end (what circom generates for its constants)."""
        body = self._body(self._export(export))
        locals_count, pos = _leb(body, 0)
        if locals_count:
            raise ValueError(f"{export} keeps locals: not a constant")
        values = []
        while body[pos] == 0x41:  # i32.const
            value, pos = _leb(body, pos + 1, signed=True)
            values.append(value)
        if not values or body[pos] not in (0x0B, 0x10):  # end, or call
            raise ValueError(f"{export} does not return a constant")
        return values

    def memory(self, address: int, size: int) -> bytes:
        """``size`` bytes the data section puts at ``address`` of the linear memory."""
        pos, _ = self._section(11)
        count, pos = _leb(self._data, pos)
        for _ in range(count):
            flags, pos = _leb(self._data, pos)
            if flags == 1:  # passive: placed by the code, not at start
                length, pos = _leb(self._data, pos)
                pos += length
                continue
            if flags == 2:
                _, pos = _leb(self._data, pos)  # its memory's index
            if self._data[pos] != 0x41:
                raise ValueError("a data segment's offset is not a constant")
            offset, pos = _leb(self._data, pos + 1, signed=True)
            pos += 1  # the offset expression's end
            length, pos = _leb(self._data, pos)
            if offset <= address and address + size <= offset + length:
                start = pos + address - offset
                return self._data[start : start + size]
            pos += length
        raise ValueError(f"no data at address {address}")

    def _section(self, kind: int) -> tuple[int, int]:
        if kind not in self._sections:
            raise ValueError(f"no section {kind}")
        return self._sections[kind]

    def _export(self, name: str) -> int:
        """The function index of export ``name``."""
        pos, _ = self._section(7)
        count, pos = _leb(self._data, pos)
        for _ in range(count):
            length, pos = _leb(self._data, pos)
            found = self._data[pos : pos + length].decode()
            kind, (index, pos) = self._data[pos + length], _leb(self._data, pos + length + 1)
            if found == name and kind == 0:
                return index
        raise ValueError(f"it exports no function {name}")

    def _body(self, index: int) -> bytes:
        """The code of function ``index`` (imported functions come first in the index space)."""
        index -= self._imported_functions()
        pos, _ = self._section(10)
        count, pos = _leb(self._data, pos)
        if not 0 <= index < count:
            raise ValueError(f"function {index} has no code")
        for _ in range(index):
            size, pos = _leb(self._data, pos)
            pos += size
        size, pos = _leb(self._data, pos)
        return self._data[pos : pos + size]

    def _imported_functions(self) -> int:
        if 2 not in self._sections:
            return 0
        pos, _ = self._sections[2]
        count, pos = _leb(self._data, pos)
        functions = 0
        for _ in range(count):
            for _name in range(2):  # module, then field
                length, pos = _leb(self._data, pos)
                pos += length
            kind = self._data[pos]
            pos += 1
            if kind == 0:  # a function: its type index
                _, pos = _leb(self._data, pos)
                functions += 1
            elif kind == 1:  # a table: its element type, then limits
                pos = _skip_limits(self._data, pos + 1)
            elif kind == 2:  # a memory: limits
                pos = _skip_limits(self._data, pos)
            else:  # a global: its type and mutability
                pos += 2
        return functions


def _leb(data: bytes, pos: int, *, signed: bool = False) -> tuple[int, int]:
    """The LEB128 number at ``pos`` and the position after it."""
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    if signed and byte & 0x40:
        value -= 1 << shift
    return value, pos


def _skip_limits(data: bytes, pos: int) -> int:
    flags, pos = _leb(data, pos)
    _, pos = _leb(data, pos)
    if flags & 1:
        _, pos = _leb(data, pos)
    return pos


def wtns_wires(head: bytes) -> int | None:
    """The wire count a .wtns file's header (its first bytes, ``head``) says, or None when those bytes are
    not the start of a .wtns file with its header section first (as circom and prooflane write them)."""
    if len(head) < 32 or head[:4] != b"wtns":
        return None
    kind, size = struct.unpack_from("<IQ", head, 12)
    if kind != 1 or size < 8:
        return None
    (n8,) = struct.unpack_from("<I", head, 24)
    if 28 + n8 + 4 > len(head) or size != 4 + n8 + 4:
        return None
    (wires,) = struct.unpack_from("<I", head, 28 + n8)
    return int(wires)


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
        key = _key_matrices(task.key_path)
        if len(witness) != key.n_vars:
            raise ValueError(f"this witness has {len(witness):,} wires, the circuit {key.n_vars:,}")
        synthesized = synthesize(key, witness)
    return synthesized, (time.perf_counter() - started) * 1000


def _generate_wtns(values: dict[str, Any], wasm: str | None, folder: str) -> str:
    if wasm is None:
        raise ValueError("circuit inputs were given but the circuit has no witness generator (.wasm)")
    out = os.path.join(folder, "witness.wtns")
    try:
        _HELPER.calculate(wasm, values, out)
    except _HelperEnded:
        _calculate_by_cli(wasm, values, folder, out)  # the CLI says why node cannot run it, if it cannot
    return out


def _calculate_by_cli(wasm: str, values: dict[str, Any], folder: str, out: str) -> None:
    inputs = os.path.join(folder, "input.json")
    Path(inputs).write_text(json.dumps(values))
    done = subprocess.run(
        [_snarkjs(), "wtns", "calculate", wasm, inputs, out], capture_output=True, text=True
    )
    if done.returncode != 0:
        # snarkjs prints the failed assertion on stdout and only a summary on stderr: keep both; the status
        # tracker shortens reasons for display, the journal keeps them whole.
        output = "\n".join(part for part in (done.stderr.strip(), done.stdout.strip()) if part)
        raise ValueError(f"witness generation failed: {output}")


# The witness helper: one node process per synthesis process, kept, that runs snarkjs's witness calculator
# (the same code as `snarkjs wtns calculate`) on each request. Starting node and loading snarkjs took most
# of a witness's time when each witness started its own `snarkjs wtns calculate` (docs/engine.md, "Circom
# circuits"). One request at a time, one JSON line each way; stdin's end (its synthesis process ended, even
# killed) ends it.
_HELPER_JS = r"""
const snarkjs = require(process.argv[1]);
const lines = require("readline").createInterface({ input: process.stdin });
let queue = Promise.resolve();
lines.on("line", (line) => {
  queue = queue.then(async () => {
    let answer;
    try {
      const request = JSON.parse(line);
      await snarkjs.wtns.calculate(request.input, request.wasm, request.out);
      answer = { ok: true };
    } catch (err) {
      answer = { error: String((err && err.message) || err) };
    }
    process.stdout.write(JSON.stringify(answer) + "\n");
  });
});
lines.on("close", () => queue.then(() => process.exit(0)));
"""


class _HelperEnded(Exception):
    """Raised when the witness helper gave no answer: it could not start, or it ended."""


class _WitnessHelper:
    """This synthesis process's witness helper (started on first use, started again after it ended)."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[str] | None = None

    def calculate(self, wasm: str, values: dict[str, Any], out: str) -> None:
        """Write the witness of ``values`` by the generator ``wasm`` to ``out``; ValueError saying why not."""
        process = self._started()
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(json.dumps({"wasm": wasm, "input": values, "out": out}) + "\n")
            process.stdin.flush()
            line = process.stdout.readline()
        except OSError:
            line = ""
        if not line:
            raise _HelperEnded(f"the witness helper ended (exit status {self.stop()})")
        answer = json.loads(line)
        if "error" in answer:
            raise ValueError(f"witness generation failed: {answer['error']}")

    def stop(self) -> int | None:
        """End the helper (its stdin closed, then killed if it lingers); its exit status."""
        process, self._process = self._process, None
        if process is None:
            return None
        with contextlib.suppress(OSError):
            assert process.stdin is not None
            process.stdin.close()
        try:
            return process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()

    def _started(self) -> subprocess.Popen[str]:
        if self._process is not None and self._process.poll() is None:
            return self._process
        node = shutil.which("node")
        if node is None:
            raise _HelperEnded("no node on PATH")
        package = Path(os.path.realpath(_snarkjs())).parents[1]  # <package>/build/cli.cjs
        self._process = subprocess.Popen(
            [node, "-e", _HELPER_JS, str(package)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        return self._process


_HELPER = _WitnessHelper()


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
