"""Files named in requests: confined to the allowed roots, regular files only, read with a limit.

A request names paths on the daemon's machine (sector folders, ``.wtns`` witnesses, a circuit's ``.zkey``
and ``.wasm``), which the daemon reads with its own permissions. Before it reads any of them:

- the path must be absolute and lie inside one of the allowed roots (:class:`Roots`), both as written and
  once resolved with every symlink followed (``Path.resolve(strict=True)``); else :class:`PathForbidden`.
  A path outside the roots as written is refused before the file system is touched, so a refusal says
  nothing about what exists there;
- a file must be a regular file (``lstat``, before it is opened: a FIFO, a device, a socket, a folder or
  a symlink in its place is refused unopened), no larger than its limit; it is then opened with
  ``O_NONBLOCK | O_NOFOLLOW`` (should it have been swapped meanwhile, opening a FIFO never waits for a
  writer and a symlink is not followed) and ``fstat``-ed again; else :class:`FileRefused`, naming the file
  and what it is;
- it is read in chunks with that limit, so a file that grows after the check is still cut off.

Only this module's functions touch such paths; they block, so the engine calls them off its event loop.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from .errors import Forbidden, Invalid, ProoflaneError, Refused, Unavailable

__all__ = [
    "CHUNK_BYTES",
    "IO_TIMEOUT_SECS",
    "KEPT_MODE",
    "FileRefused",
    "Fingerprint",
    "PathForbidden",
    "Roots",
    "copy_limited",
    "describe_mode",
    "fingerprint",
    "off_loop",
    "open_regular",
    "read_limited",
    "refusal",
]

T = TypeVar("T")

KEPT_MODE = 0o444
"""The daemon's own copies of keys, circuits and witnesses are read-only from the moment they are made: a
process maps them, and a file rewritten or cut short under a mapping changes its bytes or kills the process
(SIGBUS)."""

Fingerprint = tuple[int, int, int, int]
"""A file's identity and version: device, inode, size, modification time (ns)."""

CHUNK_BYTES = 1 << 20
"""How much one read takes (a copy checks for cancellation between chunks)."""

IO_TIMEOUT_SECS = 120.0
"""The longest the checks (and copies) of the files one request names may take before it is answered 503."""


class FileRefused(ProoflaneError):
    """Raised when a file named in a request cannot be read safely: missing, a symlink loop, not a regular
    file (a FIFO, a device, a socket, a folder) or larger than its limit; names the file and the problem."""


class PathForbidden(ProoflaneError):
    """Raised when a path named in a request lies outside the folders the daemon may read."""


class Hasher(Protocol):
    """What :func:`copy_limited` feeds the bytes it copies (a ``hashlib`` object)."""

    def update(self, data: bytes, /) -> None: ...


@dataclass(frozen=True)
class Roots:
    """The folders whose files requests may name: each as configured and as resolved (symlinks followed)."""

    folders: tuple[Path, ...]

    @classmethod
    def of(cls, folders: Iterable[Path]) -> Roots:
        """The roots, absolute and normalized; each also with its resolved form (a root may be a symlink)."""
        out: list[Path] = []
        for folder in folders:
            plain = Path(os.path.normpath(Path(folder).expanduser().absolute()))
            for form in (plain, plain.resolve()):
                if form not in out:
                    out.append(form)
        return cls(tuple(out))

    def contains(self, path: Path) -> bool:
        """Whether ``path`` (absolute, normalized) is one of the roots or lies below one."""
        return any(path.is_relative_to(root) for root in self.folders)

    def confine(self, path: str | Path, label: str) -> Path:
        """``path`` resolved (it must exist), when it lies inside the roots as written and as resolved.

        Raises :class:`PathForbidden` (outside) or :class:`FileRefused` (relative, missing, a symlink loop,
        unreadable). ``label`` names the request's field in messages ("sector", "witnesses[0]", "zkey").
        """
        text = str(path)
        if "\x00" in text:
            raise FileRefused(f"{label} {text!r}: a path may not contain a NUL byte")
        given = Path(text)
        if not given.is_absolute():
            raise FileRefused(f"{label} {text!r}: expected an absolute path on the daemon's machine")
        if not self.contains(Path(os.path.normpath(given))):
            raise self._forbidden(label, text, None)
        try:
            resolved = given.resolve(strict=True)
        except RuntimeError:  # Python 3.11's resolve reports a symlink loop this way
            raise FileRefused(f"{label} {text!r}: a symlink loop") from None
        except OSError as exc:
            raise FileRefused(f"{label} {text!r}: {_os_problem(exc)}") from None
        if not self.contains(resolved):
            raise self._forbidden(label, text, resolved)
        return resolved

    def _forbidden(self, label: str, text: str, resolved: Path | None) -> PathForbidden:
        via = f" (it resolves to {str(resolved)!r})" if resolved is not None else ""
        allowed = ", ".join(str(f) for f in self.folders)
        return PathForbidden(
            f"{label} {text!r}{via}: outside the folders this daemon may read ({allowed}); "
            "the operator lists them in allowed_roots"
        )


_MODES = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
)


def fingerprint(path: str | Path) -> Fingerprint | None:
    """The file at ``path`` as it is now (None when there is none): any rewrite, truncation or replacement
    changes it."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


def describe_mode(mode: int) -> str:
    """What a file of ``mode`` (``st_mode``) is, in words."""
    return next((words for test, words in _MODES if test(mode)), "not a regular file")


def open_regular(path: str | Path, limit: int, label: str) -> tuple[int, int]:
    """Open ``path`` for reading without following a symlink or waiting on a FIFO; (fd, size).

    Raises :class:`FileRefused` unless it is a regular file of at most ``limit`` bytes. The caller closes
    the descriptor.
    """
    text = str(path)
    try:  # first without opening it: opening a device file can do something by itself
        mode = os.lstat(text).st_mode
    except OSError as exc:
        raise FileRefused(f"{label} {text!r}: {_os_problem(exc)}") from None
    if not stat.S_ISREG(mode):
        raise FileRefused(f"{label} {text!r}: {describe_mode(mode)}, expected a regular file")
    try:
        fd = os.open(text, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symlink (or a loop of them)
            raise FileRefused(f"{label} {text!r}: a symbolic link, expected a regular file") from None
        raise FileRefused(f"{label} {text!r}: {_os_problem(exc)}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileRefused(f"{label} {text!r}: {describe_mode(info.st_mode)}, expected a regular file")
        if info.st_size > limit:
            raise FileRefused(f"{label} {text!r}: {info.st_size} bytes, more than the {limit} accepted")
        os.set_blocking(fd, True)  # a regular file: reads never wait on a writer
    except BaseException:
        os.close(fd)
        raise
    return fd, info.st_size


def read_limited(path: str | Path, limit: int, label: str, *, exact: bool = False) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them (more is :class:`FileRefused`);
    with ``exact``, exactly ``limit`` of them (another size is refused before anything is read)."""
    fd, size = open_regular(path, limit, label)
    try:
        if exact and size != limit:
            raise FileRefused(f"{label} {str(path)!r}: {size} bytes, expected {limit}")
        data = bytearray()
        while chunk := os.read(fd, min(CHUNK_BYTES, limit + 1 - len(data))):
            data += chunk
            if len(data) > limit:
                raise FileRefused(f"{label} {str(path)!r}: grew past the {limit} bytes accepted")
        if exact and len(data) != limit:
            raise FileRefused(f"{label} {str(path)!r}: {len(data)} bytes, expected {limit}")
        return bytes(data)
    finally:
        os.close(fd)


def copy_limited(
    source: str | Path,
    target: Path,
    limit: int,
    label: str,
    hasher: Hasher,
    cancelled: threading.Event | None = None,
) -> int:
    """Copy the regular file ``source`` to a new file ``target`` (never overwritten), feeding ``hasher``
    every byte; the bytes copied. Stops with :class:`FileRefused` past ``limit`` bytes, and when
    ``cancelled`` is set (the request was given up). The caller removes ``target`` on failure."""
    fd, _ = open_regular(source, limit, label)
    try:
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, KEPT_MODE)
        copied = 0
        try:
            while chunk := os.read(fd, CHUNK_BYTES):
                copied += len(chunk)
                if copied > limit:
                    raise FileRefused(f"{label} {str(source)!r}: grew past the {limit} bytes accepted")
                if cancelled is not None and cancelled.is_set():
                    raise FileRefused(f"{label} {str(source)!r}: the copy was given up")
                hasher.update(chunk)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view) :]
        finally:
            os.close(out)
        return copied
    finally:
        os.close(fd)


def _os_problem(exc: OSError) -> str:
    if exc.errno == errno.ENOENT or exc.errno == errno.ENOTDIR:
        return "no such file or folder on the daemon's machine"
    if exc.errno == errno.ELOOP:
        return "a symlink loop"
    if exc.errno == errno.EACCES or exc.errno == errno.EPERM:
        return "the daemon may not read it (permission denied)"
    return exc.strerror or str(exc)


async def off_loop(call: Callable[..., T], *args: Any) -> T:
    """``call(*args)`` in a thread, so the event loop never waits on a file; 503 past ``IO_TIMEOUT_SECS``.

    The thread cannot be stopped: a call that may run long takes a ``threading.Event`` it checks, and the
    caller sets it when it gives up (see :func:`copy_limited`).
    """
    try:
        async with asyncio.timeout(IO_TIMEOUT_SECS):
            return await asyncio.to_thread(call, *args)
    except TimeoutError:
        raise Unavailable(
            f"the files named in the request could not be read within {IO_TIMEOUT_SECS:g} s: try again later"
        ) from None


def refusal(exc: ProoflaneError) -> Refused:
    """The HTTP answer to a refused file: 403 outside the allowed roots, 422 anything else."""
    if isinstance(exc, Refused):
        return exc
    return (Forbidden if isinstance(exc, PathForbidden) else Invalid)(str(exc))
