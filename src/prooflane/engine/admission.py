"""Admission: a job request becomes a journal record and queued partitions, or a refusal that says why.

Idempotent on the client's ``job_id``; checks that a partition can ever fit the memory budget before
anything is created; resolves sectors and witnesses to paths on this machine, inside the allowed roots
(:mod:`prooflane.files`), with every file checked off the event loop (inline sectors are built on the
backend's pool); takes a job's .wtns files from an upload (:meth:`Admission.submit_upload`: streamed into
``<data_dir>/witnesses/``, checked like named files, removed once no unfinished job names them); on
restart, queues again every unfinished job of the journal without proving again what was proven.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

from .. import events as ev
from ..circuits.profiles import profile_by_name
from ..circuits.sector import FULL, Sector, WrongSectorSize, create_sector
from ..devices.backend import PoolProcessDied
from ..errors import Conflict, Invalid, NotFound, ProoflaneError, Refused, StorageFull, TooLarge, Unavailable
from ..files import FileRefused, Roots, off_loop, open_regular, refusal
from ..kinds import (
    BUILTIN_KINDS,
    CIRCOM,
    WTNS_HEADER_BYTES,
    WTNS_VERSION,
    CircomInput,
    CircuitMeta,
    StorageInput,
    kind_spec,
    witness_memory_bytes,
    wtns_limit,
    wtns_version,
    wtns_wires,
)
from ..models import InlineSector, JobRequest
from ..states import JobState, PartitionState, Priority
from ..store import JobRecord
from . import logbook
from .pipeline import Pipeline
from .records import JobRun, PartitionRun
from .registry import CircuitRegistry, UploadParts, receive_file
from .tables import counted_up_front

__all__ = ["Admission", "check_witnesses"]

P = PartitionState
T = TypeVar("T")
INLINE_MARK = ".inline"  # in an inline sector's folder: the daemon made it (from a request's spec)
BUILDING = ".building-"  # an inline sector being built: <data_dir>/sectors/.building-<job id>.<random>


class Admission:
    """Turns requests into journalled, queued jobs."""

    def __init__(self, pipeline: Pipeline, circuits: CircuitRegistry) -> None:
        self._pipeline = pipeline
        self._circuits = circuits
        # job id -> the admission of that id in progress: a second request with the id waits for it, then
        # answers as the journal says (the same job, or 409). Event loop only.
        self._admitting: dict[str, asyncio.Future[None]] = {}

    async def submit(self, req: JobRequest) -> str:
        """Journal a job and queue its partitions; return its id (see ``Engine.submit``)."""
        if req.job_id is not None:
            while (earlier := self._admitting.get(req.job_id)) is not None:
                await asyncio.wait({earlier})
        journal = self._pipeline.journal
        original = req.model_dump(mode="json", exclude_none=True)
        if req.job_id is not None and (known := journal.job(req.job_id)) is not None:
            if known.request.get("original") != original:
                raise Conflict(f"job_id {req.job_id!r} is taken by a different request")
            return req.job_id
        spec = kind_spec(req.kind)
        if spec is None:
            names = ", ".join([k.name for k in BUILTIN_KINDS] + [CIRCOM])
            raise NotFound(f"unknown kind {req.kind!r}: expected one of {names}")
        most = self._pipeline.config.max_partitions_per_job
        if req.kind == CIRCOM and len(req.witnesses or []) > most:
            raise TooLarge(_too_many(len(req.witnesses or []), most))
        job_id = req.job_id or uuid.uuid4().hex
        meta = self._circuits.meta(req.kind, req.circuit)
        computed = any(isinstance(w, dict) for w in req.witnesses or []) if req.kind == CIRCOM else False
        self._check_fits(req.kind, meta, computed)  # before anything is created for the job
        await self._circuits.keys.ensure(meta)  # a key file deleted: made again, or the job refused
        admitting = self._admitting[job_id] = asyncio.get_running_loop().create_future()
        try:
            priority, resolved = await self._resolve(req, job_id, meta)
            try:
                record = self._pipeline.journal.insert_job(
                    job_id=job_id,
                    kind=req.kind,
                    priority=priority.value,
                    request={"original": original, **resolved},
                    randomness=(req.randomness_bytes() or os.urandom(32)).hex(),
                    partitions=len(req.witnesses or []) if req.kind == CIRCOM else spec.partitions,
                    submitted_at=time.time(),
                )
            except BaseException:
                if isinstance(req.sector, InlineSector):
                    await self._remove_inline(job_id)
                raise
        finally:
            del self._admitting[job_id]
            admitting.set_result(None)
        self.admit(record, meta, done={})
        return job_id

    async def submit_upload(
        self, circuit: str, parts: UploadParts, *, job_id: str | None = None, priority: str | None = None
    ) -> str:
        """A job on the registered ``circuit`` whose witnesses come in the upload: one part ``wtns`` per
        partition, in order (see ``Engine.submit_upload``)."""
        meta = self._circuits.circuit(circuit).meta  # 404 before anything is written
        await self._circuits.keys.ensure(meta)  # 503 before anything is written when its key is gone
        folder = self._pipeline.config.data_dir / "witnesses"
        incoming = folder / f".incoming-{uuid.uuid4().hex}"
        kept: list[str] = []
        try:
            received = await self._receive_witnesses(parts, incoming, wtns_limit(meta.wires), meta.wires)
            named = {i: str(path) for i, (path, _) in enumerate(received)}
            await self._io(check_witnesses, (incoming,), named, wtns_limit(meta.wires), meta.wires)
            kept = await asyncio.to_thread(_keep_witnesses, received, folder)
            try:
                fields = {"kind": CIRCOM, "circuit": circuit, "witnesses": kept, "job_id": job_id}
                req = JobRequest.model_validate(fields | ({"priority": priority} if priority else {}))
            except ValueError as exc:
                raise Invalid(f"invalid request: {exc}") from None
            job_id = await self.submit(req)
        except BaseException:
            await asyncio.to_thread(_unlink, self._unreferenced(kept))
            raise
        finally:
            await asyncio.to_thread(shutil.rmtree, incoming, True)
        self._prune_when_ended(job_id, kept)
        return job_id

    async def _receive_witnesses(
        self, parts: UploadParts, incoming: Path, limit: int, wires: int
    ) -> list[tuple[Path, str]]:
        """Each part ``wtns`` streamed into ``incoming``: (its file, its SHA-256). Each at most ``limit``
        bytes, all together at most ``max_circuit_bytes``, and each refused from its first bytes unless they
        are a .wtns header of ``wires`` wires (before the rest of the part is read)."""
        total_limit = self._pipeline.config.max_circuit_bytes
        await asyncio.to_thread(incoming.mkdir, parents=True)
        received: list[tuple[Path, str]] = []
        total = 0
        most = self._pipeline.config.max_partitions_per_job
        async for field, chunks in parts:
            if field != "wtns":
                raise Invalid(f"upload part {field!r}: expected parts 'wtns', one .wtns file per partition")
            if len(received) == most:
                raise TooLarge(_too_many(f"more than {most:,}", most))
            index, digest = len(received), hashlib.sha256()
            target = incoming / f"{index}.wtns"
            label = f"witnesses[{index}]"
            witness = _headed_witness(chunks, label, wires)
            size = await receive_file(witness, target, min(limit, total_limit - total), label, digest)
            total += size
            received.append((target, digest.hexdigest()))
        if not received:
            raise Invalid("the upload holds no part 'wtns': send one .wtns file per partition")
        return received

    def _prune_when_ended(self, job_id: str, paths: list[str]) -> None:
        """Remove the job's uploaded witnesses once it ends (unless another unfinished job names them)."""
        job = self._pipeline.jobs.get(job_id)
        if job is None or job.state.terminal:
            _unlink(self._unreferenced(paths))
            return

        async def prune() -> None:
            await job.ended.wait()
            await asyncio.to_thread(_unlink, self._unreferenced(paths))

        self._pipeline.spawn(prune(), name=f"witnesses of {job_id}")

    def _unreferenced(self, paths: list[str]) -> list[str]:
        """The uploaded witnesses of ``paths`` that no unfinished job names (event loop only: it reads the
        pipeline's jobs)."""
        named = {
            w
            for job in self._pipeline.jobs.values()
            if not job.state.terminal
            for w in job.record.request.get("witnesses", ())
            if isinstance(w, str)
        }
        return [p for p in paths if p not in named]

    def _sweep_witnesses(self) -> None:
        """At start: the uploaded witnesses of resumed jobs are removed when those end; the others now."""
        folder = self._pipeline.config.data_dir / "witnesses"
        if not folder.is_dir():
            return
        for entry in folder.iterdir():
            if entry.name.startswith(".incoming-"):  # an upload cut short by a crash
                shutil.rmtree(entry, ignore_errors=True)
        uploaded = {str(p) for p in folder.glob("*.wtns")}
        for job in list(self._pipeline.jobs.values()):
            mine = [w for w in job.record.request.get("witnesses", ()) if w in uploaded]
            if mine and not job.state.terminal:
                self._prune_when_ended(job.job_id, mine)
        _unlink(self._unreferenced(sorted(uploaded)))

    def resume(self) -> None:
        """Queue again every job the journal holds unfinished; proven partitions stay proven."""
        journal = self._pipeline.journal
        resumed, to_prove, not_resumed = 0, 0, 0
        for record in journal.unfinished_jobs():
            done = {p.index: p.proof is not None for p in journal.partitions(record.job_id)}
            try:
                meta = self._circuits.meta(record.kind, record.request.get("circuit"))
            except (Refused, KeyError) as exc:
                journal.set_job_state(
                    record.job_id, JobState.FAILED, error=f"cannot resume: {exc}", finished_at=time.time()
                )
                logbook.job_not_resumed(record, str(exc))
                not_resumed += 1
                continue
            job = self.admit(record, meta, done, resumed=True)
            resumed += 1
            to_prove += sum(p.state is P.PENDING for p in job.partitions)
        logbook.jobs_resumed(resumed, to_prove, not_resumed)
        self._sweep_witnesses()
        self._sweep_sectors()

    def admit(
        self, record: JobRecord, meta: CircuitMeta, done: dict[int, bool], *, resumed: bool = False
    ) -> JobRun:
        """Put a journalled job in the pipeline: every partition not already proven goes to the queue.
        ``resumed``: taken again from the journal at start (said so in the log)."""
        pipeline, req = self._pipeline, record.request
        if record.kind == CIRCOM:
            wasm = self._circuits.circuit(req["circuit"]).record.wasm
            inputs: list[StorageInput | CircomInput] = [CircomInput(w, wasm) for w in req["witnesses"]]
        else:
            cfg = pipeline.config
            rnd = bytes.fromhex(record.randomness)
            inputs = [
                StorageInput(record.kind, cfg.profile, cfg.curve, req["sector"], rnd)
            ] * record.partitions
        job = JobRun(record, meta, Priority(record.priority), inputs)
        job.partitions = [
            PartitionRun(job, i, P.DONE if done.get(i) else P.PENDING) for i in range(record.partitions)
        ]
        pipeline.admitted(job)
        pipeline.post(
            ev.JobSubmitted(
                at=pipeline.clock(),
                job_id=job.job_id,
                kind=record.kind,
                priority=job.priority.value,
                partitions=record.partitions,
                done_partitions=tuple(sorted(i for i, d in done.items() if d)),
                circuit=req.get("circuit") if record.kind == CIRCOM else None,
            )
        )
        logbook.job_admitted(job, resumed=resumed)
        for part in job.partitions:
            if part.state is P.PENDING:
                pipeline.pending.push(part.key, part)
        if all(p.state is P.DONE for p in job.partitions):
            pipeline.end_job(job, JobState.DONE, None)
        return job

    async def _resolve(
        self, req: JobRequest, job_id: str, meta: CircuitMeta
    ) -> tuple[Priority, dict[str, Any]]:
        """The job's priority, and its inputs as the journal keeps them (paths on this machine)."""
        if req.kind == CIRCOM:
            circuit = self._circuits.circuit(req.circuit or "")
            witnesses = list(req.witnesses or [])
            for i, w in enumerate(witnesses):
                if isinstance(w, dict) and circuit.record.wasm is None:
                    raise Invalid(
                        f"witnesses[{i}]: circuit inputs given, but circuit {circuit.record.name!r} has no "
                        "witness generator: pass .wtns paths or register it with a .wasm"
                    )
            named = {i: w for i, w in enumerate(witnesses) if isinstance(w, str)}
            if named:
                folders = self._circuits.root_folders()
                checked = await self._io(check_witnesses, folders, named, wtns_limit(meta.wires), meta.wires)
                witnesses = [checked.get(i, w) for i, w in enumerate(witnesses)]
            prio = req.priority or Priority(circuit.record.priority)
            return prio, {"witnesses": witnesses, "circuit": circuit.record.name}
        spec = kind_spec(req.kind)
        assert spec is not None
        return req.priority or spec.priority, {"sector": await self._sector_path(req, job_id)}

    async def _sector_path(self, req: JobRequest, job_id: str) -> str:
        """The sector's folder: a named one (a relative name is one of the daemon's sector folder), resolved
        inside the allowed roots and checked (in a thread); or an inline one, built in the data folder on
        the backend's pool (removed again if refused)."""
        cfg = self._pipeline.config
        want = profile_by_name(cfg.profile).sector_bytes
        wrong_size = (
            f"profile {cfg.profile!r} proves sectors of {want} bytes (prooflane sector new --size {want})"
        )
        if isinstance(req.sector, InlineSector):
            return await self._inline_sector(req.sector, job_id, want)
        assert isinstance(req.sector, str)
        folders = self._circuits.root_folders()
        sectors = (cfg.data_dir / "sectors").absolute()
        path = await self._io(check_sector, folders, req.sector, want, wrong_size, sectors)
        return str(path)

    async def _inline_sector(self, spec: InlineSector, job_id: str, want: int) -> str:
        cfg = self._pipeline.config
        if spec.size != want:
            # Refused before anything is built: an inline sector of any other size could never be proven.
            raise Invalid(
                f"sector: an inline sector of {spec.size} bytes, but profile {cfg.profile!r} proves sectors "
                f"of {want} bytes"
            )
        path = cfg.data_dir / "sectors" / job_id
        if await asyncio.to_thread(path.exists):
            if not await asyncio.to_thread((path / INLINE_MARK).exists):  # someone's: never built over
                raise Conflict(
                    f"job_id {job_id!r}: the daemon's sector folder holds a sector of that name ({path}); an "
                    "inline sector is made under its job's id: pick another job_id, or name that sector"
                )
            # Built for this id by an admission the daemon's end cut off before the job was journalled (no
            # job has this id: submit looked): nothing names it, so it is built again.
            await self._remove_inline(job_id)
        try:
            seed = bytes.fromhex(spec.seed.removeprefix("0x")) if spec.seed else None
        except ValueError:
            raise Invalid(f"sector.seed {spec.seed!r}: expected hex, e.g. '07' or '0x07'") from None
        # Built aside and moved into place whole, marked as the daemon's: a folder under the job's id is
        # always a complete sector, and one the daemon made can be told from one someone put there.
        building = path.with_name(f"{BUILDING}{job_id}.{uuid.uuid4().hex[:8]}")
        try:
            await self._circuits.backend.run(create_sector, str(building), want, seed)
            await asyncio.to_thread(_mark_and_move, building, path)
        except PoolProcessDied as exc:
            await self._remove_inline(job_id, building)
            raise Unavailable(f"sector: building it failed ({exc}); nothing kept: try again") from None
        except (ProoflaneError, OSError, ValueError) as exc:
            await self._remove_inline(job_id, building)  # a rejected inline sector leaves nothing on disk
            full = isinstance(exc, StorageFull) or (isinstance(exc, OSError) and exc.errno in FULL)
            raise (StorageFull if full else Invalid)(f"sector: {exc}") from None
        except BaseException:  # cancelled: the daemon stops
            shutil.rmtree(building, ignore_errors=True)
            shutil.rmtree(path, ignore_errors=True)
            raise
        return str(path)

    def _sweep_sectors(self) -> None:
        """At start: remove what a killed daemon left of inline sectors no job names (one half built, or
        one built for a job that was never journalled)."""
        sectors = self._pipeline.config.data_dir / "sectors"
        if not sectors.is_dir():
            return
        folders = list(sectors.iterdir())
        marked = {f.name for f in folders if (f / INLINE_MARK).exists()}
        known = self._pipeline.journal.job_states(sorted(marked))  # one read for them all
        for folder in folders:
            if folder.name.startswith(BUILDING) or (folder.name in marked and folder.name not in known):
                logbook.leftover_removed(folder)
                shutil.rmtree(folder, ignore_errors=True)

    async def _io(self, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)`` (file checks) in a thread, refusals as the HTTP answers they stand for."""
        try:
            return await off_loop(call, *args)
        except ProoflaneError as exc:
            raise refusal(exc) from None

    async def _remove_inline(self, job_id: str, *building: Path) -> None:
        """Remove the inline sector of ``job_id`` (and the folders it was ``building`` in)."""
        for path in (self._pipeline.config.data_dir / "sectors" / job_id, *building):
            await asyncio.to_thread(shutil.rmtree, path, True)

    def _check_fits(self, kind: str, meta: CircuitMeta, computed: bool = False) -> None:
        """Refuse a job whose partition could never be reserved: its estimate, its witness generator's
        memory where its witnesses are ``computed`` from circuit inputs, and a loaded key."""
        budget, cfg = self._pipeline.budget, self._pipeline.config
        generator = witness_memory_bytes(meta.wires, cfg.witness_memory_bytes) if computed else 0
        need = meta.partition_bytes + generator + meta.worker_key_bytes(counted_up_front(cfg))
        if not budget.could_ever_fit(need):
            raise TooLarge(
                f"a {kind} partition needs {need} bytes (its reservation, its witness generator's memory "
                "(witness_memory_bytes) where it computes one, plus a loaded proving key and its "
                "tables, if msm_tables = true), more "
                f"than the whole memory budget of {budget.total} bytes: raise memory_budget_bytes "
                "or use a smaller profile"
            )


def check_sector(
    folders: tuple[Path, ...], raw: str, size_bytes: int, wrong_size: str, sectors: Path
) -> Path:
    """A sector folder named in a request, resolved inside the roots and opened (every file checked, the
    data read); raises a prooflane error saying what is wrong. A relative ``raw`` names a sector of
    ``sectors`` (the daemon's sector folder); an absolute one, any folder. Blocks: run it off the loop."""
    named = not Path(raw).is_absolute()
    try:
        path = Roots.of(folders).confine(sectors / raw if named else raw, "sector")
    except FileRefused as exc:
        if not named:
            raise
        raise FileRefused(
            f"{exc}: a relative sector name is looked up in the daemon's sector folder ({sectors}; "
            f"`prooflane sector new --out {sectors}/NAME` makes one there); name a sector elsewhere by its "
            "absolute path"
        ) from None
    try:
        Sector.open(path, size_bytes=size_bytes)
    except WrongSectorSize as exc:
        raise Invalid(f"sector {raw!r} holds {exc.size_bytes} bytes, but {wrong_size}") from None
    except ProoflaneError as exc:
        raise Invalid(f"sector {raw!r}: {exc}") from None
    return path


def check_witnesses(
    folders: tuple[Path, ...], named: dict[int, str], limit: int, wires: int | None = None
) -> dict[int, str]:
    """The .wtns paths of a request (by index), each resolved inside the roots and checked to be a regular
    file of at most ``limit`` bytes whose header, when it has one, says ``wires`` wires (not opened for
    long: synthesis reads it). Blocks: run it off the loop."""
    roots = Roots.of(folders)
    out: dict[int, str] = {}
    for i, raw in named.items():
        path = roots.confine(raw, f"witnesses[{i}]")
        # Its header first: a witness of another circuit is refused naming both counts, not its size.
        fd, _ = open_regular(path, 1 << 62, f"witnesses[{i}]")
        try:
            head = os.pread(fd, WTNS_HEADER_BYTES, 0)
        finally:
            os.close(fd)
        _check_version(head, f"witnesses[{i}] {raw!r}")
        found = wtns_wires(head)
        if wires is not None and found is not None and found != wires:
            raise Invalid(f"witnesses[{i}] {raw!r}: this witness has {found:,} wires, the circuit {wires:,}")
        fd, _ = open_regular(path, limit, f"witnesses[{i}]")
        os.close(fd)
        out[i] = str(path)
    return out


def _too_many(count: int | str, most: int) -> str:
    shown = f"{count:,}" if isinstance(count, int) else count
    return (
        f"{shown} partitions (witnesses or circuit inputs) in one job: at most {most:,} are accepted "
        "(max_partitions_per_job); split them into several jobs"
    )


async def _headed_witness(chunks: AsyncIterator[bytes], label: str, wires: int) -> AsyncIterator[bytes]:
    """An uploaded witness's chunks, once its first bytes are known to be a .wtns header of ``wires`` wires
    (``Invalid`` otherwise: an empty part, another format, a witness of another circuit)."""
    head = b""
    async for chunk in chunks:
        if len(head) >= WTNS_HEADER_BYTES:
            yield chunk
            continue
        head += chunk
        if len(head) >= WTNS_HEADER_BYTES:
            _check_head(head, label, wires)
            yield head
    if len(head) < WTNS_HEADER_BYTES:
        _check_head(head, label, wires)
        if head:
            yield head


def _check_head(head: bytes, label: str, wires: int) -> None:
    found = wtns_wires(head[:WTNS_HEADER_BYTES])
    if found is None:
        what = (
            "an empty part" if not head else f"{len(head):,} bytes" if len(head) < 32 else "its first bytes"
        )
        raise Invalid(
            f"{label}: not a .wtns witness ({what}, where a .wtns file starts with 'wtns' and its header)"
        )
    _check_version(head, label)
    if found != wires:
        raise Invalid(f"{label}: this witness has {found:,} wires, the circuit {wires:,}")


def _check_version(head: bytes, label: str) -> None:
    """Refuse a .wtns of another version than the one read: at once, not at its synthesis."""
    version = wtns_version(head[:WTNS_HEADER_BYTES])
    if version is not None and version != WTNS_VERSION:
        raise Invalid(
            f"{label}: a .wtns file of version {version}: prooflane reads version {WTNS_VERSION} "
            "(as circom 2 and snarkjs write it); nothing kept"
        )


def _keep_witnesses(received: list[tuple[Path, str]], folder: Path) -> list[str]:
    """Each checked upload moved to ``folder/<sha256>.wtns`` (the same bytes uploaded again are one file);
    their paths, in order. Blocks: run it off the loop."""
    kept = []
    for path, digest in received:
        target = folder / f"{digest}.wtns"
        path.replace(target)  # atomic; an equal file already there is replaced by its equal
        kept.append(str(target))
    return kept


def _unlink(paths: list[str]) -> None:
    for path in paths:
        Path(path).unlink(missing_ok=True)


def _mark_and_move(building: Path, path: Path) -> None:
    """Mark a built inline sector as the daemon's and move it under its job's id (one rename)."""
    (building / INLINE_MARK).write_text("made by prooflane for the job of this name\n")
    os.rename(building, path)
