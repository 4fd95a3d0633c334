"""A witness generator is untrusted code: generators written here by hand (the circom 2 protocol, in WAT)
that trap, grow their memory past their limit, say more wires than the key has, or never end a message,
each fail with one line naming what failed, leave their process's memory as it was and are let go."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import wasmtime

from prooflane.groth16.field import to_ints
from prooflane.kinds.wasm_witness import _CACHE, GeneratorLimits, WasmWitness, compute_witness

BN254_R = 21888242871839275222246405745257275088548364400416034343698204186575808495617
MIB = 1 << 20


def generator(
    folder: Path,
    *,
    init: str = "",
    pages: int = 1,
    wires: int = 4,
    n32: int = 8,
    message: str = "(i32.const 0)",
    extra: str = "",
) -> str:
    """A circom 2 generator (its exports, and the runtime's imports) of a circuit of ``wires`` wires whose
    witness is (1, x, x, 0, ...): ``init`` runs first at each witness; ``message``: getMessageChar's body."""
    prime = "".join(f"\\{b:02x}" for b in BN254_R.to_bytes(32, "little"))
    wat = f"""(module
  (import "runtime" "exceptionHandler" (func $exc (param i32)))
  (import "runtime" "printErrorMessage" (func $print))
  (memory (export "memory") {pages})
  (global $x (mut i32) (i32.const 0))
  (data (i32.const 0) "{prime}")
  (func (export "getVersion") (result i32) (i32.const 2))
  (func (export "getFieldNumLen32") (result i32) (i32.const {n32}))
  (func (export "getRawPrime") (memory.copy (i32.const 64) (i32.const 0) (i32.const 32)))
  (func (export "readSharedRWMemory") (param i32) (result i32)
    (i32.load (i32.add (i32.const 64) (i32.shl (local.get 0) (i32.const 2)))))
  (func (export "writeSharedRWMemory") (param i32 i32)
    (i32.store (i32.add (i32.const 64) (i32.shl (local.get 0) (i32.const 2))) (local.get 1)))
  (func $grow (param $pages i32) (result i32) (memory.grow (local.get $pages)))
  (func (export "init") (param i32) {init})
  (func (export "getInputSignalSize") (param i32 i32) (result i32) (i32.const 1))
  (func (export "setInputSignal") (param i32 i32 i32) (global.set $x (i32.load (i32.const 64))))
  (func (export "getInputSize") (result i32) (i32.const 1))
  (func (export "getWitnessSize") (result i32) (i32.const {wires}))
  (func (export "getWitness") (param $i i32)
    (memory.fill (i32.const 64) (i32.const 0) (i32.const 32))
    (if (i32.eqz (local.get $i)) (then (i32.store (i32.const 64) (i32.const 1))))
    (if (i32.or (i32.eq (local.get $i) (i32.const 1)) (i32.eq (local.get $i) (i32.const 2)))
      (then (i32.store (i32.const 64) (global.get $x)))))
  (func (export "getMessageChar") (result i32) {message})
  {extra}
)"""
    path = folder / f"g{len(list(folder.glob('*.wasm')))}.wasm"
    path.write_bytes(wasmtime.wat2wasm(wat))
    return str(path)


def failure(path: str, limits: GeneratorLimits | None = None, values: dict[str, int] | None = None) -> str:
    with pytest.raises(ValueError) as failed:
        compute_witness(path, values or {"x": 5}, limits)
    text = str(failed.value)
    assert "\n" not in text and pickle.loads(pickle.dumps(failed.value)).args == failed.value.args
    assert path not in _CACHE  # a generator that failed is let go
    return text


def test_a_good_generator_computes_its_witness_and_is_kept(tmp_path: Path) -> None:
    path = generator(tmp_path)
    prime, wires = compute_witness(path, {"x": 5}, GeneratorLimits(memory_bytes=4 * MIB, wires=4))
    assert prime == BN254_R and to_ints(wires) == [1, 5, 5, 0]
    assert path in _CACHE


@pytest.mark.parametrize(
    ("init", "said"),
    [
        ("unreachable", "the generator trapped: it executed an `unreachable` instruction"),
        (
            "(drop (i32.load (i32.const 1000000)))",
            "the generator trapped: it accessed memory out of bounds "
            "(its memory holds 0.1 MiB of its limit of 512 MiB (witness_memory_bytes))",
        ),
        (
            "(drop (i32.div_u (i32.const 1) (i32.const 0)))",
            "the generator trapped: an integer division by zero",
        ),
    ],
)
def test_a_trap_is_one_line_naming_it(tmp_path: Path, init: str, said: str) -> None:
    assert failure(generator(tmp_path, init=init)) == said


def test_a_stack_overflow_is_named(tmp_path: Path) -> None:
    path = generator(tmp_path, init="(call $deep)", extra="(func $deep (call $deep))")
    assert failure(path) == "the generator trapped: its call stack overflowed (wasm stack overflow)"


def test_growing_past_the_limit_fails_naming_it_and_gives_the_memory_back(tmp_path: Path) -> None:
    """In a process of its own, so that its resident memory says only what the generator did: it touches
    48 MiB of its 64 MiB, then grows by 1 GiB (refused: memory.grow says -1), and traps where it uses it."""
    touch_and_grow = (
        "(memory.fill (i32.const 65536) (i32.const 7) (i32.const 50331648))"
        "(if (i32.lt_s (call $grow (i32.const 16384)) (i32.const 0))"
        " (then (drop (i32.load (i32.const 1073741824)))))"
    )
    path = generator(tmp_path, init=f"(drop (call $grow (i32.const 768))) {touch_and_grow}")
    script = f"""
import gc
from prooflane.kinds.wasm_witness import GeneratorLimits, compute_witness
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
compute_witness({str(generator(tmp_path))!r}, {{"x": 1}})  # the engine and the runtime, loaded
gc.collect()
before = rss()
try:
    compute_witness({path!r}, {{"x": 1}}, GeneratorLimits(memory_bytes=64 << 20))
except ValueError as exc:
    print(exc)
gc.collect()
print(rss() - before)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    said, grown = done.stdout.strip().splitlines()
    assert said == (
        "the generator trapped: it accessed memory out of bounds "
        "(its memory holds 48.1 MiB of its limit of 64 MiB (witness_memory_bytes))"
    )
    assert int(grown) < 8 * MIB  # its 48 MiB went back with it


def test_an_initial_memory_past_the_limit_is_refused_before_it_runs(tmp_path: Path) -> None:
    said = failure(generator(tmp_path, pages=2048), GeneratorLimits(memory_bytes=64 * MIB))
    assert said.startswith(
        "the generator did not start: the generator needs more memory than its limit of 64 MiB"
    )


def test_more_wires_than_the_key_has_are_refused_before_memory_is_taken(tmp_path: Path) -> None:
    path = generator(tmp_path, wires=2_000_000_000)
    said = failure(path, GeneratorLimits(memory_bytes=64 * MIB, wires=4))
    assert said == "the generator computes 2,000,000,000 wires, the circuit's key has 4"


def test_wires_past_the_memory_limit_are_refused(tmp_path: Path) -> None:
    said = failure(generator(tmp_path, wires=4_000_000), GeneratorLimits(memory_bytes=64 * MIB))
    assert said == "128,000,000 bytes of values exceed the generator's limit of 64 MiB (witness_memory_bytes)"


def test_a_field_of_absurd_width_is_refused_at_once(tmp_path: Path) -> None:
    said = failure(generator(tmp_path, n32=1 << 30))
    assert said == "the generator did not start: its field takes 1073741824 32-bit words: expected 1 to 8"


def test_a_message_that_never_ends_is_read_to_a_bound(tmp_path: Path) -> None:
    """getMessageChar never says 0: the host's loop stops at MESSAGE_CHARS instead of spinning for ever."""
    path = generator(tmp_path, init="(call $print) (call $exc (i32.const 4))", message="(i32.const 65)")
    assert failure(path) == "Assert Failed. " + "A" * 1024


def test_a_generator_that_failed_is_compiled_again_for_the_next_witness(tmp_path: Path) -> None:
    """Its instance traps once the last witness's input was 3 (state a generator should not keep): the
    instance that failed is let go, and a new one computes the next witness."""
    path = generator(tmp_path, init="(if (i32.eq (global.get $x) (i32.const 3)) (then unreachable))")
    compute_witness(path, {"x": 3})
    kept = _CACHE[path][1]
    failure(path, values={"x": 5})
    assert to_ints(compute_witness(path, {"x": 4})[1]) == [1, 4, 4, 0]
    assert _CACHE[path][1] is not kept


def test_wasmtime_errors_never_leave_the_generator(tmp_path: Path) -> None:
    """wasmtime's errors hold native pointers: sent back from a pool process as they are, they once
    arrived as "ctypes objects containing pointers cannot be pickled"."""
    with pytest.raises(ValueError) as failed:
        WasmWitness(generator(tmp_path, init="unreachable")).witness({"x": 1})
    assert pickle.loads(pickle.dumps(failed.value)).args == failed.value.args
