"""What the engine knows of one prepared circuit and its proving key, with a partition's memory estimate;
making a built-in kind's key, and describing a registered .zkey.

Memory estimate of one partition (``CircuitMeta``), with ``N`` the key's FFT domain size, ``W`` the wires,
32 bytes per field element, and a factor 2 because each vector exists twice while it crosses a process
boundary (the pickle and the array):

- ``abc_bytes = 2 * 3 * N * 32``: the a, b, c evaluations; given back right after ``prove_start``;
- the rest, ``2 * W * 32 + 4 * N * 32 + WORK_ELEMENTS * N * 32``: the witness, H and the proving state,
  and the working memory of the prover's and the finalizer's calls (the NTT's scratch and outputs, the
  MSMs' digits and buckets, the copies a call makes: measured 1.0-1.3 KiB a domain element over the two
  processes at tiny, small and medium, ``benchmarks/bench_memory.py``); given back after ``prove_finish``;
- a worker's proving key (a cached allocation): on the C extension ``key.nbytes`` (its rows, mapped from
  the file: no point objects are built, the key adds no anonymous memory, and the page cache holds the
  pages once however many workers map them, so this overcounts a machine's workers); on the libraries
  ``3 * key.nbytes`` (the rows and the point objects built from them in the prover and the finalizer:
  measured 2.4x the key at medium);
- with ``msm_tables``, each worker's fixed-base tables of the key (``table_alloc_bytes``: several times
  the key's rows, built in the worker's processes' own memory), in the same allocation.

``prepare_builtin`` and ``inspect_zkey`` run in worker processes (the synthesis pool).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..files import KEPT_MODE

__all__ = ["KEY_FACTOR_LIBRARIES", "WORK_ELEMENTS", "CircuitMeta", "inspect_zkey", "prepare_builtin"]

WORK_ELEMENTS = 28
"""The proving calls' working memory, in field elements per domain element (see the module's docstring)."""
KEY_FACTOR_LIBRARIES = 3
"""A loaded key's bytes over the key's own on the libraries' arithmetic (rows and point objects)."""


@dataclass(frozen=True)
class CircuitMeta:
    """What the engine knows of one prepared circuit and its proving key (kept beside the key as JSON)."""

    key_name: str
    key_path: str
    curve: str
    constraints: int
    wires: int
    public_signals: int
    domain_size: int
    key_nbytes: int
    vk: dict[str, Any]

    @property
    def abc_bytes(self) -> int:
        """Part of a partition's reservation given back after ``prove_start``."""
        return 2 * 3 * self.domain_size * 32

    @property
    def partition_bytes(self) -> int:
        """A partition's whole reservation (taken before its synthesis)."""
        return self.abc_bytes + 2 * self.wires * 32 + (4 + WORK_ELEMENTS) * self.domain_size * 32

    @property
    def key_alloc_bytes(self) -> int:
        """Bytes of the cached allocation of one worker's loaded proving key, by the arithmetic that proves
        its curve in this process (the daemon's, which its workers share)."""
        from ..groth16.arithmetic import arithmetic
        from ..groth16.curves import curve_by_name

        if arithmetic(curve_by_name(self.curve)).name == "c-extension":
            return self.key_nbytes
        return KEY_FACTOR_LIBRARIES * self.key_nbytes

    @property
    def table_alloc_bytes(self) -> int:
        """Bytes one worker's fixed-base tables of the key add to its allocation (``msm_tables``): each
        base section's rows times ``ceil(windows / stride)`` (``groth16.key_table_bytes``), in the prover
        (A, B1, C, H) and the finalizer (B2); 0 where the libraries prove the curve (they build none)."""
        from ..groth16.curves import curve_by_name
        from ..groth16.prover import key_table_bytes

        curve = curve_by_name(self.curve)
        return key_table_bytes(curve, self.wires, self.public_signals, self.domain_size)

    def worker_key_bytes(self, tables: bool) -> int:
        """Bytes of a worker's cached allocation for the key: ``key_alloc_bytes``, plus
        ``table_alloc_bytes`` when the worker keeps tables."""
        return self.key_alloc_bytes + (self.table_alloc_bytes if tables else 0)

    def to_json(self) -> dict[str, Any]:
        """As stored beside the key."""
        return asdict(self)


def prepare_builtin(kind: str, profile: str, curve: str, keys_dir: str) -> CircuitMeta:
    """Compile kind's circuit and make its dev proving key, cached in ``keys_dir`` (reused when present)."""
    base = Path(keys_dir) / f"{kind}-{profile}-{curve}"
    meta_path = base.with_suffix(".json")
    if meta_path.exists() and base.with_suffix(".zkey").exists():  # the key where it is now (a folder moved)
        return CircuitMeta(**json.loads(meta_path.read_text()) | {"key_path": str(base.with_suffix(".zkey"))})
    from ..circuits import storage_circuit
    from ..groth16 import curve_by_name, setup, write_zkey

    circuit = storage_circuit(kind, profile, curve_by_name(curve))
    seed = hashlib.sha256(f"prooflane-dev-setup:{kind}:{profile}:{curve}".encode()).digest()
    key = setup(circuit.r1cs, seed=seed, notice=False)  # the daemon says it in its log (CircuitRegistry.load)
    base.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(base.with_suffix(".zkey"), lambda p: write_zkey(p, key))
    meta = _meta(f"{kind}@{profile}/{curve}", str(base.with_suffix(".zkey")), key, circuit.r1cs.n_constraints)
    _atomic_write(meta_path, lambda p: p.write_text(json.dumps(meta.to_json())))
    return meta


def inspect_zkey(key_name: str, path: str) -> CircuitMeta:
    """Read a .zkey, validate its points in full (remembered, so workers load it fast) and describe it
    (raises the groth16 reader's error when it is not a Groth16 .zkey or a point is bad)."""
    from ..groth16 import read_zkey
    from ..groth16.prover import check_points

    key = read_zkey(path)
    check_points(key)
    constraints = int(key.coefficients.row.max()) + 1 - (key.n_public + 1) if key.coefficients.row.size else 0
    return _meta(key_name, path, key, max(constraints, 0))


def _meta(key_name: str, key_path: str, key: Any, constraints: int) -> CircuitMeta:
    return CircuitMeta(
        key_name=key_name,
        key_path=key_path,
        curve=key.curve.name,
        constraints=constraints,
        wires=key.n_vars,
        public_signals=key.n_public,
        domain_size=key.domain_size,
        key_nbytes=key.nbytes,
        vk=key.verification_key.to_json(),
    )


def _atomic_write(path: Path, write: Callable[[Path], Any]) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    write(tmp)
    os.chmod(tmp, KEPT_MODE)  # workers map it: read-only, as the daemon's other key files
    os.replace(tmp, path)
