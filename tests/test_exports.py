"""The public API is exactly what we mean to offer, and every error says when it is raised."""

from __future__ import annotations

import inspect

import pytest

import prooflane
import prooflane.errors as errors
import prooflane.groth16 as groth16


def test_top_level_exports() -> None:
    assert set(prooflane.__all__) == {"Client", "Config", "Engine", "ProoflaneError", "__version__"}
    for name in prooflane.__all__:
        assert getattr(prooflane, name) is not None


def test_lazy_exports_are_the_real_classes() -> None:
    from prooflane.config import Config
    from prooflane.engine.engine import Engine

    assert prooflane.Engine is Engine
    assert prooflane.Config is Config


def test_unknown_attribute_is_an_attribute_error() -> None:
    name = "NoSuchThing"
    with pytest.raises(AttributeError, match=name):
        getattr(prooflane, name)


def test_groth16_exports() -> None:
    expected = {
        "BLS12381", "BN128", "CURVES", "R1CS", "Curve", "FieldVector", "Proof", "ProvingKey", "ProvingState",
        "SparseMatrix", "Synthesized", "VerificationKey", "Witness", "arithmetics", "curve_by_name",
        "curve_by_prime",
        "from_ints", "preload", "products", "prove", "prove_b2", "prove_finish", "prove_start", "read_r1cs",
        "read_wtns",
        "read_zkey", "release", "setup", "synthesize", "to_ints", "verify", "write_r1cs", "write_wtns",
        "write_zkey",
    }  # fmt: skip
    assert set(groth16.__all__) == expected
    for name in expected:
        assert getattr(groth16, name) is not None


def test_every_error_derives_from_the_base_and_says_when_it_is_raised() -> None:
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, Exception)]
    assert errors.ProoflaneError in classes
    for cls in classes:
        assert issubclass(cls, errors.ProoflaneError), cls
        assert (cls.__doc__ or "").startswith("Raised when"), cls
