"""Fixed-base tables kept on disk: built once a machine, mapped read-only by every process that proves
with them.

A section's tables (``Arithmetic.tabulate``: about ten times its bases, 8-11 s to build at 2^16) are the
same in every process for the same key and shape, so they are built once and written to a file named by
the key's digest, the section and the shape; a process that wants them maps that file instead of building
its own. Two workers of a daemon then share one copy in the page cache, a daemon's restart finds them
built, and a fresh ``prooflane prove`` of a key whose tables are on disk proves with them.

A build takes an exclusive lock on ``<file>.lock`` first, so two processes that want the same tables at
once build them once: the second waits, then maps what the first wrote (written to a temporary name and
renamed, so a reader never sees half a file). A file whose size is not the shape's, or whose spot-checked
rows (a few random rows' multiples, recomputed) differ, is rebuilt.

The folder is ``$PROOFLANE_TABLES`` when set (empty: keep nothing on disk; each process builds its own
tables in memory), else ``$XDG_CACHE_HOME/prooflane/msm-tables`` (``~/.cache/...``). It holds at most
``$PROOFLANE_TABLES_MAX_BYTES`` (default 32 GiB): storing a new file removes the least recently used ones
beyond that (a process that has one mapped keeps its mapping). Whoever can write the folder can make
proofs come out wrong (never accepted: a daemon verifies every proof it returns), as whoever can write the
point-check memory can vouch for a key.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import mmap
import os
import re
import secrets
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from .arithmetic import Section, Tables
from .caches import cache_folder, prune_least_recent

__all__ = [
    "DEFAULT_MAX_BYTES",
    "ENV",
    "MAX_BYTES_ENV",
    "cached_tables",
    "folder",
    "is_stored",
    "not_storable",
    "stored_tables",
]

ENV = "PROOFLANE_TABLES"
MAX_BYTES_ENV = "PROOFLANE_TABLES_MAX_BYTES"
DEFAULT_MAX_BYTES = 32 << 30
SPOT_CHECKS = 3
"""Rows of a file recomputed when it is mapped: catches a truncated, stale or foreign file (not a forger)."""

Tabulate = Callable[[Section], Section]
"""Builds a section's tables in memory (``Arithmetic.tabulate`` with its threads)."""
Recompute = Callable[[Section, int], bytes]
"""The tables of one row of a section, as the file holds them (``Arithmetic.row_tables``)."""


def folder() -> Path | None:
    """The folder of stored tables, or None when ``$PROOFLANE_TABLES`` is set empty."""
    return cache_folder(ENV, "msm-tables")


def not_storable() -> str | None:
    """Why tables built now could not be stored (the folder set empty, or one this process cannot create
    or write a file in); None where they can. It creates the folder and a file in it, removed at once."""
    where = folder()
    if where is None:
        return f"${ENV} is set empty: no tables are stored"
    try:
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=where, prefix=".writable."):
            pass
    except OSError as exc:
        return f"they cannot be stored in {where} ({exc.strerror or exc})"
    return None


def is_stored(section: Section) -> bool:
    """Whether ``section``'s tables are mapped from a stored file (not a process's own, in memory)."""
    return section.tables is not None and isinstance(section.tables.data, mmap.mmap)


def _path(where: Path, digest: str, name: str, window: int, stride: int, count: int) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", name)
    return where / f"{digest}.{safe}.w{window}s{stride}t{count}.tables"


def cached_tables(
    section: Section, digest: str, name: str, shape: tuple[int, int, int], size: int, recompute: Recompute
) -> Section | None:
    """``section`` with its tables mapped from the stored file, when one of the right size passes the spot
    checks; None otherwise (nothing is built)."""
    where = folder()
    if where is None:
        return None
    return _mapped(section, _path(where, digest, name, *shape), shape, size, recompute)


def stored_tables(
    section: Section,
    digest: str,
    name: str,
    shape: tuple[int, int, int],
    size: int,
    tabulate: Tabulate,
    recompute: Recompute,
) -> Section:
    """``section`` with its tables: mapped from the stored file, or built, stored and mapped (under the
    file's lock: one process builds them). Built in memory only when there is no folder or it cannot be
    written."""
    where = folder()
    if where is None:
        return tabulate(section)
    path = _path(where, digest, name, *shape)
    found = _mapped(section, path, shape, size, recompute)
    if found is not None:
        return found
    try:
        where.mkdir(parents=True, exist_ok=True)
        with _locked(path.with_name(path.name + ".lock")):
            found = _mapped(section, path, shape, size, recompute)  # built while this process waited
            if found is not None:
                return found
            built = tabulate(section)
            assert built.tables is not None
            temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
            try:
                temporary.write_bytes(built.tables.data)
                temporary.replace(path)
            finally:
                temporary.unlink(missing_ok=True)
    except OSError:
        return tabulate(section)  # a folder that cannot be written: this process's own tables
    _prune(where, keep=path)
    return _mapped(section, path, shape, size, recompute) or built


def _mapped(
    section: Section, path: Path, shape: tuple[int, int, int], size: int, recompute: Recompute
) -> Section | None:
    try:
        with path.open("rb") as file:
            if os.fstat(file.fileno()).st_size != size or size == 0:
                return None
            data = mmap.mmap(file.fileno(), size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    except (OSError, ValueError):
        return None
    rows = len(section.rows)
    width = size // rows
    for row in {secrets.randbelow(rows) for _ in range(SPOT_CHECKS)}:
        if data[row * width : (row + 1) * width] != recompute(section, row):
            data.close()
            return None
    with contextlib.suppress(OSError):
        os.utime(path)  # recently used: pruned last
    return dataclasses.replace(section, tables=Tables(*shape, data))


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _prune(where: Path, keep: Path) -> None:
    """Remove the least recently used tables beyond the folder's limit (never ``keep``, just stored)."""
    try:
        limit = int(os.environ.get(MAX_BYTES_ENV) or DEFAULT_MAX_BYTES)
    except ValueError:
        limit = DEFAULT_MAX_BYTES
    prune_least_recent(where, "*.tables", limit, keep)
