"""The C extension's arithmetic (``_curvemath``, built from ``groth16/csrc/``): every operation over a key's
rows as they lie in the (memory-mapped) file, so no point objects are built and the processes of a machine
share one copy of a key's points, the page cache's.

Batch-affine Pippenger MSMs on every core (the GIL released), the quotient's NTT, synthesis and the
on-curve check of every row, on both curves. Subgroup checks: BN254 G2 by random linear combinations
(``_pointcheck.all_in_subgroup``) over the C MSM; BLS12-381 per point by an endomorphism, in C
(``csrc/subgroup.h``) on every core. ``PROOFLANE_CURVEMATH_SO=path`` loads the extension from another
build of it (the portable-C and sanitiser lanes of the tests).

The extension's kernels (``csrc/cpu.h``: each fast kernel beside its scalar twin) use what the CPU has, read
from the CPU by the C core; this module applies the one switch of the environment, ``PROOFLANE_NO_IFMA``
(set, non-empty and not "0": the AVX-512 IFMA kernels off), once, when it first loads a build.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import os
from types import ModuleType
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .. import _pointcheck
from ..adapters import library
from ..curves import BN128, Curve
from ..errors import InvalidWitnessError
from ..field import FieldVector
from ..points import G1, G2, BadPoint, mont_row
from ..roots import coset_roots
from ..witness import Witness
from .base import MAX_THREADS, Arithmetic, Section, Tables, cpu_threads, table_bytes, table_shape

__all__ = ["NO_IFMA_ENV", "SO_ENV", "ExtensionArithmetic", "kernel_runs", "load_extension"]

SO_ENV = "PROOFLANE_CURVEMATH_SO"
NO_IFMA_ENV = "PROOFLANE_NO_IFMA"
IFMA = "avx512-ifma"  # csrc/cpu.h's name of the capability
_NAME = "prooflane.groth16._curvemath"
_CURVE_IDS = {"bn128": 0, "bls12381": 1}


def load_extension() -> tuple[ModuleType | None, str | None]:
    """``(the module, None)``, or ``(None, why it cannot be used)``. The first load of a build sets the
    capabilities its kernels use: all that the CPU has, less AVX-512 IFMA under ``PROOFLANE_NO_IFMA``; a
    later call returns the same module, as it was left."""
    return _load(os.environ.get(SO_ENV) or None)


@functools.cache
def _load(path: str | None) -> tuple[ModuleType | None, str | None]:
    try:
        if path:
            spec = importlib.util.spec_from_file_location(_NAME, path)
            if spec is None or spec.loader is None:
                return None, f"{SO_ENV}={path} is not a loadable extension"
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(_NAME)
    except (ImportError, OSError) as exc:  # OSError: a path that is not there or cannot be read
        return None, f"the C extension is not built or does not load here ({exc})"
    capabilities = module.capabilities()["detected"]
    if os.environ.get(NO_IFMA_ENV, "") not in ("", "0"):
        capabilities = tuple(c for c in capabilities if c != IFMA)
    module.use_capabilities(capabilities)
    return module, None


def kernel_runs(module: ModuleType, name: str) -> bool:
    """Whether the extension's kernel ``name`` (``csrc/cpu.h``'s KERNELS) runs now."""
    return any(k["name"] == name and k["runs"] for k in module.kernels())


def _clamp(threads: int) -> int:
    return min(max(threads, 1), MAX_THREADS)


def _fv(ints: list[int]) -> FieldVector:
    return np.frombuffer(b"".join(k.to_bytes(32, "little") for k in ints), dtype="<u8").reshape(-1, 4)


class ExtensionArithmetic(Arithmetic):
    name = "c-extension"

    def __init__(self, curve: Curve, module: ModuleType) -> None:
        super().__init__(curve)
        self._c, self._id = module, _CURVE_IDS[curve.name]

    def products(self) -> str:
        """Which field products this curve's MSMs run on now, from the kernels that run (read live, not at
        import): "avx512-ifma" (a kernel of its MSMs runs in AVX-512 IFMA lanes: BN254's batches and bucket
        sums, csrc/ifma.h; the rest on mulx), "mulx" (the 4- and 6-limb mulx/adcx/adox assembly;
        BLS12-381's NTT and subgroup checks may still take the lanes) or "portable" (the C)."""
        running = [k for k in self._c.kernels() if k["runs"] and self._id in k["curves"]]
        if any(k["serves"] == "msm" and IFMA in k["needs"] for k in running):
            return "avx512-ifma"
        return "mulx" if any(k["serves"] == "products" for k in running) else "portable"

    def kernels(self) -> list[str]:
        """The extension's fast kernels that run now on this curve (csrc/cpu.h's names)."""
        return [k["name"] for k in self._c.kernels() if k["runs"] and self._id in k["curves"]]

    def coefficients(self, values: bytes) -> bytes:
        raw: bytes = self._c.from_montgomery(self._id, values, 2)  # 5 ms for 250,000 values
        return raw

    def synthesize(
        self,
        matrix: NDArray[np.uint32],
        rows: NDArray[np.int64],
        wires: NDArray[np.int64],
        values: FieldVector,
        witness: Witness,
        n_rows: int,
    ) -> tuple[FieldVector, FieldVector, FieldVector]:
        try:
            raw = self._c.synthesize(
                self._id,
                np.ascontiguousarray(matrix, dtype="<u4"),
                np.ascontiguousarray(rows, dtype="<i8"),
                np.ascontiguousarray(wires, dtype="<i8"),
                np.ascontiguousarray(values, dtype="<u8"),
                np.ascontiguousarray(witness.values, dtype="<u8"),
                n_rows,
            )
        except ValueError as exc:
            if "not below the field" in str(exc):
                raise InvalidWitnessError("invalid witness: a value is not below the field") from None
            raise
        out = np.frombuffer(raw, dtype="<u8").reshape(3, n_rows, 4)
        return out[0], out[1], out[2]

    def coset_h(self, a: FieldVector, b: FieldVector, c: FieldVector, n: int, threads: int) -> FieldVector:
        raw = self._c.coset_h(
            self._id,
            np.ascontiguousarray(a, dtype="<u8"),
            np.ascontiguousarray(b, dtype="<u8"),
            np.ascontiguousarray(c, dtype="<u8"),
            n,
            coset_roots(self.curve.r, n),
            _clamp(threads),
        )
        return np.frombuffer(raw, dtype="<u8").reshape(n, 4)

    def section(self, rows: NDArray[np.uint8], group: int, *, checked: bool) -> Section:
        if not checked:
            found = self._c.first_off_curve(self._id, group, np.ascontiguousarray(rows, dtype=np.uint8))
            if found >= 0:
                raise BadPoint(int(found), "is not on the curve")
            outside = self._first_outside_subgroup(rows, group)
            if outside is not None:
                raise BadPoint(outside, f"is not in the subgroup of order r of G{group}")
        return Section(group, rows)

    def tabulate(self, section: Section, threads: int) -> Section:
        rows = np.ascontiguousarray(section.rows, dtype=np.uint8)
        window, stride, count = table_shape(self.curve, rows.shape[0])
        data = self._c.fixed_table(self._id, section.group, rows, window * stride, count, _clamp(threads))
        return dataclasses.replace(section, tables=Tables(window, stride, count, data))

    def table_bytes(self, group: int, rows: int) -> int:
        return table_bytes(self.curve, group, rows)

    def table_shape(self, rows: int) -> tuple[int, int, int]:
        return table_shape(self.curve, rows)

    def row_tables(self, section: Section, row: int) -> bytes:
        window, stride, count = table_shape(self.curve, len(section.rows))
        one = np.ascontiguousarray(section.rows[row : row + 1], dtype=np.uint8)
        return bytes(self._c.fixed_table(self._id, section.group, one, window * stride, count, 1))

    def msm(self, section: Section, scalars: FieldVector, threads: int) -> G1 | G2:
        if section.tables is None:
            # A section's rows passed the subgroup check (or are remembered to have): the endomorphism
            # split (csrc/glv.h) holds on them.
            rows = np.ascontiguousarray(section.rows, dtype=np.uint8)
            return self._msm(rows, scalars, section.group, threads, endo=True)
        t = section.tables
        return self._msm(t.data, scalars, section.group, threads, t.window, t.stride)

    def msm_rows(self, rows: NDArray[np.uint8], scalars: FieldVector, group: int, threads: int) -> G1 | G2:
        """Sum of ``scalars[i]`` times the point of ``rows[i]``, in plain affine coordinates, by the group
        law alone: any points of the curve, in the subgroup or not (the subgroup checks use it)."""
        return self._msm(np.ascontiguousarray(rows, dtype=np.uint8), scalars, group, threads)

    def _msm(
        self,
        rows: Any,
        scalars: FieldVector,
        group: int,
        threads: int,
        window: int = 0,
        stride: int = 0,
        *,
        endo: bool = False,
    ) -> G1 | G2:
        raw = self._c.msm(
            self._id,
            group,
            rows,
            np.ascontiguousarray(scalars, dtype="<u8"),
            _clamp(threads),
            window,
            stride,
            endo,
        )
        n8 = self.curve.n8q
        coords = tuple(int.from_bytes(raw[i : i + n8], "little") for i in range(0, len(raw), n8))
        return coords  # type: ignore[return-value]

    def _first_outside_subgroup(self, rows: NDArray[np.uint8], group: int) -> int | None:
        """Index of the first row (on the curve, not all zero) outside the subgroup of order r, or None."""
        if group == 1 and self.curve == BN128:
            return None  # BN254 G1 has cofactor 1: on the curve is in the group
        if self.curve == BN128 and _all_in_g2(self, rows):
            return None
        if (
            self.curve != BN128
        ):  # BLS12-381: the endomorphism tests (csrc/subgroup.h), every point, every core
            found = self._c.first_outside_subgroup(self._id, group, np.ascontiguousarray(rows), cpu_threads())
            return None if found < 0 else int(found)
        lib, index = library(self.curve), np.flatnonzero(rows.any(axis=1))
        outside = lib.first_outside_subgroup(lib.points(rows[index], group), group)  # names the first
        return None if outside is None else int(index[outside])


def _all_in_g2(arithmetic: ExtensionArithmetic, rows: NDArray[np.uint8]) -> bool:
    """BN254 G2: random linear combinations of the rows, each tested by ``[r]S = 0`` (an MSM of one term:
    the C group law holds on the whole twist), over the C MSM."""
    r, threads = arithmetic.curve.r, cpu_threads()

    def combine(points: object, ks: FieldVector) -> G2:
        return arithmetic.msm_rows(rows, ks, 2, threads)  # type: ignore[return-value]

    def in_g2(xy: G2) -> bool:
        return not any(arithmetic.msm_rows(mont_row(arithmetic.curve, xy)[None, :], _fv([r]), 2, 1))

    return _pointcheck.all_in_subgroup(rows, combine, in_g2, _pointcheck.BN254_G2_COFACTOR_PRIMES[0])  # type: ignore[arg-type]
