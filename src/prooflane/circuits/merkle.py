"""Binary Poseidon Merkle trees: built natively, opened in a circuit.

A node is ``Poseidon(left, right)`` (two inputs, t = 3); leaf ``i`` of a tree of depth ``d`` sits at the
bottom level, and the path bits of ``i`` (least significant first) say at each level whether the current
node is a right child (bit 1) or a left child (bit 0).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ..errors import CircuitError
from ..groth16 import BN128, Curve
from .builder import Assignment, ConstraintSystem, LinearCombination, Term
from .poseidon import poseidon_gadget, poseidon_many

__all__ = ["MerkleTree", "merkle_root_gadget", "verify_path"]


@dataclass(frozen=True, eq=False)
class MerkleTree:
    """Every level of a tree, leaves first, each level as 32-byte little-endian values.

    Invariant: ``levels[k]`` has ``2 ** (depth - k)`` rows; ``levels[-1]`` is the root alone.
    """

    curve: Curve
    levels: tuple[NDArray[np.uint8], ...]

    @property
    def depth(self) -> int:
        """Number of hashing levels (log2 of the leaf count)."""
        return len(self.levels) - 1

    @property
    def root(self) -> int:
        """The root."""
        return _value(self.levels[-1], 0)

    def leaf(self, index: int) -> int:
        """Leaf ``index``."""
        return _value(self.levels[0], index)

    def path(self, index: int) -> list[int]:
        """The siblings of leaf ``index``, bottom level first."""
        if not 0 <= index < len(self.levels[0]):
            raise CircuitError(f"leaf index {index} is outside a tree of {len(self.levels[0])} leaves")
        return [_value(level, (index >> k) ^ 1) for k, level in enumerate(self.levels[:-1])]

    @classmethod
    def build(cls, leaves: Sequence[int], curve: Curve = BN128) -> MerkleTree:
        """Hash ``leaves`` (a power of two of them, at least two) up to the root."""
        n = len(leaves)
        if n < 2 or n & (n - 1):
            raise CircuitError(f"a Merkle tree needs a power of two leaves (at least 2), not {n}")
        level = [int(x) for x in leaves]
        levels = [_pack(level)]
        while len(level) > 1:
            level = poseidon_many([level[0::2], level[1::2]], curve)
            levels.append(_pack(level))
        return cls(curve, tuple(levels))

    def to_bytes(self) -> bytes:
        """All levels, leaves first, concatenated (the on-disk form)."""
        return b"".join(level.tobytes() for level in self.levels)

    @classmethod
    def from_bytes(cls, data: bytes | NDArray[np.uint8], leaves: int, curve: Curve = BN128) -> MerkleTree:
        """Read the on-disk form of a tree with ``leaves`` leaves (zero-copy over a memory map)."""
        flat = np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes) else data
        if flat.size != (2 * leaves - 1) * 32:
            expected = (2 * leaves - 1) * 32
            raise CircuitError(f"a tree of {leaves} leaves takes {expected} bytes, not {flat.size}")
        rows = flat.reshape(-1, 32)
        levels, start, size = [], 0, leaves
        while size >= 1:
            levels.append(rows[start : start + size])
            start += size
            size //= 2
        return cls(curve, tuple(levels))


def _pack(values: Sequence[int]) -> NDArray[np.uint8]:
    raw = b"".join(v.to_bytes(32, "little") for v in values)
    return np.frombuffer(raw, dtype=np.uint8).reshape(-1, 32)


def _value(level: NDArray[np.uint8], index: int) -> int:
    return int.from_bytes(level[index].tobytes(), "little")


def verify_path(leaf: int, index: int, siblings: Sequence[int], root: int, curve: Curve = BN128) -> bool:
    """Check natively that ``leaf`` at ``index`` opens to ``root`` along ``siblings``."""
    from .poseidon import poseidon

    node = leaf
    for k, sibling in enumerate(siblings):
        pair = [sibling, node] if (index >> k) & 1 else [node, sibling]
        node = poseidon(pair, curve)
    return node == root


def merkle_root_gadget(
    cs: ConstraintSystem, leaf: Term, bits: Sequence[Term], siblings: Sequence[Term], name: str
) -> LinearCombination:
    """Constrain and return the root reached from ``leaf`` along ``siblings``, turning by ``bits``.

    ``bits`` must already be constrained boolean (``ConstraintSystem.to_bits``). Per level: one constraint
    for the swap and 243 for the hash.
    """
    if len(bits) != len(siblings):
        raise CircuitError(f"{name}: {len(bits)} path bits for {len(siblings)} siblings")
    node = cs.one * 0 + leaf
    with cs.namespace(name):
        for k, (bit, sib) in enumerate(zip(bits, siblings, strict=True)):
            sibling = cs.one * 0 + sib
            # swap = bit * (sibling - node): left = node + swap, right = sibling - swap.
            cur = node
            swap = cs.alloc(f"swap[{k}]", _swap_hint(bit, sibling, cur))
            cs.enforce(bit, sibling - cur, swap, f"level[{k}]/swap")
            node = poseidon_gadget(cs, [cur + swap, sibling - swap], f"level[{k}]/hash")
    return node


def _swap_hint(bit: Term, sibling: Term, node: Term) -> Callable[[Assignment], int]:
    return lambda v: v[bit] * (v[sibling] - v[node])
