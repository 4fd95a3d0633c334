"""WebAssembly modules built by hand for the reader's tests: what circom's witness generators export for their
constants, with as much as a test asks for before them (empty function bodies, imports, exports, data
segments), and the two field-product functions ``wasm_field`` rewrites."""

from __future__ import annotations

from prooflane.groth16 import BN128

MAGIC = b"\0asm\x01\0\0\0"


def uleb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def sleb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        if (value == 0 and not byte & 0x40) or (value == -1 and byte & 0x40):
            return bytes([*out, byte])
        out.append(byte | 0x80)


def section(kind: int, body: bytes) -> bytes:
    return bytes([kind]) + uleb(len(body)) + body


def vector(items: list[bytes], count: int | None = None) -> bytes:
    """``items`` with their count first (``count``: another count said)."""
    return uleb(len(items) if count is None else count) + b"".join(items)


def name(text: str) -> bytes:
    return uleb(len(text.encode())) + text.encode()


EMPTY_BODY = b"\x02\x00\x0b"  # its size, no locals, end
_CONST, _VOID, _PAIR, _MUL = (
    b"\x60\x00\x01\x7f",
    b"\x60\x00\x00",
    b"\x60\x02\x7f\x7f\x00",
    b"\x60\x03\x7f\x7f\x7f\x00",
)


def generator_wasm(
    wires: int,
    inputs: int = 1,
    prime: int = BN128.r,
    version: int = 2,
    *,
    padding: int = 0,
    imports: tuple[bytes, ...] = (),
    passive: int = 0,
    field_product: bool = False,
) -> bytes:
    """A module exporting what circom's witness generators export for their constants, as circom generates
    them (``i32.const N``; ``getRawPrime`` copies the prime from the data section): no witness.

    ``padding`` empty function bodies come before the constants' functions; ``imports`` (entries, of any
    kind: the functions' indices are not shifted for them) before everything; ``passive`` empty passive data
    segments before the prime's; ``field_product``: two more
    functions, named ``Fr_F1m_mul`` and ``Fr_F1m_square`` in a name section, of circom's signatures."""
    prime_at, shared_at = 64, 1024
    constants = {
        "getVersion": version,
        "getWitnessSize": wires,
        "getInputSize": inputs,
        "getFieldNumLen32": 8,
    }
    first = padding  # the constants' first function
    copy_index = first + len(constants) + 1
    bodies = [b"\x00\x41" + sleb(v) + b"\x0b" for v in constants.values()]
    bodies.append(
        b"\x00\x41" + sleb(prime_at) + b"\x41" + sleb(shared_at) + b"\x10" + uleb(copy_index) + b"\x0b"
    )
    bodies.append(b"\x00\x0b")  # the copy itself: never run here
    types = [b"\x00"] * len(constants) + [b"\x01", b"\x02"]
    if field_product:
        bodies += [b"\x00\x0b", b"\x00\x0b"]
        types += [b"\x03", b"\x02"]
    exported = [*constants, "getRawPrime"]
    sections = {
        1: vector([_CONST, _VOID, _PAIR, _MUL]),
        2: vector(list(imports)) if imports else b"",
        3: uleb(padding + len(types)) + b"\x01" * padding + b"".join(types),
        5: vector([b"\x00\x01"]),
        7: vector([name(n) + b"\x00" + uleb(first + i) for i, n in enumerate(exported)]),
        10: uleb(padding + len(bodies)) + EMPTY_BODY * padding + b"".join(uleb(len(b)) + b for b in bodies),
        11: uleb(passive + 1)
        + b"\x01\x00" * passive
        + b"\x00\x41"
        + sleb(prime_at)
        + b"\x0b"
        + uleb(32)
        + prime.to_bytes(32, "little"),
    }
    module = MAGIC + b"".join(section(k, v) for k, v in sections.items() if v)
    if field_product:
        mul = first + len(constants) + 2
        names = vector([uleb(mul) + name("Fr_F1m_mul"), uleb(mul + 1) + name("Fr_F1m_square")])
        module += section(0, name("name") + b"\x01" + uleb(len(names)) + names)
    return module
