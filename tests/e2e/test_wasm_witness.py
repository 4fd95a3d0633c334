"""Witnesses computed in-process by wasmtime (``prooflane.kinds.wasm_witness``) equal snarkjs' own, wire
for wire, on circom circuits compiled here by circom2: small ones of the tests, and circomlib's SHA-256,
EdDSA-Poseidon verifier and SMT verifier; and a generator's failures are one line naming what failed."""

from __future__ import annotations

import gc
import json
import shutil
import subprocess
import sys
import weakref
from pathlib import Path
from typing import Any

import pytest

from prooflane.client import Client
from prooflane.groth16 import read_r1cs, read_wtns, setup, write_zkey
from prooflane.groth16.field import to_ints
from prooflane.kinds.synthesis import _computed
from prooflane.kinds.wasm_witness import WasmWitness, compute_witness
from tests.support.daemons import TIMEOUT, start_daemon, wait_done

pytestmark = pytest.mark.timeout(900)
ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "node_modules" / ".bin"
LIB = ROOT / "node_modules" / "circomlib" / "circuits"

CIRCUITS: dict[str, tuple[str, dict[str, Any]]] = {
    "mul": (
        "template Mul() { signal input a; signal input b; signal output c; c <== a * b; }\n"
        "component main = Mul();",
        {"a": 3, "b": "11"},
    ),
    "arrays": (
        "template A() { signal input x[2][3]; signal input k; signal output s; var t = 0;\n"
        "  for (var i = 0; i < 2; i++) { for (var j = 0; j < 3; j++) { t += x[i][j]; } }\n"
        "  s <== t * k; }\ncomponent main {public [k]} = A();",
        {"x": [[1, 2, "0x10"], [-1, 5, 6]], "k": 7},
    ),
    "sha256": (
        'include "circomlib/sha256/sha256.circom";\ncomponent main = Sha256(16);',
        {"in": [1, 0] * 8},
    ),
    "eddsa": (
        'include "circomlib/eddsaposeidon.circom";\ncomponent main = EdDSAPoseidonVerifier();',
        {"enabled": 0, "Ax": 0, "Ay": 1, "S": 0, "R8x": 0, "R8y": 1, "M": 5},
    ),
    "smt": (
        'include "circomlib/smt/smtverifier.circom";\ncomponent main = SMTVerifier(4);',
        {"enabled": 0, "root": 0, "siblings": [0, 0, 0, 0], "oldKey": 0, "oldValue": 0, "isOld0": 0,
         "key": 0, "value": 0, "fnc": 0},
    ),
    "powers": (  # products of large field elements, near the prime (BN254's r - 3)
        "template P() { signal input x; signal output y[8]; y[0] <== x * x;\n"
        "  for (var i = 1; i < 8; i++) { y[i] <== y[i - 1] * x; } }\ncomponent main = P();",
        {"x": "21888242871839275222246405745257275088548364400416034343698204186575808495614"},
    ),
}  # fmt: skip
BLS12381_R = 0x73EDA753299D7D483339D80809A1D80553BDA402FFFE5BFEFFFFFFFF00000001


def compiled(folder: Path, name: str, source: str, prime: str = "bn128") -> Path:
    (folder / f"{name}.circom").write_text(f"pragma circom 2.0.0;\n{source}\n")
    if "circomlib/" in source:  # circom2 (circom as WebAssembly) reads only below the folder it runs in
        shutil.copytree(LIB, folder / "circomlib")
    argv = [str(BIN / "circom2"), f"{name}.circom", "--wasm", "--prime", prime, "-o", "."]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=folder, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return folder / f"{name}_js" / f"{name}.wasm"


def snarkjs_witness(folder: Path, wasm: Path, values: dict[str, Any]) -> list[int]:
    (folder / "input.json").write_text(json.dumps(values))
    argv = [str(BIN / "snarkjs"), "wtns", "calculate", str(wasm), "input.json", "w.wtns"]
    subprocess.run(argv, check=True, capture_output=True, cwd=folder, timeout=600)
    return to_ints(read_wtns(folder / "w.wtns").values)


@pytest.mark.parametrize("name", list(CIRCUITS))
def test_the_witness_equals_snarkjs_wire_for_wire(name: str, tmp_path: Path) -> None:
    source, values = CIRCUITS[name]
    wasm = compiled(tmp_path, name, source)
    _, ours = compute_witness(str(wasm), values)
    assert to_ints(ours) == snarkjs_witness(tmp_path, wasm, values)
    assert len(_computed(values, str(wasm))) == len(ours)  # the synthesis path: the same witness
    assert WasmWitness(str(wasm)).field_product == "64-bit limbs (wide arithmetic)"


def test_a_bls12_381_generator_computes_the_same_witness_as_snarkjs(tmp_path: Path) -> None:
    source, _ = CIRCUITS["powers"]
    wasm = compiled(tmp_path, "powers", source, prime="bls12381")
    values = {"x": str(BLS12381_R - 3)}
    prime, ours = compute_witness(str(wasm), values)
    assert prime == BLS12381_R
    assert to_ints(ours) == snarkjs_witness(tmp_path, wasm, values)
    assert to_ints(ours)[1:9] == [pow(BLS12381_R - 3, k, BLS12381_R) for k in range(2, 10)]
    assert WasmWitness(str(wasm)).field_product == "64-bit limbs (wide arithmetic)"


def test_a_failing_generator_says_why_in_one_line(tmp_path: Path) -> None:
    source = ("template Check() { signal input a; signal input b; signal output c;\n"
              "  assert(a < 10); c <== a * b; }\ncomponent main = Check();")  # fmt: skip
    wasm = str(compiled(tmp_path, "check", source))
    cases: dict[str, dict[str, Any]] = {
        "Assert Failed. Error in template Check_0 line: 3": {"a": 12, "b": 1},
        "not all inputs were given: 1 of the circuit's 2 input values": {"a": 1},
        "input 'z' is not an input signal of the circuit": {"a": 1, "b": 1, "z": 3},
        "input 'b': 2 values given, the signal takes 1": {"a": 1, "b": [1, 2]},
        "input 'a': 'ten' is not a number": {"a": "ten", "b": 1},
    }
    for said, values in cases.items():
        with pytest.raises(ValueError) as failed:
            _computed(values, wasm)
        assert str(failed.value) == f"witness generation failed: {said}"
    _, wires = compute_witness(wasm, {"a": 3, "b": 4})  # the generator is reused after its failures
    assert to_ints(wires)[:2] == [1, 12]


def test_a_daemon_without_node_proves_a_circuit_from_its_inputs(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host that has only what the daemon's install brings (no node, no snarkjs on PATH)."""
    source, _ = CIRCUITS["mul"]
    (tmp_path / "mul.circom").write_text(f"pragma circom 2.0.0;\n{source}\n")
    argv = [str(BIN / "circom2"), "mul.circom", "--r1cs", "--wasm", "-o", "."]
    subprocess.run(argv, check=True, capture_output=True, cwd=tmp_path, timeout=600)
    write_zkey(tmp_path / "mul.zkey", setup(read_r1cs(tmp_path / "mul.r1cs"), seed=b"no-node"))
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))  # the venv's programs alone
    assert shutil.which("node") is None and shutil.which("snarkjs") is None
    daemon = start_daemon(tmp_path_factory, "no-node")
    try:
        with Client(daemon.url) as client:
            info = client.upload_circuit("mul", tmp_path / "mul.zkey", wasm=tmp_path / "mul_js" / "mul.wasm")
            assert info.witness_field_product == "64-bit limbs (wide arithmetic)"
            assert client.circuits()[0].witness_field_product == "64-bit limbs (wide arithmetic)"
            job_id = client.submit("circom", circuit="mul", witnesses=[{"a": 3, "b": 11}, {"a": 5, "b": 7}])
            found = client.proof(job_id, wait=TIMEOUT)
            assert found is not None, client.job(job_id)
            assert [p.public for p in found.partitions] == [["33"], ["35"]]
            bad = client.submit("circom", circuit="mul", witnesses=[{"a": 3}])
            view = wait_done(client, [bad])[0]
            assert (
                view.error is not None
                and "witness generation failed: not all inputs were given" in view.error
            )
    finally:
        daemon.stop()


def test_a_generator_let_go_is_freed(tmp_path: Path) -> None:
    """Its runtime's handlers once held the generator, and through wasmtime's registry of host functions it
    was never collected: 35 MB of SHA-256's each time a process compiled a generator again."""
    source, values = CIRCUITS["mul"]
    wasm = str(compiled(tmp_path, "mul", source))
    generator = WasmWitness(wasm)
    assert to_ints(generator.witness(values))[:2] == [1, 33]
    gone = weakref.ref(generator)
    del generator
    gc.collect()
    assert gone() is None


def test_a_compiled_generator_is_kept_and_mapped_by_the_next_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, values = CIRCUITS["mul"]
    wasm = str(compiled(tmp_path, "mul", source))
    kept = tmp_path / "compiled"
    monkeypatch.setenv("PROOFLANE_WASM_CACHE", str(kept))
    first = to_ints(WasmWitness(wasm).witness(values))
    (stored,) = kept.glob("*.cwasm")
    assert first[:2] == [1, 33] and stored.stat().st_size > 0
    script = (
        "import sys, wasmtime; from prooflane.kinds.wasm_witness import WasmWitness; "
        "calls = []; real = wasmtime.Module.__init__; "
        "wasmtime.Module.__init__ = lambda self, *a, **k: (calls.append(a), real(self, *a, **k))[1]; "
        "w = WasmWitness(sys.argv[1]); print(len(calls), w.witness({'a': 3, 'b': 11})[1][0])"
    )
    again = subprocess.run([sys.executable, "-c", script, wasm], capture_output=True, text=True, check=True)
    assert again.stdout.split() == ["1", "33"]  # only the small module of its own loops was compiled
    stored.write_bytes(b"not compiled code")  # a file wasmtime refuses is compiled again and replaced
    assert to_ints(WasmWitness(wasm).witness(values)) == first
    assert stored.read_bytes()[:4] != b"not "
    monkeypatch.setenv("PROOFLANE_WASM_CACHE", "")  # none kept
    stored.unlink()
    assert to_ints(WasmWitness(wasm).witness(values)) == first
    assert list(kept.glob("*.cwasm")) == []
