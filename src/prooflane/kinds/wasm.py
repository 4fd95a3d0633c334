"""The one WebAssembly reader of prooflane: a module's sections, and the few things the kinds read in them,
never run. What a circom witness generator says of its circuit (:func:`inspect_wasm`, at registration) and
where its field product's functions lie (``wasm_field``, before a generator is compiled) are both read here.

The work is linear in the file, with small constants. Each section's header is read once; each thing is
found in one pass over its section, which stops where the thing is; a function's body is reached by stepping
over the bodies before it, one size each, never reading them. Every count is checked before its entries are
walked, and a module whose counts pass the bounds below is refused: wasmtime's own limits (wasmparser's), so
no module refused for them is one wasmtime would run; the sections' bound is ours. Every error is a
``ValueError`` of one line naming what is wrong: the count and its bound, the section, the byte.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import NamedTuple

__all__ = [
    "MAX_DATA_SEGMENTS",
    "MAX_EXPORTS",
    "MAX_FUNCTIONS",
    "MAX_IMPORTS",
    "MAX_NAME_BYTES",
    "MAX_SECTIONS",
    "MAX_TYPES",
    "MAX_TYPE_ARITY",
    "Body",
    "WasmModule",
    "WitnessGenerator",
    "inspect_wasm",
]

MAX_SECTIONS = 1_000
"""The most sections read (circom writes a dozen: one of each kind and its names)."""
MAX_TYPES = 1_000_000
"""The most function types a module may declare (wasmtime's limit)."""
MAX_FUNCTIONS = 1_000_000
"""The most functions a module may define, or name (wasmtime's limit)."""
MAX_IMPORTS = 100_000
"""The most imports (wasmtime's limit)."""
MAX_EXPORTS = 100_000
"""The most exports (wasmtime's limit)."""
MAX_DATA_SEGMENTS = 100_000
"""The most data segments (wasmtime's limit)."""
MAX_NAME_BYTES = 100_000
"""The longest name, of an import, an export or a function (wasmtime's limit)."""
MAX_TYPE_ARITY = 1_000
"""The most parameters, or results, of a function type (wasmtime's limit)."""

LEB_BYTES = 5
"""The longest LEB128 number WebAssembly allows for the 32-bit values read here (ceil(32 / 7) bytes)."""

MAX_WASM_BYTES = 1 << 31
"""The largest witness generator accepted (2 GiB; circom's largest circuits' are tens of MB)."""

Data = bytes | bytearray | mmap.mmap
"""A module's bytes: read, or mapped."""

_MAGIC = b"\0asm\x01\0\0\0"
_LONG_NUMBER = "not a WebAssembly module: the number at byte"
_NOT_A_MODULE = "not a WebAssembly module (no \\0asm magic and version 1)"


@dataclass(frozen=True)
class WitnessGenerator:
    """What a circom witness generator (.wasm) says of its circuit: read from the module, never run."""

    circom_version: int
    wires: int
    inputs: int
    prime: int


def inspect_wasm(path: str) -> WitnessGenerator | None:
    """Read what circom's witness generator at ``path`` exports: the wires it computes
    (``getWitnessSize``), its input signals (``getInputSize``), its version and its field's prime (the
    constants ``getRawPrime`` copies). None for a WebAssembly module whose exports say none of that (a
    circom 1 generator, say: snarkjs still runs those); ValueError for a file that is no module at all, whose
    sections do not add up, or whose counts pass the reader's bounds (see the module's text).

    The file is mapped, not read: its section headers, its export section, the code section up to the last
    of five bodies, those bodies' first instructions and the data section's segment headers are walked, each
    once."""
    from ..files import open_regular

    fd, size = open_regular(path, MAX_WASM_BYTES, "wasm")
    try:
        if size < 8:
            raise ValueError(_NOT_A_MODULE)
        with mmap.mmap(fd, size, prot=mmap.PROT_READ) as mapped:
            return _inspect(mapped)
    finally:
        os.close(fd)


_GENERATOR_EXPORTS = ("getVersion", "getWitnessSize", "getInputSize", "getFieldNumLen32", "getRawPrime")
_MOST_CONSTANTS = 2  # getRawPrime's: the prime's address, and where to copy it
_I32_CONST, _CALL, _END = 0x41, 0x10, 0x0B


def _inspect(data: Data) -> WitnessGenerator | None:
    module = WasmModule(data)
    exports = module.exported_functions(_GENERATOR_EXPORTS)
    if len(exports) < len(_GENERATOR_EXPORTS):
        return None
    try:
        bodies = module.bodies(exports.values())
        constant = {name: _returned_constants(data, name, bodies[index]) for name, index in exports.items()}
        single = [constant[n] for n in ("getVersion", "getWitnessSize", "getInputSize", "getFieldNumLen32")]
        if any(len(values) != 1 for values in single) or single[3][0] <= 0:
            return None
        (version,), (wires,), (inputs,), (n32,) = single
        source = constant["getRawPrime"][0]  # getRawPrime: i32.const <prime's address>, i32.const <to>, call
        prime = int.from_bytes(module.memory(source, 4 * n32), "little")
    except _Absent:  # a module, but not a circom 2 generator (a malformed one: ValueError, let through)
        return None
    return WitnessGenerator(version, wires, inputs, prime)


def _returned_constants(data: Data, export: str, body: Body) -> list[int]:
    """The ``i32.const`` operands of exported function ``export``, whose body must hold nothing else but a
    call and its end (what circom generates for its constants): at most two are read."""
    try:
        locals_count, pos = _leb(data, body.start)
        if locals_count:
            raise _Absent(f"{export} keeps locals: not a constant")
        values: list[int] = []
        op = data[pos] if pos < body.end else None
        while op == _I32_CONST and len(values) < _MOST_CONSTANTS:
            value, pos = _leb(data, pos + 1, signed=True)
            values.append(value)
            op = data[pos] if pos < body.end else None
        if not values or op not in (_END, _CALL):
            raise _Absent(f"{export} does not return a constant")
    except _Absent:
        raise
    except (IndexError, ValueError):  # a body cut short, or a number too long: no constant either
        raise _Absent(f"{export} does not return a constant") from None
    return values


class _Absent(ValueError):
    """Raised when what was looked for is not in the module, which may still be a valid one (a circom 1
    generator, say)."""


class Body(NamedTuple):
    """Where a function's code is: its entry in the code section starts at ``entry`` (the body's size), the
    body itself (its locals, then its instructions) at ``start``; both end at ``end``."""

    entry: int
    start: int
    end: int


_TYPE, _IMPORT, _FUNCTION, _EXPORT, _CODE, _DATA = 1, 2, 3, 7, 10, 11
_LAST_SECTION_ID = 13  # the tags' (exception handling); 12 is the data count
_SECTION_NAMES = {0: "name", 1: "type", 2: "import", 3: "function", 7: "export", 10: "code", 11: "data"}


class WasmModule:
    """A WebAssembly module's sections, found once, and what the kinds read in them, each in one pass that
    stops where it is found. Function indices are the module's own (imported functions first)."""

    def __init__(self, data: Data) -> None:
        if len(data) < 8 or data[:8] != _MAGIC:
            raise ValueError(_NOT_A_MODULE)
        self.data = data
        self.sections: dict[int, tuple[int, int, int]] = {}
        """Each section but the custom ones: its id -> (where its header is, its content's start, its end)."""
        self._custom: list[tuple[int, int]] = []  # the custom sections' (start, end), in order
        self._imported: int | None = None
        pos = 8
        try:
            while pos < len(data):
                if len(self.sections) + len(self._custom) == MAX_SECTIONS:
                    raise ValueError(f"it has more than {MAX_SECTIONS:,} sections (the most read)")
                pos = self._header(pos)
        except IndexError:
            raise ValueError("not a WebAssembly module: it ends inside a section's header") from None

    def _header(self, pos: int) -> int:
        """Note the section whose header is at ``pos``; where the next one starts."""
        kind = self.data[pos]
        size, start = _leb(self.data, pos + 1)
        if start + size > len(self.data):
            end = f"section {kind} at byte {start} runs {size} bytes, past the file's end"
            raise ValueError(f"not a WebAssembly module: {end}")
        if kind == 0:  # custom sections may repeat
            self._custom.append((start, start + size))
        elif kind > _LAST_SECTION_ID:
            raise ValueError(
                f"not a WebAssembly module: the section at byte {pos} has id {kind}, none of its"
            )
        elif kind in self.sections:
            first = self.sections[kind][0]
            raise ValueError(f"not a WebAssembly module: two sections {kind} (at bytes {first} and {pos})")
        else:
            self.sections[kind] = (pos, start, start + size)
        return start + size

    def imported_functions(self) -> int:
        """How many of the module's functions are imported (they come first in the index space)."""
        if self._imported is None:
            self._imported = self._count_imported_functions()
        return self._imported

    def _count_imported_functions(self) -> int:
        count, pos, end = self._vector(_IMPORT, "imports", MAX_IMPORTS)
        functions = 0
        with self._reading(_IMPORT) as data:
            for n in range(count):
                for _name in range(2):  # module, then field
                    length, pos = _name_length(data, pos)
                    pos += length
                kind, pos = data[pos], pos + 1
                if kind == 0:  # a function: its type's index
                    _, pos = _leb(data, pos)
                    functions += 1
                elif kind in (1, 2):  # a table (its element type, then limits) or a memory (limits)
                    pos = _skip_limits(data, pos + (kind == 1))
                elif kind == 3:  # a global: its value type and mutability
                    pos += 2
                elif kind == 4:  # a tag: its attribute, then its type's index
                    _, pos = _leb(data, pos + 1)
                else:
                    raise ValueError(f"not a WebAssembly module: import {n} is of kind {kind}, none of 0-4")
            _check_end(_IMPORT, pos, end)
        return functions

    def exported_functions(self, names: Collection[str]) -> dict[str, int]:
        """The function index of each of ``names`` the module exports as a function (the others left out)."""
        wanted, found = _Wanted(names), dict[str, int]()
        count, pos, end = self._vector(_EXPORT, "exports", MAX_EXPORTS)
        with self._reading(_EXPORT) as data:
            for _ in range(count):
                length, pos = _name_length(data, pos)
                name = wanted.among(data, pos, length)
                kind, (index, pos) = data[pos + length], _leb(data, pos + length + 1)
                if name is not None and kind == 0 and name not in found:
                    found[name] = index
                    if len(found) == len(wanted.names):
                        return found
            _check_end(_EXPORT, pos, end)
        return found

    def function_names(self, names: Collection[str]) -> dict[str, int]:
        """The function index of each of ``names`` in the custom "name" section (the others left out)."""
        wanted, found = _Wanted(names), dict[str, int]()
        count, pos, end = self._name_map()
        if count > MAX_FUNCTIONS:
            raise ValueError(f"it names {count:,} functions: more than the {MAX_FUNCTIONS:,} read")
        with self._reading(0) as data:
            for _ in range(count):  # each its function's index, then its name: one-byte numbers read inline
                at = pos
                while data[pos] & 0x80:  # the index, stepped over (read again where the name is wanted)
                    pos += 1
                    if pos - at == LEB_BYTES:
                        raise ValueError(f"{_LONG_NUMBER} {at} runs past {LEB_BYTES} bytes")
                length = data[pos + 1]
                length, pos = (length, pos + 2) if length < 0x80 else _name_length(data, pos + 1)
                if length in wanted.lengths:
                    name = wanted.among(data, pos, length)
                    if name is not None and name not in found:
                        found[name] = _leb(data, at)[0]
                        if len(found) == len(wanted.names):
                            return found
                pos += length
            _check_end(0, pos, end)
        return found

    def _name_map(self) -> tuple[int, int, int]:
        """The function names' count, where the first is and where they end, in the first "name" section
        (no names: 0)."""
        with self._reading(0) as data:
            for start, end in self._custom:
                length, pos = _name_length(data, start)
                if data[pos : pos + length] != b"name":
                    continue
                pos += length
                while pos < end:  # its subsections: an id, a size, the content
                    sub, (size, pos) = data[pos], _leb(data, pos + 1)
                    if sub == 1:
                        count, first = _leb(data, pos)
                        return count, first, min(pos + size, end)
                    pos += size
                break
        return 0, 0, 0

    def signatures(self, indices: Collection[int]) -> dict[int, tuple[bytes, bytes]]:
        """Each of the functions ``indices`` (defined here, not imported): its (parameter, result) types, as
        WebAssembly's value type bytes."""
        defined = self._defined(indices)
        type_of = self._type_indices(set(defined.values()))
        wanted = set(type_of.values())
        count, pos, end = self._vector(_TYPE, "types", MAX_TYPES)
        last = max(wanted, default=-1)
        if last >= count:
            raise ValueError(f"not a WebAssembly module: a function of type {last}, of {count:,} types")
        found, n = {}, 0
        with self._reading(_TYPE) as data:
            for target in sorted(wanted):
                for skipped in range(n, target):  # the types before it (one-byte counts read inline)
                    if data[pos] != 0x60:
                        raise ValueError(
                            f"type {skipped} is not a function's (its form is 0x{data[pos]:02x})"
                        )
                    arity = data[pos + 1]
                    pos = pos + 2 + arity if arity < 0x80 else _after_value_types(data, pos + 1)
                    arity = data[pos]
                    pos = pos + 1 + arity if arity < 0x80 else _after_value_types(data, pos)
                if data[pos] != 0x60:
                    raise ValueError(f"type {target} is not a function's (its form is 0x{data[pos]:02x})")
                params, pos = _value_types(data, pos + 1)
                results, pos = _value_types(data, pos)
                found[target], n = (params, results), target + 1
            _check_end(_TYPE, pos, end)
        return {index: found[type_of[own]] for index, own in defined.items()}

    def _type_indices(self, wanted: set[int]) -> dict[int, int]:
        """Each of the functions defined here ``wanted`` (by their index among those) -> its type's index."""
        count, pos, end = self._functions(_FUNCTION, "functions")
        last = max(wanted, default=-1)
        if last >= count:
            missing = f"function {last + self.imported_functions()} has no type (of {count:,} defined)"
            raise ValueError(f"not a WebAssembly module: {missing}")
        with self._reading(_FUNCTION) as data:
            if end - pos == count:  # every index is one byte (under 128 types): the n-th is at pos + n
                return {n: data[pos + n] for n in wanted}
            found = {}
            for n in range(last + 1):
                index, pos = _leb(data, pos)
                if n in wanted:
                    found[n] = index
            _check_end(_FUNCTION, pos, end)
        return found

    def bodies(self, indices: Collection[int]) -> dict[int, Body]:
        """Where each of the functions ``indices`` (defined here, not imported) has its code: one walk over
        the code section, up to the last of them, reading each body's size alone."""
        defined = self._defined(indices)
        count, pos, end = self._functions(_CODE, "function bodies")
        if defined and max(defined.values()) >= count:
            missing = f"function {max(defined)} has no code (of {count:,} bodies)"
            raise ValueError(f"not a WebAssembly module: {missing}")
        found: dict[int, Body] = {}
        n = 0
        with self._reading(_CODE) as data:
            for target in sorted(set(defined.values())):
                for _ in range(target - n):  # the bodies before it: their sizes alone
                    size = data[pos]
                    if size < 0x80:
                        pos += 1 + size
                    else:
                        size, pos = _leb(data, pos)
                        pos += size
                size, start = _leb(data, pos)
                found[target] = Body(pos, start, start + size)
                pos, n = start + size, target + 1
            _check_end(_CODE, pos, end)
        return {index: found[own] for index, own in defined.items()}

    def memory(self, address: int, size: int) -> bytes:
        """``size`` bytes the data section puts at ``address`` of the linear memory (on instantiation)."""
        count, pos, end = self._vector(_DATA, "data segments", MAX_DATA_SEGMENTS)
        with self._reading(_DATA) as data:
            for _ in range(count):
                flags, pos = _leb(data, pos)
                if flags == 1:  # passive: placed by the code, not at start
                    length, pos = _leb(data, pos)
                    pos += length
                    continue
                if flags == 2:
                    _, pos = _leb(data, pos)  # its memory's index
                elif flags != 0:
                    raise ValueError(
                        f"not a WebAssembly module: a data segment's flags are {flags}, none of 0-2"
                    )
                if data[pos] != _I32_CONST:
                    raise _Absent("a data segment's offset is not a constant")
                offset, pos = _leb(data, pos + 1, signed=True)
                length, pos = _leb(data, pos + 1)  # after the offset expression's end
                if offset <= address and address + size <= offset + length and pos + length <= end:
                    start = pos + address - offset
                    return bytes(data[start : start + size])
                pos += length
            _check_end(_DATA, pos, end)
        raise _Absent(f"no data at address {address}")

    def _defined(self, indices: Collection[int]) -> dict[int, int]:
        """Each of the function ``indices`` -> its index among the functions defined here."""
        imported = self.imported_functions()
        for index in indices:
            if index < imported:
                raise _Absent(f"function {index} is imported: it has no code here")
        return {index: index - imported for index in indices}

    def _functions(self, kind: int, what: str) -> tuple[int, int, int]:
        """:meth:`_vector` of the function or code section: the functions defined and imported together are
        at most :data:`MAX_FUNCTIONS` (as wasmtime counts them)."""
        imported = self.imported_functions()
        if not imported:
            return self._vector(kind, what, MAX_FUNCTIONS)
        return self._vector(kind, f"{what} besides {imported:,} imported", MAX_FUNCTIONS - imported)

    def _vector(self, kind: int, what: str, bound: int) -> tuple[int, int, int]:
        """Section ``kind``'s entry count (at most ``bound``), where its first entry is, and its end (no such
        section: no entries)."""
        if kind not in self.sections:
            return 0, 0, 0
        _, start, end = self.sections[kind]
        with self._reading(kind) as data:
            count, pos = _leb(data, start)
        if count > bound:
            raise ValueError(f"it declares {count:,} {what}: more than the {bound:,} read (wasmtime's limit)")
        if count > end - pos:
            room = f"{count:,} {what} in the {end - pos:,} bytes of its {_SECTION_NAMES[kind]} section"
            raise ValueError(f"not a WebAssembly module: {room}")
        return count, pos, end

    @contextlib.contextmanager
    def _reading(self, kind: int) -> Iterator[Data]:
        """The module's bytes, for a walk of section ``kind``: past the file's end is a ValueError."""
        try:
            yield self.data
        except IndexError:
            where = f"its {_SECTION_NAMES[kind]} section"
            raise ValueError(f"not a WebAssembly module: {where} ends inside an entry") from None


class _Wanted:
    """Names looked for, as the bytes a module spells them in: found without decoding any other name."""

    def __init__(self, names: Collection[str]) -> None:
        self.names = {name.encode(): name for name in names}
        self.lengths = {len(name) for name in self.names}

    def among(self, data: Data, pos: int, length: int) -> str | None:
        """The name looked for that the ``length`` bytes at ``pos`` spell, if any."""
        return self.names.get(bytes(data[pos : pos + length])) if length in self.lengths else None


def _check_end(kind: int, pos: int, end: int) -> None:
    if pos > end:
        where = f"its {_SECTION_NAMES[kind]} section's entries run past its end"
        raise ValueError(f"not a WebAssembly module: {where} (byte {end})")


def _name_length(data: Data, pos: int) -> tuple[int, int]:
    """A name's length in bytes (at most :data:`MAX_NAME_BYTES`), and where its bytes start."""
    length, start = _leb(data, pos)
    if length > MAX_NAME_BYTES:
        raise ValueError(f"a name of {length:,} bytes at byte {pos}: more than the {MAX_NAME_BYTES:,} read")
    return length, start


def _value_types(data: Data, pos: int) -> tuple[bytes, int]:
    """A function type's parameters or results (at most :data:`MAX_TYPE_ARITY`), and where they end."""
    count, pos = _leb(data, pos)
    if count > MAX_TYPE_ARITY:
        raise ValueError(f"a function type of {count:,} values: more than the {MAX_TYPE_ARITY:,} read")
    return bytes(data[pos : pos + count]), pos + count


def _after_value_types(data: Data, pos: int) -> int:
    return _value_types(data, pos)[1]


def _leb(data: Data, pos: int, *, signed: bool = False) -> tuple[int, int]:
    """The LEB128 number at ``pos`` and the position after it (ValueError past :data:`LEB_BYTES` bytes)."""
    value = shift = 0
    for _ in range(LEB_BYTES):
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    else:
        start = pos - LEB_BYTES
        raise ValueError(f"{_LONG_NUMBER} {start} runs past {LEB_BYTES} bytes")
    if signed and byte & 0x40:
        value -= 1 << shift
    return value, pos


def _skip_limits(data: Data, pos: int) -> int:
    flags, pos = _leb(data, pos)
    _, pos = _leb(data, pos)
    if flags & 1:
        _, pos = _leb(data, pos)
    return pos
