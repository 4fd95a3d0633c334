"""The upload routes' multipart reader (``MultipartReader``, on python-multipart's parser), fuzzed.

Generated bodies (parts whose data hold delimiter-like lines: the boundary followed by other bytes, a
boundary cut short, CR and LF alone), cut into chunks at random, read back part for part; damaged bodies
(cut anywhere, bytes changed) end in ``Invalid`` or in parts, never in another exception or a hang. And
the three ways the parser prooflane had before went wrong: a head over the bound in one read, a
``BOUNDARY=`` in upper case, a ``--boundaryX`` line inside the data.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator

import anyio
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prooflane.errors import Invalid
from prooflane.server.upload import MAX_PART_HEADER_BYTES, MultipartReader, _reader

BOUNDARY = "b0Und4ry"
NAMES = st.sampled_from(["zkey", "wasm", "wtns"])
# Data made of pieces that look like the parser's syntax, so the fuzzing reaches its edges.
PIECES = st.sampled_from([
    b"\r\n", b"\r", b"\n", b"--", b"-", f"--{BOUNDARY}".encode(), f"\r\n--{BOUNDARY}X".encode(),
    f"\r\n--{BOUNDARY[:-1]}".encode(), f"--{BOUNDARY}--".encode(), b"Content-Disposition: x",
])  # fmt: skip
# A line of the boundary then "--", or then only spaces, is a delimiter (RFC 2046): a sender picks a boundary
# its data never holds so, and so do these (the CRLFs around a part's data included).
_DELIMITER = re.compile(rb"\r\n--" + re.escape(BOUNDARY.encode()) + rb"(--|[ \t]*\r\n)")
DATA = (
    st.lists(st.one_of(PIECES, st.binary(max_size=40)), max_size=12)
    .map(b"".join)
    .filter(lambda d: not _DELIMITER.search(b"\r\n" + d + b"\r\n"))
)


def body_of(parts: list[tuple[str, bytes]], boundary: str = BOUNDARY) -> bytes:
    head = 'Content-Disposition: form-data; name="{}"; filename="f"\r\nContent-Type: application/octet-stream'
    return (
        b"".join(
            f"--{boundary}\r\n{head.format(name)}\r\n\r\n".encode() + data + b"\r\n" for name, data in parts
        )
        + f"--{boundary}--\r\n".encode()
    )


def read(body: bytes, cuts: list[int], boundary: str = BOUNDARY) -> list[tuple[str, bytes]]:
    """The parts of ``body`` sent in chunks ending at ``cuts``."""

    async def chunks() -> AsyncIterator[bytes]:
        start = 0
        for end in [*sorted(c % (len(body) + 1) for c in cuts), len(body)]:
            if end > start:
                yield body[start:end]
                start = end

    async def parts() -> list[tuple[str, bytes]]:
        got = []
        async for name, data in MultipartReader(chunks(), boundary).parts():
            got.append((name, b"".join([c async for c in data])))
        return got

    return anyio.run(parts)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(NAMES, DATA), max_size=4), st.lists(st.integers(min_value=0), max_size=8))
def test_every_body_reads_back_part_for_part_however_it_is_cut(
    parts: list[tuple[str, bytes]], cuts: list[int]
) -> None:
    assert read(body_of(parts), cuts) == parts


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(NAMES, DATA), min_size=1, max_size=3),
    st.integers(min_value=0),
    st.one_of(st.none(), st.integers(min_value=0, max_value=255)),
    st.lists(st.integers(min_value=0), max_size=4),
)
def test_a_damaged_body_is_invalid_or_parts_never_another_error(
    parts: list[tuple[str, bytes]], at: int, byte: int | None, cuts: list[int]
) -> None:
    body = body_of(parts)
    at %= len(body)
    damaged = body[:at] if byte is None else body[:at] + bytes([byte]) + body[at + 1 :]
    with contextlib.suppress(Invalid):  # anything else fails the test
        read(damaged, cuts)


def test_a_part_head_over_the_bound_is_refused_even_in_one_read() -> None:
    long = 'Content-Disposition: form-data; name="zkey"; filename="' + "f" * MAX_PART_HEADER_BYTES + '"'
    body = f"--{BOUNDARY}\r\n{long}\r\n\r\nzz\r\n--{BOUNDARY}--\r\n".encode()
    with pytest.raises(Invalid, match="header size exceeded"):
        read(body, [])  # one chunk: the whole head at once


def test_a_boundary_line_followed_by_more_is_data() -> None:
    data = f"a\r\n--{BOUNDARY}X\r\nstill the zkey\r\n--{BOUNDARY}-x".encode()
    assert read(body_of([("zkey", data)]), []) == [("zkey", data)]


@pytest.mark.parametrize(
    "content_type",
    [f"multipart/form-data; BOUNDARY={BOUNDARY}", f'Multipart/Form-Data; Boundary="{BOUNDARY}"'],
)
def test_the_content_type_s_names_are_read_in_any_case(content_type: str) -> None:
    request = httpx.Request("PUT", "http://d/v1/circuits/c", headers={"content-type": content_type})
    reader = _reader(_Starlette(request), 1 << 20, None)  # type: ignore[arg-type]
    assert isinstance(reader, MultipartReader)


class _Starlette:
    """What ``_reader`` reads of a request: its headers and its body stream."""

    def __init__(self, request: httpx.Request) -> None:
        self.headers = request.headers

    async def stream(self) -> AsyncIterator[bytes]:
        yield b""
