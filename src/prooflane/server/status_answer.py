"""``GET /status`` as the daemon answers it: bounded, tagged, encoded once, gzipped for who takes it.

Everyone polls ``/status`` (the dashboard every 1.5 s and on every event, a fleet for each daemon it
follows), so an answer costs: a snapshot (each job's text is kept while it does not change), its tag, and,
only when the tag is new or the kept encoding older than ``REUSE_SECS``, an encoding (and a gzip of it).
A client whose ``If-None-Match`` names the tag is answered ``304 Not Modified`` with no body: its copy is
current but for what the clock moves (``prooflane.status.ages``). The tag is the snapshot's and the bounds'
(:func:`bounded_tag`): the same snapshot listed to other bounds (``?next=``, ``?ended=``, ``?jobs=``) is
another body, so another tag.
"""

from __future__ import annotations

import gzip
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from fastapi import Request, Response

__all__ = [
    "DEFAULT_ENDED",
    "DEFAULT_NEXT",
    "GZIP_FROM_BYTES",
    "MAX_LISTED",
    "REUSE_SECS",
    "StatusAnswers",
    "bounded_tag",
    "takes_gzip",
]

DEFAULT_NEXT = 20
"""Waiting jobs ``/status`` lists whole by default, the next to run (the rest are counted)."""
DEFAULT_ENDED = 20
"""Ended jobs (still in the live view) ``/status`` lists whole by default, the last to end."""
MAX_LISTED = 1000
"""The most of either a client may ask for (``?next=``, ``?ended=``); ``GET /v1/jobs`` pages the rest."""
REUSE_SECS = 1.0
"""How long an encoded answer is served again under the same tag (its clock fields that much older)."""
GZIP_FROM_BYTES = 4096
"""Answers this large or larger are gzipped for a client that accepts it."""
GZIP_LEVEL = 1  # the fastest: a 500 KB snapshot in about 3 ms, most of the gain of the higher levels


class TaggedSnapshot(Protocol):
    """What answering needs of a status snapshot."""

    def to_json_text(self) -> str: ...

    def bounded(self, waiting: int, ended: int) -> TaggedSnapshot: ...

    def tag(self) -> str: ...


@dataclass(slots=True)
class _Encoded:
    tag: str
    made_at: float
    body: bytes
    zipped: bytes | None = None  # made when a client first takes gzip


class StatusAnswers:
    """Answers ``GET /status`` from the engine's snapshots, keeping the last encoding of each bound asked."""

    def __init__(self, snapshot: Callable[[], TaggedSnapshot], clock: Callable[[], float] = time.monotonic):
        self._snapshot = snapshot
        self.clock = clock
        self._kept: dict[tuple[int, int], _Encoded] = {}
        self.encodings = 0  # how many times a snapshot was encoded (for tests and benchmarks)

    def answer(self, request: Request, waiting: int, ended: int) -> Response:
        """The answer to one request: ``waiting`` and ``ended`` jobs listed besides those holding work."""
        snapshot = self._snapshot()
        tag = bounded_tag(snapshot.tag(), waiting, ended)
        headers = {"ETag": tag, "Vary": "Accept-Encoding", "Cache-Control": "no-cache"}
        if _names(request.headers.get("if-none-match", ""), tag):
            return Response(status_code=304, headers=headers)
        bounds = (waiting, ended)
        now = self.clock()
        kept = self._kept.get(bounds)
        if kept is None or kept.tag != tag or now - kept.made_at > REUSE_SECS:
            body = snapshot.bounded(waiting, ended).to_json_text().encode()
            kept = self._kept[bounds] = _Encoded(tag, now, body)
            self.encodings += 1
            if len(self._kept) > 16:  # odd bounds asked once: keep the few in use
                self._kept = {bounds: kept}
        body = kept.body
        if takes_gzip(request.headers.get("accept-encoding", "")) and len(body) >= GZIP_FROM_BYTES:
            if kept.zipped is None:
                kept.zipped = gzip.compress(body, compresslevel=GZIP_LEVEL, mtime=0)
            body = kept.zipped
            headers["Content-Encoding"] = "gzip"
        return Response(body, media_type="application/json", headers=headers)


def bounded_tag(tag: str, waiting: int, ended: int) -> str:
    """A snapshot's entity tag for its answer listing ``waiting`` and ``ended`` jobs whole: every query
    parameter that changes the body is in it (``jobs`` sets both bounds), so no bound's copy passes for
    another's."""
    weak = "W/" if tag.startswith("W/") else ""
    return f'{weak}"{tag.removeprefix("W/").strip(chr(34))}.n{waiting}.e{ended}"'


def _names(if_none_match: str, tag: str) -> bool:
    """Whether an ``If-None-Match`` value names ``tag`` (weak comparison, RFC 9110 13.1.2) or is ``*``."""
    if not if_none_match:
        return False
    opaque = tag.removeprefix("W/")
    for given in if_none_match.split(","):
        given = given.strip()
        if given == "*" or given.removeprefix("W/") == opaque:
            return True
    return False


def takes_gzip(accepted: str) -> bool:
    """Whether an ``Accept-Encoding`` value takes gzip (``gzip`` or ``*``, without ``q=0``; RFC 9110)."""
    for part in accepted.split(","):
        coding, _, params = part.partition(";")
        if coding.strip().lower() not in ("gzip", "*"):
            continue
        params = params.strip().lower()
        quality = params.removeprefix("q=") if params.startswith("q=") else "1"
        try:
            return float(quality) > 0
        except ValueError:
            return False
    return False
