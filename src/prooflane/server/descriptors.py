"""A server's file descriptors: the open-files limit raised at start, connections capped below it, and an
``accept()`` that fails for want of descriptors backed off and logged once a minute.

- :func:`raise_fd_limit` and :func:`connection_cap`: the soft limit raised to the hard limit; at most that
  many connections, less ``FD_RESERVE`` kept for the process's own files.
- :func:`back_off_accept_errors`: asyncio's accept loop (3.11 to 3.13 at least) goes on after an
  ``accept()`` failed with EMFILE, ENFILE, ENOBUFS or ENOMEM, for its whole backlog (2,048 attempts each
  time the socket is ready), each attempt logging a line with its traceback and scheduling one more retry:
  a full descriptor table once wrote 936,000 lines in 40 s. With this, the first such failure ends the round,
  and asyncio tries again a second later, as it means to. A round also ends after ``ACCEPT_BATCH``
  connections: asyncio would accept a whole burst (its backlog) before the connection cap sees any of them.
- :func:`quiet_accept_errors`: asyncio's "accept() out of system resource" logged once a minute, with how
  many were left out, not for every attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import resource
import socket
import time
from typing import Any

__all__ = [
    "ACCEPT_BATCH",
    "FD_RESERVE",
    "back_off_accept_errors",
    "connection_cap",
    "quiet_accept_errors",
    "raise_fd_limit",
]

FD_RESERVE = 256
"""File descriptors kept for the daemon's own use (journal, pipes and pidfds of workers, keys) beyond its
connections."""


def raise_fd_limit() -> int:
    """Raise this process's soft limit of open files to its hard limit; return the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def connection_cap(max_connections: int) -> int:
    """``max_connections``, lowered where the open-files limit would not hold that many and ``FD_RESERVE``."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return max_connections
    return max(16, min(max_connections, soft - FD_RESERVE))


class _OncePerMinute(logging.Filter):
    """Lets asyncio's "accept() out of system resource" through once a minute, counting the rest."""

    def __init__(self) -> None:
        super().__init__()
        self._last = float("-inf")
        self._dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if "out of system resource" not in record.getMessage():
            return True
        now = time.monotonic()
        if now - self._last < 60.0:
            self._dropped += 1
            return False
        if self._dropped:
            record.msg = f"{record.msg} ({self._dropped} more since the last such line)"
        self._last, self._dropped = now, 0
        record.exc_info = None  # the cause is in the message; the traceback says nothing more
        return True


def quiet_accept_errors() -> None:
    """Install :class:`_OncePerMinute` on asyncio's logger (once)."""
    logger = logging.getLogger("asyncio")
    if not any(isinstance(f, _OncePerMinute) for f in logger.filters):
        logger.addFilter(_OncePerMinute())


_EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
ACCEPT_BATCH = 32
"""The most connections one round of the accept loop takes (asyncio's own: the listen backlog, 2,048)."""


class _AcceptRound:
    """A listening socket as one round of asyncio's accept loop sees it: after ``ACCEPT_BATCH`` connections,
    or once an ``accept()`` has failed for want of resources, it says "nothing more to accept"
    (``BlockingIOError``), so the loop returns. After a failure asyncio retries a second later (once);
    after a full batch the next round comes at the loop's next turn, once the connections accepted have
    been admitted or turned away (so a burst of connections cannot take every descriptor before the
    connection cap sees one of them)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._left = ACCEPT_BATCH
        self._exhausted = False

    def accept(self) -> tuple[socket.socket, Any]:
        if self._exhausted or self._left <= 0:
            raise BlockingIOError(errno.EAGAIN, "this round of accepts is over")
        try:
            accepted = self.sock.accept()
        except OSError as exc:
            self._exhausted = exc.errno in _EXHAUSTED
            raise
        self._left -= 1
        return accepted

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


def back_off_accept_errors(loop: asyncio.AbstractEventLoop) -> None:
    """Make ``loop``'s accept rounds end at the first ``accept()`` out of resources, and after
    ``ACCEPT_BATCH`` connections (once per loop; a loop without asyncio's selector accept is left as it
    is)."""
    accept = getattr(loop, "_accept_connection", None)
    if accept is None or getattr(accept, "backs_off", False):
        return

    def accept_connection(protocol_factory: Any, sock: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(sock, _AcceptRound):  # the retry asyncio scheduled passes its socket back
            sock = sock.sock
        accept(protocol_factory, _AcceptRound(sock), *args, **kwargs)

    accept_connection.backs_off = True  # type: ignore[attr-defined]
    loop._accept_connection = accept_connection  # type: ignore[attr-defined]
