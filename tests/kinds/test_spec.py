"""Proof kinds: cuzk's names, partition counts and priorities."""

from __future__ import annotations

from prooflane.kinds import BUILTIN_KINDS, CIRCOM, kind_spec
from prooflane.models import Priority


def test_builtin_kinds_keep_cuzk_names_partitions_and_priorities() -> None:
    table = {k.name: (k.partitions, k.priority) for k in BUILTIN_KINDS}
    assert table == {
        "porep-c2": (10, Priority.NORMAL),
        "snap-update": (16, Priority.NORMAL),
        "window-post": (1, Priority.HIGH),
        "winning-post": (1, Priority.CRITICAL),
    }
    circom = kind_spec(CIRCOM)
    assert circom is not None and circom.partitions == 0
    assert kind_spec("porep-c1") is None


def test_priority_ranks_order_critical_first() -> None:
    assert sorted(Priority, key=lambda p: p.rank) == [Priority.CRITICAL, Priority.HIGH, Priority.NORMAL]
