"""A disk with no byte left: the full-disk tests' one way to fill the small tmpfs (``small_disk``)."""

from __future__ import annotations

import contextlib
import errno
from pathlib import Path

import pytest


def fill(disk: Path) -> Path:
    """Write a file until the disk has no byte left; return it (removing it frees the room again)."""
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as f:
        for chunk in (1 << 16, 1 << 12, 1 << 9, 1):
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * chunk)
    with pytest.raises(OSError) as full:
        (disk / "one-more").write_bytes(b"\0" * 4096)
    assert full.value.errno == errno.ENOSPC
    return filler
