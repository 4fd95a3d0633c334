"""The proving keys a device process holds: read once per process, their library points built on demand.

Runs inside device processes (and in the daemon's own process for the in-process backend). The engine
accounts for each worker's loaded keys in the memory budget and tells the worker to drop one when the
budget evicts it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["drop_key", "load_key"]

_KEYS: dict[str, Any] = {}  # key path -> ProvingKey, in this process


def load_key(path: str, parts: tuple[str, ...] = ()) -> Any:
    """The proving key at ``path``, read once per process; the library points of its base sections
    ``parts`` (of "a", "b1", "b2", "c", "h") are built now when not built yet."""
    from ..groth16 import preload, read_zkey

    key = _KEYS.get(path)
    if key is None:
        key = _KEYS[path] = read_zkey(path)
    if parts:
        preload(key, parts)
    return key


def drop_key(path: str) -> None:
    """Forget the key at ``path`` and its library points in this process (its memory was evicted)."""
    from ..groth16 import release

    key = _KEYS.pop(path, None)
    if key is not None:
        release(key)
