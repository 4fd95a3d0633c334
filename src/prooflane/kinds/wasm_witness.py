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

A generator is untrusted code, and one input may make a legitimate one loop for ever (a ``var`` loop bound
by a signal). Its time is bounded by the process that runs it: the synthesis pool ends a synthesis past
``synthesis_timeout_secs`` by ending its process (which also ends a loop in a host function), at no cost to
the generator's code (wasmtime's epoch checks cost 13% of SHA-256's witness time, measured). Within the
process, every witness runs within :class:`GeneratorLimits`:

- memory: the store's limiter caps each WebAssembly memory at the partition's allowance, reserved from the
  memory budget (``witness_memory_bytes``), so ``memory.grow`` past it fails and the failure names the
  limit; the wires the generator says are checked against the key's before any memory is taken for them;
- address space: where the process's address space is limited (``ulimit -v``), memories are mapped at
  their size and moved when they grow, instead of a 4 GiB reservation and a guard each, so that several
  generators fit (their loads and stores then check bounds in code: 18% of SHA-256's witness time);
- the host's own loop (a message read a character at a time) reads at most ``MESSAGE_CHARS``.

A generator that failed is dropped from the cache (its memory goes back), and every wasmtime error and
trap becomes a one-line ``ValueError`` naming what failed (the trap, the limit, the input), which the
pool can send back (wasmtime's own errors hold pointers and cannot be pickled).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import importlib.metadata
import logging
import os
import resource
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..files import Fingerprint, fingerprint
from ..groth16.field import FieldVector
from .wasm_field import PRIMES, patched

log = logging.getLogger("prooflane.synthesis")

__all__ = [
    "CIRCOM2_EXPORTS",
    "GeneratorLimits",
    "NotCircom2",
    "WasmWitness",
    "compute_witness",
    "field_product",
]

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
MAX_FIELD_WORDS = 8  # 32-bit words of a field element: 256 bits (BN254's and BLS12-381's r take 8)
MESSAGE_CHARS = 1024  # the most characters read of one message the generator prints
MESSAGES = 16  # the most messages kept of one witness


@dataclass(frozen=True)
class GeneratorLimits:
    """What one witness computation may use: ``memory_bytes``, the most bytes each of its WebAssembly
    memories may hold (the partition's ``witness_memory_bytes``, reserved from the budget); ``wires``, the
    wires the circuit's key has (None: not known), checked before memory is taken for them. Its time is
    the synthesis pool's to bound (see the module's docstring)."""

    memory_bytes: int = 512 << 20
    wires: int | None = None

    def memory_text(self) -> str:
        return f"{self.memory_bytes / (1 << 20):g} MiB (witness_memory_bytes)"


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
    """One circom 2 witness generator, compiled and instantiated (its start function run within
    ``limits``); :meth:`witness` runs it."""

    def __init__(self, path: str, *, rewrite: bool = True, limits: GeneratorLimits | None = None) -> None:
        import wasmtime

        limits = limits or GeneratorLimits()
        self._wasmtime = wasmtime
        module, self.field_product, curve = _compiled(wasmtime, path, rewrite)
        missing = sorted(CIRCOM2_EXPORTS - {e.name for e in module.exports})
        if missing:
            raise NotCircom2(f"witness generator {path}: not a circom 2 generator (no {', '.join(missing)})")
        self._store = wasmtime.Store(_engine())
        self._said = _Said()  # what the handlers note: not this object, which would make a cycle through
        # the store that the collector never frees (35 MB a generator)
        self._limit(limits)
        try:
            imports = [self._import(item.module, item.name or "", item.type) for item in module.imports]
            instance = wasmtime.Instance(self._store, module, imports)
            self._exports = instance.exports(self._store)
            self.n32: int = self._call("getFieldNumLen32")
            if not 1 <= self.n32 <= MAX_FIELD_WORDS:  # read a word at a time below, by Python
                raise ValueError(
                    f"the generator did not start: its field takes {self.n32} 32-bit words: "
                    f"expected 1 to {MAX_FIELD_WORDS}"
                )
            self._call("getRawPrime")
            self.prime = self._read()
        except (wasmtime.WasmtimeError, wasmtime.Trap, _Failed) as exc:
            raise ValueError(f"the generator did not start: {self._failed(exc, limits)}") from None
        if curve is not None and self.prime != PRIMES[curve]:  # another field than the one found in it
            self.__init__(path, rewrite=False, limits=limits)  # type: ignore[misc]
            return
        loops = wasmtime.Module(_engine(), _LOOPS)
        own = [self._exports[i.name or ""] for i in loops.imports]
        self._loops: Any = wasmtime.Instance(self._store, loops, own).exports(self._store)
        self._buffer: Any = self._loops["buffer"]

    field_product: str
    """How the generator multiplies field elements: "64-bit limbs (wide arithmetic)", its product
    rewritten (``wasm_field``), or "the generator's own (32-bit limbs): why"."""

    def witness(self, values: dict[str, Any], limits: GeneratorLimits | None = None) -> FieldVector:
        """Every wire's value for circuit inputs ``values`` (name -> a number or a nested list of them), as
        the prover takes them, within ``limits``; ``ValueError`` with one line naming the input, the limit,
        the trap or the generator's own message, when it fails."""
        limits = limits or GeneratorLimits()
        self._said.failure, self._said.messages = None, []
        self._limit(limits)
        try:
            self._call("init", 1)  # with its checks, as snarkjs runs it
            given = sum(self._set_input(name, value, limits) for name, value in values.items())
            expected = self._call("getInputSize")
            if given < expected:
                raise ValueError(
                    f"not all inputs were given: {given} of the circuit's {expected} input values"
                )
            wires = self._call("getWitnessSize")
            if limits.wires is not None and wires != limits.wires:
                raise ValueError(
                    f"the generator computes {wires:,} wires, the circuit's key has {limits.wires:,}"
                )
            width = 4 * self.n32
            self._room(wires * width, limits)
            self._loops["get_witness"](self._store, wires, self.n32)
            raw = self._buffer.read(self._store, 0, wires * width)
            return _field_vector(raw, wires, self.n32)
        except (self._wasmtime.WasmtimeError, self._wasmtime.Trap, _Failed) as exc:
            raise ValueError(self._failed(exc, limits)) from None

    def _set_input(self, name: str, value: Any, limits: GeneratorLimits) -> int:
        """Set input signal ``name``'s values; how many were set."""
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
        self._room(len(numbers), limits)
        self._buffer.write(self._store, numbers, 0)
        self._loops["set_input"](self._store, high, low, len(flat), self.n32)
        return len(flat)

    def _limit(self, limits: GeneratorLimits) -> None:
        """Apply ``limits`` to the store: the size of each of its memories."""
        self._store.set_limits(memory_size=limits.memory_bytes)

    def _failed(self, exc: BaseException, limits: GeneratorLimits) -> str:
        """One line saying why the generator failed: its own words where it said any, else the trap; where
        it ran out of memory or out of its memory's bounds, how much it holds of its limit."""
        said = " ".join(m.strip() for m in self._said.messages if m.strip())
        wasmtime = self._wasmtime
        code = exc.trap_code if isinstance(exc, wasmtime.Trap) else None
        if self._said.failure is not None:
            what = _FAILURES.get(self._said.failure, f"error code {self._said.failure}")
            if self._said.failure == 5:
                what += self._memory_held(limits)
            return f"{what}. {said}".strip() if said else what
        text = _first_line(exc)
        if code is None and "memory" in text and ("limit" in text or "minimum" in text):
            return f"the generator needs more memory than its limit of {limits.memory_text()}: {text}"
        trap = f"the generator trapped: {_TRAPS.get(code, text) if code is not None else text}"
        if code is wasmtime.TrapCode.MEMORY_OUT_OF_BOUNDS:
            trap += self._memory_held(limits)
        return f"{trap}. {said}" if said else trap

    def _memory_held(self, limits: GeneratorLimits) -> str:
        """How much memory the generator holds, of its limit (a ``memory.grow`` past the limit fails, and
        the generator then runs out of memory or out of its memory's bounds)."""
        try:
            memory = self._exports["memory"]
            held = memory.data_len(self._store) if isinstance(memory, self._wasmtime.Memory) else None
        except (AttributeError, KeyError):
            held = None
        if held is None:
            return f" (its memory limit: {limits.memory_text()})"
        return f" (its memory holds {held / (1 << 20):.1f} MiB of its limit of {limits.memory_text()})"

    def _call(self, name: str, *args: int) -> int:
        result = self._exports[name](self._store, *args)  # type: ignore[operator]
        return int(result) if result is not None else 0

    def _room(self, nbytes: int, limits: GeneratorLimits) -> None:
        """The loops' memory holds at least ``nbytes`` (inputs or wires), within ``limits``."""
        if nbytes > limits.memory_bytes:
            raise ValueError(
                f"{nbytes:,} bytes of values exceed the generator's limit of {limits.memory_text()}"
            )
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


_TRAPS: dict[Any, str] = {}
"""Each wasmtime trap code in words (filled in by ``_engine``, which imports wasmtime)."""


def _trap_words(wasmtime: Any) -> dict[Any, str]:
    code = wasmtime.TrapCode
    return {
        code.STACK_OVERFLOW: "its call stack overflowed (wasm stack overflow)",
        code.MEMORY_OUT_OF_BOUNDS: "it accessed memory out of bounds",
        code.HEAP_MISALIGNED: "a misaligned atomic memory access",
        code.TABLE_OUT_OF_BOUNDS: "a table access out of bounds",
        code.INDIRECT_CALL_TO_NULL: "an indirect call to a null table entry",
        code.BAD_SIGNATURE: "an indirect call with the wrong signature",
        code.INTEGER_OVERFLOW: "an integer overflow",
        code.INTEGER_DIVISION_BY_ZERO: "an integer division by zero",
        code.BAD_CONVERSION_TO_INTEGER: "a float that is no integer converted to one",
        code.UNREACHABLE: "it executed an `unreachable` instruction",
        code.ALLOCATION_TOO_LARGE: "an allocation too large",
    }


def _first_line(exc: BaseException) -> str:
    """What a wasmtime error or trap says, in one line (its cause, not the backtrace before it)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if "Caused by:" in lines:
        lines = lines[lines.index("Caused by:") + 1 :]
    return (lines[0] if lines else type(exc).__name__).removeprefix("wasm trap: ")


class _Said:
    """What the generator's runtime imports were told: a failure's code and the messages it printed."""

    def __init__(self) -> None:
        self.failure: int | None = None
        self.messages: list[str] = []

    def on_failure(self, code: int) -> None:
        self.failure = code
        raise _Failed(code)  # traps the call in progress

    def on_message(self, caller: Any) -> None:
        """Read a message, a character at a time, until 0: at most ``MESSAGE_CHARS`` of it
        (``getMessageChar`` is the generator's own, and may never say 0)."""
        read = caller["getMessageChar"]
        chars: list[str] = []
        while len(chars) < MESSAGE_CHARS and (c := read(caller)) != 0:
            chars.append(chr(c) if 0 < c < 0x110000 else "?")
        if len(self.messages) < MESSAGES:
            self.messages.append("".join(chars))


@functools.cache
def _engine() -> Any:
    """This process's one wasmtime engine (every generator compiled for it): wide arithmetic, and where the
    address space is limited, memories mapped at their size (``ENGINE_SETTINGS``)."""
    import wasmtime

    config = wasmtime.Config()
    config.wasm_wide_arithmetic = True
    if _address_space_limited():
        config.memory_reservation = 0
        config.memory_guard_size = 0
        config.memory_reservation_for_growth = 0
    _TRAPS.update(_trap_words(wasmtime))
    atexit.register(_let_go)
    return wasmtime.Engine(config)


def _let_go() -> None:
    """At the process's exit, before its modules are torn down: the generators and the engine freed while
    wasmtime's bindings still stand (its objects freed after them say so on standard error)."""
    _CACHE.clear()
    _engine.cache_clear()


def _address_space_limited() -> bool:
    """Whether this process's address space is limited (``ulimit -v``): then each memory is mapped at its
    size, not in a 4 GiB reservation with a guard."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return soft != resource.RLIM_INFINITY


def _engine_settings() -> str:
    """The engine's settings that its compiled code depends on (part of a compiled generator's name)."""
    return "wide|reservation 0" if _address_space_limited() else "wide"


def _compiled(wasmtime: Any, path: str, rewrite: bool) -> tuple[Any, str, str | None]:
    """The module of the generator at ``path``, its field product on 64-bit limbs where ``wasm_field`` can
    rewrite it (wasmtime's wide arithmetic), how it multiplies, and the curve whose field the rewritten
    product is of (None: not rewritten)."""
    try:
        with open(path, "rb") as f:
            original = f.read()
    except OSError as exc:
        raise ValueError(f"witness generator {path}: {exc.strerror}") from None
    engine = _engine()
    rewritten, why = (None, "its field is not the one found in it")
    if rewrite:
        rewritten, why = _rewritten(wasmtime, original)
    if rewritten is not None:
        try:
            return _module(wasmtime, engine, rewritten), REWRITTEN, why
        except wasmtime.WasmtimeError as exc:
            why = f"rewritten, it did not compile: {_first_line(exc)}"
    try:
        module = _module(wasmtime, engine, original)
    except wasmtime.WasmtimeError as exc:
        raise ValueError(
            f"witness generator {path}: not a WebAssembly module wasmtime can run: {_first_line(exc)}"
        ) from None
    return module, f"the generator's own (32-bit limbs): {why}", None


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
    digest = hashlib.sha256(
        code + f"|wasmtime {_wasmtime_version()}|{_engine_settings()}".encode()
    ).hexdigest()
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


def compute_witness(
    path: str, values: dict[str, Any], limits: GeneratorLimits | None = None
) -> tuple[int, FieldVector]:
    """The field's prime and every wire's value of the generator at ``path`` for ``values``, within
    ``limits`` (the generator compiled once per process and file, and kept while it succeeds: one that
    failed is dropped, and its memory with it)."""
    limits = limits or GeneratorLimits()
    now = fingerprint(path)
    found = _CACHE.pop(path, None)
    generator = found[1] if found is not None and found[0] == now else None
    failure = None
    try:
        if generator is None:
            generator = WasmWitness(path, limits=limits)
            log.info("witness generator %s compiled: field product %s", path, generator.field_product)
        wires = generator.witness(values, limits)
    except NotCircom2:
        raise
    except ValueError as exc:
        failure = str(exc)  # raised below, outside this block: its traceback would keep the generator alive
    if failure is not None or generator is None:
        found = generator = None
        raise ValueError(failure)
    _CACHE[path] = (now, generator)
    while len(_CACHE) > _KEPT:
        _CACHE.popitem(last=False)
    return generator.prime, wires
