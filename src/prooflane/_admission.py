"""Admission: a job request becomes a journal record and queued partitions, or a refusal that says why.

Idempotent on the client's ``job_id``; checks that a partition can ever fit the memory budget before
anything is created; resolves sectors and witnesses to paths on this machine; on restart, queues again
every unfinished job of the journal without proving again what was proven.
"""

from __future__ import annotations

import errno
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

from . import events as ev
from ._circuits import CircuitRegistry
from ._jobs import JobRun, PartitionRun
from ._pipeline import Pipeline
from .errors import JobRejected, ProoflaneError
from .kinds import BUILTIN_KINDS, CIRCOM, CircomInput, CircuitMeta, StorageInput, kind_spec
from .models import InlineSector, JobRequest
from .states import JobState, PartitionState, Priority
from .store import JobRecord

__all__ = ["Admission"]

P = PartitionState


class Admission:
    """Turns requests into journalled, queued jobs."""

    def __init__(self, pipeline: Pipeline, circuits: CircuitRegistry) -> None:
        self._pipeline = pipeline
        self._circuits = circuits

    def submit(self, req: JobRequest) -> str:
        """Journal a job and queue its partitions; return its id (see ``Engine.submit``)."""
        journal = self._pipeline.journal
        original = req.model_dump(mode="json", exclude_none=True)
        if req.job_id is not None and (known := journal.job(req.job_id)) is not None:
            if known.request.get("original") != original:
                raise JobRejected(f"job_id {req.job_id!r} is taken by a different request", 409)
            return req.job_id
        spec = kind_spec(req.kind)
        if spec is None:
            names = ", ".join([k.name for k in BUILTIN_KINDS] + [CIRCOM])
            raise JobRejected(f"unknown kind {req.kind!r}: expected one of {names}", 404)
        job_id = req.job_id or uuid.uuid4().hex
        meta = self._circuits.meta(req.kind, req.circuit)
        self._check_fits(req.kind, meta)  # before anything is created for the job
        priority, resolved = self._resolve(req, job_id)
        randomness = (req.randomness_bytes() or os.urandom(32)).hex()
        partitions = len(req.witnesses or []) if req.kind == CIRCOM else spec.partitions
        record = journal.insert_job(
            job_id=job_id,
            kind=req.kind,
            priority=priority.value,
            request={"original": original, **resolved},
            randomness=randomness,
            partitions=partitions,
            submitted_at=time.time(),
        )
        self.admit(record, meta, done={})
        return job_id

    def resume(self) -> None:
        """Queue again every job the journal holds unfinished; proven partitions stay proven."""
        journal = self._pipeline.journal
        for record in journal.unfinished_jobs():
            done = {p.index: p.proof is not None for p in journal.partitions(record.job_id)}
            try:
                meta = self._circuits.meta(record.kind, record.request.get("circuit"))
            except (JobRejected, KeyError) as exc:
                journal.set_job_state(
                    record.job_id, JobState.FAILED, error=f"cannot resume: {exc}", finished_at=time.time()
                )
                continue
            self.admit(record, meta, done)

    def admit(self, record: JobRecord, meta: CircuitMeta, done: dict[int, bool]) -> JobRun:
        """Put a journalled job in the pipeline: every partition not already proven goes to the queue."""
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
        pipeline.jobs[job.job_id] = job
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
        for part in job.partitions:
            if part.state is P.PENDING:
                pipeline.pending.push(part.key, part)
        if all(p.state is P.DONE for p in job.partitions):
            pipeline.end_job(job, JobState.DONE, None)
        return job

    def _resolve(self, req: JobRequest, job_id: str) -> tuple[Priority, dict[str, Any]]:
        """The job's priority, and its inputs as the journal keeps them (paths on this machine)."""
        if req.kind == CIRCOM:
            circuit = self._circuits.circuit(req.circuit or "")
            witnesses = []
            for i, w in enumerate(req.witnesses or []):
                if isinstance(w, str) and not Path(w).is_file():
                    raise JobRejected(f"witnesses[{i}]: no .wtns file {w!r} on the daemon's machine", 422)
                if isinstance(w, dict) and circuit.record.wasm is None:
                    raise JobRejected(
                        f"witnesses[{i}]: circuit inputs given, but circuit {circuit.record.name!r} has no "
                        "witness generator: pass .wtns paths or register it with a .wasm",
                        422,
                    )
                witnesses.append(str(Path(w).resolve()) if isinstance(w, str) else w)
            prio = req.priority or Priority(circuit.record.priority)
            return prio, {"witnesses": witnesses, "circuit": circuit.record.name}
        spec = kind_spec(req.kind)
        assert spec is not None
        return req.priority or spec.priority, {"sector": self._sector_path(req, job_id)}

    def _sector_path(self, req: JobRequest, job_id: str) -> str:
        from .circuits import Sector, profile_by_name

        cfg = self._pipeline.config
        want = profile_by_name(cfg.profile).sector_bytes
        inline = isinstance(req.sector, InlineSector)
        if isinstance(req.sector, InlineSector) and req.sector.size != want:
            # Refused before anything is built: an inline sector of any other size could never be proven.
            raise JobRejected(
                f"sector: an inline sector of {req.sector.size} bytes, but profile {cfg.profile!r} proves "
                f"sectors of {want} bytes",
                422,
            )
        path = cfg.data_dir / "sectors" / job_id
        try:
            if isinstance(req.sector, str):
                path = Path(req.sector).expanduser().resolve()
                sector = Sector.open(path)
            else:
                assert req.sector is not None
                seed = bytes.fromhex(req.sector.seed.removeprefix("0x")) if req.sector.seed else None
                sector = Sector.create(path, req.sector.size, seed=seed)
        except (ProoflaneError, OSError, ValueError, RuntimeError) as exc:
            if inline:
                shutil.rmtree(path, ignore_errors=True)  # a rejected inline sector leaves nothing on disk
            full = (
                isinstance(exc, OSError) and exc.errno == errno.ENOSPC
            )  # the daemon's fault, not the request's
            raise JobRejected(f"sector: {exc}", 507 if full else 422) from None
        if sector.size_bytes != want:
            raise JobRejected(
                f"sector {str(path)!r} holds {sector.size_bytes} bytes, but profile {cfg.profile!r} "
                f"proves sectors of {want} bytes (prooflane sector new --size {want})",
                422,
            )
        return str(path)

    def _check_fits(self, kind: str, meta: CircuitMeta) -> None:
        budget = self._pipeline.budget
        need = meta.partition_bytes + meta.key_alloc_bytes
        if not budget.could_ever_fit(need):
            raise JobRejected(
                f"a {kind} partition needs {need} bytes (its reservation plus a loaded proving key), more "
                f"than the whole memory budget of {budget.total} bytes: raise memory_budget_bytes "
                "or use a smaller profile",
                413,
            )
