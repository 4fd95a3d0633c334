"""Circuit sizes: a profile fixes the sector size and the challenges each partition proves.

Constraints per partition (BN254 and BLS12-381 alike; a 2-input Poseidon is 243 constraints, a Merkle
level 244, a challenge index's bits ``depth + 1``):

- PoSt (winning-post, window-post): ``K * (depth + 1 + 244 * depth + 1)``
- porep-c2, snap-update: ``K * (depth + 1 + 2 * (244 * depth + 1) + 243 + 1)``

=======  ============  =====  ===========  =============  ==========  ==============
profile  sector        depth  PoSt K       PoSt           encoding K  encoding
=======  ============  =====  ===========  =============  ==========  ==============
tiny     256 B         3      1            737            1           1,714
small    32 KiB        10     6            14,712         3           15,411
medium   512 KiB       14     18           61,776         9           63,837
=======  ============  =====  ===========  =============  ==========  ==============
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import CircuitError

__all__ = ["KINDS", "LEAF_BYTES", "POST_KINDS", "PROFILES", "Profile", "profile_by_name"]

LEAF_BYTES = 32
WINNING_POST, WINDOW_POST, POREP_C2, SNAP_UPDATE = "winning-post", "window-post", "porep-c2", "snap-update"
POST_KINDS = (WINNING_POST, WINDOW_POST)
ENCODING_KINDS = (POREP_C2, SNAP_UPDATE)
KINDS = POST_KINDS + ENCODING_KINDS


@dataclass(frozen=True)
class Profile:
    """Sizes of the storage circuits: the sector they fit and the challenges per partition."""

    name: str
    sector_bytes: int
    post_challenges: int
    encoding_challenges: int

    @property
    def leaf_count(self) -> int:
        """Leaves (32-byte field elements) in a sector of this profile."""
        return self.sector_bytes // LEAF_BYTES

    @property
    def depth(self) -> int:
        """Levels of the sector's Merkle trees."""
        return self.leaf_count.bit_length() - 1

    def challenges(self, kind: str) -> int:
        """Challenged leaves one partition of ``kind`` proves."""
        if kind in POST_KINDS:
            return self.post_challenges
        if kind in ENCODING_KINDS:
            return self.encoding_challenges
        raise CircuitError(f"unknown proof kind {kind!r}: expected one of {', '.join(KINDS)}")


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("tiny", sector_bytes=256, post_challenges=1, encoding_challenges=1),
        Profile("small", sector_bytes=32 * 1024, post_challenges=6, encoding_challenges=3),
        Profile("medium", sector_bytes=512 * 1024, post_challenges=18, encoding_challenges=9),
    )
}


def profile_by_name(name: str | Profile) -> Profile:
    """The profile called ``name`` (a Profile is returned as is)."""
    if isinstance(name, Profile):
        return name
    try:
        return PROFILES[name]
    except KeyError:
        raise CircuitError(f"unknown profile {name!r}: expected one of {', '.join(PROFILES)}") from None
