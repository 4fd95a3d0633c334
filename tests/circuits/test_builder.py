"""The constraint-system builder: linear combinations, constraints, wire order, witness, synthesis."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prooflane.circuits import Assignment, ConstraintSystem, LinearCombination, compile_circuit
from prooflane.errors import CircuitError, UnsatisfiedConstraint
from prooflane.groth16 import BLS12381, BN128, Witness, from_ints, synthesize, to_ints

P = BN128.r


def cube(cs: ConstraintSystem) -> None:
    """x^3 + x + 5 = out, the usual first circuit."""
    x = cs.private_input("x")
    out = cs.public_input("out")
    x2 = cs.mul(x, x, "x2")
    x3 = cs.mul(x2, x, "x3")
    cs.assert_equal(x3 + x + 5, out, "out")


def test_linear_combination_arithmetic_reduces_and_drops_zero_terms() -> None:
    cs = ConstraintSystem()
    x, y = cs.private_input("x"), cs.private_input("y")
    lc = 3 * x + y * 2 - x * 3 + 7
    assert isinstance(lc, LinearCombination)
    assert lc.terms == {2: 2, 0: 7}
    assert (-x).terms == {1: P - 1}
    assert (1 - x).terms == {0: 1, 1: P - 1}
    assert (x * P).terms == {}


def test_product_of_two_signals_needs_a_constraint() -> None:
    cs = ConstraintSystem()
    x, y = cs.private_input("x"), cs.private_input("y")
    with pytest.raises(TypeError):
        _ = x * y  # type: ignore[operator]


def test_witness_follows_circom_wire_order() -> None:
    def circuit(cs: ConstraintSystem) -> None:
        a = cs.private_input("a")
        t = cs.mul(a, a, "t")  # an internal signal declared before the public input
        pub = cs.public_input("pub")
        cs.assert_equal(t, pub, "eq")

    compiled = compile_circuit(circuit)
    assert compiled.public_names == ["pub"]
    assert compiled.r1cs.n_pub_in == 1 and compiled.r1cs.n_prv_in == 1
    assert compiled.witness_values({"a": 3, "pub": 9}) == [1, 9, 3, 9]


def test_cube_circuit_compiles_once_and_evaluates_many_witnesses() -> None:
    compiled = compile_circuit(cube)
    assert compiled.n_constraints == 3
    for x in (0, 3, 12345):
        wires = compiled.witness_values({"x": x, "out": x**3 + x + 5})
        assert compiled.public_values(wires) == [(x**3 + x + 5) % P]


def test_unsatisfied_constraint_is_named_with_its_index() -> None:
    compiled = compile_circuit(cube)
    with pytest.raises(UnsatisfiedConstraint) as caught:
        compiled.witness_values({"x": 3, "out": 36})
    assert caught.value.name == "out"
    assert caught.value.index == 2
    assert "constraint 2 (out)" in str(caught.value)


def test_namespaces_prefix_constraint_names() -> None:
    def circuit(cs: ConstraintSystem) -> None:
        x = cs.public_input("x")
        with cs.namespace("outer"), cs.namespace("inner"):
            cs.assert_equal(x, 1, "is_one")

    compiled = compile_circuit(circuit)
    assert compiled.constraint_names == ["outer/inner/is_one"]
    with pytest.raises(UnsatisfiedConstraint, match="outer/inner/is_one"):
        compiled.witness_values({"x": 2})


def test_to_bits_decomposes_and_range_checks() -> None:
    def circuit(cs: ConstraintSystem) -> None:
        x = cs.public_input("x")
        bits = cs.to_bits(x, 4, "bits")
        cs.assert_equal(bits[0], cs.private_input("low"), "low")

    compiled = compile_circuit(circuit)
    assert compiled.n_constraints == 4 + 1 + 1
    wires = compiled.witness_values({"x": 13, "low": 1})
    assert wires[-4:] == [1, 0, 1, 1]
    with pytest.raises(UnsatisfiedConstraint, match="bits/recompose"):
        compiled.witness_values({"x": 16, "low": 0})  # does not fit in 4 bits


def test_boolean_gadget_rejects_two() -> None:
    def circuit(cs: ConstraintSystem) -> None:
        cs.assert_boolean(cs.private_input("b"), "b_is_bit")

    compiled = compile_circuit(circuit)
    compiled.witness_values({"b": 0})
    compiled.witness_values({"b": 1})
    with pytest.raises(UnsatisfiedConstraint, match="b_is_bit"):
        compiled.witness_values({"b": 2})


def test_input_errors_name_the_input() -> None:
    compiled = compile_circuit(cube)
    with pytest.raises(CircuitError, match="missing input 'out'"):
        compiled.witness_values({"x": 1})
    with pytest.raises(CircuitError, match="unknown input"):
        compiled.witness_values({"x": 1, "out": 7, "z": 1})

    def twice(cs: ConstraintSystem) -> None:
        cs.public_input("a")
        cs.private_input("a")

    with pytest.raises(CircuitError, match="declared twice"):
        compile_circuit(twice)


def test_array_inputs_take_lists() -> None:
    def circuit(cs: ConstraintSystem) -> None:
        xs = cs.public_inputs("xs", 3)
        cs.assert_equal(xs[0] + xs[1], xs[2], "sum")

    compiled = compile_circuit(circuit)
    assert compiled.public_names == ["xs[0]", "xs[1]", "xs[2]"]
    compiled.witness_values({"xs": [2, 3, 5]})
    with pytest.raises(CircuitError, match="has 2 values"):
        compiled.witness_values({"xs": [2, 3]})


def test_cached_synthesize_equals_the_prover_synthesize() -> None:
    compiled = compile_circuit(cube)
    inputs = {"x": 5, "out": 135}
    mine = compiled.synthesize(inputs)
    witness = compiled.witness(inputs)
    theirs = synthesize(compiled.r1cs, witness)
    assert (mine.witness == theirs.witness).all()
    for name in ("a", "b", "c"):
        assert (getattr(mine, name) == getattr(theirs, name)).all(), name
    assert mine.public == (135,)
    again = compiled.synthesize(witness)
    assert (again.a == mine.a).all()


def test_synthesize_rejects_a_bad_witness_by_name() -> None:
    compiled = compile_circuit(cube)
    wires = compiled.witness_values({"x": 5, "out": 135})
    wires[-1] += 1
    with pytest.raises(UnsatisfiedConstraint):
        compiled.synthesize(Witness(BN128, from_ints(wires)))


def test_bls12_381_circuits_reduce_by_its_field() -> None:
    compiled = compile_circuit(cube, BLS12381)
    wires = compiled.witness_values({"x": BLS12381.r - 1, "out": 3})  # (-1)^3 - 1 + 5 = 3
    assert to_ints(compiled.witness({"x": BLS12381.r - 1, "out": 3}).values) == wires


def test_enforce_rejects_other_types() -> None:
    def circuit(cs: ConstraintSystem) -> None:
        cs.enforce(cs.public_input("x"), 1.5, 0, "bad")  # type: ignore[arg-type]

    with pytest.raises(
        CircuitError, match="constraint 'bad': expected a linear combination or an int, got float"
    ):
        compile_circuit(circuit)


@settings(derandomize=True, deadline=None, max_examples=100)
@given(
    st.lists(st.integers(min_value=-(2**300), max_value=2**300), min_size=3, max_size=3),
    st.lists(st.integers(min_value=-(2**300), max_value=2**300), min_size=3, max_size=3),
    st.integers(min_value=0, max_value=P - 1),
    st.integers(min_value=0, max_value=P - 1),
)
def test_linear_combinations_evaluate_like_the_field(
    ka: list[int], kb: list[int], x_value: int, y_value: int
) -> None:
    cs = ConstraintSystem()
    x, y = cs.private_input("x"), cs.private_input("y")
    a = ka[0] * x + ka[1] * y + ka[2]
    b = kb[0] * x - y * kb[1] + kb[2]
    v = Assignment([1, x_value, y_value], P)
    assert v[a] == (ka[0] * x_value + ka[1] * y_value + ka[2]) % P
    assert v[a + b] == (v[a] + v[b]) % P
    assert v[a - b] == (v[a] - v[b]) % P
    assert v[-a] == (-v[a]) % P
    assert v[a * 7] == 7 * v[a] % P
