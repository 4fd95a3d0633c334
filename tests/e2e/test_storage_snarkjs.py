"""The storage kinds' circuits checked by snarkjs: every kind proves on both curves and snarkjs verifies the
proof, and snarkjs accepts the R1CS and witness files written for them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from prooflane.circuits import (
    KINDS,
    PROFILES,
    Sector,
    partition_public,
    partition_witness,
    storage_circuit,
)
from prooflane.groth16 import (
    BLS12381,
    BN128,
    Curve,
    prove_finish,
    prove_start,
    setup,
    synthesize,
    verify,
    write_r1cs,
    write_wtns,
)

RANDOMNESS = bytes(range(32))


@pytest.fixture
def sector(tmp_path: Path) -> Sector:
    return Sector.create(tmp_path / "sector", PROFILES["tiny"].sector_bytes, seed="storage-tests")


@pytest.mark.parametrize("curve", [BN128, BLS12381], ids=lambda c: c.name)
def test_every_kind_proves_and_snarkjs_verifies(
    curve: Curve, sector: Sector, snarkjs: Path, tmp_path: Path
) -> None:
    keys = {}
    for kind in KINDS:
        circuit = storage_circuit(kind, "tiny", curve)
        if id(circuit) not in keys:
            keys[id(circuit)] = setup(circuit.r1cs, seed=b"storage-tests")
        key = keys[id(circuit)]
        witness = partition_witness(kind, "tiny", sector, RANDOMNESS, 1, curve)
        synthesized = circuit.synthesize(witness)
        from_key = synthesize(key, witness)  # what a prover holding only the .zkey computes
        assert all((getattr(from_key, n) == getattr(synthesized, n)).all() for n in ("a", "b", "c"))
        proof = prove_finish(prove_start(key, synthesized))
        public = partition_public(kind, "tiny", sector, RANDOMNESS, 1, curve)
        assert verify(key.verification_key, public, proof)
        files = {
            "vk": key.verification_key.to_json(),
            "public": proof.public_json(),
            "proof": proof.to_json(),
        }
        for name, data in files.items():
            (tmp_path / f"{name}.json").write_text(json.dumps(data))
        assert [int(x) for x in files["public"]] == public
        run = subprocess.run(
            [
                str(snarkjs),
                "groth16",
                "verify",
                *(str(tmp_path / f"{n}.json") for n in ("vk", "public", "proof")),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 0 and "OK" in run.stdout, (kind, run.stdout, run.stderr)
        assert not verify(key.verification_key, [public[0] + 1, *public[1:]], proof)


def test_snarkjs_accepts_the_r1cs_and_witness(sector: Sector, snarkjs: Path, tmp_path: Path) -> None:
    circuit = storage_circuit("porep-c2", "tiny")
    write_r1cs(tmp_path / "c.r1cs", circuit.r1cs)
    write_wtns(tmp_path / "w.wtns", partition_witness("porep-c2", "tiny", sector, RANDOMNESS, 0))
    run = subprocess.run(
        [str(snarkjs), "wtns", "check", str(tmp_path / "c.r1cs"), str(tmp_path / "w.wtns")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0 and "WITNESS IS CORRECT" in run.stdout, run.stdout + run.stderr
    info = subprocess.run(
        [str(snarkjs), "r1cs", "info", str(tmp_path / "c.r1cs")], capture_output=True, text=True, timeout=120
    )
    assert f"# of Constraints: {circuit.n_constraints}" in info.stdout
