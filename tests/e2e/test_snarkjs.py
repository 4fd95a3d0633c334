"""prooflane against the real snarkjs 0.7.6, both curves, both directions (circuits compiled by circom2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from prooflane.groth16 import (
    BLS12381,
    BN128,
    Curve,
    Proof,
    VerificationKey,
    arithmetics,
    prove,
    read_r1cs,
    read_wtns,
    read_zkey,
    setup,
    synthesize,
    verify,
    write_zkey,
)
from prooflane.groth16.proof import parse_public
from tests.support.arithmetics import extension_module
from tests.support.paths import NODE_BIN, SHARED_BENCH

CIRCUIT = """pragma circom 2.0.0;
template Chain(n) {
    signal input x;
    signal input y;
    signal output out;
    signal s[n + 1];
    s[0] <== x;
    for (var i = 0; i < n; i++) {
        s[i + 1] <== s[i] * s[i] + y;
    }
    out <== s[n] * x;
}
component main {public [y]} = Chain(20);
"""


@dataclass(frozen=True)
class Sample:
    """A compiled circuit, its witness, and a snarkjs key, proof and verification key."""

    curve: Curve
    folder: Path
    r1cs: Path
    wtns: Path
    zkey: Path
    vkey: Path
    proof: Path
    public: Path

    def snarkjs(self, *args: str | Path, ok: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(NODE_BIN / "snarkjs"), *map(str, args)], cwd=self.folder, capture_output=True, text=True
        )
        if ok and done.returncode != 0:
            raise AssertionError(f"snarkjs {args} failed: {done.stdout}{done.stderr}")
        return done

    def snarkjs_accepts(self, vkey: Path, public: Path, proof: Path) -> bool:
        done = self.snarkjs("groth16", "verify", vkey, public, proof, ok=False)
        assert done.returncode in (0, 1), done.stderr
        return done.returncode == 0


def _build(curve: Curve, folder: Path, snarkjs: Path) -> Sample:
    (folder / "chain.circom").write_text(CIRCUIT)
    (folder / "input.json").write_text('{"x": "3", "y": "5"}')

    def run(*args: str) -> None:
        subprocess.run(args, cwd=folder, check=True, capture_output=True)

    run(str(NODE_BIN / "circom2"), "chain.circom", "--r1cs", "--wasm", "--prime", curve.name, "-o", ".")
    run(str(snarkjs), "wtns", "calculate", "chain_js/chain.wasm", "input.json", "chain.wtns")
    run(str(snarkjs), "powersoftau", "new", curve.name, "6", "pot0.ptau")
    run(str(snarkjs), "powersoftau", "prepare", "phase2", "pot0.ptau", "pot.ptau")
    run(str(snarkjs), "groth16", "setup", "chain.r1cs", "pot.ptau", "chain.zkey")
    run(str(snarkjs), "zkey", "export", "verificationkey", "chain.zkey", "vkey.json")
    run(str(snarkjs), "groth16", "prove", "chain.zkey", "chain.wtns", "proof.json", "public.json")
    names = ("chain.r1cs", "chain.wtns", "chain.zkey", "vkey.json", "proof.json", "public.json")
    return Sample(curve, folder, *(folder / n for n in names))


@pytest.fixture(scope="session", params=[BN128, BLS12381], ids=["bn128", "bls12381"])
def sample(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, snarkjs: Path) -> Sample:
    curve: Curve = request.param
    return _build(curve, tmp_path_factory.mktemp(f"snarkjs-{curve.name}"), snarkjs)


def _json(path: Path) -> Any:
    return json.loads(path.read_text())


def _write(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data))
    return path


def _load(sample: Sample) -> tuple[VerificationKey, tuple[int, ...], Proof]:
    vk = VerificationKey.from_json(_json(sample.vkey))
    return vk, parse_public(_json(sample.public), vk.curve), Proof.from_json(_json(sample.proof))


def test_a_snarkjs_proof_verifies_in_prooflane(sample: Sample) -> None:
    vk, public, proof = _load(sample)
    assert vk.curve == sample.curve
    assert verify(vk, public, proof)


def test_tampered_snarkjs_proof_and_public_are_rejected_by_both(sample: Sample) -> None:
    vk, public, proof = _load(sample)
    bad_public = (public[0], public[1] + 1)
    assert not verify(vk, bad_public, proof)
    assert not sample.snarkjs_accepts(
        sample.vkey, _write(sample.folder / "bad_public.json", [str(v) for v in bad_public]), sample.proof
    )
    swapped = {**_json(sample.proof), "pi_a": _json(sample.proof)["pi_c"]}
    assert not verify(vk, public, Proof.from_json(swapped))
    assert not sample.snarkjs_accepts(sample.vkey, sample.public, _write(sample.folder / "bad.json", swapped))


def test_a_snarkjs_key_proves_in_prooflane_and_snarkjs_verifies(sample: Sample) -> None:
    key = read_zkey(sample.zkey)
    assert key.verification_key == VerificationKey.from_json(_json(sample.vkey))
    proof = prove(key, read_wtns(sample.wtns))
    assert proof.public_json() == _json(sample.public)
    path = _write(sample.folder / "prooflane_proof.json", proof.to_json())
    assert sample.snarkjs_accepts(sample.vkey, sample.public, path)
    tampered = {**proof.to_json(), "pi_c": proof.to_json()["pi_a"]}
    assert not sample.snarkjs_accepts(sample.vkey, sample.public, _write(sample.folder / "t.json", tampered))


@pytest.mark.parametrize("native", ["1", "0"], ids=["native", "libraries"])
def test_a_cold_prove_process_proves_with_a_snarkjs_key_and_snarkjs_verifies(
    sample: Sample, tmp_path: Path, native: str
) -> None:
    if native == "1":
        extension_module()  # required under CI
    env = dict(os.environ, PROOFLANE_POINT_CHECKS=str(tmp_path / "point-checks"), PROOFLANE_NATIVE=native)
    for run in ("unseen key", "remembered key"):
        proof, public = tmp_path / f"{run}-proof.json", tmp_path / f"{run}-public.json"
        done = subprocess.run(
            [sys.executable, "-c", "from prooflane.cli import main; main()", "prove", sample.zkey,
             sample.wtns, "--threads", "2", "--proof", proof, "--public", public, "--json"],
            capture_output=True, text=True, env=env, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        # the C extension on both curves (BLS12-381's where the CPU has mulx), else the libraries
        said = json.loads(done.stdout)["arithmetic"]
        if native == "0":
            assert said == "libraries: PROOFLANE_NATIVE=0"
        else:
            assert said == arithmetics()[sample.curve.name] and (
                sample.curve.name != "bn128" or said == "c-extension"
            )
        assert sample.snarkjs_accepts(sample.vkey, public, proof), run
        assert any((tmp_path / "point-checks").iterdir())  # the subgroup checks were remembered
    tampered = {**_json(proof), "pi_a": _json(proof)["pi_c"]}
    assert not sample.snarkjs_accepts(sample.vkey, public, _write(tmp_path / "tampered.json", tampered))


def test_synthesis_from_circom_r1cs_matches_the_snarkjs_key(sample: Sample) -> None:
    witness = read_wtns(sample.wtns)
    one, two = synthesize(read_r1cs(sample.r1cs), witness), synthesize(read_zkey(sample.zkey), witness)
    assert (one.a == two.a).all() and (one.b == two.b).all() and (one.c == two.c).all()


def test_a_prooflane_key_proves_in_snarkjs_and_in_prooflane(sample: Sample) -> None:
    key = setup(read_r1cs(sample.r1cs), seed=b"snarkjs interop")
    zkey = sample.folder / "dev.zkey"
    write_zkey(zkey, key)
    vkey = _write(sample.folder / "dev_vkey.json", key.verification_key.to_json())
    sample.snarkjs("groth16", "prove", zkey, sample.wtns, "dev_proof.json", "dev_public.json")
    assert sample.snarkjs_accepts(vkey, sample.folder / "dev_public.json", sample.folder / "dev_proof.json")
    snark_proof = Proof.from_json(_json(sample.folder / "dev_proof.json"))
    assert verify(key.verification_key, parse_public(_json(sample.public), sample.curve), snark_proof)
    ours = prove(key, read_wtns(sample.wtns))
    assert sample.snarkjs_accepts(vkey, sample.public, _write(sample.folder / "own.json", ours.to_json()))
    exported = sample.snarkjs("zkey", "export", "verificationkey", zkey, "snark_dev_vkey.json")
    assert exported.returncode == 0
    theirs = _json(sample.folder / "snark_dev_vkey.json")
    assert {k: v for k, v in theirs.items() if k != "vk_alphabeta_12"} == key.verification_key.to_json()


def test_the_shipped_benchmark_proof_verifies() -> None:
    folder = SHARED_BENCH / "square_chain-65000-bn128"
    if not (folder / "proof.json").exists():
        pytest.skip("the shared benchmark inputs are not beside this clone")
    vk = VerificationKey.from_json(_json(folder / "verification_key.json"))
    public = parse_public(_json(folder / "public.json"), vk.curve)
    proof = Proof.from_json(_json(folder / "proof.json"))
    assert verify(vk, public, proof)
    assert not verify(vk, (public[0] + 1, *public[1:]), proof)
