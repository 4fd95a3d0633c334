from __future__ import annotations

import pytest

from prooflane.groth16 import BLS12381, BN128, curve_by_name, curve_by_prime, from_ints, to_ints


def test_field_vector_round_trips_ints() -> None:
    values = [0, 1, BN128.r - 1, 2**200 + 7]
    vector = from_ints(values)
    assert vector.shape == (4, 4)
    assert to_ints(vector) == values


def test_from_ints_reduces_by_modulus() -> None:
    assert to_ints(from_ints([BN128.r + 5, -1], BN128.r)) == [5, BN128.r - 1]


@pytest.mark.parametrize("name", ["bn128", "BN254", "alt_bn128"])
def test_curve_aliases(name: str) -> None:
    assert curve_by_name(name) is BN128


def test_unknown_curve_names_the_choices() -> None:
    with pytest.raises(ValueError, match="bls12381, bn128"):
        curve_by_name("secp256k1")


def test_curve_by_prime_knows_both_fields() -> None:
    assert curve_by_prime(BLS12381.q) is BLS12381
    assert curve_by_prime(BN128.r) is BN128
    assert BN128.n8q == 32 and BLS12381.n8q == 48
