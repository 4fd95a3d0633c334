"""circom witnesses computed in this process: the circuit's ``.wasm`` (its witness generator) run by
wasmtime, through circom 2's witness protocol, so that no node is needed to prove.

The protocol (what circom's generated ``witness_calculator.js`` does, written here from its behaviour):

- the module imports host functions from ``runtime``: ``exceptionHandler(code)`` (the generator failed:
  1 a signal not found, 2 too many signals set, 3 a signal set twice, 4 an assertion failed, 5 out of
  memory, 6 an input array index out of range), ``printErrorMessage()`` (a message to read, a character at
  a time, from ``getMessageChar()`` until 0; "Error in template Mul_0 line: 7"), and others that only
  print (``writeBufferMessage``, ``showSharedRWMemory``, and the ``log*`` functions of some versions);
- numbers cross in a shared buffer of ``getFieldNumLen32()`` 32-bit words, least significant first:
  ``writeSharedRWMemory(i, word)``, ``readSharedRWMemory(i)``; ``getRawPrime()`` puts the field's prime
  there, ``getWitness(i)`` wire ``i``'s value;
- ``init(sanity_check)`` starts a witness; each input signal is found by the 64-bit FNV-1a hash of its
  name (``getInputSignalSize(high, low)`` says how many values it takes, negative when the circuit has no
  such input), and its values are set in order, flattened (``setInputSignal(high, low, i)``, each value
  reduced modulo the prime first); the last one computes the witness; ``getInputSize()`` is how many
  input values there are in all, ``getWitnessSize()`` how many wires.

Each call from Python into wasmtime costs tens of microseconds, and a witness is a call per wire and per
32-bit word: 62,000 wires took 13 s so. So the loops run in WebAssembly: a small module of this file's own
(``_LOOPS``, in WAT) imports the generator's functions and sets an input signal's values, or copies every
wire's value, between the generator and its own memory, which Python reads and writes in one piece. A
witness then costs a call per input signal and one for all the wires.

A module is compiled once per process and file (its fingerprint: a file changed is compiled again) and
its instance kept for the next witness (``init`` starts each afresh); its compiled code is kept on disk
(``_module``) and mapped by a later process instead of compiling again (0.12 s -> 0.3 ms for SHA-256).
Its field product is first rewritten on 64-bit limbs (``wasm_field``: 1.5x the witness's speed), where it
can be, and ``field_product`` says which runs. Errors are ``ValueError`` with one line, as the node
helper's were: the input named where the protocol can name it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import logging
import os
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from ..files import Fingerprint, fingerprint
from ..groth16.field import FieldVector
from .wasm_field import PRIMES, patched

log = logging.getLogger("prooflane.synthesis")

__all__ = ["CIRCOM2_EXPORTS", "NotCircom2", "WasmWitness", "compute_witness", "field_product"]

CIRCOM2_EXPORTS = frozenset({
    "getFieldNumLen32", "getRawPrime", "readSharedRWMemory", "writeSharedRWMemory", "init",
    "getInputSignalSize", "setInputSignal", "getInputSize", "getWitnessSize", "getWitness",
})  # fmt: skip
"""What a generator must export to be run here (circom 2.0.0 and later)."""

_LOOPS = """
(module
  (import "c" "writeSharedRWMemory" (func $write (param i32 i32)))
  (import "c" "readSharedRWMemory" (func $read (param i32) (result i32)))
  (import "c" "setInputSignal" (func $set (param i32 i32 i32)))
  (import "c" "getWitness" (func $get (param i32)))
  (memory (export "buffer") 1)
  ;; signal (high, low)'s values 0..count-1, n32 words each, from this memory at 0
  (func (export "set_input") (param $high i32) (param $low i32) (param $count i32) (param $n32 i32)
    (local $i i32) (local $j i32) (local $at i32)
    (block $done (loop $values
      (br_if $done (i32.ge_u (local.get $i) (local.get $count)))
      (local.set $j (i32.const 0))
      (block $words_done (loop $words
        (br_if $words_done (i32.ge_u (local.get $j) (local.get $n32)))
        (call $write (local.get $j) (i32.load (local.get $at)))
        (local.set $at (i32.add (local.get $at) (i32.const 4)))
        (local.set $j (i32.add (local.get $j) (i32.const 1)))
        (br $words)))
      (call $set (local.get $high) (local.get $low) (local.get $i))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $values))))
  ;; wires 0..count-1, n32 words each, into this memory at 0
  (func (export "get_witness") (param $count i32) (param $n32 i32)
    (local $i i32) (local $j i32) (local $at i32)
    (block $done (loop $wires
      (br_if $done (i32.ge_u (local.get $i) (local.get $count)))
      (call $get (local.get $i))
      (local.set $j (i32.const 0))
      (block $words_done (loop $words
        (br_if $words_done (i32.ge_u (local.get $j) (local.get $n32)))
        (i32.store (local.get $at) (call $read (local.get $j)))
        (local.set $at (i32.add (local.get $at) (i32.const 4)))
        (local.set $j (i32.add (local.get $j) (i32.const 1)))
        (br $words)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $wires))))
)
"""
_KEPT = 4  # generators kept compiled and instantiated per process, least recently used first out
_FAILURES = {
    1: "a signal was not found",
    2: "too many signals were set",
    3: "a signal was set twice",
    4: "Assert Failed",
    5: "the generator ran out of memory",
    6: "an input array index is out of range",
}
_FNV_OFFSET, _FNV_PRIME, _MASK64 = 0xCBF29CE484222325, 0x100000001B3, (1 << 64) - 1


class _Failed(Exception):
    """Raised by the runtime's exceptionHandler: it ends the generator's call in progress."""


class NotCircom2(ValueError):
    """Raised when a generator does not export circom 2's witness protocol (an older circom's)."""


def fnv1a64(name: str) -> int:
    """The 64-bit FNV-1a hash of ``name``'s UTF-8 bytes: how the generator knows an input signal."""
    h = _FNV_OFFSET
    for byte in name.encode():
        h = ((h ^ byte) * _FNV_PRIME) & _MASK64
    return h


def _i32(word: int) -> int:
    """An unsigned 32-bit word as wasm's i32 argument (two's complement)."""
    return word - (1 << 32) if word >= 1 << 31 else word


class WasmWitness:
    """One circom 2 witness generator, compiled and instantiated; :meth:`witness` runs it."""

    def __init__(self, path: str, *, rewrite: bool = True) -> None:
        import wasmtime

        self._wasmtime = wasmtime
        engine, module, self.field_product, curve = _compiled(wasmtime, path, rewrite)
        missing = sorted(CIRCOM2_EXPORTS - {e.name for e in module.exports})
        if missing:
            raise NotCircom2(f"witness generator {path}: not a circom 2 generator (no {', '.join(missing)})")
        self._store = wasmtime.Store(engine)
        self._said = _Said()  # what the handlers note: not this object, which would make a cycle through
        # the store that the collector never frees (35 MB a generator)
        imports = [self._import(item.module, item.name or "", item.type) for item in module.imports]
        instance = wasmtime.Instance(self._store, module, imports)
        self._exports = instance.exports(self._store)
        self.n32: int = self._call("getFieldNumLen32")
        self._call("getRawPrime")
        self.prime = self._read()
        if curve is not None and self.prime != PRIMES[curve]:  # another field than the one found in it
            self.__init__(path, rewrite=False)  # type: ignore[misc]
            return
        loops = wasmtime.Module(engine, _LOOPS)
        own = [self._exports[i.name or ""] for i in loops.imports]
        self._loops: Any = wasmtime.Instance(self._store, loops, own).exports(self._store)
        self._buffer: Any = self._loops["buffer"]

    field_product: str
    """How the generator multiplies field elements: "64-bit limbs (wide arithmetic)", its product
    rewritten (``wasm_field``), or "the generator's own (32-bit limbs): why"."""

    def witness(self, values: dict[str, Any]) -> FieldVector:
        """Every wire's value for circuit inputs ``values`` (name -> a number or a nested list of them), as
        the prover takes them; ``ValueError`` with one line naming the input, or the generator's own
        message, when it fails."""
        self._said.failure, self._said.messages = None, []
        try:
            self._call("init", 1)  # with its checks, as snarkjs runs it
            given = 0
            for name, value in values.items():
                flat = _flat(value, name)
                h = fnv1a64(name)
                high, low = _i32(h >> 32), _i32(h & 0xFFFFFFFF)
                size = self._call("getInputSignalSize", high, low)
                if size <= 0:  # an input takes a value at least; the generator says 0 or less of others
                    raise ValueError(f"input {name!r} is not an input signal of the circuit")
                if len(flat) != size:
                    raise ValueError(f"input {name!r}: {len(flat)} values given, the signal takes {size}")
                width = 4 * self.n32
                numbers = b"".join(_number(item, name, self.prime).to_bytes(width, "little") for item in flat)
                self._room(len(numbers))
                self._buffer.write(self._store, numbers, 0)
                self._loops["set_input"](self._store, high, low, len(flat), self.n32)
                given += len(flat)
            expected = self._call("getInputSize")
            if given < expected:
                raise ValueError(
                    f"not all inputs were given: {given} of the circuit's {expected} input values"
                )
            wires = self._call("getWitnessSize")
            width = 4 * self.n32
            self._room(wires * width)
            self._loops["get_witness"](self._store, wires, self.n32)
            raw = self._buffer.read(self._store, 0, wires * width)
            return _field_vector(raw, wires, self.n32)
        except (self._wasmtime.WasmtimeError, _Failed) as exc:  # a trap: the generator failed (it said how)
            raise ValueError(self._failed(str(exc))) from None

    def _failed(self, trap: str) -> str:
        said = " ".join(m.strip() for m in self._said.messages if m.strip())
        if self._said.failure is not None:
            what = _FAILURES.get(self._said.failure, f"error code {self._said.failure}")
            return f"{what}. {said}".strip() if said else what
        return said or f"the generator trapped: {trap.splitlines()[0]}"

    def _call(self, name: str, *args: int) -> int:
        result = self._exports[name](self._store, *args)  # type: ignore[operator]
        return int(result) if result is not None else 0

    def _room(self, nbytes: int) -> None:
        """The loops' memory holds at least ``nbytes``."""
        short = nbytes - self._buffer.data_len(self._store)
        if short > 0:
            self._buffer.grow(self._store, -(-short // 65536))

    def _read(self) -> int:
        words = [self._call("readSharedRWMemory", j) & 0xFFFFFFFF for j in range(self.n32)]
        return sum(w << (32 * j) for j, w in enumerate(words))

    def _import(self, module: str, name: str, kind: Any) -> Any:
        """What the generator imports: the runtime's functions (failures and messages noted, the printing
        ones doing nothing), or a memory of the type asked."""
        wasmtime = self._wasmtime
        if isinstance(kind, wasmtime.MemoryType):
            return wasmtime.Memory(self._store, kind)
        if not isinstance(kind, wasmtime.FuncType):
            raise ValueError(f"the witness generator imports {module}.{name}, which is not a function")
        if name == "exceptionHandler":
            return wasmtime.Func(self._store, kind, self._said.on_failure)
        if name == "printErrorMessage":
            return wasmtime.Func(self._store, kind, self._said.on_message, access_caller=True)
        results = [0] * len(kind.results)
        handler: Callable[..., Any] = lambda *_: results[0] if len(results) == 1 else None  # noqa: E731
        return wasmtime.Func(self._store, kind, handler)


class _Said:
    """What the generator's runtime imports were told: a failure's code and the messages it printed."""

    def __init__(self) -> None:
        self.failure: int | None = None
        self.messages: list[str] = []

    def on_failure(self, code: int) -> None:
        self.failure = code
        raise _Failed(code)  # traps the call in progress

    def on_message(self, caller: Any) -> None:
        read = caller["getMessageChar"]
        chars = []
        while (c := read(caller)) != 0:
            chars.append(chr(c))
        self.messages.append("".join(chars))


def _compiled(wasmtime: Any, path: str, rewrite: bool) -> tuple[Any, Any, str, str | None]:
    """The engine and module of the generator at ``path``, its field product on 64-bit limbs where
    ``wasm_field`` can rewrite it (wasmtime's wide arithmetic), how it multiplies, and the curve whose
    field the rewritten product is of (None: not rewritten)."""
    try:
        with open(path, "rb") as f:
            original = f.read()
    except OSError as exc:
        raise ValueError(f"witness generator {path}: {exc.strerror}") from None
    config = wasmtime.Config()
    config.wasm_wide_arithmetic = True
    engine = wasmtime.Engine(config)
    rewritten, why = (None, "its field is not the one found in it")
    if rewrite:
        rewritten, why = _rewritten(wasmtime, original)
    if rewritten is not None:
        try:
            return engine, _module(wasmtime, engine, rewritten), REWRITTEN, why
        except wasmtime.WasmtimeError as exc:
            why = f"rewritten, it did not compile: {str(exc).splitlines()[0]}"
    try:
        module = _module(wasmtime, engine, original)
    except wasmtime.WasmtimeError as exc:
        raise ValueError(f"witness generator {path}: not a WebAssembly module wasmtime can run: "
                         f"{str(exc).splitlines()[0]}") from None  # fmt: skip
    return engine, module, f"the generator's own (32-bit limbs): {why}", None


@functools.cache
def _wasmtime_version() -> str:
    return importlib.metadata.version("wasmtime")


COMPILED_ENV = "PROOFLANE_WASM_CACHE"
COMPILED_MAX_BYTES = 4 << 30
"""The compiled generators kept (least recently used out first): a module compiles to about 30x its size."""


def _module(wasmtime: Any, engine: Any, code: bytes) -> Any:
    """``code`` compiled: mapped from the folder of compiled generators (``$PROOFLANE_WASM_CACHE``, else
    ``~/.cache/prooflane/wasm``; empty: none kept) when this wasmtime compiled it before, else compiled and
    stored there (0.12 s -> 0.3 ms for SHA-256's). A file wasmtime refuses is compiled again; a folder that
    cannot be written is only not used. The folder is trusted as the user's own: wasmtime runs what it
    maps."""
    from ..groth16.caches import cache_folder, prune_least_recent

    where = cache_folder(COMPILED_ENV, "wasm")
    if where is None:
        return wasmtime.Module(engine, code)
    digest = hashlib.sha256(code + f"|wasmtime {_wasmtime_version()}|wide".encode()).hexdigest()
    path = where / f"{digest}.cwasm"
    with contextlib.suppress(OSError, wasmtime.WasmtimeError):
        module = wasmtime.Module.deserialize_file(engine, str(path))
        os.utime(path)  # recently used
        return module
    module = wasmtime.Module(engine, code)
    try:
        where.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        try:
            partial.write_bytes(module.serialize())
            partial.replace(path)
        finally:
            partial.unlink(missing_ok=True)
        prune_least_recent(where, "*.cwasm", COMPILED_MAX_BYTES, keep=path)
    except OSError as exc:
        log.debug("compiled generator not kept in %s: %s", where, exc)
    return module


REWRITTEN = "64-bit limbs (wide arithmetic)"
"""``field_product`` of a generator whose product ``wasm_field`` rewrote."""


def _rewritten(wasmtime: Any, original: bytes) -> tuple[bytes, str] | tuple[None, str]:
    try:
        return patched(original, wasmtime.wat2wasm)
    except wasmtime.WasmtimeError as exc:  # its text of the product not taken
        return None, f"the rewritten product did not assemble: {str(exc).splitlines()[0]}"


def field_product(path: str) -> str:
    """How the generator at ``path`` will multiply field elements once compiled (``WasmWitness``'s
    ``field_product``), decided as it decides, without compiling it: what a registered circuit shows."""
    import wasmtime

    with open(path, "rb") as f:
        rewritten, why = _rewritten(wasmtime, f.read())
    return REWRITTEN if rewritten is not None else f"the generator's own (32-bit limbs): {why}"


def _field_vector(raw: bytes, wires: int, n32: int) -> FieldVector:
    """The generator's wires (``n32`` 32-bit words each, least significant first) as a FieldVector (four
    64-bit limbs a wire, little-endian: the same bytes when ``n32`` is 8), with no Python int made."""
    if n32 > 8:
        raise ValueError(f"the generator's field takes {n32} 32-bit words: more than 256 bits")
    words = np.frombuffer(raw, dtype="<u4").reshape(wires, n32)
    if n32 < 8:
        words = np.pad(words, ((0, 0), (0, 8 - n32)))
    return np.ascontiguousarray(words).view("<u8").astype(np.uint64)


def _flat(value: Any, name: str) -> list[Any]:
    """An input's values in order, nested lists flattened."""
    if isinstance(value, list | tuple):
        return [item for part in value for item in _flat(part, name)]
    return [value]


def _number(item: Any, name: str, prime: int) -> int:
    """One input value as a field element: an integer, or a decimal or 0x-hex string (negative: mod p)."""
    if isinstance(item, bool) or not isinstance(item, int | str):
        raise ValueError(f"input {name!r}: {item!r} is not a number (an integer, or a decimal or 0x string)")
    if isinstance(item, str):
        text = item.strip()
        negative = text.startswith("-")
        digits = text[1:] if negative else text
        try:
            number = int(digits, 16) if digits.lower().startswith("0x") else int(digits, 10)
        except ValueError:
            raise ValueError(f"input {name!r}: {item!r} is not a number") from None
        return (-number if negative else number) % prime
    return int(item) % prime


_CACHE: OrderedDict[str, tuple[Fingerprint | None, WasmWitness]] = OrderedDict()


def compute_witness(path: str, values: dict[str, Any]) -> tuple[int, FieldVector]:
    """The field's prime and every wire's value of the generator at ``path`` for ``values`` (the generator
    compiled once per process and file)."""
    now = fingerprint(path)
    found = _CACHE.pop(path, None)
    if found is not None and found[0] == now:
        generator = found[1]
    else:
        generator = WasmWitness(path)
        log.info("witness generator %s compiled: field product %s", path, generator.field_product)
    _CACHE[path] = (now, generator)
    while len(_CACHE) > _KEPT:
        _CACHE.popitem(last=False)
    return generator.prime, generator.witness(values)
