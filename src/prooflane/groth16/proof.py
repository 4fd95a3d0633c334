"""Groth16 proofs and verification keys, and their snarkjs JSON shapes (proof.json, verification_key.json).

Points are affine integer tuples: ``G1 = (x, y)``, ``G2 = (x0, x1, y0, y1)`` with ``x = x0 + x1*u``; the
point at infinity is all zeros. In JSON, coordinates are decimal strings with ``z = 1`` (infinity:
``["0", "1", "0"]``), and G2 coordinates are written ``[c0, c1]``, as snarkjs writes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .curves import Curve, curve_by_name
from .errors import FormatError
from .points import G1, G2, on_curve_g1, on_curve_g2

__all__ = ["Proof", "VerificationKey"]


@dataclass(frozen=True)
class VerificationKey:
    """What a verifier needs: ``alpha1``, ``beta2``, ``gamma2``, ``delta2`` and one IC point per public
    signal plus one for the constant wire."""

    curve: Curve
    n_public: int
    alpha1: G1
    beta2: G2
    gamma2: G2
    delta2: G2
    ic: tuple[G1, ...]

    def to_json(self) -> dict[str, Any]:
        """The snarkjs ``verification_key.json`` shape (without ``vk_alphabeta_12``, which verifiers
        recompute)."""
        return {
            "protocol": "groth16",
            "curve": self.curve.name,
            "nPublic": self.n_public,
            "vk_alpha_1": g1_json(self.alpha1),
            "vk_beta_2": g2_json(self.beta2),
            "vk_gamma_2": g2_json(self.gamma2),
            "vk_delta_2": g2_json(self.delta2),
            "IC": [g1_json(p) for p in self.ic],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, source: str = "verification key") -> VerificationKey:
        """Parse the snarkjs shape; raises FormatError naming ``source`` and the bad field."""
        if not isinstance(data, Mapping):
            raise FormatError(source, "expected a JSON object")
        if data.get("protocol", "groth16") != "groth16":
            raise FormatError(source, f"protocol {data.get('protocol')!r}: expected 'groth16'")
        curve = _curve(data, source)
        ic_raw = _field(data, "IC", source)
        if not isinstance(ic_raw, list) or not ic_raw:
            raise FormatError(source, "IC: expected a non-empty list of G1 points")
        ic = tuple(parse_g1(p, curve, source, f"IC[{i}]", point=True) for i, p in enumerate(ic_raw))
        n_public = _field(data, "nPublic", source)
        if not isinstance(n_public, int) or n_public != len(ic) - 1:
            raise FormatError(source, f"nPublic {n_public!r} does not match {len(ic)} IC points")
        return cls(
            curve=curve,
            n_public=n_public,
            # A key's points are on the curve, and none is infinity but an IC point (an unused input's).
            alpha1=parse_g1(_field(data, "vk_alpha_1", source), curve, source, "vk_alpha_1", finite=True),
            beta2=parse_g2(_field(data, "vk_beta_2", source), curve, source, "vk_beta_2", finite=True),
            gamma2=parse_g2(_field(data, "vk_gamma_2", source), curve, source, "vk_gamma_2", finite=True),
            delta2=parse_g2(_field(data, "vk_delta_2", source), curve, source, "vk_delta_2", finite=True),
            ic=ic,
        )


@dataclass(frozen=True)
class Proof:
    """A Groth16 proof ``(A, B, C)`` with the public signals it proves (witness[1..nPublic])."""

    curve: Curve
    a: G1
    b: G2
    c: G1
    public: tuple[int, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        """The snarkjs ``proof.json`` shape."""
        return {
            "pi_a": g1_json(self.a),
            "pi_b": g2_json(self.b),
            "pi_c": g1_json(self.c),
            "protocol": "groth16",
            "curve": self.curve.name,
        }

    def public_json(self) -> list[str]:
        """The snarkjs ``public.json`` shape: decimal strings."""
        return [str(v) for v in self.public]

    @classmethod
    def from_json(
        cls,
        data: Mapping[str, Any],
        *,
        curve: Curve | None = None,
        public: tuple[int, ...] = (),
        source: str = "proof",
    ) -> Proof:
        """Parse the snarkjs shape. ``curve`` defaults to the file's ``curve`` field."""
        if not isinstance(data, Mapping):
            raise FormatError(source, "expected a JSON object")
        if curve is None:
            curve = _curve(data, source)
        elif "curve" in data and _curve(data, source) != curve:
            raise FormatError(source, f"curve {data['curve']!r} does not match {curve.name}")
        return cls(
            curve=curve,
            a=parse_g1(_field(data, "pi_a", source), curve, source, "pi_a"),
            b=parse_g2(_field(data, "pi_b", source), curve, source, "pi_b"),
            c=parse_g1(_field(data, "pi_c", source), curve, source, "pi_c"),
            public=public,
        )


def parse_public(data: Any, curve: Curve, source: str = "public signals") -> tuple[int, ...]:
    """Parse a public.json list of decimal strings (values must be below the scalar field)."""
    if not isinstance(data, list):
        raise FormatError(source, "expected a JSON list of decimal strings")
    out = []
    for i, v in enumerate(data):
        n = _int(v, source, f"[{i}]")
        if n >= curve.r:
            raise FormatError(source, f"[{i}] is not below the scalar field of {curve.name}")
        out.append(n)
    return tuple(out)


def g1_json(p: G1) -> list[str]:
    """A G1 point as snarkjs writes it."""
    return ["0", "1", "0"] if p == (0, 0) else [str(p[0]), str(p[1]), "1"]


def g2_json(p: G2) -> list[list[str]]:
    """A G2 point as snarkjs writes it."""
    if p == (0, 0, 0, 0):
        return [["0", "0"], ["1", "0"], ["0", "0"]]
    return [[str(p[0]), str(p[1])], [str(p[2]), str(p[3])], ["1", "0"]]


def parse_g1(
    raw: Any, curve: Curve, source: str, name: str, *, point: bool = False, finite: bool = False
) -> G1:
    """A G1 point from its JSON form; raises FormatError naming ``name``. With ``point``, an affine point
    must lie on the curve (a proof's need not: it then fails to verify); with ``finite``, infinity is
    refused too."""
    if not isinstance(raw, list) or len(raw) not in (2, 3):
        raise FormatError(source, f"{name}: expected [x, y, z] decimal strings")
    x, y = (_coord(v, curve, source, name) for v in raw[:2])
    z = _int(raw[2], source, name) if len(raw) == 3 else 1
    if z == 0 and not finite:
        return (0, 0)
    if z not in (0, 1):
        raise FormatError(source, f"{name}: z must be 0 or 1 (affine)")
    if (point or finite) and (z == 0 or not on_curve_g1(curve, (x, y))):  # (0, 0): infinity's encoding here
        raise FormatError(source, f"{name}: [{x}, {y}, {z}] is not a finite point of the curve")
    return (x, y)


def parse_g2(raw: Any, curve: Curve, source: str, name: str, *, finite: bool = False) -> G2:
    """A G2 point from its JSON form; raises FormatError naming ``name``. With ``finite``, it must be an
    affine point of the twist (a proof's need not: it then fails to verify)."""
    ok = isinstance(raw, list) and len(raw) in (2, 3)
    ok = ok and all(isinstance(c, list) and len(c) == 2 for c in raw)
    if not ok:
        raise FormatError(source, f"{name}: expected [[x0, x1], [y0, y1], [z0, z1]] decimal strings")
    x0, x1, y0, y1 = (_coord(v, curve, source, name) for pair in raw[:2] for v in pair)
    z = (_int(raw[2][0], source, name), _int(raw[2][1], source, name)) if len(raw) == 3 else (1, 0)
    if z == (0, 0) and not finite:
        return (0, 0, 0, 0)
    if z not in ((0, 0), (1, 0)):
        raise FormatError(source, f"{name}: z must be [0, 0] or [1, 0] (affine)")
    if finite and (z == (0, 0) or not on_curve_g2(curve, (x0, x1, y0, y1))):
        raise FormatError(source, f"{name}: not a finite point of the curve's twist")
    return (x0, x1, y0, y1)


def _curve(data: Mapping[str, Any], source: str) -> Curve:
    name = data.get("curve")
    if not isinstance(name, str):
        raise FormatError(source, "missing field 'curve'")
    try:
        return curve_by_name(name)
    except ValueError as exc:
        raise FormatError(source, str(exc)) from None


def _field(data: Mapping[str, Any], name: str, source: str) -> Any:
    if name not in data:
        raise FormatError(source, f"missing field {name!r}")
    return data[name]


def _int(v: Any, source: str, name: str) -> int:
    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
        return v
    if isinstance(v, str) and v.isdigit() and len(v) < 200:
        return int(v)
    raise FormatError(source, f"{name}: {v!r} is not a non-negative decimal integer")


def _coord(v: Any, curve: Curve, source: str, name: str) -> int:
    n = _int(v, source, name)
    if n >= curve.q:
        raise FormatError(source, f"{name}: coordinate is not below the base field of {curve.name}")
    return n
