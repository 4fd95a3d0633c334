"""Circuits across the fleet: one upload registered on every daemon followed (or a chosen set), and which
daemon holds which circuit, by digest.

``PUT /fleet/circuits/{name}`` takes the body a daemon's ``PUT /v1/circuits/{name}`` takes (multipart: a part
``zkey``, then optionally ``wasm``). The fleet spools it to a temporary file as it arrives (never held in
memory; at most ``max_upload_bytes``), then sends that file to each daemon at once, streamed from disk, with
the daemon's own token, and answers each daemon's outcome. ``GET /fleet/circuits`` asks each reachable
daemon for its ``/v1/circuits`` and says, per circuit and digest, which daemons hold it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx

from .follower import FETCH_ERRORS, DaemonFollower, describe_failure
from .service import Fleet

__all__ = ["UploadRefused", "circuit_holdings", "register_everywhere", "spooled"]

_CHUNK = 1 << 20
_ANSWER_SECS = 600.0  # a daemon checks an upload (inspects its key) before it answers


class UploadRefused(Exception):
    """Raised when the fleet refuses an upload before sending it anywhere; carries the HTTP status."""

    def __init__(self, status: int, detail: str) -> None:
        self.status = status
        self.detail = detail
        super().__init__(detail)


@contextlib.asynccontextmanager
async def spooled(chunks: AsyncIterator[bytes], limit: int) -> AsyncIterator[Path]:
    """The body written to a temporary file as it arrives (at most ``limit`` bytes); removed afterwards."""
    fd, name = await asyncio.to_thread(tempfile.mkstemp, prefix="prooflane-fleet-upload-")
    path = Path(name)
    try:
        size = 0
        try:
            async for chunk in chunks:
                size += len(chunk)
                if size > limit:
                    raise UploadRefused(413, f"upload too large: at most {limit:,} bytes (max_upload_bytes)")
                await asyncio.to_thread(_write, fd, chunk)
        except OSError as exc:
            full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
            raise UploadRefused(507 if full else 503, f"cannot spool the upload: {exc.strerror}") from None
        finally:
            os.close(fd)
        yield path
    finally:
        await asyncio.to_thread(path.unlink, True)


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


async def register_everywhere(
    fleet: Fleet, name: str, body: Path, headers: dict[str, str], params: dict[str, str], chosen: list[str]
) -> dict[str, Any]:
    """Send the spooled upload to each daemon of ``chosen`` (all followed when empty) at once; each one's
    outcome: ``ok``, its ``status`` and the circuit it answered, or the ``detail`` of its refusal."""
    unknown = [d for d in chosen if d not in fleet.followers]
    if unknown:
        raise UploadRefused(404, f"no daemon named {', '.join(map(repr, unknown))} in the fleet")
    followers = [fleet.followers[d] for d in chosen] if chosen else list(fleet.followers.values())
    if not followers:
        raise UploadRefused(409, "the fleet follows no daemon to register the circuit on")
    outcomes = await asyncio.gather(*(_send(f, name, body, headers, params) for f in followers))
    daemons = {f.spec.name: outcome for f, outcome in zip(followers, outcomes, strict=True)}
    return {"name": name, "ok": all(o["ok"] for o in outcomes), "daemons": daemons}


async def _send(
    follower: DaemonFollower, name: str, body: Path, headers: dict[str, str], params: dict[str, str]
) -> dict[str, Any]:
    timeout = httpx.Timeout(follower.config.timeout_secs, read=_ANSWER_SECS, write=_ANSWER_SECS)
    size = (await asyncio.to_thread(body.stat)).st_size
    sized = headers | {"content-length": str(size)}
    try:
        client = await follower.http()
        answer = await client.put(
            f"/v1/circuits/{name}", params=params, headers=sized, content=_read(body), timeout=timeout
        )
    except FETCH_ERRORS as exc:
        return {"ok": False, "status": None, "detail": describe_failure(exc)}
    try:
        said: Any = answer.json()
    except ValueError:
        said = {"detail": answer.text}
    if answer.status_code == 201:
        return {"ok": True, "status": 201, "circuit": said}
    detail = said.get("detail") if isinstance(said, dict) else None
    return {"ok": False, "status": answer.status_code, "detail": str(detail or answer.text)}


async def _read(path: Path) -> AsyncIterator[bytes]:
    file = await asyncio.to_thread(open, path, "rb")
    try:
        while chunk := await asyncio.to_thread(file.read, _CHUNK):
            yield chunk
    finally:
        file.close()


async def circuit_holdings(fleet: Fleet) -> dict[str, Any]:
    """``GET /fleet/circuits``: each circuit (name and digest) any daemon holds, and per daemon whether it
    holds it (``holds``), holds other files under the name (``other``), lacks it (``missing``) or could not
    be asked (``unknown``; ``errors`` says why)."""
    followers = list(fleet.followers.values())
    answers = await asyncio.gather(*(_circuits_of(f) for f in followers))
    asked = dict(zip((f.spec.name for f in followers), answers, strict=True))
    by_name: dict[str, dict[str, str]] = {}  # circuit name -> daemon -> digest
    for daemon, listed in asked.items():
        for circuit in listed if isinstance(listed, list) else []:
            by_name.setdefault(str(circuit.get("name")), {})[daemon] = str(circuit.get("digest", ""))
    circuits = [
        {"name": name, "digest": digest, "daemons": dict(_where(asked, held, digest))}
        for name, held in sorted(by_name.items())
        for digest in sorted(set(held.values()))
    ]
    daemons = {d: None if isinstance(a, list) else a for d, a in asked.items()}
    return {"circuits": circuits, "errors": daemons}


def _where(
    asked: dict[str, list[dict[str, Any]] | str], held: dict[str, str], digest: str
) -> Iterator[tuple[str, str]]:
    for daemon, listed in asked.items():
        if not isinstance(listed, list):
            yield daemon, "unknown"
        elif daemon not in held:
            yield daemon, "missing"
        else:
            yield daemon, "holds" if held[daemon] == digest else "other"


async def _circuits_of(follower: DaemonFollower) -> list[dict[str, Any]] | str:
    """The daemon's ``GET /v1/circuits``, or why it could not be had."""
    try:
        answer = await follower.get("/v1/circuits")
        listed = answer.json() if answer.status_code == 200 else None
    except FETCH_ERRORS as exc:
        return describe_failure(exc)
    if not isinstance(listed, list):
        return f"/v1/circuits answered {answer.status_code}"
    return [c for c in listed if isinstance(c, dict)]
