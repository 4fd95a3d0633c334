"""Registering circom circuits on the in-process engine: a witness generator (.wasm) of another circuit
than the key is refused naming both counts, read from the module without running it; a .wtns of another
circuit is refused naming both counts, not its size."""

from __future__ import annotations

from pathlib import Path

import pytest

from prooflane.config import Config
from prooflane.errors import Invalid
from prooflane.groth16 import BLS12381, BN128, setup, write_wtns, write_zkey
from prooflane.kinds import WitnessGenerator, inspect_wasm, wtns_wires
from prooflane.models import JobRequest
from prooflane.states import JobState
from tests.support.engine import running, tiny_config
from tests.support.groth16_samples import square_chain

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

CHAIN = 8  # the key's circuit: square_chain(BN128, 8), 12 wires


def _uleb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _sleb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        if (value == 0 and not byte & 0x40) or (value == -1 and byte & 0x40):
            return bytes([*out, byte])
        out.append(byte | 0x80)


def _section(kind: int, body: bytes) -> bytes:
    return bytes([kind]) + _uleb(len(body)) + body


def _vector(items: list[bytes]) -> bytes:
    return _uleb(len(items)) + b"".join(items)


def generator_wasm(wires: int, inputs: int = 1, prime: int = BN128.r, version: int = 2) -> bytes:
    """A WebAssembly module exporting what circom's witness generators export for their constants, as circom
    generates them (``i32.const N``; ``getRawPrime`` copies the prime from the data section): no witness."""
    prime_at, shared_at = 64, 1024
    constants = {
        "getVersion": version,
        "getWitnessSize": wires,
        "getInputSize": inputs,
        "getFieldNumLen32": 8,
    }
    types = _vector(
        [b"\x60\x00\x01\x7f", b"\x60\x00\x00", b"\x60\x02\x7f\x7f\x00"]
    )  # ()->i32, ()->(), (i32,i32)
    functions = _vector([b"\x00"] * len(constants) + [b"\x01", b"\x02"])
    memory = _vector([b"\x00\x01"])
    names = [*constants, "getRawPrime"]
    exports = _vector([_uleb(len(n)) + n.encode() + b"\x00" + _uleb(i) for i, n in enumerate(names)])
    bodies = [b"\x00\x41" + _sleb(v) + b"\x0b" for v in constants.values()]
    copy_index = len(constants) + 1
    bodies.append(
        b"\x00\x41" + _sleb(prime_at) + b"\x41" + _sleb(shared_at) + b"\x10" + _uleb(copy_index) + b"\x0b"
    )
    bodies.append(b"\x00\x0b")  # the copy itself: never run here
    code = _vector([_uleb(len(b)) + b for b in bodies])
    data = _vector(
        [
            b"\x00\x41"
            + _sleb(prime_at)
            + b"\x0b"
            + _vector([bytes([x]) for x in prime.to_bytes(32, "little")])
        ]
    )
    return b"\0asm\x01\0\0\0" + b"".join(
        _section(k, v)
        for k, v in ((1, types), (3, functions), (5, memory), (7, exports), (10, code), (11, data))
    )


@pytest.fixture
def circuit(tmp_path: Path) -> dict[str, Path]:
    """A key of square_chain(BN128, CHAIN), a witness of it, a witness of a longer chain, and generators."""
    folder = tmp_path / "circuit"
    folder.mkdir()
    r1cs, witness = square_chain(BN128, CHAIN)
    write_zkey(folder / "c.zkey", setup(r1cs, seed=b"registry"))
    write_wtns(folder / "good.wtns", witness)
    write_wtns(folder / "other.wtns", square_chain(BN128, 3 * CHAIN)[1])
    files = {"zkey": folder / "c.zkey", "good": folder / "good.wtns", "other": folder / "other.wtns"}
    for name, wasm in {
        "same": generator_wasm(r1cs.n_wires),
        "more": generator_wasm(5_795),
        "bls": generator_wasm(r1cs.n_wires, prime=BLS12381.r),
        "junk": b"not a module",
        "bare": b"\0asm\x01\0\0\0",  # a module, but none of circom 2's exports (circom 1's are others)
    }.items():
        (folder / f"{name}.wasm").write_bytes(wasm)
        files[name] = folder / f"{name}.wasm"
    return files


def config(tmp_path: Path, keys_dir: Path) -> Config:
    return tiny_config(tmp_path / "data", keys_dir, allowed_roots=(tmp_path,))


def test_what_a_generator_says_is_read_without_running_it(circuit: dict[str, Path]) -> None:
    assert inspect_wasm(str(circuit["more"])) == WitnessGenerator(2, 5_795, 1, BN128.r)
    assert inspect_wasm(str(circuit["bls"])) == WitnessGenerator(2, CHAIN + 4, 1, BLS12381.r)
    with pytest.raises(ValueError, match="not a WebAssembly module"):
        inspect_wasm(str(circuit["junk"]))
    assert inspect_wasm(str(circuit["bare"])) is None


def test_a_witness_header_says_its_wires(circuit: dict[str, Path]) -> None:
    assert wtns_wires(circuit["good"].read_bytes()[:4096]) == CHAIN + 4
    assert wtns_wires(circuit["other"].read_bytes()[:4096]) == 3 * CHAIN + 4
    assert wtns_wires(b"\0" * 4096) is None and wtns_wires(b"wtns") is None


async def test_a_generator_of_another_circuit_is_refused_naming_both_counts(
    tmp_path: Path, keys_dir: Path, circuit: dict[str, Path]
) -> None:
    async with running(config(tmp_path, keys_dir)) as h:
        with pytest.raises(Invalid) as refused:
            await h.engine.register_circuit("c", circuit["zkey"], wasm_path=circuit["more"])
        assert "the .wasm computes 5,795 wires, the key has 12" in str(refused.value)
        assert str(circuit["more"]) in str(refused.value)
        with pytest.raises(
            Invalid, match=r"the \.wasm computes over bls12381's scalar field, the key over bn128"
        ):
            await h.engine.register_circuit("c", circuit["zkey"], wasm_path=circuit["bls"])
        with pytest.raises(Invalid, match="not a WebAssembly module"):
            await h.engine.register_circuit("c", circuit["zkey"], wasm_path=circuit["junk"])
        assert h.engine.circuits() == []  # nothing kept of a refused registration
        assert not (tmp_path / "data" / "circuits" / "c").exists()
        info = await h.engine.register_circuit("c", circuit["zkey"], wasm_path=circuit["same"])
        assert info.has_witness_generator
        # a module of circom 2's exports alone: nothing to rewrite, and it says so
        assert info.witness_field_product == "the generator's own (32-bit limbs): no Fr_F1m_mul in it"


async def test_a_crafted_generator_is_refused_off_the_pool_and_the_pool_stays_free(
    tmp_path: Path, keys_dir: Path, circuit: dict[str, Path]
) -> None:
    """A run of 0xFF bytes in a LEB128 number once cost quadratic time on a pool process (400 kB: 6.7 s, so
    two uploads held the synthesis pool for 80 s). The reader stops at WebAssembly's 5 bytes, in a thread of
    the daemon: the pool is asked for the key alone."""
    crafted = tmp_path / "crafted.wasm"
    crafted.write_bytes(b"\0asm\x01\0\0\0\x01" + b"\xff" * 1_500_000)
    async with running(config(tmp_path, keys_dir)) as h:
        with pytest.raises(Invalid, match="the number at byte 9 runs past 5 bytes"):
            await h.engine.register_circuit("c", circuit["zkey"], wasm_path=crafted)
        assert [step.call for step in h.backend.steps if step.name == "run"][-1] == "inspect_zkey"
        assert "inspect_wasm" not in [step.call for step in h.backend.steps]
        assert h.engine.circuits() == []


async def test_a_generator_whose_counts_cannot_be_read_is_registered_unchecked(
    tmp_path: Path, keys_dir: Path, circuit: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    async with running(config(tmp_path, keys_dir)) as h:
        info = await h.engine.register_circuit("c", circuit["zkey"], wasm_path=circuit["bare"])
        assert info.has_witness_generator
        assert info.witness_field_product == "snarkjs' in node (not a circom 2 generator)"
        assert "registered without checking that it is of the key's circuit" in caplog.text


async def test_a_witness_of_another_circuit_is_refused_naming_both_counts(
    tmp_path: Path, keys_dir: Path, circuit: dict[str, Path]
) -> None:
    async with running(config(tmp_path, keys_dir)) as h:
        await h.engine.register_circuit("c", circuit["zkey"])
        other = JobRequest(
            kind="circom", circuit="c", witnesses=[str(circuit["good"]), str(circuit["other"])]
        )
        with pytest.raises(Invalid) as refused:
            await h.engine.submit(other)
        assert (
            str(refused.value)
            == f"witnesses[1] {str(circuit['other'])!r}: this witness has 28 wires, the circuit 12"
        )
        good = await h.engine.submit(JobRequest(kind="circom", circuit="c", witnesses=[str(circuit["good"])]))
        assert await h.done(good) is JobState.DONE


async def test_a_start_removes_circuit_folders_that_no_registration_journalled(
    tmp_path: Path, keys_dir: Path, circuit: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """A daemon killed while it inspected an upload left ``circuits/<name>/`` in place, never journalled: the
    next start removes it (and half-received ``.incoming-*`` folders), keeping every registered circuit."""
    cfg = config(tmp_path, keys_dir)
    async with running(cfg) as h:
        await h.engine.register_circuit("kept", circuit["zkey"], wasm_path=circuit["same"])
    circuits = cfg.data_dir / "circuits"
    for left in ("cut-short", ".incoming-0123"):
        (circuits / left).mkdir()
        (circuits / left / "circuit.zkey").write_bytes(circuit["zkey"].read_bytes())
    async with running(cfg) as h:
        assert sorted(p.name for p in circuits.iterdir()) == ["kept"]
        assert [c.name for c in h.engine.circuits()] == ["kept"]
        assert "circuit folder" in caplog.text and "cut-short: never registered" in caplog.text
        info = await h.engine.register_circuit("cut-short", circuit["zkey"])  # the name is free again
        assert info.name == "cut-short"
