"""Registering circom circuits on the in-process engine: a witness generator (.wasm) of another circuit
than the key is refused naming both counts, read from the module without running it; a .wtns of another
circuit is refused naming both counts, not its size."""

from __future__ import annotations

from collections.abc import Callable
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
from tests.support.wasm_modules import generator_wasm

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

CHAIN = 8  # the key's circuit: square_chain(BN128, 8), 12 wires


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


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """Each read of a generator from now on: which reader, and whether it ran on the event loop."""
    import asyncio

    from prooflane.engine import registry
    from prooflane.kinds import wasm, wasm_witness

    reads: list[tuple[str, bool]] = []

    def counted(name: str, reader: Callable[[str], object]) -> Callable[[str], object]:
        def read(path: str) -> object:
            try:
                asyncio.get_running_loop()
                on_loop = True
            except RuntimeError:
                on_loop = False
            reads.append((name, on_loop))
            return reader(path)

        return read

    counted_inspect = counted("inspect_wasm", inspect_wasm)
    monkeypatch.setattr(registry, "inspect_wasm", counted_inspect)
    monkeypatch.setattr(wasm, "inspect_wasm", counted_inspect)  # were it taken from there
    monkeypatch.setattr(wasm_witness, "field_product", counted("field_product", wasm_witness.field_product))
    return reads


async def test_a_generator_is_read_once_at_registration_and_never_at_a_start(
    tmp_path: Path, keys_dir: Path, circuit: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What registration read of the .wasm is journalled with the circuit: a start reads nothing (a 10 MB
    module once cost every start 23 s, on the event loop)."""
    cfg = config(tmp_path, keys_dir)
    reads = _count_reads(monkeypatch)
    async with running(cfg) as h:
        info = await h.engine.register_circuit("c", circuit["zkey"], wasm_path=circuit["same"])
    assert reads == [("inspect_wasm", False), ("field_product", False)]
    reads.clear()
    async with running(cfg) as h:
        (again,) = h.engine.circuits()
    assert reads == []
    assert again.witness_field_product == info.witness_field_product
    assert again.witness_field_product == "the generator's own (32-bit limbs): no Fr_F1m_mul in it"


async def test_a_circuit_journalled_before_its_reading_was_is_read_once_off_the_loop(
    tmp_path: Path, keys_dir: Path, circuit: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import contextlib
    import sqlite3

    cfg = config(tmp_path, keys_dir)
    async with running(cfg) as h:
        info = await h.engine.register_circuit("c", circuit["zkey"], wasm_path=circuit["same"])
    with contextlib.closing(sqlite3.connect(cfg.data_dir / "journal.sqlite3")) as db, db:
        db.execute("UPDATE circuits SET wasm_inspection = NULL")  # as an older journal holds it
    reads = _count_reads(monkeypatch)
    async with running(cfg) as h:
        assert h.engine.circuits()[0].witness_field_product == info.witness_field_product
    assert reads == [("inspect_wasm", False), ("field_product", False)]  # in a thread
    reads.clear()
    async with running(cfg) as h:
        assert h.engine.circuits()[0].witness_field_product == info.witness_field_product
    assert reads == []
