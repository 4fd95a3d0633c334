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
from prooflane.circuits.poseidon import permute
from prooflane.groth16 import BLS12381, BN128, Curve

ROOT = Path(__file__).resolve().parents[2]

# Inputs per width n = 1..16: [n, n + 1, ...] plus a value near the field's modulus for n >= 2.
VECTOR_SCRIPT = """
import { buildPoseidon } from "circomlibjs";
const poseidon = await buildPoseidon();
const cases = JSON.parse(process.argv[1]);  // decimal strings
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


def test_native_poseidon_equals_circomlibjs_for_1_to_16_inputs(node: str) -> None:
    cases = json.dumps([[str(x) for x in xs] for xs in _cases()])
    run = subprocess.run(  # run from the project root so that node resolves node_modules/circomlibjs
        [node, "--input-type=module", "-e", VECTOR_SCRIPT, cases],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=ROOT,
    )
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


# The Poseidon authors' published test vectors (hadeshash test_vectors.txt): the permutation of
# [0, 1, ..., t - 1] for the x^5 instances over the BN254 (254) and BLS12-381 (255) scalar fields.
PUBLISHED = {
    ("bn128", 3): [
        0x115CC0F5E7D690413DF64C6B9662E9CF2A3617F2743245519E19607A4417189A,
        0x0FCA49B798923AB0239DE1C9E7A4A9A2210312B6A2F616D18B5A87F9B628AE29,
        0x0E7AE82E40091E63CBD4F16A6D16310B3729D4B6E138FCF54110E2867045A30C,
    ],
    ("bls12381", 3): [
        0x28CE19420FC246A05553AD1E8C98F5C9D67166BE2C18E9E4CB4B4E317DD2A78A,
        0x51F3E312C95343A896CFD8945EA82BA956C1118CE9B9859B6EA56637B4B1DDC4,
        0x3B2B69139B235626A0BFB56C9527AE66A7BF486AD8C11C14D1DA0C69BBE0F79A,
    ],
    ("bls12381", 5): [
        0x2A918B9C9F9BD7BB509331C81E297B5707F6FC7393DCEE1B13901A0B22202E18,
        0x65EBF8671739EEB11FB217F2D5C5BF4A0C3F210E3F3CD3B08B5DB75675D797F7,
        0x2CC176FC26BC70737A696A9DFD1B636CE360EE76926D182390CDB7459CF585CE,
        0x4DC4E29D283AFD2A491FE6AEF122B9A968E74EFF05341F3CC23FDA1781DCB566,
        0x03FF622DA276830B9451B88B85E6184FD6AE15C8AB3EE25A5667BE8592CCE3B1,
    ],
}


@pytest.mark.parametrize(("curve_name", "t"), list(PUBLISHED))
def test_permutation_matches_the_authors_reference_instances(curve_name: str, t: int) -> None:
    curve = {"bn128": BN128, "bls12381": BLS12381}[curve_name]
    assert permute(list(range(t)), poseidon_params(curve, t - 1)) == PUBLISHED[(curve_name, t)]
