"""The SQLite journal of jobs, partitions, their proofs, and registered circuits (WAL mode).

Every write is its own committed transaction, so a job acknowledged to a client and every partition proof
stored survive ``kill -9`` of the daemon (WAL with ``synchronous=NORMAL`` loses nothing on a process crash).
A write that cannot be made (the disk is full, or failing) raises :class:`JournalUnwritable` and stores
nothing of itself. Used from the event loop only; each call is one short statement.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ProoflaneError

__all__ = ["CircuitRecord", "JobRecord", "JournalUnwritable", "PartitionRecord", "Store"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    priority TEXT NOT NULL,
    request TEXT NOT NULL,
    randomness TEXT NOT NULL,
    partitions INTEGER NOT NULL,
    state TEXT NOT NULL,
    error TEXT,
    submitted_at REAL NOT NULL,
    finished_at REAL
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
CREATE TABLE IF NOT EXISTS partitions (
    job_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 1,
    error TEXT,
    proof TEXT,
    public TEXT,
    PRIMARY KEY (job_id, idx)
);
CREATE TABLE IF NOT EXISTS circuits (
    name TEXT PRIMARY KEY,
    zkey TEXT NOT NULL,
    wasm TEXT,
    digest TEXT NOT NULL,
    priority TEXT NOT NULL,
    curve TEXT NOT NULL,
    constraints INTEGER NOT NULL,
    public_signals INTEGER NOT NULL,
    memory_bytes INTEGER NOT NULL
);
"""


class JournalUnwritable(ProoflaneError):
    """Raised when the journal cannot be written (the disk is full, or failing); that write stored nothing."""


@dataclass(frozen=True)
class JobRecord:
    """One row of ``jobs``."""

    seq: int
    job_id: str
    kind: str
    priority: str
    request: dict[str, Any]
    randomness: str
    partitions: int
    state: str
    error: str | None
    submitted_at: float
    finished_at: float | None


@dataclass(frozen=True)
class PartitionRecord:
    """One row of ``partitions``; ``proof``/``public`` are set once the partition verified."""

    job_id: str
    index: int
    state: str
    attempts: int
    error: str | None
    proof: dict[str, Any] | None
    public: list[str] | None


@dataclass(frozen=True)
class CircuitRecord:
    """One registered circom circuit."""

    name: str
    zkey: str
    wasm: str | None
    digest: str
    priority: str
    curve: str
    constraints: int
    public_signals: int
    memory_bytes: int


class Store:
    """The journal in ``<data_dir>/journal.sqlite3``."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    # -- jobs -----------------------------------------------------------------------------------------

    def insert_job(
        self,
        *,
        job_id: str,
        kind: str,
        priority: str,
        request: dict[str, Any],
        randomness: str,
        partitions: int,
        submitted_at: float,
    ) -> JobRecord:
        """Journal a new queued job and its pending partitions in one transaction."""
        with self._tx():
            self._write(
                "INSERT INTO jobs (job_id, kind, priority, request, randomness, partitions, state,"
                " submitted_at) VALUES (?, ?, ?, ?, ?, ?, 'queued', ?)",
                (job_id, kind, priority, json.dumps(request), randomness, partitions, submitted_at),
            )
            for i in range(partitions):
                self._write(
                    "INSERT INTO partitions (job_id, idx, state) VALUES (?, ?, 'pending')", (job_id, i)
                )
        record = self.job(job_id)
        assert record is not None
        return record

    def job(self, job_id: str) -> JobRecord | None:
        """The job's row, or None."""
        row = self._db.execute("SELECT * FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        return _job(row) if row else None

    def jobs(self, state: str | None = None, limit: int = 100) -> list[JobRecord]:
        """Jobs newest first, optionally only in ``state``."""
        if state is None:
            rows = self._db.execute("SELECT * FROM jobs ORDER BY seq DESC LIMIT ?", (limit,))
        else:
            rows = self._db.execute(
                "SELECT * FROM jobs WHERE state = ? ORDER BY seq DESC LIMIT ?", (state, limit)
            )
        return [_job(r) for r in rows.fetchall()]

    def unfinished_jobs(self) -> list[JobRecord]:
        """Jobs not yet done, failed or cancelled, oldest first."""
        rows = self._db.execute("SELECT * FROM jobs WHERE state IN ('queued', 'running') ORDER BY seq")
        return [_job(r) for r in rows.fetchall()]

    def set_job_state(
        self, job_id: str, state: str, *, error: str | None = None, finished_at: float | None = None
    ) -> None:
        """Record the job's state (and, when it ends, its error and end time)."""
        self._write(
            "UPDATE jobs SET state = ?, error = coalesce(?, error), finished_at = ? WHERE job_id = ?",
            (state, error, finished_at, job_id),
        )

    def end_job(
        self, job_id: str, state: str, *, error: str | None, finished_at: float, close_partitions: str | None
    ) -> None:
        """Record the job's end in one transaction: its state, error and end time, and (``close_partitions``)
        that state for every partition of it not done or failed."""
        with self._tx():
            self.set_job_state(job_id, state, error=error, finished_at=finished_at)
            if close_partitions is not None:
                self.end_open_partitions(job_id, close_partitions)

    def probe(self) -> None:
        """Write (and commit) one small row: JournalUnwritable while the journal cannot take writes."""
        with self._tx():
            self._write("CREATE TABLE IF NOT EXISTS probe (id INTEGER PRIMARY KEY, at REAL NOT NULL)", ())
            self._write("INSERT OR REPLACE INTO probe VALUES (1, julianday('now'))", ())

    def counts(self) -> dict[str, int]:
        """Number of jobs in each state."""
        rows = self._db.execute("SELECT state, count(*) FROM jobs GROUP BY state").fetchall()
        return {str(r[0]): int(r[1]) for r in rows}

    # -- partitions -----------------------------------------------------------------------------------

    def partitions(self, job_id: str) -> list[PartitionRecord]:
        """The job's partitions in index order."""
        rows = self._db.execute("SELECT * FROM partitions WHERE job_id = ? ORDER BY idx", (job_id,))
        return [_partition(r) for r in rows.fetchall()]

    def save_proof(self, job_id: str, index: int, proof: dict[str, Any], public: list[str]) -> None:
        """Store a verified partition proof (the partition is then done and never proven again)."""
        self._write(
            "UPDATE partitions SET state = 'done', proof = ?, public = ? WHERE job_id = ? AND idx = ?",
            (json.dumps(proof), json.dumps(public), job_id, index),
        )

    def set_partition(
        self, job_id: str, index: int, state: str, *, attempts: int | None = None, error: str | None = None
    ) -> None:
        """Record a partition's state (and attempts or error when given)."""
        self._write(
            "UPDATE partitions SET state = ?, attempts = coalesce(?, attempts), error = coalesce(?, error)"
            " WHERE job_id = ? AND idx = ?",
            (state, attempts, error, job_id, index),
        )

    def end_open_partitions(self, job_id: str, state: str) -> None:
        """Mark every partition of the job not yet done as ``state`` (failed or cancelled)."""
        self._write(
            "UPDATE partitions SET state = ? WHERE job_id = ? AND state NOT IN ('done', 'failed')",
            (state, job_id),
        )

    # -- circuits -------------------------------------------------------------------------------------

    def add_circuit(self, record: CircuitRecord) -> None:
        """Register a circuit (replacing nothing: the caller checked the name is free)."""
        self._write(
            "INSERT INTO circuits VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                record.name,
                record.zkey,
                record.wasm,
                record.digest,
                record.priority,
                record.curve,
                record.constraints,
                record.public_signals,
                record.memory_bytes,
            ),
        )

    def circuits(self) -> list[CircuitRecord]:
        """Every registered circuit, by name."""
        rows = self._db.execute("SELECT * FROM circuits ORDER BY name").fetchall()
        return [CircuitRecord(**dict(r)) for r in rows]

    # -- internals ------------------------------------------------------------------------------------

    def _write(self, sql: str, params: tuple[Any, ...]) -> None:
        """One statement that writes; JournalUnwritable (naming the journal) when it cannot be made."""
        try:
            self._db.execute(sql, params)
        except (sqlite3.Error, OSError) as exc:
            raise JournalUnwritable(f"the journal {self.path} cannot be written ({exc})") from exc

    @contextmanager
    def _tx(self) -> Iterator[None]:
        """One transaction (nested ones join it): all of its writes are stored, or none."""
        if self._db.in_transaction:
            yield
            return
        self._write("BEGIN", ())
        try:
            yield
            self._write("COMMIT", ())
        except BaseException:
            if self._db.in_transaction:  # a COMMIT that failed (a full disk) leaves it open
                self._db.execute("ROLLBACK")
            raise


def _job(row: sqlite3.Row) -> JobRecord:
    data = dict(row)
    data["request"] = json.loads(data["request"])
    return JobRecord(**data)


def _partition(row: sqlite3.Row) -> PartitionRecord:
    return PartitionRecord(
        job_id=row["job_id"],
        index=row["idx"],
        state=row["state"],
        attempts=row["attempts"],
        error=row["error"],
        proof=json.loads(row["proof"]) if row["proof"] else None,
        public=json.loads(row["public"]) if row["public"] else None,
    )
