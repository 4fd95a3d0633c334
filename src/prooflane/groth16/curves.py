"""The two pairing-friendly curves prooflane proves on, named the way snarkjs names them."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BLS12381", "BN128", "CURVES", "Curve", "curve_by_name", "curve_by_prime"]


@dataclass(frozen=True)
class Curve:
    """Parameters of one curve: its snarkjs name, scalar field ``r`` and base field ``q``."""

    name: str
    r: int
    q: int

    @property
    def n8r(self) -> int:
        """Bytes in one scalar-field element as the circom/snarkjs formats store it."""
        return 32

    @property
    def n8q(self) -> int:
        """Bytes in one base-field element as the circom/snarkjs formats store it."""
        return (self.q.bit_length() + 63) // 64 * 8


BN128 = Curve(
    name="bn128",
    r=21888242871839275222246405745257275088548364400416034343698204186575808495617,
    q=21888242871839275222246405745257275088696311157297823662689037894645226208583,
)
BLS12381 = Curve(
    name="bls12381",
    r=52435875175126190479447740508185965837690552500527637822603658699938581184513,
    q=int(
        "4002409555221667393417789825735904156556882819939007885332058136124031650490837864442687629129015664037894272559787"
    ),
)
CURVES: dict[str, Curve] = {"bn128": BN128, "bls12381": BLS12381}
_ALIASES = {"bn254": "bn128", "alt_bn128": "bn128", "bls12-381": "bls12381", "bls12_381": "bls12381"}


def curve_by_name(name: str) -> Curve:
    """Return the curve called ``name`` (snarkjs names and the usual aliases, any case)."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    try:
        return CURVES[key]
    except KeyError:
        known = ", ".join(sorted(CURVES))
        raise ValueError(f"unknown curve {name!r}: expected one of {known}") from None


def curve_by_prime(prime: int) -> Curve:
    """Return the curve whose scalar field (as in .r1cs/.wtns) or base field (.zkey) is ``prime``."""
    for curve in CURVES.values():
        if prime in (curve.r, curve.q):
            return curve
    raise ValueError(f"no supported curve has the prime {prime}")
