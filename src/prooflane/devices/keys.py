"""The proving keys a device process holds: read once per process, their library points built on demand.

Runs inside device processes (and in the daemon's own process for the in-process backend). The engine
accounts for each worker's loaded keys in the memory budget and tells the worker to drop one when the
budget evicts it. A key is read again when its file changed since it was read (a ``stat`` per use): a
mapping of a file cut short kills the process that touches it (SIGBUS), and one rewritten in place would
prove with other points.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
from typing import Any

from ..files import Fingerprint, fingerprint

__all__ = [
    "drop_key",
    "give_back_free_memory",
    "give_back_when_grown",
    "load_key",
    "loaded_key",
    "resident_bytes",
]

_KEYS: dict[str, Any] = {}  # key path -> ProvingKey, in this process
_READ: dict[str, Fingerprint | None] = {}  # key path -> its file as it was when read


def load_key(
    path: str, parts: tuple[str, ...] = (), *, matrices: bool = True, tables: bool | None = False
) -> Any:
    """The proving key at ``path``, read once per process; the library points of its base sections
    ``parts`` (of "a", "b1", "b2", "c", "h") are built now when not built yet, and with ``tables`` their
    fixed-base tables (``groth16.preload``: True builds them where not stored, None maps the stored ones).

    ``matrices=False`` (device processes, which prove and never synthesize) keeps the key without its
    coefficient matrices, most of a key's bytes; the first read in a process decides.
    """
    from ..groth16 import preload, read_zkey

    now = fingerprint(path)
    if path in _KEYS and _READ.get(path) != now:  # changed on disk since: never touch the old mapping
        drop_key(path)
    key = _KEYS.get(path)
    if key is None:
        key = read_zkey(path)
        _READ[path] = now
        if not matrices:
            key = dataclasses.replace(key, coefficients=_no_coefficients())
        _KEYS[path] = key
        give_back_free_memory()  # reading a key leaves tens of MB of freed heap behind
    if parts:
        preload(key, parts, tables=tables)
    return key


def give_back_free_memory() -> None:
    """Return the heap's free pages to the system (glibc ``malloc_trim``; elsewhere nothing).

    Reading a key, synthesizing or proving a partition, frees far more than it keeps; glibc holds the freed
    heap for reuse, so a long-lived process would show (and hold) the high-water mark of every key it read
    and every partition it proved.
    """
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL("libc.so.6")
            _LIBC.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _LIBC = False
    if _LIBC:
        _LIBC.malloc_trim(0)


_LIBC: Any = None  # the C library once looked up; False where it has no malloc_trim

TRIM_GROWTH_BYTES = 32 << 20
"""Heap growth since the last trim that makes a worker or pool process trim again."""
_trimmed_at = 0  # this process's resident bytes after its last trim


def give_back_when_grown() -> None:
    """:func:`give_back_free_memory`, once this process's resident memory grew by ``TRIM_GROWTH_BYTES``
    since it last did: a process that proves partitions of one size again and again keeps their working
    memory (trimming it after each one cost a page fault a page the next time: 200,000 faults in 21 s of
    proving at ``small``), and one whose partitions grew gives the excess back."""
    global _trimmed_at
    resident = resident_bytes()
    if resident - _trimmed_at > TRIM_GROWTH_BYTES:
        give_back_free_memory()
        _trimmed_at = resident_bytes()


def resident_bytes() -> int:
    """This process's resident memory (0 where /proc cannot tell)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _no_coefficients() -> Any:
    import numpy as np

    from ..groth16.zkey import Coefficients

    empty = np.empty(0, dtype=np.int64)
    return Coefficients(np.empty(0, dtype=np.uint32), empty, empty, np.empty((0, 4), dtype=np.uint64))


def loaded_key(path: str) -> Any | None:
    """The key at ``path`` if this process has read it, else None."""
    return _KEYS.get(path)


def drop_key(path: str) -> None:
    """Forget the key at ``path`` and its library points in this process (its memory was evicted)."""
    from ..groth16 import release

    _READ.pop(path, None)
    key = _KEYS.pop(path, None)
    if key is not None:
        release(key)
