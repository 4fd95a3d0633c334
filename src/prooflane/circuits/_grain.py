"""Poseidon round constants and MDS matrices by the Poseidon paper's reference procedure.

This follows ``generate_parameters_grain.sage`` of the Poseidon authors (Grassi, Khovratovich, Rechberger,
Roy, Schofnegger, "Poseidon: A New Hash Function for Zero-Knowledge Proof Systems", USENIX Security 2021,
reference code "hadeshash"): an 80-bit Grain LFSR seeded with the parameters (field type 1 = prime field,
S-box type 0 = x^alpha, field size n, width t, R_F, R_P) and thirty ones, clocked 160 times, then filtered by
the self-shrinking rule; round constants are n-bit draws (most significant bit first) rejected while >= p;
the MDS matrix is the Cauchy matrix 1 / (x_i + y_j) over 2t further draws reduced mod p. circomlib's Poseidon
constants were made by this procedure (``sage generate_parameters_grain.sage 1 0 254 t 8 R_P p``).

Run ``python -m prooflane.circuits._grain`` to regenerate ``poseidon_params.json`` (kept in the package).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BLS12381_R",
    "BN254_R",
    "N_ROUNDS_F",
    "N_ROUNDS_P",
    "PARAMS_FILE",
    "GeneratedParams",
    "generate",
]

BN254_R = 21888242871839275222246405745257275088548364400416034343698204186575808495617
BLS12381_R = 52435875175126190479447740508185965837690552500527637822603658699938581184513
# Full rounds, and partial rounds for t = 2..17: the numbers circomlib uses (from the paper's
# calc_round_numbers.py for 128-bit security with x^5, rounded up so that R_P is a multiple of t).
N_ROUNDS_F = 8
N_ROUNDS_P = (56, 57, 56, 60, 60, 63, 64, 63, 60, 66, 60, 65, 70, 60, 64, 68)
PARAMS_FILE = Path(__file__).resolve().parent / "poseidon_params.json"
_FIELDS = {"bn128": (BN254_R, 254), "bls12381": (BLS12381_R, 255)}


@dataclass(frozen=True)
class GeneratedParams:
    """Round constants (``(R_F + R_P) * t`` of them, round by round) and the t x t MDS matrix."""

    t: int
    rounds_f: int
    rounds_p: int
    constants: tuple[int, ...]
    mds: tuple[tuple[int, ...], ...]


def _grain_bits(n: int, t: int, rounds_f: int, rounds_p: int) -> Iterator[int]:
    """The filtered output bits of the Grain LFSR seeded with the instance's parameters."""
    seed = f"{1:02b}{0:04b}{n:012b}{t:012b}{rounds_f:010b}{rounds_p:010b}" + "1" * 30
    # state bit i is the sequence's element i; a step appends the feedback bit at position 79.
    state = sum(int(bit) << i for i, bit in enumerate(seed))

    def step() -> int:
        nonlocal state
        new = ((state >> 62) ^ (state >> 51) ^ (state >> 38) ^ (state >> 23) ^ (state >> 13) ^ state) & 1
        state = (state >> 1) | (new << 79)
        return new

    for _ in range(160):
        step()
    while True:
        first = step()
        while first == 0:
            step()
            first = step()
        yield step()


def _draw(bits: Iterator[int], n: int) -> int:
    value = 0
    for _ in range(n):
        value = (value << 1) | next(bits)
    return value


def generate(curve: str, t: int) -> GeneratedParams:
    """Generate the constants and MDS matrix for width ``t`` over the scalar field of ``curve``."""
    prime, n = _FIELDS[curve]
    rounds_p = N_ROUNDS_P[t - 2]
    bits = _grain_bits(n, t, N_ROUNDS_F, rounds_p)
    constants: list[int] = []
    while len(constants) < (N_ROUNDS_F + rounds_p) * t:
        value = _draw(bits, n)
        if value < prime:
            constants.append(value)
    while True:
        draws = [_draw(bits, n) % prime for _ in range(2 * t)]
        if len(set(draws)) != 2 * t:
            continue
        xs, ys = draws[:t], draws[t:]
        if any((x + y) % prime == 0 for x in xs for y in ys):
            continue
        mds = tuple(tuple(pow(x + y, -1, prime) for y in ys) for x in xs)
        return GeneratedParams(t, N_ROUNDS_F, rounds_p, tuple(constants), mds)


def _main() -> None:
    data: dict[str, dict[str, object]] = {}
    for curve in _FIELDS:
        data[curve] = {}
        for t in range(2, 18):
            params = generate(curve, t)
            data[curve][str(t)] = {
                "rounds_f": params.rounds_f,
                "rounds_p": params.rounds_p,
                "constants": [hex(c) for c in params.constants],
                "mds": [[hex(v) for v in row] for row in params.mds],
            }
    PARAMS_FILE.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    print(f"wrote {PARAMS_FILE}")


if __name__ == "__main__":
    _main()
