"""The proving keys' files, kept on disk while the daemon runs.

A worker reads a key's file when it first proves a partition of it, and a circom circuit's synthesis reads
its key too; a file deleted meanwhile (a cleanup script, an operator's ``rm``) would fail every partition
that needs it while health said nothing. So the files are watched (:meth:`KeyFiles.run`, every
``CHECK_SECS``, a ``stat`` each) and looked at again before a job is accepted and before a worker loads a
key (:meth:`KeyFiles.ensure`):

- a built-in kind's key, missing from the keys folder, is made again (the same key, byte for byte: its
  development setup has a fixed seed), one remake at a time per kind, health saying so meanwhile;
- a registered circuit's key, missing from the data folder, cannot be made again: its jobs are refused
  (503, naming the file and what to do), health says so, and registering the circuit again (the same
  files) puts it back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Mapping

from ..errors import Unavailable
from ..kinds import CircuitMeta

__all__ = ["CHECK_SECS", "KeyFiles"]

log = logging.getLogger("prooflane.engine")

CHECK_SECS = 5.0
"""How often every key file is looked at."""

Remake = Callable[[str], Awaitable[CircuitMeta]]
"""Make a built-in kind's key again (its name): the prepared circuit, with the key written."""


class KeyFiles:
    """The watch over the key files of ``builtin`` (kind -> its circuit, as the registry keeps it) and of
    ``registered`` (circuit name -> its circuit); ``remake`` makes a built-in kind's key again."""

    def __init__(
        self,
        builtin: Mapping[str, CircuitMeta],
        registered: Callable[[], Mapping[str, CircuitMeta]],
        remake: Remake,
    ) -> None:
        self._builtin = builtin
        self._registered = registered
        self._remake = remake
        self._remaking: dict[str, asyncio.Future[None]] = {}  # kind -> its remake in progress
        self._failed: dict[str, str] = {}  # kind -> why its last remake failed
        self._missing: dict[str, str] = {}  # registered circuit -> its missing key file (as last seen)

    def problems(self) -> list[str]:
        """Health's reasons (as of the last look): keys being made again, or missing for good."""
        said = [
            f"the key of {kind} was missing from the keys folder: being made again" for kind in self._remaking
        ]
        said += [
            f"the key of {kind} is missing from the keys folder and could not be made again: {why}"
            for kind, why in self._failed.items()
        ]
        said += [_missing(name, path) for name, path in self._missing.items()]
        return said

    async def ensure(self, meta: CircuitMeta) -> None:
        """Return once ``meta``'s key file is on disk: a built-in kind's is made again when missing; a
        registered circuit's missing raises ``Unavailable`` naming the file and what to do."""
        if os.path.exists(meta.key_path):  # noqa: ASYNC240 (a stat: microseconds, as the journal's reads)
            return
        kind = self._kind_of(meta)
        if kind is None:  # a registered circuit: its files came from its user
            name = meta.key_name.removeprefix("circom:")
            self._missing[name] = meta.key_path
            raise Unavailable(_missing(name, meta.key_path))
        await self._made_again(kind)

    def found(self, name: str) -> None:
        """A registered circuit's files are back (registered again)."""
        self._missing.pop(name, None)

    async def run(self) -> None:
        """Look at every key file every ``CHECK_SECS``, until cancelled; remake what is missing."""
        while True:
            await asyncio.sleep(CHECK_SECS)
            await self.look()

    async def look(self) -> None:
        """One look at every key file (a ``stat`` each, in a thread)."""
        builtin = dict(self._builtin)
        registered = dict(self._registered())
        paths = [m.key_path for m in (*builtin.values(), *registered.values())]
        present = dict(zip(paths, await asyncio.to_thread(_present, paths), strict=True))
        self._missing = {n: m.key_path for n, m in registered.items() if not present[m.key_path]}
        for kind, meta in builtin.items():
            if not present[meta.key_path] and kind not in self._remaking:
                with contextlib.suppress(Unavailable):  # said by problems() until a remake works
                    await self._made_again(kind)

    def _kind_of(self, meta: CircuitMeta) -> str | None:
        return next((k for k, m in self._builtin.items() if m.key_path == meta.key_path), None)

    async def _made_again(self, kind: str) -> None:
        """The one remake of ``kind``'s key in progress (started when there is none); ``Unavailable`` when
        it fails."""
        remake = self._remaking.get(kind)
        if remake is None:
            remake = self._remaking[kind] = asyncio.ensure_future(self._make(kind))
            remake.add_done_callback(lambda _: self._remaking.pop(kind, None))
        await asyncio.shield(remake)
        if (why := self._failed.get(kind)) is not None:
            raise Unavailable(
                f"the key of {kind} is missing from the keys folder and could not be made again: {why}"
            )

    async def _make(self, kind: str) -> None:
        path = self._builtin[kind].key_path
        log.warning("the key of %s is missing (%s): making it again", kind, path, extra={"kind": kind})
        try:
            await self._remake(kind)
        except Exception as exc:  # a full disk, a pool that died: said by health and the next job
            self._failed[kind] = str(exc) or type(exc).__name__
            log.error("the key of %s could not be made again: %s", kind, exc, extra={"kind": kind})
            return
        self._failed.pop(kind, None)
        log.info("the key of %s is made again (%s)", kind, path, extra={"kind": kind})


def _present(paths: list[str]) -> list[bool]:
    return [os.path.exists(p) for p in paths]


def _missing(name: str, path: str) -> str:
    return (
        f"circuit {name!r}: its key file {path} is missing from the data folder: its jobs are refused "
        "until it is registered again (the same files)"
    )
