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

A key file changed since the daemon accepted it (rewritten or cut short in place, or replaced: its
:func:`~prooflane.files.fingerprint` differs) is a missing key: a built-in kind's is removed and made again,
a registered circuit's jobs are refused until it is registered again. The daemon makes its key files
read-only, and every process that maps one reads it again when its file changed (``stat`` before each use),
so no process proves with, or faults on, bytes that are no longer the key's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Mapping

from ..errors import Unavailable
from ..files import Fingerprint, fingerprint
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
        self._changed: dict[str, str] = {}  # registered circuit -> how its key file changed
        self._accepted: dict[str, Fingerprint] = {}  # key path -> its file as the daemon accepted it

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
        said += list(self._changed.values())
        return said

    def accept(self, path: str) -> None:
        """``path`` as it is now is the key's file (just written, copied or registered)."""
        if (now := fingerprint(path)) is not None:
            self._accepted[path] = now

    def changed(self, name: str) -> bool:
        """Whether registered circuit ``name``'s key file changed since it was registered."""
        return name in self._changed

    async def ensure(self, meta: CircuitMeta) -> None:
        """Return once ``meta``'s key file is on disk as the daemon accepted it: a built-in kind's is made
        again when missing or changed; a registered circuit's missing or changed raises ``Unavailable``
        naming the file and what to do."""
        now = fingerprint(meta.key_path)  # a stat: microseconds, as the journal's reads
        kind = self._kind_of(meta)
        if kind is None:  # a registered circuit: its files came from its user
            name = meta.key_name.removeprefix("circom:")
            if now is None:
                self._missing[name] = meta.key_path
                raise Unavailable(_missing(name, meta.key_path))
            if self._differs(name, meta.key_path, now) or name in self._changed:
                raise Unavailable(self._changed[name])
            return
        if now is None:
            await self._made_again(kind)
        elif self._differs(kind, meta.key_path, now):
            await self._changed_builtin(kind, meta.key_path)

    def found(self, name: str, path: str) -> None:
        """A registered circuit's files are back (registered again): ``path``, its key file, as it is now."""
        self._missing.pop(name, None)
        self._changed.pop(name, None)
        self.accept(path)

    def _differs(self, name: str, path: str, now: Fingerprint) -> bool:
        """Whether ``path`` differs from the file accepted (the first sight of it is accepted); for a
        registered circuit the change is remembered, said by health and every refusal."""
        accepted = self._accepted.setdefault(path, now)
        if accepted == now:
            return False
        if self._kind_of_path(path) is None and name not in self._changed:
            self._changed[name] = _changed(name, path, accepted, now)
            log.error("%s", self._changed[name], extra={"circuit": name})
        return True

    async def _changed_builtin(self, kind: str, path: str) -> None:
        """A built-in kind's key file changed in place: removed, then made again (the same key)."""
        log.warning("the key of %s changed on disk (%s): removed, to be made again", kind, path,
                    extra={"kind": kind})  # fmt: skip
        self._accepted.pop(path, None)
        with contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread(os.unlink, path)
        await self._made_again(kind)

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
        files = dict(zip(paths, await asyncio.to_thread(_fingerprints, paths), strict=True))
        self._missing = {n: m.key_path for n, m in registered.items() if files[m.key_path] is None}
        for name, meta in registered.items():
            if (now := files[meta.key_path]) is not None:
                self._differs(name, meta.key_path, now)
        for kind, meta in builtin.items():
            if kind in self._remaking:
                continue
            now = files[meta.key_path]
            with contextlib.suppress(Unavailable):  # said by problems() until a remake works
                if now is None:
                    await self._made_again(kind)
                elif self._differs(kind, meta.key_path, now):
                    await self._changed_builtin(kind, meta.key_path)

    def _kind_of(self, meta: CircuitMeta) -> str | None:
        return self._kind_of_path(meta.key_path)

    def _kind_of_path(self, path: str) -> str | None:
        return next((k for k, m in self._builtin.items() if m.key_path == path), None)

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
        self.accept(path)
        log.info("the key of %s is made again (%s)", kind, path, extra={"kind": kind})


def _fingerprints(paths: list[str]) -> list[Fingerprint | None]:
    return [fingerprint(p) for p in paths]


def _changed(name: str, path: str, accepted: Fingerprint, now: Fingerprint) -> str:
    how = (
        "replaced by another file" if accepted[:2] != now[:2]
        else f"rewritten in place ({accepted[2]:,} bytes, now {now[2]:,})"
    )  # fmt: skip
    return (
        f"circuit {name!r}: its key file {path} changed on disk since it was registered ({how}): its jobs "
        "are refused until it is registered again (the same files)"
    )


def _missing(name: str, path: str) -> str:
    return (
        f"circuit {name!r}: its key file {path} is missing from the data folder: its jobs are refused "
        "until it is registered again (the same files)"
    )
