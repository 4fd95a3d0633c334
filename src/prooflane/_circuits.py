"""The engine's circuits: the built-in kinds' prepared circuits and the registered circom circuits.

A registered circuit's files are copied into the data folder and journalled, so registrations survive
restarts. Key preparation and inspection run on the backend's CPU pool, never on the event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from ._jobs import CircuitEntry, circuit_info
from ._pipeline import Pipeline
from .devices import DeviceBackend
from .errors import JobRejected, ProoflaneError
from .kinds import BUILTIN_KINDS, CIRCOM, CIRCOM_SPEC, CircuitMeta, inspect_zkey, prepare_builtin
from .models import CircuitInfo, KindInfo
from .states import Priority
from .store import CircuitRecord

__all__ = ["CircuitRegistry"]


class CircuitRegistry:
    """Built-in kinds -> their circuit; registered names -> their circom circuit."""

    def __init__(self, pipeline: Pipeline, backend: DeviceBackend) -> None:
        self._pipeline = pipeline
        self._backend = backend
        self._metas: dict[str, CircuitMeta] = {}  # built-in kind -> its circuit
        self._circuits: dict[str, CircuitEntry] = {}

    async def load(self) -> None:
        """Prepare every built-in kind's circuit and key (cached in the keys folder); read registrations."""
        cfg = self._pipeline.config
        keys_dir = str(cfg.keys_dir)
        calls = [
            self._backend.run(prepare_builtin, k.name, cfg.profile, cfg.curve, keys_dir)
            for k in BUILTIN_KINDS
        ]
        for spec, meta in zip(BUILTIN_KINDS, await asyncio.gather(*calls), strict=True):
            self._metas[spec.name] = meta
        for record in self._pipeline.journal.circuits():
            meta_path = Path(record.zkey).with_suffix(".json")
            self._circuits[record.name] = CircuitEntry(
                record, CircuitMeta(**json.loads(meta_path.read_text()))
            )

    def builtin(self, kind: str) -> CircuitMeta:
        """The prepared circuit of a built-in kind (KeyError for any other)."""
        return self._metas[kind]

    def circuit(self, name: str) -> CircuitEntry:
        """A registered circuit, or 404 naming the registered ones."""
        circuit = self._circuits.get(name)
        if circuit is None:
            known = ", ".join(self._circuits) or "none registered"
            raise JobRejected(f"unknown circuit {name!r} (registered: {known})", 404)
        return circuit

    def meta(self, kind: str, circuit: str | None) -> CircuitMeta:
        """The circuit a job of ``kind`` (and, for circom, of ``circuit``) proves."""
        return self.circuit(circuit or "").meta if kind == CIRCOM else self._metas[kind]

    def kinds(self) -> list[KindInfo]:
        """Every proof kind (the built-in ones, then ``circom``)."""
        return _kind_infos(self._metas)

    def verification_key(self, kind: str, circuit: str | None = None) -> dict[str, Any]:
        """The snarkjs verification_key.json of ``kind`` (for ``circom``, of ``circuit``); 404 if unknown."""
        if kind == CIRCOM:
            return self.circuit(circuit or "").meta.vk
        if kind not in self._metas:
            raise JobRejected(f"unknown kind {kind!r}: expected one of {', '.join(self._metas)}", 404)
        return self._metas[kind].vk

    def infos(self) -> list[CircuitInfo]:
        """The registered circom circuits."""
        return [circuit_info(c) for c in self._circuits.values()]

    async def register(
        self, name: str, zkey_path: Path, *, wasm_path: Path | None = None, priority: str = "normal"
    ) -> CircuitInfo:
        """Register a circom circuit (see :meth:`prooflane.engine.Engine.register_circuit`)."""
        _check_files(zkey_path, wasm_path)
        try:
            prio = Priority(priority)
        except ValueError:
            raise JobRejected(f"priority {priority!r}: expected critical, high or normal", 422) from None
        digest = _digest(Path(zkey_path), Path(wasm_path) if wasm_path else None)
        if (known := self._circuits.get(name)) is not None:
            if known.record.digest != digest:
                raise JobRejected(f"circuit {name!r} is registered with other files; pick another name", 409)
            return circuit_info(known)
        folder = self._pipeline.config.data_dir / "circuits" / name
        folder.mkdir(parents=True, exist_ok=True)
        zkey = folder / "circuit.zkey"
        shutil.copyfile(zkey_path, zkey)
        wasm = folder / "circuit.wasm" if wasm_path else None
        if wasm_path and wasm:
            shutil.copyfile(wasm_path, wasm)
        try:
            meta = await self._backend.run(inspect_zkey, f"circom:{name}", str(zkey))
        except ProoflaneError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            raise JobRejected(f"zkey {str(zkey_path)!r}: {exc}", 422) from None
        zkey.with_suffix(".json").write_text(json.dumps(meta.to_json()))
        record = CircuitRecord(
            name, str(zkey), str(wasm) if wasm else None, digest, prio.value, meta.curve, meta.constraints,
            meta.public_signals, meta.partition_bytes,
        )  # fmt: skip
        self._pipeline.journal.add_circuit(record)
        self._circuits[name] = CircuitEntry(record, meta)
        return circuit_info(self._circuits[name])


def _kind_infos(metas: dict[str, CircuitMeta]) -> list[KindInfo]:
    """``GET /v1/kinds``: the built-in kinds (``metas``: their prepared circuits), then ``circom``."""
    out = [
        KindInfo(
            name=spec.name,
            partitions=spec.partitions,
            priority=spec.priority,
            curve=metas[spec.name].curve,
            constraints_per_partition=metas[spec.name].constraints,
            memory_per_partition_bytes=metas[spec.name].partition_bytes,
            proving_key_bytes=metas[spec.name].key_alloc_bytes,
            description=spec.description,
        )
        for spec in BUILTIN_KINDS
    ]
    circom = CIRCOM_SPEC
    out.append(
        KindInfo(
            name=CIRCOM,
            partitions=0,
            priority=circom.priority,
            curve="any",
            constraints_per_partition=0,
            memory_per_partition_bytes=0,
            description=circom.description,
        )
    )
    return out


def _check_files(zkey: Path, wasm: Path | None) -> None:
    for label, path in (("zkey", zkey), ("wasm", wasm)):
        if path is not None and not Path(path).is_file():
            raise JobRejected(f"{label} {str(path)!r}: no such file on the daemon's machine", 422)


def _digest(*paths: Path | None) -> str:
    h = hashlib.sha256()
    for path in paths:
        h.update(path.read_bytes() if path else b"-")
    return h.hexdigest()
