"""The prover in-process: setup, synthesize, the split prove, verify, and what crosses processes."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

import prooflane.groth16 as g
from prooflane.errors import InvalidWitnessError, KeyMismatchError
from prooflane.groth16 import (
    BLS12381,
    BN128,
    Curve,
    Proof,
    Witness,
    from_ints,
    preload,
    prove,
    prove_b2,
    prove_finish,
    prove_start,
    release,
    setup,
    synthesize,
    verify,
)
from prooflane.groth16.arithmetic import choose
from tests.support.arithmetics import c_extension, libraries
from tests.support.groth16_samples import square_chain

CURVES = [pytest.param(BN128, id="bn128"), pytest.param(BLS12381, id="bls12381")]


def test_exports_are_the_public_api() -> None:
    expected = {
        "Witness", "ProvingKey", "VerificationKey", "Proof", "Synthesized", "ProvingState", "R1CS",
        "read_r1cs", "write_r1cs", "read_wtns", "write_wtns", "read_zkey", "write_zkey",
        "setup", "synthesize", "prove_start", "prove_finish", "prove", "verify", "preload", "release",
    }  # fmt: skip
    assert expected <= set(g.__all__)
    assert all(hasattr(g, name) for name in g.__all__)


@pytest.mark.parametrize("curve", CURVES)
def test_proof_verifies_and_tampering_is_rejected(curve: Curve) -> None:
    r1cs, witness = square_chain(curve, 8)
    key = setup(r1cs, seed=b"prove")
    proof = prove(key, witness)
    vk = key.verification_key
    assert proof.public == (witness_value(witness, 1), 5)
    assert verify(vk, proof.public, proof)
    assert not verify(vk, (proof.public[0], 6), proof)
    assert not verify(vk, proof.public, dataclasses.replace(proof, a=proof.c))
    assert not verify(vk, proof.public, dataclasses.replace(proof, c=(proof.c[0], proof.c[1] + 1)))
    assert not verify(vk, (proof.public[0], curve.r + 5), proof)


def witness_value(witness: Witness, i: int) -> int:
    return g.to_ints(witness.values[i : i + 1])[0]


@pytest.mark.parametrize("curve", CURVES)
def test_split_prove_equals_prove_with_the_same_randomness(curve: Curve) -> None:
    r1cs, witness = square_chain(curve, 6)
    key = setup(r1cs, seed=b"split")
    state = prove_start(key, synthesize(r1cs, witness), randomness=(11, 12))
    assert prove_finish(state) == prove(key, witness, randomness=(11, 12))


@pytest.mark.parametrize("curve", CURVES)
def test_b2_computed_beside_prove_start_gives_the_same_proof(curve: Curve) -> None:
    r1cs, witness = square_chain(curve, 6)
    key = setup(r1cs, seed=b"early b2")
    synthesized = synthesize(r1cs, witness)
    b2 = prove_b2(key, synthesized.witness)  # needs only the witness: before prove_start
    state = prove_start(key, synthesized, randomness=(5, 6))
    assert prove_finish(state, b2=b2) == prove_finish(state) == prove(key, witness, randomness=(5, 6))


@pytest.mark.parametrize("curve", CURVES)
def test_synthesis_from_the_circuit_and_from_the_key_agree(curve: Curve) -> None:
    r1cs, witness = square_chain(curve, 6)
    key = setup(r1cs, seed=b"syn")
    one, two = synthesize(r1cs, witness), synthesize(key, witness)
    for name in ("a", "b", "c", "witness"):
        assert np.array_equal(getattr(one, name), getattr(two, name))
    assert one.public == two.public


def test_an_unsatisfied_constraint_is_named() -> None:
    r1cs, witness = square_chain(BN128, 6)
    values = witness.values.copy()
    values[6] = from_ints([12345])[0]  # s[3] is wire 6: constraints 2 (it is an output) and 3 break
    with pytest.raises(InvalidWitnessError, match="constraint 2 "):
        synthesize(r1cs, Witness(BN128, values))


def test_wire_zero_must_be_one() -> None:
    r1cs, witness = square_chain(BN128, 2)
    values = witness.values.copy()
    values[0] = from_ints([2])[0]
    with pytest.raises(InvalidWitnessError, match="wire 0"):
        synthesize(r1cs, Witness(BN128, values))


@pytest.mark.parametrize("curve", CURVES)
def test_a_key_with_a_point_off_the_curve_is_refused_every_time(curve: Curve) -> None:
    # the key's points are converted once a process: a bad one must not be remembered as good, nor
    # a good key's points lent to a bad one that differs from it in one point
    r1cs, witness = square_chain(curve, 4)
    key = setup(r1cs, seed=b"vk cache")
    proof, vk = prove(key, witness), key.verification_key
    off_ic = dataclasses.replace(vk, ic=(vk.ic[0], (vk.ic[1][0], vk.ic[1][1] + 1), *vk.ic[2:]))
    g2 = vk.delta2
    off_delta = dataclasses.replace(vk, delta2=(g2[0], g2[1], g2[2], g2[3] + 1))
    for _ in range(2):
        assert verify(vk, proof.public, proof)
        assert not verify(off_ic, proof.public, proof)
        assert not verify(off_delta, proof.public, proof)
    other = setup(r1cs, seed=b"vk cache 2").verification_key  # a valid key, not this proof's
    assert not verify(other, proof.public, proof)
    assert verify(vk, proof.public, proof)


def test_verify_refuses_a_count_or_curve_mismatch() -> None:
    key = setup(square_chain(BN128, 2)[0], seed=b"mm")
    proof = prove(key, square_chain(BN128, 2)[1])
    with pytest.raises(KeyMismatchError, match="1 public signals"):
        verify(key.verification_key, proof.public[:1], proof)
    with pytest.raises(KeyMismatchError, match="bls12381"):
        verify(key.verification_key, proof.public, dataclasses.replace(proof, curve=BLS12381))


@pytest.mark.parametrize("curve", CURVES)
def test_everything_that_crosses_a_process_pickles_small(curve: Curve) -> None:
    r1cs, witness = square_chain(curve, 6)
    key = setup(r1cs, seed=b"pickle")
    preload(key)
    syn = synthesize(key, witness)
    state = prove_start(key, syn, randomness=(1, 2))
    for value in (key, syn, state, prove_finish(state)):
        back = pickle.loads(pickle.dumps(value))
        assert type(back) is type(value)
    assert pickle.loads(pickle.dumps(key)).digest == key.digest
    assert len(pickle.dumps(syn)) < syn.nbytes + 2000
    assert len(pickle.dumps(key)) < key.nbytes + 4000
    restored = pickle.loads(pickle.dumps(state))
    assert prove_finish(restored) == prove_finish(state)


def test_proof_from_json_rejects_points_off_the_curve() -> None:
    key = setup(square_chain(BN128, 2)[0], seed=b"off")
    proof = prove(key, square_chain(BN128, 2)[1])
    bad = Proof.from_json({**proof.to_json(), "pi_a": ["1", "3", "1"]})
    assert not verify(key.verification_key, proof.public, bad)
    bad_b = Proof.from_json({**proof.to_json(), "pi_b": [["1", "2"], ["3", "4"], ["1", "0"]]})
    assert not verify(key.verification_key, proof.public, bad_b)


@pytest.mark.parametrize("curve", CURVES)
def test_a_prove_on_several_threads_equals_one_on_one(curve: Curve, arithmetic: str) -> None:
    r1cs, witness = square_chain(curve, 10)
    key = setup(r1cs, seed=b"threads")
    proof = prove(key, witness, threads=2, randomness=(5, 6))
    assert proof == prove(key, witness, threads=1, randomness=(5, 6))
    assert verify(key.verification_key, proof.public, proof)


@pytest.mark.parametrize("curve", CURVES)
def test_both_arithmetics_make_the_same_proof(curve: Curve, monkeypatch: pytest.MonkeyPatch) -> None:
    """The seam: the C extension over rows and the libraries over points compute the same proof, step by
    step (synthesis, H, every MSM), from the same blinding."""
    r1cs, witness = square_chain(curve, 20)
    key = setup(r1cs, seed=b"one seam")
    proofs = []
    for make in (c_extension, libraries):
        monkeypatch.setitem(choose._CHOSEN, curve.name, make(curve))
        release(key)
        proofs.append(prove(key, witness, randomness=(11, 12)))
    assert proofs[0] == proofs[1] and verify(key.verification_key, proofs[0].public, proofs[0])


def test_a_prove_refuses_a_witness_of_the_wrong_length(arithmetic: str) -> None:
    key = setup(square_chain(BN128, 3)[0], seed=b"len2")
    with pytest.raises(InvalidWitnessError, match="8 values"):
        prove(key, square_chain(BN128, 4)[1], threads=2)


@pytest.mark.parametrize("curve", CURVES)
def test_a_prove_over_fixed_base_tables_equals_one_without(curve: Curve, arithmetic: str) -> None:
    """``preload(tables=True)`` keeps each section's tables beside it (the C extension; the libraries keep
    none), of the bytes ``key_table_bytes`` predicts, built once; the proof over them is the same proof."""
    from prooflane.groth16.prover import BASES, base_section, key_table_bytes, loaded, section_rows

    r1cs, witness = square_chain(curve, 300)
    key = setup(r1cs, seed=b"tables")
    release(key)
    plain = prove(key, witness, randomness=(7, 8), tables=False)
    preload(key, tables=True)
    sections = {name: base_section(key.curve, key.digest, name, section_rows(key, name)) for name in BASES}
    built = [s.tables for s in sections.values()]
    predicted = key_table_bytes(curve, key.n_vars, key.n_public, key.domain_size)
    if arithmetic == "native":
        assert all(t is not None for t in built)
        assert predicted == sum(len(t.data) for t in built if t is not None) > 4 * key.nbytes
    else:
        assert built == [None] * len(BASES) and predicted == 0
    tabled = prove(key, witness, randomness=(7, 8))
    assert tabled == plain and verify(key.verification_key, tabled.public, tabled)
    preload(key, tables=True)  # held: not built again
    assert [base_section(key.curve, key.digest, n, None).tables for n in BASES] == built
    release(key)
    assert not loaded(key)
