"""The synthesis entry point: one partition's witness built and synthesized, in a worker process (the
synthesis pool)."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from ..files import Fingerprint, fingerprint
from .spec import StorageInput, SynthesisTask
from .witness_helper import generate_wtns
from .wtns import wtns_limit

__all__ = ["synthesize_partition"]


def synthesize_partition(task: SynthesisTask) -> tuple[Any, float]:
    """Build the partition's witness and synthesize it; return the Synthesized and milliseconds taken.

    Built-in kinds use the compiled circuit's one-pass synthesis (witness and A·w, B·w, C·w together,
    every constraint checked); circom partitions read (or generate) a .wtns and synthesize it against the
    key's matrices.
    """
    started = time.perf_counter()
    inputs = task.inputs
    if isinstance(inputs, StorageInput):
        from ..circuits import Sector, partition_synthesize
        from ..groth16 import curve_by_name

        sector = Sector.open(Path(inputs.sector))
        curve = curve_by_name(inputs.curve)
        synthesized = partition_synthesize(
            inputs.kind, inputs.profile, sector, inputs.randomness, task.partition, curve
        )
    else:
        from ..groth16 import read_wtns, synthesize

        key = _key_matrices(task.key_path, task.key_cache_bytes)
        if isinstance(inputs.witness, str):
            from ..files import read_limited

            # checked when the job was accepted; read as carefully now, since the file may have changed
            limit = wtns_limit(key.n_vars)
            witness = read_wtns(inputs.witness, read_limited(inputs.witness, limit, "witness"))
        else:
            from .wasm_witness import GeneratorLimits

            limits = GeneratorLimits(memory_bytes=task.witness_memory_bytes, wires=key.n_vars)
            witness = _computed(inputs.witness, inputs.wasm, limits)
        if len(witness) != key.n_vars:
            raise ValueError(f"this witness has {len(witness):,} wires, the circuit {key.n_vars:,}")
        synthesized = synthesize(key, witness)
    return synthesized, (time.perf_counter() - started) * 1000


def _computed(values: dict[str, Any], wasm: str | None, limits: Any = None) -> Any:
    """The witness of circuit inputs ``values`` by the generator ``wasm``: run in this process by wasmtime
    (:mod:`.wasm_witness`) within ``limits`` (a ``GeneratorLimits``; None: the defaults); a generator that
    is not circom 2's goes to snarkjs (node) as before."""
    from ..groth16 import Witness, curve_by_prime, read_wtns
    from .wasm_witness import NotCircom2, compute_witness

    if wasm is None:
        raise ValueError("circuit inputs were given but the circuit has no witness generator (.wasm)")
    try:
        prime, wires = compute_witness(wasm, values, limits)
    except NotCircom2:
        folder = tempfile.mkdtemp(prefix="prooflane-wtns-")
        try:
            return read_wtns(generate_wtns(values, wasm, folder))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    except ValueError as exc:
        raise ValueError(f"witness generation failed: {exc}") from None
    return Witness(curve_by_prime(prime), wires)


_MATRICES: OrderedDict[str, tuple[Fingerprint | None, Any]] = OrderedDict()
"""Key path -> (its file when read, the ProvingKey), least recently used first, for circom synthesis in
this process."""


def _key_matrices(path: str, cache_bytes: int) -> Any:
    """The proving key at ``path`` (its constraint matrices are what synthesis needs), read once and kept
    while the keys kept, by their files' sizes, fit in ``cache_bytes`` (the one asked for is always kept).
    A key whose file changed since it was read is read again: its old mapping is never touched."""
    from ..groth16 import read_zkey

    now = fingerprint(path)
    found = _MATRICES.pop(path, None)
    key = found[1] if found is not None and found[0] == now else read_zkey(path)
    _MATRICES[path] = (now, key)  # the most recently used, last
    while len(_MATRICES) > 1 and sum(_size(f) for f, _ in _MATRICES.values()) > cache_bytes:
        _MATRICES.popitem(last=False)
    return key


def _size(found: Fingerprint | None) -> int:
    return 0 if found is None else found[2]
