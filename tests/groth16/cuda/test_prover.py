"""The device section on the cuda kernels: a proof whose H and G1 MSMs ran there verifies and equals the
cpu path's; the per-process cache of device bases; the device memory a key and a partition need."""

from __future__ import annotations

import random

import pytest

import prooflane.groth16.cuda as gpu_path
from prooflane.groth16 import BLS12381, BN128, Curve, from_ints, prove_finish, prove_start, setup, synthesize
from prooflane.groth16 import verify as verify_proof
from prooflane.groth16.cuda import key_device_bytes, msm_g1, partition_device_bytes, preload, release
from tests.support.gpu import cpu_msm, gpu, random_points, rows
from tests.support.groth16_samples import square_chain


def test_the_package_offers_the_device_section_primitives() -> None:
    assert set(gpu_path.__all__) == {
        "coset_h", "device_memory", "gpu_available", "key_device_bytes", "msm_g1", "ntt",
        "partition_device_bytes", "preload", "prove_start", "release", "select_device", "simulated",
        "unavailable_reason",
    }  # fmt: skip
    assert all(callable(getattr(gpu_path, name)) for name in gpu_path.__all__)
    assert gpu_path.unavailable_reason() is None  # the simulator or a GPU is here
    free, total = gpu_path.device_memory()
    assert 0 <= free <= total and (total > 0) == gpu_path.gpu_available()
    with pytest.raises(AttributeError, match="no_such_thing"):
        _ = gpu_path.no_such_thing


def test_device_bases_are_cached_per_key_section_and_released() -> None:
    rng = random.Random("cache")
    points = random_points(BN128, 3, rng)
    scalars = [rng.randrange(1 << 32) for _ in points]
    expected = cpu_msm(BN128, points, scalars)
    assert msm_g1(BN128, "k1", "a", rows(BN128, points), from_ints(scalars)) == expected
    assert msm_g1(BN128, "k1", "a", None, from_ints(scalars)) == expected  # from device memory

    r1cs, _ = square_chain(BN128, 2)
    key = setup(r1cs, seed=b"cache")
    preload(key)
    msm_g1(BN128, key.digest, "h", None, from_ints([1] * key.domain_size))
    release(key)
    with pytest.raises(LookupError, match="not in device memory"):
        msm_g1(BN128, key.digest, "h", None, from_ints([1] * key.domain_size))


@pytest.mark.parametrize("curve", [pytest.param(BN128, id="bn128"), pytest.param(BLS12381, id="bls12381")])
def test_device_memory_needs_grow_with_the_key(curve: Curve) -> None:
    small = setup(square_chain(curve, 2)[0], seed=b"m")
    large = setup(square_chain(curve, 40)[0], seed=b"m")
    limbs = 8 if curve == BN128 else 12
    rows_g1 = sum(getattr(small, f"{n}_points").shape[0] for n in ("a", "b1", "c", "h"))
    assert key_device_bytes(small) == rows_g1 * 2 * limbs * 4
    assert key_device_bytes(large) > key_device_bytes(small)
    assert partition_device_bytes(large) > partition_device_bytes(small) > 0


def _check_proof(curve: Curve, links: int) -> None:
    r1cs, witness = square_chain(curve, links)
    key = setup(r1cs, seed=b"cuda")
    synthesized = synthesize(r1cs, witness)
    on_device = gpu_path.prove_start(key, synthesized, randomness=(3, 4))
    on_cpu = prove_start(key, synthesized, randomness=(3, 4))
    assert (on_device.a, on_device.b1, on_device.c, on_device.h) == (on_cpu.a, on_cpu.b1, on_cpu.c, on_cpu.h)
    proof = prove_finish(on_device)
    assert verify_proof(key.verification_key, proof.public, proof)


def test_a_proof_with_the_device_section_on_the_kernels_verifies() -> None:
    _check_proof(BN128, 2)


@gpu
@pytest.mark.parametrize("curve", [pytest.param(BN128, id="bn128"), pytest.param(BLS12381, id="bls12381")])
def test_a_proof_with_the_device_section_on_a_gpu_verifies(curve: Curve) -> None:
    _check_proof(curve, 1000)
