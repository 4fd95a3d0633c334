"""A process's cache of key sections (library points, device buffers), kept for its last few keys."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class SectionCache(Generic[T]):
    """Built base sections keyed by (key digest, section name), holding the sections of at most ``keys``
    keys: using a section makes its key the newest, and a new key past the limit evicts the oldest key's
    sections together. Safe to use from several threads (two workers of one process may build at once;
    a section built twice meanwhile is kept once)."""

    def __init__(self, keys: int, where: str) -> None:
        self.keys = keys
        self.where = where  # "loaded in this process", for the LookupError of a section not built
        self._held: OrderedDict[tuple[str, str], T] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, digest: str, name: str, build: Callable[[], T] | None) -> T:
        """The section, built by ``build()`` (outside the lock) when it is not held; ``build=None`` means
        "must be held" (else LookupError)."""
        with self._lock:
            found = self._held.get((digest, name))
            if found is not None:
                self._touch(digest)
                return found
        if build is None:
            raise LookupError(f"bases {name} of key {digest[:12]} are not {self.where}")
        made = build()
        with self._lock:
            self._held[(digest, name)] = made
            self._touch(digest)
            while len({d for d, _ in self._held}) > self.keys:
                self._drop(next(iter(self._held))[0])
        return made

    def replace(self, digest: str, name: str, old: T, new: T) -> None:
        """Hold ``new`` for the section in place of ``old`` (a richer build of it), unless the section
        is no longer ``old`` (dropped or replaced meanwhile)."""
        with self._lock:
            if self._held.get((digest, name)) is old:
                self._held[(digest, name)] = new

    def holds(self, digest: str, name: str) -> bool:
        with self._lock:
            return (digest, name) in self._held

    def release(self, digest: str) -> None:
        """Drop every section of the key ``digest``."""
        with self._lock:
            self._drop(digest)

    def _touch(self, digest: str) -> None:
        """Make the key ``digest`` the newest: its sections move to the end, the oldest key's stay first."""
        for k in [k for k in self._held if k[0] == digest]:
            self._held.move_to_end(k)

    def _drop(self, digest: str) -> None:
        for k in [k for k in self._held if k[0] == digest]:
            del self._held[k]
