"""Poseidon: parameters regenerated from the Grain LFSR, native hash equal to circomlibjs, the gadget."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from prooflane.circuits import (
    ConstraintSystem,
    compile_circuit,
    poseidon,
    poseidon_gadget,
    poseidon_many,
    poseidon_params,
)
from prooflane.circuits._grain import generate
from prooflane.groth16 import BLS12381, BN128, Curve

ROOT = Path(__file__).resolve().parent.parent

# Inputs per width n = 1..16: [n, n + 1, ...] plus a value near the field's modulus for n >= 2.
VECTOR_SCRIPT = """
import { buildPoseidon } from "circomlibjs";
const poseidon = await buildPoseidon();
const cases = JSON.parse(process.argv[2]);  // decimal strings
console.log(JSON.stringify(cases.map((xs) => poseidon.F.toString(poseidon(xs.map(BigInt))))));
process.exit(0);
"""


def _cases() -> list[list[int]]:
    cases = []
    for n in range(1, 17):
        xs = list(range(n, 2 * n))
        if n >= 2:
            xs[-1] = BN128.r - 1 - n
        cases.append(xs)
    return cases


@pytest.mark.parametrize("curve", [BN128, BLS12381], ids=lambda c: c.name)
@pytest.mark.parametrize("t", [3])
def test_packaged_parameters_regenerate_from_the_grain_lfsr(curve: Curve, t: int) -> None:
    generated = generate(curve.name, t)
    packaged = poseidon_params(curve, t - 1)
    assert generated.constants == packaged.constants
    assert generated.mds == packaged.mds
    assert (generated.rounds_f, generated.rounds_p) == (packaged.rounds_f, packaged.rounds_p)


def test_bn254_parameters_are_circomlibs() -> None:
    raw = json.loads((ROOT / "node_modules/circomlibjs/src/poseidon_constants.json").read_text())
    for n in range(1, 17):
        params = poseidon_params(BN128, n)
        assert [int(c, 16) for c in raw["C"][n - 1]] == list(params.constants), n
        assert [[int(v, 16) for v in row] for row in raw["M"][n - 1]] == [list(r) for r in params.mds], n


def test_native_poseidon_equals_circomlibjs_for_1_to_16_inputs(node: str, tmp_path: Path) -> None:
    script = ROOT / f".poseidon-vectors-{tmp_path.name}.mjs"  # inside the project so node finds circomlibjs
    script.write_text(VECTOR_SCRIPT)
    try:
        run = subprocess.run(
            [node, str(script), json.dumps([[str(x) for x in xs] for xs in _cases()])],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    finally:
        script.unlink()
    expected = [int(x) for x in json.loads(run.stdout)]
    assert [poseidon(xs) for xs in _cases()] == expected


def test_known_vector() -> None:
    # circomlib's own test vector for poseidon([1, 2])
    assert poseidon([1, 2]) == 0x115CC0F5E7D690413DF64C6B9662E9CF2A3617F2743245519E19607A4417189A


def test_batched_hash_equals_single_hashes() -> None:
    lefts, rights = [1, 5, BN128.r - 1], [2, 7, 3]
    assert poseidon_many([lefts, rights]) == [poseidon([a, b]) for a, b in zip(lefts, rights, strict=True)]
    assert poseidon_many([lefts, rights], BLS12381) == [
        poseidon([a, b], BLS12381) for a, b in zip(lefts, rights, strict=True)
    ]


def test_curves_give_different_hashes() -> None:
    assert poseidon([1, 2], BN128) != poseidon([1, 2], BLS12381)


@pytest.mark.parametrize("n", [1, 2, 5])
def test_gadget_equals_native_hash(n: int) -> None:
    def circuit(cs: ConstraintSystem) -> None:
        xs = cs.private_inputs("xs", n)
        out = cs.public_input("out")
        cs.assert_equal(poseidon_gadget(cs, xs, "h"), out, "out")

    compiled = compile_circuit(circuit)
    params = poseidon_params(BN128, n)
    assert compiled.n_constraints == 3 * params.n_sboxes + 1
    xs = [7 * i + 1 for i in range(n)]
    compiled.witness_values({"xs": xs, "out": poseidon(xs)})
    with pytest.raises(Exception, match="out"):
        compiled.witness_values({"xs": xs, "out": poseidon(xs) + 1})


def test_two_input_gadget_costs_243_constraints() -> None:
    assert 3 * poseidon_params(BN128, 2).n_sboxes == 243
    assert 3 * poseidon_params(BLS12381, 2).n_sboxes == 243
