"""A synthesized partition kept in a shared-memory file, so that it crosses no pipe on its way to a worker.

A partition's vectors (8 MB at 62,500 rows: the witness, A·w, B·w, C·w) used to come back from the
synthesis pool through ``ProcessPoolExecutor``'s pipe: pickled whole, written, read and unpickled again,
30-36 ms of CPU a partition between the two ends (docs/engine.md, "Where the engine's extra CPU goes on
SHA-256"), and then sent on to the prover and the finalizer. Here the pool process pickles the result with
protocol 5, writes its large buffers (the arrays) into one file of the backend's folder in ``/dev/shm``
(:mod:`prooflane.shm`), and hands back a :class:`Parcel`: the small pickle and where each buffer lies. The
daemon passes the parcel on as it is; a worker's process :meth:`~Parcel.open`\\ s it, mapping the file
copy-on-write, so its arrays read the very pages the pool process wrote and stay writable.

Ownership: the daemon :meth:`~Parcel.claim`\\ s each parcel it receives, and the file is unlinked once the
daemon holds no reference to it (the partition was proved, retried or dropped). A worker that mapped it
keeps its pages until it lets go of the arrays. The backend removes the folder when it stops, and the next
backend removes any folder left by a daemon that no longer runs (one killed by SIGKILL).

Where the folder cannot be written (no ``/dev/shm``, or it is full), the parcel carries its buffers inline
and says why (``problem``): it then travels through the pipes as before, and the daemon logs the reason once.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import pickle
import tempfile
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["Parcel", "opened", "park", "unpark"]

_ALIGN = 64  # each buffer starts on a cache line (numpy and the C core read them as words)
_INLINE_BELOW = 1 << 16  # smaller buffers stay in the pickle


class Parcel:
    """An object pickled with its large buffers in the file ``path`` at ``spans`` (offset, size), or, when
    ``path`` is None, inline in ``inline`` (``problem`` says why the file could not be written)."""

    def __init__(
        self,
        head: bytes,
        path: str | None,
        spans: tuple[tuple[int, int], ...],
        inline: tuple[bytes, ...] = (),
        problem: str = "",
    ) -> None:
        self.head, self.path, self.spans, self.inline, self.problem = head, path, spans, inline, problem

    def __reduce__(self) -> tuple[Callable[..., Parcel], tuple[Any, ...]]:
        # A copy never owns the file: only the object the daemon claimed unlinks it.
        return Parcel, (self.head, self.path, self.spans, self.inline, self.problem)

    @property
    def nbytes(self) -> int:
        """Bytes of its buffers (in the file, or inline)."""
        return sum(size for _, size in self.spans) + sum(len(b) for b in self.inline)

    def claim(self) -> None:
        """Unlink the file once this object is gone (called once, by the daemon, on receiving it)."""
        if self.path is not None:
            weakref.finalize(self, _unlink, self.path)

    def open(self) -> Any:
        """The object, its arrays over a private (copy-on-write) mapping of the file."""
        if self.path is None:
            return pickle.loads(self.head, buffers=self.inline)
        if not self.spans:
            return pickle.loads(self.head)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            mapped = mmap.mmap(fd, 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)  # the mapping keeps the pages
        view = memoryview(mapped)
        return pickle.loads(self.head, buffers=[view[at : at + size] for at, size in self.spans])


def opened(value: Any) -> Any:
    """``value`` itself, or the object a :class:`Parcel` holds."""
    return value.open() if isinstance(value, Parcel) else value


def park(value: Any, folder: str, name: str | None = None) -> Parcel:
    """``value`` as a parcel, its buffers in a new file of ``folder`` (inline where it cannot be written),
    named ``name`` when given (the daemon then knows the file's name before it is written, and removes it
    when the process writing it is ended: :func:`unpark`)."""
    buffers: list[pickle.PickleBuffer] = []

    def out_of_band(buffer: pickle.PickleBuffer) -> bool:
        if buffer.raw().nbytes < _INLINE_BELOW:
            return True  # pickled in band
        buffers.append(buffer)
        return False

    head = pickle.dumps(value, protocol=5, buffer_callback=out_of_band)
    raw = [b.raw() for b in buffers]
    try:
        path, spans = _write(raw, folder, name)
    except OSError as exc:
        return Parcel(head, None, (), tuple(r.tobytes() for r in raw), exc.strerror or str(exc))
    return Parcel(head, path, spans)


def _write(raw: list[memoryview], folder: str, name: str | None) -> tuple[str, tuple[tuple[int, int], ...]]:
    if name is None:
        fd, path = tempfile.mkstemp(dir=folder, suffix=".parcel")
    else:
        path = os.path.join(folder, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    spans, at = [], 0
    try:
        with os.fdopen(fd, "wb") as file:
            for r in raw:
                pad = -at % _ALIGN
                file.write(b"\0" * pad)
                at += pad
                file.write(r)  # tmpfs says ENOSPC here when it is full
                spans.append((at, r.nbytes))
                at += r.nbytes
    except OSError:
        _unlink(path)
        raise
    return path, tuple(spans)


def unpark(folder: str, name: str) -> None:
    """Remove the file a parcel named ``name`` was being written to in ``folder``, if it is there (its
    process was ended before the daemon claimed it)."""
    _unlink(os.path.join(folder, name))


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
