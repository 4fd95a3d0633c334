"""How fast an upload's multipart body is read: the routes' reader against python-multipart's own parser
under it, and against the parser prooflane had before it (read from git history, when this is a checkout).

A body of one part of ``--mib`` random MiB is fed in chunks of ``--chunk-kib`` KiB, ``--repeat`` times,
the readers alternating; each row is the median and the spread (min-max) of the times.

    python benchmarks/bench_multipart.py [--mib 64] [--chunk-kib 64] [--repeat 5]

Prints a table and writes benchmarks/results/bench_multipart.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from _common import print_table, write_json
from prooflane.server.upload import MultipartReader

BOUNDARY = "----prooflane-bench-7d2f"
BEFORE = "63aeded"  # the last commit with prooflane's own parser (server/upload.py)
ROOT = Path(__file__).resolve().parents[1]


def body_of(size: int) -> bytes:
    head = f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="zkey"; filename="c.zkey"\r\n\r\n'
    return head.encode() + os.urandom(size) + f"\r\n--{BOUNDARY}--\r\n".encode()


def read_with(reader: Callable[[AsyncIterator[bytes], str], Any], chunks: list[bytes]) -> int:
    async def feed() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    async def run() -> int:
        got = 0
        async for _, part in reader(feed(), BOUNDARY).parts():
            async for piece in part:
                got += len(piece)
        return got

    return asyncio.run(run())


def bare_parser(chunks: list[bytes]) -> int:
    from python_multipart.multipart import MultipartParser

    got = [0]

    def on_data(data: bytes, start: int, end: int) -> None:
        got[0] += end - start

    parser = MultipartParser(BOUNDARY, {"on_part_data": on_data})
    for chunk in chunks:
        parser.write(chunk)
    return got[0]


def reader_before() -> Any | None:
    """prooflane's own reader as it was before python-multipart, or None outside a git checkout."""
    try:
        source = subprocess.run(["git", "show", f"{BEFORE}:src/prooflane/server/upload.py"], cwd=ROOT,
                                capture_output=True, text=True, check=True).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
    space: dict[str, Any] = {"__name__": "upload_before"}
    exec(compile(source.replace("from ..", "from prooflane."), "upload_before", "exec"), space)
    return space["MultipartReader"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--chunk-kib", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    size, step = args.mib << 20, args.chunk_kib << 10
    body = body_of(size)
    chunks = [body[i : i + step] for i in range(0, len(body), step)]
    readers: dict[str, Callable[[], int]] = {
        "upload reader (python-multipart)": lambda: read_with(MultipartReader, chunks),
        "python-multipart's parser alone": lambda: bare_parser(chunks),
    }
    before = reader_before()
    if before is not None:
        readers[f"prooflane's own parser ({BEFORE})"] = lambda: read_with(before, chunks)
    times: dict[str, list[float]] = {name: [] for name in readers}
    for round_ in range(args.repeat):
        order = list(readers) if round_ % 2 == 0 else list(reversed(readers))
        for name in order:
            started = time.perf_counter()
            assert readers[name]() == size, name
            times[name].append(time.perf_counter() - started)
    rows, results = [], []
    for name, secs in times.items():
        median = statistics.median(secs)
        rows.append([name, f"{median * 1000:.1f}", f"{min(secs) * 1000:.1f}-{max(secs) * 1000:.1f}",
                     f"{args.mib / median:,.0f}"])  # fmt: skip
        results.append(
            {"reader": name, "median_secs": median, "secs": secs, "mib_per_sec": args.mib / median}
        )
    print(
        f"{args.mib} MiB in {args.chunk_kib} KiB chunks, {args.repeat} rounds, load {os.getloadavg()[0]:.2f}"
    )
    print_table(["reader", "median ms", "spread ms", "MiB/s"], rows)
    write_json("bench_multipart", {"mib": args.mib, "chunk_kib": args.chunk_kib, "results": results})


if __name__ == "__main__":
    main()
