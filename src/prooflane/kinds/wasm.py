"""The circom ``.wasm`` reader: what a circom witness generator says of its circuit, read from the module's
sections, never run."""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

__all__ = ["WitnessGenerator", "inspect_wasm"]


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
    circom 1 generator, say: snarkjs still runs those); ValueError for a file that is no module at all, or
    whose sections do not add up.

    The file is mapped, not read, and only its section headers, its export, import and data sections and
    five function bodies are walked: the time is linear in the sections' count, whatever the file holds (each
    number is at most 5 bytes, as WebAssembly allows for 32 bits)."""
    from ..files import open_regular

    fd, size = open_regular(path, MAX_WASM_BYTES, "wasm")
    try:
        if size < 8:
            raise ValueError("not a WebAssembly module (no \\0asm magic and version 1)")
        with mmap.mmap(fd, size, prot=mmap.PROT_READ) as mapped:
            return _inspect(mapped)
    finally:
        os.close(fd)


MAX_WASM_BYTES = 1 << 31
"""The largest witness generator accepted (2 GiB; circom's largest circuits' are tens of MB)."""


def _inspect(data: mmap.mmap) -> WitnessGenerator | None:
    if data[:8] != b"\0asm\x01\0\0\0":
        raise ValueError("not a WebAssembly module (no \\0asm magic and version 1)")
    module = _WasmModule(data)
    try:
        constant = {name: module.returned_constants(name) for name in _GENERATOR_EXPORTS}
        (version,), (wires,), (inputs,), (n32,) = (
            constant[n] for n in ("getVersion", "getWitnessSize", "getInputSize", "getFieldNumLen32")
        )
        source = constant["getRawPrime"][0]  # getRawPrime: i32.const <prime's address>, i32.const <to>, call
        prime = int.from_bytes(module.memory(source, 4 * n32), "little")
    except (IndexError, UnicodeDecodeError, ValueError):
        return None
    return WitnessGenerator(version, wires, inputs, prime)


_GENERATOR_EXPORTS = ("getVersion", "getWitnessSize", "getInputSize", "getFieldNumLen32", "getRawPrime")


class _WasmModule:
    """The few sections of a WebAssembly module that say what circom's generated constants are."""

    def __init__(self, data: mmap.mmap | bytes) -> None:
        self._data = data
        self._sections: dict[int, tuple[int, int]] = {}
        pos = 8
        try:
            while pos < len(data):
                kind = data[pos]
                size, pos = _leb(data, pos + 1)
                if pos + size > len(data):
                    end = f"section {kind} at byte {pos} runs {size} bytes, past the file's end"
                    raise ValueError(f"not a WebAssembly module: {end}")
                if kind != 0:  # custom sections (0) may repeat; circom's names are not needed
                    self._sections[kind] = (pos, pos + size)
                pos += size
        except IndexError:
            raise ValueError("not a WebAssembly module: it ends inside a section's header") from None

    def returned_constants(self, export: str) -> list[int]:
        """The ``i32.const`` operands of exported function ``export``, whose body must hold nothing else but
        a call and its end (what circom generates for its constants)."""
        body = self._body(self._export(export))
        locals_count, pos = _leb(body, 0)
        if locals_count:
            raise ValueError(f"{export} keeps locals: not a constant")
        values = []
        while body[pos] == 0x41:  # i32.const
            value, pos = _leb(body, pos + 1, signed=True)
            values.append(value)
        if not values or body[pos] not in (0x0B, 0x10):  # end, or call
            raise ValueError(f"{export} does not return a constant")
        return values

    def memory(self, address: int, size: int) -> bytes:
        """``size`` bytes the data section puts at ``address`` of the linear memory."""
        pos, _ = self._section(11)
        count, pos = _leb(self._data, pos)
        for _ in range(count):
            flags, pos = _leb(self._data, pos)
            if flags == 1:  # passive: placed by the code, not at start
                length, pos = _leb(self._data, pos)
                pos += length
                continue
            if flags == 2:
                _, pos = _leb(self._data, pos)  # its memory's index
            if self._data[pos] != 0x41:
                raise ValueError("a data segment's offset is not a constant")
            offset, pos = _leb(self._data, pos + 1, signed=True)
            pos += 1  # the offset expression's end
            length, pos = _leb(self._data, pos)
            if offset <= address and address + size <= offset + length:
                start = pos + address - offset
                return self._data[start : start + size]
            pos += length
        raise ValueError(f"no data at address {address}")

    def _section(self, kind: int) -> tuple[int, int]:
        if kind not in self._sections:
            raise ValueError(f"no section {kind}")
        return self._sections[kind]

    def _export(self, name: str) -> int:
        """The function index of export ``name``."""
        pos, _ = self._section(7)
        count, pos = _leb(self._data, pos)
        for _ in range(count):
            length, pos = _leb(self._data, pos)
            found = self._data[pos : pos + length].decode()
            kind, (index, pos) = self._data[pos + length], _leb(self._data, pos + length + 1)
            if found == name and kind == 0:
                return index
        raise ValueError(f"it exports no function {name}")

    def _body(self, index: int) -> bytes:
        """The code of function ``index`` (imported functions come first in the index space)."""
        index -= self._imported_functions()
        pos, _ = self._section(10)
        count, pos = _leb(self._data, pos)
        if not 0 <= index < count:
            raise ValueError(f"function {index} has no code")
        for _ in range(index):
            size, pos = _leb(self._data, pos)
            pos += size
        size, pos = _leb(self._data, pos)
        return self._data[pos : pos + size]

    def _imported_functions(self) -> int:
        if 2 not in self._sections:
            return 0
        pos, _ = self._sections[2]
        count, pos = _leb(self._data, pos)
        functions = 0
        for _ in range(count):
            for _name in range(2):  # module, then field
                length, pos = _leb(self._data, pos)
                pos += length
            kind = self._data[pos]
            pos += 1
            if kind == 0:  # a function: its type index
                _, pos = _leb(self._data, pos)
                functions += 1
            elif kind == 1:  # a table: its element type, then limits
                pos = _skip_limits(self._data, pos + 1)
            elif kind == 2:  # a memory: limits
                pos = _skip_limits(self._data, pos)
            else:  # a global: its type and mutability
                pos += 2
        return functions


LEB_BYTES = 5
"""The longest LEB128 number WebAssembly allows for the 32-bit values read here (ceil(32 / 7) bytes)."""


def _leb(data: mmap.mmap | bytes, pos: int, *, signed: bool = False) -> tuple[int, int]:
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
        raise ValueError(f"not a WebAssembly module: the number at byte {start} runs past {LEB_BYTES} bytes")
    if signed and byte & 0x40:
        value -= 1 << shift
    return value, pos


def _skip_limits(data: mmap.mmap | bytes, pos: int) -> int:
    flags, pos = _leb(data, pos)
    _, pos = _leb(data, pos)
    if flags & 1:
        _, pos = _leb(data, pos)
    return pos
