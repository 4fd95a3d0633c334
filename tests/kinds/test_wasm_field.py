"""The field product rewritten on 64-bit limbs (``prooflane.kinds.wasm_field``): the same number as the
Montgomery product circom's generators compute, on both fields, and a module it cannot rewrite stays as it
is, with the reason said."""

from __future__ import annotations

import random

import pytest
import wasmtime

from prooflane.kinds.wasm import WasmModule
from prooflane.kinds.wasm_field import PRIMES, montgomery_wat, patched
from tests.support.wasm_modules import generator_wasm

R = 1 << 256


def circoms_product(x: int, y: int, q: int) -> int:
    """What circom's Fr_F1m_mul stores: (x*y + m*q) / 2^256, less q once when that is q or more (modulo
    2^256, as its 256-bit subtraction leaves it)."""
    m = (-x * y * pow(q, -1, R)) % R
    v = (x * y + m * q) // R
    return (v - q) % R if v >= q else v


def instance(q: int) -> tuple[wasmtime.Store, dict[str, object]]:
    config = wasmtime.Config()
    config.wasm_wide_arithmetic = True
    engine = wasmtime.Engine(config)
    store = wasmtime.Store(engine)
    module = wasmtime.Module(engine, montgomery_wat(q))
    exports = wasmtime.Instance(store, module, []).exports(store)
    return store, {name: exports[name] for name in ("memory", "mul", "square")}


@pytest.mark.parametrize("curve", list(PRIMES))
def test_the_product_is_circoms_to_the_bit_on_each_field(curve: str) -> None:
    q = PRIMES[curve]
    store, ex = instance(q)
    memory, mul, square = ex["memory"], ex["mul"], ex["square"]
    rng = random.Random(curve)
    edges = [0, 1, 2, q - 2, q - 1, q, q + 1, R - 1, (R - 1) // q * q]
    numbers = edges + [rng.randrange(q) for _ in range(200)] + [rng.randrange(R) for _ in range(50)]
    for x in numbers:
        for y in [*edges, rng.choice(numbers)]:
            memory.write(store, x.to_bytes(32, "little") + y.to_bytes(32, "little"), 0)  # type: ignore[attr-defined]
            mul(store, 0, 32, 64)  # type: ignore[operator]
            assert int.from_bytes(memory.read(store, 64, 96), "little") == circoms_product(x, y, q)  # type: ignore[attr-defined]
        square(store, 0, 0)  # type: ignore[operator]  # in place: r is x
        assert int.from_bytes(memory.read(store, 0, 32), "little") == circoms_product(x, x, q)  # type: ignore[attr-defined]


def test_a_product_of_montgomery_forms_is_the_montgomery_form_of_the_product() -> None:
    q = PRIMES["bn128"]
    store, ex = instance(q)
    a, b = 123456789, q - 987654321
    mont = [(v * R) % q for v in (a, b)]
    ex["memory"].write(store, b"".join(v.to_bytes(32, "little") for v in mont), 0)  # type: ignore[attr-defined]
    ex["mul"](store, 0, 32, 64)  # type: ignore[operator]
    assert int.from_bytes(ex["memory"].read(store, 64, 96), "little") == (a * b * R) % q  # type: ignore[attr-defined]


def test_an_even_or_too_wide_modulus_is_refused() -> None:
    for bad in (1 << 200, (1 << 255) + 1):
        with pytest.raises(ValueError):
            montgomery_wat(bad)


def _module(body: str, prime: int | None) -> bytes:
    escaped = "".join("\\" + f"{b:02x}" for b in prime.to_bytes(32, "little")) if prime else ""
    data = f'(data (i32.const 0) "{escaped}")' if prime else ""
    return bytes(wasmtime.wat2wasm(f"(module (memory 1) {data} {body})"))


MUL = "(func $Fr_F1m_mul (param i32 i32 i32)) (func $Fr_F1m_square (param i32 i32))"


def test_a_module_of_both_functions_and_a_known_prime_is_rewritten_and_still_valid() -> None:
    module = _module(MUL, PRIMES["bls12381"])
    rewritten, curve = patched(module, wasmtime.wat2wasm)
    assert curve == "bls12381"
    assert rewritten is not None and rewritten != module
    config = wasmtime.Config()
    config.wasm_wide_arithmetic = True
    wasmtime.Module(wasmtime.Engine(config), rewritten)  # validates


@pytest.mark.parametrize(
    ("body", "prime", "said"),
    [
        (MUL, None, "its field is none of bn128, bls12381"),
        (
            MUL.replace("param i32 i32 i32", "param i32 i32"),
            PRIMES["bn128"],
            "its Fr_F1m_mul takes other arguments",
        ),
        ("(func $Fr_F1m_square (param i32 i32))", PRIMES["bn128"], "no Fr_F1m_mul in it"),
        ("(func $other)", PRIMES["bn128"], "no Fr_F1m_mul in it"),
    ],
)
def test_a_module_it_cannot_rewrite_stays_as_it_is_and_says_why(
    body: str, prime: int | None, said: str
) -> None:
    assert patched(_module(body, prime), wasmtime.wat2wasm) == (None, said)


def test_bytes_that_are_not_a_module_are_left_alone() -> None:
    junk = b"\0asm\1\0\0\0\x0a\xff" + PRIMES["bn128"].to_bytes(32, "little")
    rewritten, said = patched(junk, wasmtime.wat2wasm)
    assert rewritten is None and said.startswith("it is not laid out as expected")


def test_a_product_behind_other_functions_is_rewritten_in_place_and_the_module_stays_valid() -> None:
    module = generator_wasm(12, prime=PRIMES["bn128"], padding=1_000, field_product=True)
    rewritten, curve = patched(module, wasmtime.wat2wasm)
    assert curve == "bn128" and rewritten is not None
    config = wasmtime.Config()
    config.wasm_wide_arithmetic = True
    engine = wasmtime.Engine(config)
    wasmtime.Module.validate(engine, module)
    wasmtime.Module.validate(engine, rewritten)
    header, _, end = WasmModule(module).sections[10]
    assert rewritten[:header] == module[:header]  # all before the code section kept
    assert rewritten.endswith(module[end:])  # and all after it: the data, the names
    ours = WasmModule(bytes(wasmtime.wat2wasm(montgomery_wat(PRIMES["bn128"]))))
    theirs = WasmModule(rewritten)
    names = theirs.function_names(["Fr_F1m_mul", "Fr_F1m_square"])
    assert names == {"Fr_F1m_mul": 1_006, "Fr_F1m_square": 1_007}  # behind 1,000 + 6 others
    for mine, replaced in zip(
        ours.bodies([0, 1]).values(), theirs.bodies(names.values()).values(), strict=True
    ):
        assert rewritten[replaced.entry : replaced.end] == ours.data[mine.entry : mine.end]


def test_a_module_past_wasmtimes_limits_is_left_alone_naming_the_count_and_the_bound() -> None:
    module = generator_wasm(12, prime=PRIMES["bn128"], padding=1_000_000, field_product=True)
    said = "it declares 1,000,008 functions: more than the 1,000,000 read (wasmtime's limit)"
    assert patched(module, wasmtime.wat2wasm) == (None, f"it is not laid out as expected ({said})")
