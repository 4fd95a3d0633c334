"""The engine's circuits: the built-in kinds' prepared circuits and the registered circom circuits.

A registered circuit's files are copied into the data folder and journalled, so registrations survive
restarts. The files a registration names must lie inside the allowed roots and be regular files no larger
than the memory budget; they are copied (and hashed) in a thread, and the copy is inspected on the
backend's CPU pool (the .wasm in a thread: its reader is linear and bounded). What the .wasm says is
journalled with the circuit, so a start reads nothing again: nothing of it runs on the event loop. Or they
come in the request (an upload): streamed into the same new folder a chunk at a time (:func:`receive_file`),
then checked like a copy. A refused or failed registration leaves nothing in the data folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import functools
import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from .._version import __version__
from ..devices.backend import DeviceBackend, PoolProcessDied
from ..errors import Conflict, Invalid, NotFound, ProoflaneError, StorageFull, TooLarge, Unavailable
from ..files import CHUNK_BYTES, KEPT_MODE, Hasher, Roots, copy_limited, off_loop, refusal
from ..groth16 import curve_by_name, curve_by_prime
from ..kinds import (
    BUILTIN_KINDS,
    CIRCOM,
    CIRCOM_SPEC,
    CircuitMeta,
    WitnessGenerator,
    inspect_wasm,
    inspect_zkey,
    prepare_builtin,
)
from ..models import CircuitInfo, KindInfo
from ..states import Priority
from ..store import CircuitRecord, JournalUnwritable
from .keyfiles import KeyFiles
from .pipeline import Pipeline
from .records import CircuitEntry
from .records import circuit_info as _described

__all__ = ["CircuitRegistry", "UploadParts", "copy_circuit_files", "receive_file"]

log = logging.getLogger("prooflane.engine")

UploadParts = AsyncIterator[tuple[str, AsyncIterator[bytes]]]
"""An upload as it arrives: its parts in order, each its field name and its bytes, a chunk at a time (each
part's chunks are taken before the next part is asked for)."""


class CircuitRegistry:
    """Built-in kinds -> their circuit; registered names -> their circom circuit."""

    def __init__(self, pipeline: Pipeline, backend: DeviceBackend) -> None:
        self._pipeline = pipeline
        self._backend = backend
        self._metas: dict[str, CircuitMeta] = {}  # built-in kind -> its circuit
        self._circuits: dict[str, CircuitEntry] = {}
        # name -> its registration in progress; another one of the name waits for it (event loop only).
        self._registering: dict[str, asyncio.Future[None]] = {}
        self.keys = KeyFiles(self._metas, self._registered_metas, self._remake)
        """The key files watched (made again, or their circuit refused, when deleted)."""

    @property
    def backend(self) -> DeviceBackend:
        """Where CPU-side work runs (admission builds inline sectors there too)."""
        return self._backend

    def root_folders(self) -> tuple[Path, ...]:
        """The folders whose files requests may name: the data folder, then ``allowed_roots``."""
        cfg = self._pipeline.config
        return (cfg.data_dir, *(Path(p) for p in cfg.allowed_roots))

    async def load(self) -> None:
        """Prepare every built-in kind's circuit and key (cached in the keys folder); read registrations."""
        cfg = self._pipeline.config
        keys_dir = str(cfg.keys_dir)
        for spec in BUILTIN_KINDS:  # one at a time: calls that overlapped would start extra pool processes
            self._metas[spec.name] = await self._backend.run(
                prepare_builtin, spec.name, cfg.profile, cfg.curve, keys_dir
            )
        kinds = ", ".join(spec.name for spec in BUILTIN_KINDS)
        log.warning(
            "UNSAFE development keys: the built-in kinds (%s) prove with keys made here from a public seed "
            "(in %s); never use their proofs in production", kinds, keys_dir,
            extra={"kinds": [spec.name for spec in BUILTIN_KINDS], "keys_dir": keys_dir},
        )  # fmt: skip
        records = self._pipeline.journal.circuits()
        for record in records:
            meta_path = Path(record.zkey).with_suffix(".json")
            meta = CircuitMeta(**json.loads(meta_path.read_text()))
            record = await self._inspected(record)
            self._circuits[record.name] = CircuitEntry(record, meta, _field_product(record))
        # What registrations cut short by a crash left: files on their way in, and folders moved into place
        # but never journalled (the daemon killed while it inspected them).
        journalled = {Path(record.zkey).parent for record in records}
        for folder in await asyncio.to_thread(_unjournalled, cfg.data_dir / "circuits", journalled):
            if not folder.name.startswith(".incoming-"):
                log.warning("circuit folder %s: never registered (a registration cut short): removed", folder)
            await asyncio.to_thread(shutil.rmtree, folder, True)

    async def _inspected(self, record: CircuitRecord) -> CircuitRecord:
        """``record`` with what its .wasm says, as registration journalled it: nothing is read again. A
        record from an older journal (or read by another prooflane or wasmtime) has its .wasm read now, in a
        thread, and journalled, once; one whose .wasm cannot be opened now is read again at the next start."""
        if record.wasm is None or _current(record.wasm_inspection):
            return record
        try:
            inspection = await asyncio.to_thread(_read_generator, record.wasm)
        except (OSError, ProoflaneError) as exc:
            log.warning(
                "circuit %r: its .wasm cannot be read (%s): read again at the next start", record.name, exc
            )
            return dataclasses.replace(record, wasm_inspection=_inspection(None, f"unknown: {exc}"))
        try:
            self._pipeline.journal.set_wasm_inspection(record.name, inspection)
        except JournalUnwritable as exc:
            unkept = "circuit %r: what its .wasm says is not journalled (%s): read again at the next start"
            log.warning(unkept, record.name, exc)
        return dataclasses.replace(record, wasm_inspection=inspection)

    def _registered_metas(self) -> dict[str, CircuitMeta]:
        return {name: entry.meta for name, entry in self._circuits.items()}

    async def _remake(self, kind: str) -> CircuitMeta:
        """A built-in kind's key made again in the keys folder (see :mod:`.keyfiles`)."""
        cfg = self._pipeline.config
        meta: CircuitMeta = await self._backend.run(
            prepare_builtin, kind, cfg.profile, cfg.curve, str(cfg.keys_dir)
        )
        self._metas[kind] = meta
        return meta

    def circuit(self, name: str) -> CircuitEntry:
        """A registered circuit, or 404 naming the registered ones."""
        circuit = self._circuits.get(name)
        if circuit is None:
            known = ", ".join(self._circuits) or "none registered"
            raise NotFound(f"unknown circuit {name!r} (registered: {known})")
        return circuit

    def meta(self, kind: str, circuit: str | None) -> CircuitMeta:
        """The circuit a job of ``kind`` (and, for circom, of ``circuit``) proves."""
        return self.circuit(circuit or "").meta if kind == CIRCOM else self._metas[kind]

    def kinds(self) -> list[KindInfo]:
        """Every proof kind (the built-in ones, then ``circom``)."""
        return _kind_infos(self._metas, self._pipeline.tables.may_use)

    def verification_key(self, kind: str, circuit: str | None = None) -> dict[str, Any]:
        """The snarkjs verification_key.json of ``kind`` (for ``circom``, of ``circuit``); 404 if unknown."""
        if kind == CIRCOM:
            return self.circuit(circuit or "").meta.vk
        if kind not in self._metas:
            raise NotFound(f"unknown kind {kind!r}: expected one of {', '.join(self._metas)}")
        return self._metas[kind].vk

    def infos(self) -> list[CircuitInfo]:
        """The registered circom circuits."""
        return [_info(c) for c in self._circuits.values()]

    async def register(
        self, name: str, zkey_path: Path, *, wasm_path: Path | None = None, priority: str = "normal"
    ) -> CircuitInfo:
        """Register a circom circuit (see :meth:`prooflane.engine.Engine.register_circuit`)."""
        prio = _priority(priority)
        async with self._one_at_a_time(name):
            return await self._register(name, str(zkey_path), str(wasm_path) if wasm_path else None, prio)

    async def register_upload(
        self, name: str, parts: UploadParts, *, digest: str | None = None, priority: str = "normal"
    ) -> CircuitInfo:
        """Register a circom circuit from an upload (see :meth:`prooflane.engine.Engine.register_upload`)."""
        prio = _priority(priority)
        incoming = self._incoming()
        try:
            got, has_wasm = await self._receive_circuit(parts, incoming)
            if digest is not None and digest.lower() != got:
                raise Invalid(
                    f"digest {digest!r}: the upload's SHA-256 (of the .zkey, then the .wasm) is {got}: the "
                    "files were changed or cut on the way; nothing kept"
                )
            async with self._one_at_a_time(name):
                wasm = "uploaded" if has_wasm else None
                return await self._settle(name, incoming, "uploaded", wasm, got, prio)
        finally:
            await asyncio.to_thread(shutil.rmtree, incoming, True)

    async def _receive_circuit(self, parts: UploadParts, incoming: Path) -> tuple[str, bool]:
        """An upload's .zkey (then .wasm) streamed into ``incoming``; their digest, and whether a .wasm came.
        Each file at most the memory budget, both together at most ``max_circuit_bytes``."""
        cfg = self._pipeline.config
        await asyncio.to_thread(incoming.mkdir, parents=True)
        digest, seen, total = hashlib.sha256(), list[str](), 0
        async for field, chunks in parts:
            if field not in ("zkey", "wasm") or field in seen or (field == "wasm" and not seen):
                raise Invalid(
                    f"upload part {field!r}: expected a part 'zkey' and then, optionally, one 'wasm'"
                )
            seen.append(field)
            limit = min(cfg.memory_budget_bytes, cfg.max_circuit_bytes - total)
            target = incoming / f"circuit.{field}"
            total += await receive_file(chunks, target, limit, f"the uploaded {field}", digest)
        if not seen:
            raise Invalid("the upload holds no part 'zkey': send the .zkey (and optionally the .wasm)")
        if seen == ["zkey"]:
            digest.update(b"-")
        return digest.hexdigest(), "wasm" in seen

    def _incoming(self) -> Path:
        """A new folder for a registration's files (renamed into place once checked; swept at start)."""
        return self._pipeline.config.data_dir / "circuits" / f".incoming-{uuid.uuid4().hex}"

    @contextlib.asynccontextmanager
    async def _one_at_a_time(self, name: str) -> AsyncIterator[None]:
        """One registration of ``name`` at a time: another waits for it, then answers as it left things."""
        while (earlier := self._registering.get(name)) is not None:
            await asyncio.wait({earlier})
        registering = self._registering[name] = asyncio.get_running_loop().create_future()
        try:
            yield
        finally:
            del self._registering[name]
            registering.set_result(None)

    async def _register(
        self, name: str, zkey_path: str, wasm_path: str | None, prio: Priority
    ) -> CircuitInfo:
        cfg = self._pipeline.config
        incoming = self._incoming()
        given_up = threading.Event()  # set when the request stops waiting for the copy
        try:
            try:
                digest = await off_loop(
                    copy_circuit_files, self.root_folders(), zkey_path, wasm_path, incoming,
                    cfg.memory_budget_bytes, given_up,
                )  # fmt: skip
            except ProoflaneError as exc:
                raise refusal(exc) from None
            finally:
                given_up.set()
            return await self._settle(name, incoming, zkey_path, wasm_path, digest, prio)
        finally:
            await asyncio.to_thread(shutil.rmtree, incoming, True)

    async def _settle(
        self, name: str, incoming: Path, zkey_path: str, wasm_path: str | None, digest: str, prio: Priority
    ) -> CircuitInfo:
        """The files in ``incoming`` (of ``digest``) become circuit ``name``: the same again is the circuit
        registered; others under a taken name are refused; new ones are moved into place, inspected and
        journalled (removed again when refused). Called one registration of ``name`` at a time."""
        cfg = self._pipeline.config
        if (known := self._circuits.get(name)) is not None:
            if known.record.digest != digest:
                taken = f"circuit {name!r} is registered with other files; pick another name"
                raise Conflict(taken)
            changed = self.keys.changed(name)
            if changed or not await asyncio.to_thread(_files_present, known.record):  # these put them back
                await asyncio.to_thread(_move_folder, incoming, Path(known.record.zkey).parent)
                meta_file = Path(known.meta.key_path).with_suffix(".json")
                await asyncio.to_thread(meta_file.write_text, json.dumps(known.meta.to_json()))
                self.keys.found(name, known.meta.key_path)
                how = "had changed on disk" if changed else "were missing"
                log.warning("circuit %r: its files %s and are back (registered again)", name, how)
            return _info(known)
        folder = cfg.data_dir / "circuits" / name
        await asyncio.to_thread(_move_folder, incoming, folder)
        try:
            return await self._inspect_and_journal(name, folder, zkey_path, wasm_path, digest, prio)
        except BaseException:
            await asyncio.to_thread(shutil.rmtree, folder, True)  # a failed registration keeps nothing
            raise

    async def _inspect_and_journal(
        self, name: str, folder: Path, zkey_path: str, wasm_path: str | None, digest: str, prio: Priority
    ) -> CircuitInfo:
        zkey = folder / "circuit.zkey"
        wasm = folder / "circuit.wasm"
        try:
            meta = await self._backend.run(inspect_zkey, f"circom:{name}", str(zkey))
        except PoolProcessDied as exc:
            raise Unavailable(
                f"zkey {zkey_path!r}: the process inspecting it died ({exc}); nothing kept: try again"
            ) from None
        except ProoflaneError as exc:
            raise Invalid(f"zkey {zkey_path!r}: {exc}") from None
        wasm_kept = str(wasm) if await asyncio.to_thread(wasm.exists) else None
        inspection = None
        if wasm_kept is not None:
            generator = await self._check_generator(wasm_kept, wasm_path, meta)
            inspection = await asyncio.to_thread(_inspection_of, wasm_kept, generator)
        await asyncio.to_thread(zkey.with_suffix(".json").write_text, json.dumps(meta.to_json()))
        record = CircuitRecord(
            name, str(zkey), wasm_kept, digest, prio.value, meta.curve, meta.constraints,
            meta.public_signals, meta.partition_bytes, inspection,
        )  # fmt: skip
        self._pipeline.journal.add_circuit(record)
        self._circuits[name] = CircuitEntry(record, meta, _field_product(record))
        self.keys.accept(meta.key_path)
        return _info(self._circuits[name])

    async def _check_generator(
        self, wasm: str, named: str | None, meta: CircuitMeta
    ) -> WitnessGenerator | None:
        """What the witness generator ``wasm`` says; refuse (422) one of another circuit than the key: its
        wire count, or its field, differ from the key's; or a file that is no WebAssembly module, or passes
        the reader's bounds. Read from the module without running it, in a thread of the daemon, not on the
        synthesis pool: the reader is linear in the module, its counts bounded, so no file can hold the pool
        up (a module without circom 2's constants cannot be checked: accepted, None)."""
        try:
            generator: WitnessGenerator | None = await asyncio.to_thread(inspect_wasm, wasm)
        except (ProoflaneError, ValueError) as exc:
            raise Invalid(f"wasm {named!r}: {exc}") from None
        if generator is None:
            log.warning(
                "wasm %r exports no circom 2 constants (getWitnessSize, getRawPrime...): registered without "
                "checking that it is of the key's circuit",
                named,
            )
            return None
        mismatch = None
        if generator.prime != curve_by_name(meta.curve).r:
            mismatch = f"the .wasm computes over {_field(generator.prime)}, the key over {meta.curve}'s"
        elif generator.wires != meta.wires:
            mismatch = f"the .wasm computes {generator.wires:,} wires, the key has {meta.wires:,}"
        if mismatch is not None:
            raise Invalid(f"wasm {named!r} and zkey are not of one circuit: {mismatch}")
        return generator


def _info(circuit: CircuitEntry) -> CircuitInfo:
    """A registered circuit as the API shows it, with its digest (what ``PUT /v1/circuits/{name}`` takes)."""
    return _described(circuit).model_copy(update={"digest": circuit.record.digest})


def _field_product(record: CircuitRecord) -> str | None:
    """How a circuit's generator will multiply, as journalled (None without one)."""
    if record.wasm is None or record.wasm_inspection is None:
        return None
    return str(record.wasm_inspection.get("field_product", "unknown"))


# What a registered circuit's .wasm says, journalled with it (``CircuitRecord.wasm_inspection``):
#   {"read_by": "prooflane <version>, wasmtime <version>" (a start under others reads it again),
#    "generator": {"circom_version", "wires", "inputs", "prime" (0x hex)}, or null (no circom 2 constants),
#    "field_product": how it will multiply (``wasm_witness.field_product``; a circom 1 module says so)}


def _read_generator(wasm: str) -> dict[str, Any]:
    """What the generator at ``wasm`` says (a file that is no module: its field product says why). Blocks:
    run it in a thread; OSError or ProoflaneError where it cannot be opened."""
    try:
        generator = inspect_wasm(wasm)
    except ValueError as exc:
        return _inspection(None, f"unknown: {exc}")
    return _inspection_of(wasm, generator)


def _inspection_of(wasm: str, generator: WitnessGenerator | None) -> dict[str, Any]:
    """The journalled inspection of the generator at ``wasm``, once ``generator`` is read from it: how it
    will multiply is decided as the synthesis process decides (blocks: run it in a thread)."""
    if generator is None:
        return _inspection(None, "snarkjs' in node (not a circom 2 generator)")
    from ..kinds.wasm_witness import field_product

    try:
        product = field_product(wasm)
    except (OSError, ValueError) as exc:
        product = f"unknown: {exc}"
    return _inspection(generator, product)


def _inspection(generator: WitnessGenerator | None, product: str) -> dict[str, Any]:
    read = None
    if generator is not None:
        read = dataclasses.asdict(generator) | {"prime": hex(generator.prime)}
    return {"read_by": _readers(), "generator": read, "field_product": product}


def _current(inspection: dict[str, Any] | None) -> bool:
    """Whether ``inspection`` was journalled by this prooflane and wasmtime (else read again, once)."""
    return inspection is not None and inspection.get("read_by") == _readers()


@functools.cache
def _readers() -> str:
    try:
        wasmtime = importlib.metadata.version("wasmtime")
    except importlib.metadata.PackageNotFoundError:
        wasmtime = "none"
    return f"prooflane {__version__}, wasmtime {wasmtime}"


def _priority(priority: str) -> Priority:
    try:
        return Priority(priority)
    except ValueError:
        raise Invalid(f"priority {priority!r}: expected critical, high or normal") from None


def _field(prime: int) -> str:
    """A scalar field by its curve's name, or by its prime when prooflane knows no such curve."""
    try:
        return f"{curve_by_prime(prime).name}'s scalar field"
    except ValueError:
        return f"the field of prime {prime}"


def _kind_infos(metas: dict[str, CircuitMeta], tables: Callable[[CircuitMeta], bool]) -> list[KindInfo]:
    """``GET /v1/kinds``: the built-in kinds (``metas``: their prepared circuits; ``tables``: whether a
    cpu worker may keep a key's fixed-base tables), then ``circom``."""
    out = [
        KindInfo(
            name=spec.name,
            partitions=spec.partitions,
            priority=spec.priority,
            curve=metas[spec.name].curve,
            constraints_per_partition=metas[spec.name].constraints,
            memory_per_partition_bytes=metas[spec.name].partition_bytes,
            proving_key_bytes=metas[spec.name].worker_key_bytes(tables(metas[spec.name])),
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


def copy_circuit_files(
    folders: tuple[Path, ...],
    zkey: str,
    wasm: str | None,
    target: Path,
    limit: int,
    given_up: threading.Event,
) -> str:
    """Copy a registration's .zkey (and .wasm) into the new folder ``target``, each resolved inside the
    roots and a regular file of at most ``limit`` bytes; the SHA-256 of both. Blocks: run it off the loop."""
    roots = Roots.of(folders)
    zkey_path = roots.confine(zkey, "zkey")
    wasm_path = roots.confine(wasm, "wasm") if wasm is not None else None
    target.mkdir(parents=True)
    digest = hashlib.sha256()
    copy_limited(zkey_path, target / "circuit.zkey", limit, "zkey", digest, given_up)
    if wasm_path is not None:
        copy_limited(wasm_path, target / "circuit.wasm", limit, "wasm", digest, given_up)
    else:
        digest.update(b"-")
    return digest.hexdigest()


def _files_present(record: CircuitRecord) -> bool:
    """Whether a registered circuit's files are all in the data folder."""
    return all(os.path.exists(p) for p in (record.zkey, record.wasm) if p is not None)


def _move_folder(source: Path, target: Path) -> None:
    """``source`` becomes ``target`` (a folder left by an earlier, interrupted registration is replaced)."""
    shutil.rmtree(target, ignore_errors=True)
    source.rename(target)


def _unjournalled(circuits: Path, journalled: set[Path]) -> list[Path]:
    """The folders under ``circuits`` that no journalled circuit's files are in."""
    if not circuits.is_dir():
        return []
    return [f for f in circuits.iterdir() if f.is_dir() and not f.is_symlink() and f not in journalled]


async def receive_file(
    chunks: AsyncIterator[bytes], target: Path, limit: int, label: str, hasher: Hasher
) -> int:
    """Write the uploaded ``chunks`` to the new file ``target`` (never overwritten), feeding ``hasher``; the
    bytes written. Held at most ``CHUNK_BYTES`` at a time, written in a thread. Past ``limit`` bytes:
    ``TooLarge``; a full disk: ``StorageFull``. The caller removes ``target`` on failure."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = await asyncio.to_thread(os.open, target, flags, KEPT_MODE)
    except OSError as exc:
        raise _unwritten(exc, label) from None
    size, pending = 0, bytearray()
    try:
        async for chunk in chunks:
            size += len(chunk)
            if size > limit:
                raise TooLarge(f"{label}: more than the {limit:,} bytes accepted; nothing kept")
            pending += chunk
            if len(pending) >= CHUNK_BYTES:
                full, pending = pending, bytearray()
                await asyncio.to_thread(_write, fd, full, hasher)
        if pending:
            await asyncio.to_thread(_write, fd, pending, hasher)
    except OSError as exc:
        raise _unwritten(exc, label) from None
    finally:
        os.close(fd)
    return size


def _write(fd: int, data: bytearray, hasher: Hasher) -> None:
    hasher.update(bytes(data))  # a copy of one chunk: the protocol takes bytes
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _unwritten(exc: OSError, label: str) -> ProoflaneError:
    """The refusal of an upload the data folder could not take."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StorageFull(f"{label}: the data folder's disk is full ({exc.strerror}); nothing kept")
    return Unavailable(f"{label}: cannot write it into the data folder ({exc.strerror or exc}); nothing kept")
