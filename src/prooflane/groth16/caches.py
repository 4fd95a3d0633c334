"""Folders where prooflane keeps what a machine computes once and many processes reuse (keys' fixed-base
tables, compiled witness generators): where they are, and how they stay within a size."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["cache_folder", "prune_least_recent"]


def cache_folder(env: str, name: str) -> Path | None:
    """``$env`` (None when set empty), else ``$XDG_CACHE_HOME/prooflane/name`` (``~/.cache/...``): where
    prooflane keeps what a machine computes once (tables here, compiled witness generators)."""
    configured = os.environ.get(env)
    if configured is not None:
        return Path(configured) if configured else None
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "prooflane" / name


def prune_least_recent(where: Path, pattern: str, limit: int, keep: Path) -> None:
    """Remove the files of ``where`` matching ``pattern`` least recently used first (their mtime), with
    their ``.lock`` files, until they hold at most ``limit`` bytes; never ``keep``, just stored."""
    files = []
    for path in where.glob(pattern):
        with contextlib.suppress(OSError):
            stat = path.stat()
            files.append((stat.st_mtime, stat.st_size, path))
    total = sum(size for _, size, _ in files)
    for _, size, path in sorted(files):
        if total <= limit:
            break
        if path != keep:
            with contextlib.suppress(OSError):
                path.unlink()
                path.with_name(path.name + ".lock").unlink(missing_ok=True)
            total -= size
