"""Known answers for the C core's own tests (``tests/c/test_core.c``), computed by the Python reference: the
libraries' MSMs and FFT path, plain-Python field and curve arithmetic, the Python synthesis. Never by the C
extension, whose core they test.

    python -m tests.c.vectors OUT          writes OUT (a few MiB)

The file: the magic ``PLVEC1\\0\\0``, then records until its end, each a header of nine little-endian u32
(kind, curve, group, four parameters, a spare zero, the count of blobs) and its blobs (a u64 length, then
the bytes). Kinds, with their parameters and blobs:

- 1 MSM (stride): rows, scalars, the sum's plain affine bytes, and the calls to make (u32 triples: window,
  threads, endo); a stride above 0 means fixed-base tables of the rows (test_core.c builds them:
  ``window·stride`` bits apart, as many as the scalars' windows need)
- 2 NTT (n): a, b, c (any 32 bytes), roots (w_n, w_2n, 1/n), h; test_core.c runs it on 1, 2 and 4 threads
- 3 synthesis (rows): matrix (u32), rows, wires (i64), values, witness, A·w, B·w and A·w∘B·w
- 4 scalars out of Montgomery form (times, 1-4): values (any 32 bytes), results
- 5 the first row off the curve: rows, its index (i64; -1 none)
- 6 the first BLS12-381 row outside the subgroup: rows, its index (i64; -1 none); on 1 and 2 threads
"""

from __future__ import annotations

import random
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from prooflane.groth16 import BLS12381, BN128, Curve, setup
from prooflane.groth16.adapters import library
from prooflane.groth16.arithmetic import LibraryArithmetic
from prooflane.groth16.field import from_ints
from prooflane.groth16.points import CURVE_B, TWIST_B, mont_row
from prooflane.groth16.roots import coset_roots
from tests.support import curve_reference as ref
from tests.support.groth16_samples import square_chain
from tests.support.msm import CURVE_IDS, generator, library_msm, rows_of

MAGIC = b"PLVEC1\0\0"
MSM, NTT, SYNTH, FROM_MONT, OFF_CURVE, SUBGROUP = 1, 2, 3, 4, 5, 6
Record = tuple[int, int, int, tuple[int, ...], list[bytes]]


def _record(kind: int, curve: Curve, group: int, params: tuple[int, ...], blobs: list[Any]) -> Record:
    return kind, CURVE_IDS[curve.name], group, params, [bytes(b) for b in blobs]


def _encode(record: Record) -> bytes:
    kind, curve, group, params, blobs = record
    padded = (*params, 0, 0, 0, 0)[:4]
    out = struct.pack("<9I", kind, curve, group, *padded, 0, len(blobs))
    return out + b"".join(struct.pack("<Q", len(b)) + b for b in blobs)


def _plain(curve: Curve, xy: tuple[int, ...]) -> bytes:
    return b"".join(v.to_bytes(curve.n8q, "little") for v in xy)


def _scalars(values: list[int]) -> bytes:
    return b"".join(v.to_bytes(32, "little") for v in values)


def _calls(*calls: tuple[int, int, int]) -> bytes:
    return b"".join(struct.pack("<3I", *call) for call in calls)


def _edges(curve: Curve, rng: random.Random, n: int) -> list[int]:
    edges = [0, 1, 2, curve.r - 1, curve.r, curve.r + 1, 2**128 - 1, 2**128, 2**255, 2**256 - 1]
    return [edges[i] if i < len(edges) else rng.randrange(2**256) for i in range(n)]


def _msms(curve: Curve, group: int, rng: random.Random) -> Iterator[Record]:
    """Few terms at the edges (equal, opposite and infinite points; zero, r and 2^256 - 1), on 1-3 threads,
    split and not and over tables; batched buckets over repeated points and over distinct ones; the
    bucket sums' lane cases (a doubling and a cancellation in a lane, one bucket in every lane)."""
    be = library(curve)
    gen, xy = generator(curve, group)
    points: list[Any] = [be.mul(gen, rng.randrange(1, curve.r)) for _ in range(40)]
    points[3], points[4], points[5] = points[1], be.mul(points[2], curve.r - 1), None
    rows = rows_of(curve, group, points)
    scalars = _edges(curve, rng, 40)
    want = _plain(curve, library_msm(curve, group, points, scalars))
    calls = _calls((0, 1, 0), (0, 2, 1), (0, 3, 0), (0, 3, 1), (2, 1, 0), (10, 2, 1))
    yield _record(MSM, curve, group, (0,), [rows, _scalars(scalars), want, calls])
    for window, stride in ((13, 2), (9, 3)):
        yield _record(MSM, curve, group, (stride,), [rows, _scalars(scalars), want, _calls((window, 2, 0))])
    # 4,096 terms: batched buckets at 11 and 12 bits on one thread; repeated points, then distinct ones
    few = [p for p in points if p is not None][:20]
    few += [be.mul(p, curve.r - 1) for p in few[:6]]
    pick = [rng.randrange(len(few)) for _ in range(4096)]
    scalars = [rng.choice([1, 1, 2, curve.r - 1, rng.randrange(2**256)]) for _ in range(4096)]
    weights = [0] * len(few)
    for k, s in zip(pick, scalars, strict=True):
        weights[k] += s
    want = _plain(curve, library_msm(curve, group, few, weights))
    repeated = rows_of(curve, group, [few[k] for k in pick])
    step, acc, distinct = be.mul(gen, rng.randrange(1, curve.r)), few[0], []
    for _ in range(4096):
        acc = acc + step
        distinct.append(acc)
    spread = [rng.randrange(2**256) for _ in range(4096)]
    want_spread = _plain(curve, tuple(xy(be.msm(distinct, from_ints([s % curve.r for s in spread]), group))))
    distinct_rows = rows_of(curve, group, distinct)
    calls = _calls((11, 1, 0), (12, 1, 1), (0, 2, 0), (0, 2, 1))
    yield _record(MSM, curve, group, (0,), [repeated, _scalars(scalars), want, calls])
    yield _record(MSM, curve, group, (0,), [distinct_rows, _scalars(spread), want_spread, calls])
    yield from _lane_sums(curve, group, rng)


def _lane_sums(curve: Curve, group: int, rng: random.Random) -> Iterator[Record]:
    """ifma.h's bucket sums (window 0 of 11 bits, 1,024 buckets, lane i the buckets 128·i + j) where a
    running sum meets P twice, P then -P on a lane's last step, and one bucket in every lane."""
    be = library(curve)
    gen, _ = generator(curve, group)
    p = be.mul(gen, rng.randrange(1, curve.r))
    others = [be.mul(gen, rng.randrange(1, curve.r)) for _ in range(8)]
    cases = [
        [(p, 128), (p, 127)],
        [(p, 514), (be.mul(p, curve.r - 1), 513)],
        [(o, 1 + 128 * i + rng.randrange(128)) for i, o in enumerate(others)],
    ]
    for low in cases:
        points = [pt for pt, _ in low] + [others[k % 8] for k in range(4096 - len(low))]
        scalars = [d for _, d in low] + [rng.randrange(1, 2**10) << 11 for _ in range(4096 - len(low))]
        want = _plain(curve, library_msm(curve, group, points, scalars))
        blobs = [rows_of(curve, group, points), _scalars(scalars), want, _calls((11, 1, 0))]
        yield _record(MSM, curve, group, (0,), blobs)


def _ntts(curve: Curve, rng: random.Random) -> Iterator[Record]:
    """Domains of 1 to 2^12 (the lanes from 64 values a thread), fewer values than the domain, values of r
    and beyond; 1-4 threads."""
    lib, r = LibraryArithmetic(curve, "the reference"), curve.r
    for n, m in ((1, 1), (2, 2), (16, 9), (64, 64), (256, 200), (4096, 4096)):
        given = [
            [rng.randrange(2**256) if rng.random() < 0.1 else rng.randrange(r) for _ in range(m)]
            for _ in "abc"
        ]
        given[0][0] = 2**256 - 1
        a, b, c = (from_ints([x % r for x in v]) for v in given)
        h = lib.coset_h(a, b, c, n, 1)
        blobs = [_scalars(v) for v in given] + [coset_roots(r, n), h.astype("<u8").tobytes()]
        yield _record(NTT, curve, 0, (n,), blobs)


def _synthesis(curve: Curve) -> Iterator[Record]:
    r1cs, witness = square_chain(curve, 40)
    key = setup(r1cs, seed=b"C core vectors")
    coef = key.coefficients
    n_rows = int(coef.row.max()) + 1
    a, b, c = LibraryArithmetic(curve, "the reference").synthesize(
        coef.matrix, coef.row, coef.wire, coef.value, witness, n_rows
    )
    typed = ((coef.matrix, "<u4"), (coef.row, "<i8"), (coef.wire, "<i8"), (coef.value, "<u8"))
    blobs = [np.ascontiguousarray(x, dtype=t).tobytes() for x, t in (*typed, (witness.values, "<u8"))]
    out = b"".join(np.ascontiguousarray(v, dtype="<u8").tobytes() for v in (a, b, c))
    yield _record(SYNTH, curve, 0, (n_rows,), [*blobs, out])


def _from_montgomery(curve: Curve, rng: random.Random) -> Iterator[Record]:
    values = _edges(curve, rng, 64)
    for times in range(1, 5):  # times 0 copies the 32 bytes as they are, reduced or not
        factor = pow(pow(2, 256 * times, curve.r), -1, curve.r)
        yield _record(
            FROM_MONT,
            curve,
            0,
            (times,),
            [_scalars(values), _scalars([v * factor % curve.r for v in values])],
        )


def _curve_checks(curve: Curve, group: int, rng: random.Random) -> Iterator[Record]:
    be = library(curve)
    gen, xy = generator(curve, group)
    good = [mont_row(curve, xy(be.mul(gen, rng.randrange(1, curve.r)))) for _ in range(20)]
    rows = np.stack([*good, np.zeros_like(good[0])])
    yield _record(OFF_CURVE, curve, group, (), [rows, struct.pack("<q", -1)])
    bad = rows.copy()
    bad[7, 0] ^= 1  # x changed: off the curve
    yield _record(OFF_CURVE, curve, group, (), [bad, struct.pack("<q", 7)])
    above = rows.copy()
    above[4, : curve.n8q] = np.frombuffer(curve.q.to_bytes(curve.n8q, "little"), np.uint8)  # x = q
    yield _record(OFF_CURVE, curve, group, (), [above, struct.pack("<q", 4)])
    if curve != BLS12381:
        return
    extension = group == 2
    b = TWIST_B[curve.name] if extension else (CURVE_B[curve.name], 0)
    # a random point of the curve lies in the subgroup with probability 1/h (h > 2^125 on both groups)
    plain = [ref.random_point(rng, curve.q, b, extension=extension) for _ in range(9)]
    outside = [mont_row(curve, ref.flat(p, extension=extension)) for p in plain]
    for at in range(9):  # an outsider at every lane position of the eight-point tests, and none
        mixed = np.stack([*good[:at], np.zeros_like(good[0]), outside[at], *good[at:]])
        yield _record(SUBGROUP, curve, group, (), [mixed, struct.pack("<q", at + 1)])
    yield _record(SUBGROUP, curve, group, (), [rows, struct.pack("<q", -1)])


def records() -> Iterator[Record]:
    for curve in (BN128, BLS12381):
        rng = random.Random(f"C core vectors, {curve.name}")
        for group in (1, 2):
            yield from _msms(curve, group, rng)
            yield from _curve_checks(curve, group, rng)
        yield from _ntts(curve, rng)
        yield from _synthesis(curve)
        yield from _from_montgomery(curve, rng)


def main(out: Path) -> None:
    data = MAGIC + b"".join(_encode(record) for record in records())
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(out)
    print(f"{out}: {len(data)} bytes")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
