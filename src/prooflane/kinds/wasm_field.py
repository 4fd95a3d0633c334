"""A faster field product for circom's witness generators: their Montgomery multiplication, rewritten
with 64-bit limbs, put in place of theirs before the module is compiled.

circom's generated ``.wasm`` multiplies field elements (``Fr_F1m_mul``, ``Fr_F1m_square``) on eight 32-bit
limbs, because core WebAssembly has no 64x64 -> 128-bit product: 64 limb products and 64 more to reduce.
That product is most of a witness's time (43% of circomlib's SHA-256, profiled). WebAssembly's
wide-arithmetic extension (``i64.mul_wide_u``, ``i64.add128``, ``i64.sub128``: wasmtime 26 and later)
gives the 128-bit product, so the same Montgomery product takes 16 limb products and 16 to reduce, on four
64-bit limbs.

The result is the same number, bit for bit: both compute ``(x*y + m*q) / 2^256`` for the one ``m`` below
``2^256`` that makes the sum divisible by 2^256 (the limb size only changes how ``m`` is found, digit by
digit), and both subtract ``q`` once when the result is at least ``q`` or overflowed 256 bits. The limbs are
the same bytes in memory (eight little-endian 32-bit words are four little-endian 64-bit ones).

:func:`patched` finds the two functions by their names (the module's name section) and the field by its
prime among the module's bytes, and returns the module with their bodies replaced; it returns ``None``, and
the generator runs as compiled by circom, when anything it expects is not there. What it did is said:
``WasmWitness.field_product``.
"""

from __future__ import annotations

from collections.abc import Callable

from .wasm import Body, WasmModule

__all__ = ["PRIMES", "montgomery_wat", "patched"]

PRIMES = {
    "bn128": 0x30644E72E131A029B85045B68181585D2833E84879B9709143E1F593F0000001,
    "bls12381": 0x73EDA753299D7D483339D80809A1D80553BDA402FFFE5BFEFFFFFFFF00000001,
}
"""The scalar fields whose generators are rewritten (the curves prooflane proves on)."""

_PATCHED = {"Fr_F1m_mul": "mul", "Fr_F1m_square": "square"}  # the generator's name -> ours
_MASK = (1 << 64) - 1


def _limbs(number: int) -> list[int]:
    return [(number >> (64 * i)) & _MASK for i in range(4)]


def _signed(word: int) -> int:
    """A 64-bit word as WAT's i64 literal."""
    return word - (1 << 64) if word >> 63 else word


def _product(prime: int, out: list[str]) -> None:
    """The Montgomery product modulo ``prime`` of the limbs in locals x0..x3 and y0..y3 (CIOS), stored at
    $r, reduced below it: appended to ``out`` as WAT instructions. Its constants are inline (no global's
    index, which would be another in the generator)."""
    emit = out.append
    q = [f"i64.const {_signed(w)}" for w in _limbs(prime)]
    np_ = f"i64.const {_signed((-pow(prime, -1, 1 << 64)) & _MASK)}"
    for k in range(6):
        emit(f"i64.const 0 local.set $t{k}")
    for i in range(4):
        emit("i64.const 0 local.set $c")
        for j in range(4):  # (c, t_j) = t_j + x_j * y_i + c
            emit(f"local.get $x{j} local.get $y{i} i64.mul_wide_u "
                 f"local.get $t{j} i64.const 0 i64.add128 local.get $c i64.const 0 i64.add128 "
                 f"local.set $c local.set $t{j}")  # fmt: skip
        emit("local.get $t4 i64.const 0 local.get $c i64.const 0 i64.add128 local.set $t5 local.set $t4")
        emit(f"local.get $t0 {np_} i64.mul local.set $m")  # m = t_0 * (-1/q) mod 2^64
        emit(f"local.get $m {q[0]} i64.mul_wide_u local.get $t0 i64.const 0 i64.add128 "
             "local.set $c drop")  # fmt: skip
        for j in range(1, 4):  # (c, t_{j-1}) = t_j + m * q_j + c
            emit(f"local.get $m {q[j]} i64.mul_wide_u "
                 f"local.get $t{j} i64.const 0 i64.add128 local.get $c i64.const 0 i64.add128 "
                 f"local.set $c local.set $t{j - 1}")  # fmt: skip
        emit("local.get $t4 i64.const 0 local.get $c i64.const 0 i64.add128 local.set $c local.set $t3")
        emit("local.get $t5 local.get $c i64.add local.set $t4")
    # s = t - q, with the borrow (0 or -1) carried in $c; t stays when it is below q and did not overflow.
    emit("i64.const 0 local.set $c")
    for j in range(4):
        emit(f"local.get $t{j} i64.const 0 {q[j]} i64.const 0 i64.sub128 "
             f"local.get $c local.get $c i64.add128 local.set $c local.set $s{j}")  # fmt: skip
    emit("local.get $t4 i64.const 0 i64.ne local.get $c i64.eqz i32.or local.set $subtract")
    for j in range(4):
        emit(f"local.get $r local.get $s{j} local.get $t{j} local.get $subtract select "
             f"i64.store offset={8 * j}")  # fmt: skip


def montgomery_wat(prime: int) -> str:
    """A module exporting ``mul(x, y, r)`` and ``square(x, r)``: circom's ``Fr_F1m_mul`` and
    ``Fr_F1m_square`` (pointers to 32-byte little-endian Montgomery forms in memory 0) modulo ``prime``,
    on 64-bit limbs. Its functions use no index of their module but memory 0's."""
    if not (prime % 2 == 1 and prime.bit_length() <= 255):
        raise ValueError("the Montgomery product here takes an odd prime of at most 255 bits")
    local_names = [f"$x{j}" for j in range(4)] + [f"$y{j}" for j in range(4)] + [f"$t{k}" for k in range(6)]
    local_names += [f"$s{j}" for j in range(4)] + ["$c", "$m"]
    locals_ = " ".join(f"(local {name} i64)" for name in local_names) + " (local $subtract i32)"
    body: list[str] = []
    _product(prime, body)
    load_x = " ".join(f"local.get $x i64.load offset={8 * j} local.set $x{j}" for j in range(4))
    load_y = " ".join(f"local.get $y i64.load offset={8 * j} local.set $y{j}" for j in range(4))
    copy_y = " ".join(f"local.get $x{j} local.set $y{j}" for j in range(4))
    return "\n".join([
        "(module (memory (export \"memory\") 1)",
        f'(func (export "mul") (param $x i32) (param $y i32) (param $r i32) {locals_}',
        load_x, load_y, *body, ")",
        f'(func (export "square") (param $x i32) (param $r i32) {locals_}',
        load_x, copy_y, *body, "))",
    ])  # fmt: skip


def _u32(number: int) -> bytes:
    out = bytearray()
    while True:
        byte, number = number & 0x7F, number >> 7
        out.append(byte | (0x80 if number else 0))
        if not number:
            return bytes(out)


_I32 = b"\x7f"
_SIGNATURES = {"mul": (_I32 * 3, b""), "square": (_I32 * 2, b"")}


def patched(
    module: bytes, wat2wasm: Callable[[str], bytes | bytearray]
) -> tuple[bytes, str] | tuple[None, str]:
    """``module`` (a circom generator) with its field product on 64-bit limbs, and the field's curve; or
    None and why not. ``wat2wasm`` is wasmtime's (text -> module bytes). The module is read by
    :class:`~prooflane.kinds.wasm.WasmModule` (linear in it, its counts bounded) and copied once."""
    curves = [curve for curve, prime in PRIMES.items() if prime.to_bytes(32, "little") in module]
    if len(curves) != 1:
        return None, "its field is none of " + ", ".join(PRIMES) if not curves else "two fields found in it"
    curve = curves[0]
    try:
        theirs = WasmModule(module)
        names = theirs.function_names(_PATCHED)
        for name in _PATCHED:
            if name not in names or names[name] < theirs.imported_functions():
                return None, f"no {name} in it"
        signatures = theirs.signatures(names.values())
        for name, ours_name in _PATCHED.items():
            if signatures[names[name]] != _SIGNATURES[ours_name]:
                return None, f"its {name} takes other arguments"
        bodies = theirs.bodies(names.values())
        ours = WasmModule(bytes(wat2wasm(montgomery_wat(PRIMES[curve]))))
        our_bodies = ours.bodies(range(len(_PATCHED)))  # mul, then square: _PATCHED's order
    except ValueError as exc:
        return None, f"it is not laid out as expected ({exc})"
    replaced = {
        bodies[names[name]]: bytes(ours.data[our_bodies[n].entry : our_bodies[n].end])
        for n, name in enumerate(_PATCHED)
    }
    return _with_bodies(theirs, replaced), curve


def _with_bodies(module: WasmModule, replaced: dict[Body, bytes]) -> bytes:
    """``module`` with the code entries ``replaced`` (each its size and body) put in their place."""
    header, start, end = module.sections[10]
    data, code, at = module.data, bytearray(), start
    for body, entry in sorted(replaced.items()):
        code += data[at : body.entry]
        code += entry
        at = body.end
    code += data[at:end]
    return bytes(data[:header]) + b"\x0a" + _u32(len(code)) + code + bytes(data[end:])
