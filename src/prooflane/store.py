"""The SQLite journal of jobs, partitions, their proofs, and registered circuits (WAL mode).

Every write is its own committed transaction, so a job acknowledged to a client and every partition proof
stored survive ``kill -9`` of the daemon (WAL with ``synchronous=NORMAL`` loses nothing on a process crash).
A write that cannot be made (the disk is full, or failing) raises :class:`JournalUnwritable` and stores
nothing of itself; a read that fails (a damaged page) raises :class:`JournalUnreadable`. Used from the event
loop only; each call is one short statement.

One daemon per data folder: opening the journal takes an exclusive lock on ``daemon.lock`` beside it (held
until :meth:`Store.close`, or the process's end), so a second daemon on the same folder is refused at start
(:class:`JournalInUse`) instead of overwriting the first one's proofs. The journal is checked when opened
(``PRAGMA quick_check``: :class:`JournalDamaged`), and every stored proof carries the SHA-256 of its text,
checked when it is read back, so a proof changed on disk is never served as valid.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ProoflaneError

__all__ = [
    "CircuitRecord",
    "JobRecord",
    "JournalDamaged",
    "JournalInUse",
    "JournalUnreadable",
    "JournalUnwritable",
    "PartitionRecord",
    "PartitionRow",
    "Store",
]

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
    digest TEXT,
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
    memory_bytes INTEGER NOT NULL,
    wasm_inspection TEXT
);
"""


class JournalUnwritable(ProoflaneError):
    """Raised when the journal cannot be written (the disk is full, or failing); that write stored nothing."""


class JournalUnreadable(ProoflaneError):
    """Raised when the journal cannot be read (a damaged page, a failing disk), or a stored proof no longer
    matches the digest it was stored with."""


class JournalDamaged(JournalUnreadable):
    """Raised when the journal fails its check at open (``PRAGMA quick_check``); names what it found."""


class JournalInUse(ProoflaneError):
    """Raised when another daemon holds the data folder's lock: one daemon per data folder."""


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
    wasm_inspection: dict[str, Any] | None = None
    """What registration read of its .wasm (the engine's registry says what it holds), so that a start reads
    nothing again; None without a .wasm, or from a journal older than the column (read once, then stored)."""


@dataclass(frozen=True)
class PartitionRow:
    """A partition's row without its proof: what a job's view needs (no proof text read or decoded)."""

    index: int
    state: str
    attempts: int
    error: str | None


class Store:
    """The journal in ``<data_dir>/journal.sqlite3``, locked for this process (see the module's text)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = _lock_folder(path.parent / "daemon.lock")
        try:
            self._db = self._open(path)
        except BaseException:
            os.close(self._lock)
            raise

    def _open(self, path: Path) -> sqlite3.Connection:
        try:
            db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            found = [str(row[0]) for row in db.execute("PRAGMA quick_check(5)").fetchall()]
            if found != ["ok"]:
                db.close()
                raise JournalDamaged(f"the journal {path} is damaged: {'; '.join(found)}")
            db.executescript(_SCHEMA)
            if "digest" not in _columns(db, "partitions"):
                db.execute("ALTER TABLE partitions ADD COLUMN digest TEXT")  # journals from before digests
            if "wasm_inspection" not in _columns(db, "circuits"):  # journals from before it was kept
                db.execute("ALTER TABLE circuits ADD COLUMN wasm_inspection TEXT")
            if db.execute("PRAGMA user_version").fetchone()[0] < DIGESTS_VERSION:
                _digest_every_proof(db)
        except sqlite3.DatabaseError as exc:
            raise JournalDamaged(f"the journal {path} cannot be opened: {exc}") from None
        except OSError as exc:
            raise JournalUnwritable(f"the journal {path} cannot be opened: {exc.strerror or exc}") from None
        return db

    def close(self) -> None:
        """Close the database and let go of the data folder."""
        self._db.close()
        with contextlib.suppress(OSError):
            os.close(self._lock)

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
        rows = self._read("SELECT * FROM jobs WHERE job_id = ?", (job_id,))
        return _job(rows[0]) if rows else None

    def jobs(self, state: str | None = None, limit: int = 100, before: int | None = None) -> list[JobRecord]:
        """Jobs newest first, optionally only in ``state``, and only those journalled before the job of
        journal position ``before`` (a page after the last one read)."""
        where: list[str] = []
        params: list[Any] = []
        if state is not None:
            where.append("state = ?")
            params.append(state)
        if before is not None:
            where.append("seq < ?")
            params.append(before)
        clause = f"WHERE {' AND '.join(where)} " if where else ""
        rows = self._read(f"SELECT * FROM jobs {clause}ORDER BY seq DESC LIMIT ?", (*params, limit))
        return [_job(r) for r in rows]

    def unfinished_jobs(self) -> list[JobRecord]:
        """Jobs not yet done, failed or cancelled, oldest first."""
        rows = self._read("SELECT * FROM jobs WHERE state IN ('queued', 'running') ORDER BY seq", ())
        return [_job(r) for r in rows]

    def unfinished_job_ids(self) -> list[str]:
        """The ids of the jobs not yet done, failed or cancelled, oldest first (nothing else read)."""
        rows = self._read("SELECT job_id FROM jobs WHERE state IN ('queued', 'running') ORDER BY seq", ())
        return [str(r[0]) for r in rows]

    def job_states(self, job_ids: list[str]) -> dict[str, str]:
        """The state of each of ``job_ids`` the journal holds (one read per 500 ids)."""
        rows = self._read_in("SELECT job_id, state FROM jobs WHERE job_id IN ({})", "", job_ids)
        return {str(r[0]): str(r[1]) for r in rows}

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
        rows = self._read("SELECT state, count(*) FROM jobs GROUP BY state", ())
        return {str(r[0]): int(r[1]) for r in rows}

    # -- partitions -----------------------------------------------------------------------------------

    def partitions(self, job_id: str) -> list[PartitionRecord]:
        """The job's partitions in index order, proofs included (each checked against its digest)."""
        rows = self._read("SELECT * FROM partitions WHERE job_id = ? ORDER BY idx", (job_id,))
        return [_partition(r, self.path) for r in rows]

    def partition_states(self, job_id: str) -> list[PartitionRow]:
        """The job's partitions in index order, without their proofs (nothing large read or decoded)."""
        sql = "SELECT idx, state, attempts, error FROM partitions WHERE job_id = ? ORDER BY idx"
        return [PartitionRow(r[0], r[1], r[2], r[3]) for r in self._read(sql, (job_id,))]

    def partition_states_of(self, job_ids: list[str]) -> dict[str, list[PartitionRow]]:
        """:meth:`partition_states` of many jobs in one statement (a page of jobs: one read, not one each)."""
        found: dict[str, list[PartitionRow]] = {job_id: [] for job_id in job_ids}
        sql = "SELECT job_id, idx, state, attempts, error FROM partitions WHERE job_id IN ({})"
        for r in self._read_in(sql, " ORDER BY job_id, idx", job_ids):
            found[r[0]].append(PartitionRow(r[1], r[2], r[3], r[4]))
        return found

    def save_proof(self, job_id: str, index: int, proof: dict[str, Any], public: list[str]) -> None:
        """Store a verified partition proof (the partition is then done and never proven again), with the
        digest of its text."""
        proof_text, public_text = json.dumps(proof), json.dumps(public)
        self._write(
            "UPDATE partitions SET state = 'done', proof = ?, public = ?, digest = ?"
            " WHERE job_id = ? AND idx = ?",
            (proof_text, public_text, _digest(proof_text, public_text), job_id, index),
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
            "INSERT INTO circuits (name, zkey, wasm, digest, priority, curve, constraints, public_signals,"
            " memory_bytes, wasm_inspection) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                _json_or_null(record.wasm_inspection),
            ),
        )

    def set_wasm_inspection(self, name: str, inspection: dict[str, Any]) -> None:
        """Keep what was read of circuit ``name``'s .wasm (a circuit journalled before it was kept)."""
        self._write("UPDATE circuits SET wasm_inspection = ? WHERE name = ?", (json.dumps(inspection), name))

    def circuits(self) -> list[CircuitRecord]:
        """Every registered circuit, by name (a .wasm inspection that does not decode: None, read again)."""
        rows = self._read("SELECT * FROM circuits ORDER BY name", ())
        return [
            CircuitRecord(**(dict(r) | {"wasm_inspection": _decoded(r["wasm_inspection"])})) for r in rows
        ]

    # -- internals ------------------------------------------------------------------------------------

    def _read_in(self, sql: str, order: str, ids: list[str]) -> list[sqlite3.Row]:
        """``sql`` (with ``IN ({})``) for ``ids``, read 500 at a time (SQLite's limit on bound parameters is
        32766: stay small), each read's rows ``order``-ed."""
        rows: list[sqlite3.Row] = []
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            rows += self._read(sql.format(",".join("?" * len(chunk))) + order, tuple(chunk))
        return rows

    def _read(self, sql: str, params: tuple[Any, ...]) -> list[sqlite3.Row]:
        """One statement that reads; JournalUnreadable (naming the journal) when it cannot be read."""
        try:
            return self._db.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise JournalUnreadable(f"the journal {self.path} cannot be read ({exc})") from None

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


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {str(row[1]) for row in db.execute(f"PRAGMA table_info({table})")}


def _json_or_null(value: dict[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value)


def _decoded(text: str | None) -> dict[str, Any] | None:
    """A JSON object kept in a column; None where there is none, or it is damaged (then read again)."""
    try:
        value = json.loads(text) if text is not None else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _job(row: sqlite3.Row) -> JobRecord:
    data = dict(row)
    data["request"] = json.loads(data["request"])
    return JobRecord(**data)


DIGESTS_VERSION = 1
"""The journal's ``user_version`` from which every stored proof has its digest: a proof without one is then
a row changed on disk (not served), never a row from before digests."""


def _digest_every_proof(db: sqlite3.Connection) -> None:
    """Give the proofs of a journal from before digests theirs, once (then ``user_version`` says so)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        rows = db.execute(
            "SELECT job_id, idx, proof, public FROM partitions WHERE proof IS NOT NULL AND digest IS NULL"
        ).fetchall()
        db.executemany(
            "UPDATE partitions SET digest = ? WHERE job_id = ? AND idx = ?",
            [(_digest(r["proof"], r["public"] or ""), r["job_id"], r["idx"]) for r in rows],
        )
        db.execute(f"PRAGMA user_version = {DIGESTS_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _partition(row: sqlite3.Row, journal: Path) -> PartitionRecord:
    proof, public, digest = row["proof"], row["public"], row["digest"]
    if proof and (digest is None or _digest(proof, public or "") != digest):
        lost = "has lost" if digest is None else "does not match"
        raise JournalUnreadable(
            f"the journal {journal}: the stored proof of {row['job_id']}/{row['idx']} {lost} the digest it "
            "was stored with (changed on disk): it is not served"
        )
    return PartitionRecord(
        job_id=row["job_id"],
        index=row["idx"],
        state=row["state"],
        attempts=row["attempts"],
        error=row["error"],
        proof=json.loads(proof) if proof else None,
        public=json.loads(public) if public else None,
    )


def _digest(proof_text: str, public_text: str) -> str:
    return hashlib.sha256(f"{proof_text}\n{public_text}".encode()).hexdigest()


def _lock_folder(path: Path) -> int:
    """An exclusive lock on ``path`` for this process (the file holds its pid); JournalInUse when another
    process has it. The lock ends with the process, however it ends, so a killed daemon leaves none."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise JournalUnwritable(f"cannot lock the data folder ({path}: {exc.strerror or exc})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise JournalInUse(
            f"the data folder {path.parent} is in use by another prooflane daemon (pid {holder}): one daemon "
            "per data folder (give this one its own --data)"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
