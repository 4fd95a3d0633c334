"""The SQLite journal: jobs, partitions and proofs survive reopening."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

import pytest

from prooflane.store import CircuitRecord, JournalInUse, JournalUnreadable, Store


def new_job(store: Store, job_id: str, partitions: int = 3) -> None:
    store.insert_job(
        job_id=job_id,
        kind="porep-c2",
        priority="normal",
        request={"original": {"kind": "porep-c2"}, "sector": "/s"},
        randomness="ab",
        partitions=partitions,
        submitted_at=1.0,
    )


def test_job_and_proofs_survive_reopening(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    store = Store(path)
    new_job(store, "a")
    store.save_proof("a", 1, {"pi_a": ["1"]}, ["5"])
    store.close()
    again = Store(path)
    record = again.job("a")
    assert record is not None and record.state == "queued" and record.partitions == 3
    assert record.request["sector"] == "/s"
    parts = again.partitions("a")
    assert [p.state for p in parts] == ["pending", "done", "pending"]
    assert parts[1].proof == {"pi_a": ["1"]} and parts[1].public == ["5"]
    assert [j.job_id for j in again.unfinished_jobs()] == ["a"]


def test_ending_a_job_keeps_done_partitions_and_cancels_the_rest(tmp_path: Path) -> None:
    store = Store(tmp_path / "j.sqlite3")
    new_job(store, "a")
    store.save_proof("a", 0, {}, [])
    store.set_partition("a", 1, "failed", error="bad proof")
    store.set_job_state("a", "failed", error="partition 1 failed", finished_at=2.0)
    store.end_open_partitions("a", "cancelled")
    assert [p.state for p in store.partitions("a")] == ["done", "failed", "cancelled"]
    record = store.job("a")
    assert record is not None and record.error == "partition 1 failed" and record.finished_at == 2.0
    assert store.unfinished_jobs() == []
    assert store.counts() == {"failed": 1}


def test_jobs_list_newest_first_and_filters_by_state(tmp_path: Path) -> None:
    store = Store(tmp_path / "j.sqlite3")
    for name in ("a", "b", "c"):
        new_job(store, name, 1)
    store.set_job_state("b", "done", finished_at=3.0)
    assert [j.job_id for j in store.jobs()] == ["c", "b", "a"]
    assert [j.job_id for j in store.jobs("done")] == ["b"]
    assert [j.job_id for j in store.jobs(limit=1)] == ["c"]
    assert [j.seq for j in store.jobs()] == sorted((j.seq for j in store.jobs()), reverse=True)


def test_circuits_are_registered_once(tmp_path: Path) -> None:
    store = Store(tmp_path / "j.sqlite3")
    record = CircuitRecord("c", "/c.zkey", None, "d", "normal", "bn128", 10, 2, 1000)
    store.add_circuit(record)
    assert store.circuits() == [record]


def test_what_was_read_of_a_circuits_wasm_is_kept_with_it(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    store = Store(path)
    read = {
        "generator": {"wires": 12, "prime": "0x30644e"},
        "field_product": "64-bit limbs (wide arithmetic)",
    }
    record = CircuitRecord("c", "/c.zkey", "/c.wasm", "d", "normal", "bn128", 10, 2, 1000, read)
    store.add_circuit(record)
    store.close()
    assert Store(path).circuits() == [record]


def test_a_journal_from_before_wasm_inspections_gains_the_column_and_keeps_its_circuits(
    tmp_path: Path,
) -> None:
    """Its circuits read with none (the registry reads their .wasm once and keeps what it read)."""
    path = tmp_path / "j.sqlite3"
    with contextlib.closing(sqlite3.connect(path)) as db, db:  # the circuits table as it was before
        db.execute(
            "CREATE TABLE circuits (name TEXT PRIMARY KEY, zkey TEXT NOT NULL, wasm TEXT,"
            " digest TEXT NOT NULL, priority TEXT NOT NULL, curve TEXT NOT NULL,"
            " constraints INTEGER NOT NULL, public_signals INTEGER NOT NULL, memory_bytes INTEGER NOT NULL)"
        )
        db.execute(
            "INSERT INTO circuits VALUES ('old', '/o.zkey', '/o.wasm', 'd', 'normal', 'bn128', 1, 1, 1)"
        )
    store = Store(path)
    (old,) = store.circuits()
    assert old == CircuitRecord("old", "/o.zkey", "/o.wasm", "d", "normal", "bn128", 1, 1, 1, None)
    store.set_wasm_inspection("old", {"field_product": "snarkjs' in node (not a circom 2 generator)"})
    store.close()
    (old,) = Store(path).circuits()
    assert old.wasm_inspection == {"field_product": "snarkjs' in node (not a circom 2 generator)"}


def test_a_wasm_inspection_changed_into_junk_on_disk_reads_as_none(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    store = Store(path)
    store.add_circuit(CircuitRecord("c", "/c.zkey", "/c.wasm", "d", "normal", "bn128", 1, 1, 1, {"a": 1}))
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE circuits SET wasm_inspection = '{not json'")
    assert store.circuits()[0].wasm_inspection is None  # read again, and kept again, by the next start


def test_pages_of_jobs_follow_one_another_without_gap_or_repeat(tmp_path: Path) -> None:
    store = Store(tmp_path / "j.sqlite3")
    for n in range(7):
        new_job(store, f"j{n}", 1)
    pages, before = [], None
    while page := store.jobs(limit=3, before=before):
        pages.append([j.job_id for j in page])
        before = page[-1].seq
    assert pages == [["j6", "j5", "j4"], ["j3", "j2", "j1"], ["j0"]]


def test_partition_states_leave_the_proofs_out(tmp_path: Path) -> None:
    store = Store(tmp_path / "j.sqlite3")
    new_job(store, "a", 2)
    store.save_proof("a", 0, {"pi_a": ["1"]}, ["5"])
    assert [(p.index, p.state) for p in store.partition_states("a")] == [(0, "done"), (1, "pending")]
    assert not hasattr(store.partition_states("a")[0], "proof")


def test_a_second_daemon_on_the_same_data_folder_is_refused_naming_the_first(tmp_path: Path) -> None:
    first = Store(tmp_path / "journal.sqlite3")
    with pytest.raises(JournalInUse, match=rf"in use by another prooflane daemon \(pid {os.getpid()}\)"):
        Store(tmp_path / "journal.sqlite3")
    first.close()
    Store(tmp_path / "journal.sqlite3").close()  # free again once the first let go


def _journal_with_a_proof(tmp_path: Path) -> Path:
    """A closed journal holding job "a" of one partition, done with a proof."""
    path = tmp_path / "journal.sqlite3"
    store = Store(path)
    new_job(store, "a", 1)
    store.save_proof("a", 0, {"pi_a": ["12345"]}, ["5"])
    store.close()
    return path


def test_a_proof_changed_on_disk_is_never_served(tmp_path: Path) -> None:
    path = _journal_with_a_proof(tmp_path)
    with contextlib.closing(sqlite3.connect(path)) as db, db:  # one digit changed behind the journal's back
        db.execute("UPDATE partitions SET proof = replace(proof, '12345', '12346')")
    again = Store(path)
    with pytest.raises(JournalUnreadable, match="does not match the digest"):
        again.partitions("a")
    assert again.partition_states("a")[0].state == "done"  # the job's state is still readable


def test_a_proof_whose_digest_was_removed_on_disk_is_never_served(tmp_path: Path) -> None:
    path = _journal_with_a_proof(tmp_path)
    with contextlib.closing(sqlite3.connect(path)) as db, db:  # a changed proof, and its digest set to NULL
        db.execute("UPDATE partitions SET proof = replace(proof, '12345', '12346'), digest = NULL")
    with pytest.raises(JournalUnreadable, match="has lost the digest it was stored with"):
        Store(path).partitions("a")


def test_a_journal_from_before_digests_gets_them_once_and_is_served(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    store = Store(path)
    new_job(store, "a", 2)
    store.save_proof("a", 0, {"pi_a": ["1"]}, ["5"])
    store.close()
    with contextlib.closing(sqlite3.connect(path)) as db, db:  # as a journal written before digests reads
        db.execute("UPDATE partitions SET digest = NULL")
        db.execute("PRAGMA user_version = 0")
    again = Store(path)
    assert [p.proof for p in again.partitions("a")] == [{"pi_a": ["1"]}, None]
    again.close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 1
        assert db.execute("SELECT count(*) FROM partitions WHERE digest IS NOT NULL").fetchone()[0] == 1


def test_a_damaged_journal_is_refused_at_open_saying_so(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    store = Store(path)
    for n in range(200):  # enough rows for several pages
        new_job(store, f"job-{n:04d}", 4)
    store.close()
    with path.open("r+b") as raw:  # a page of the table's data overwritten with garbage
        raw.seek(4096 * 3)
        raw.write(b"\xde\xad" * 2048)
    with pytest.raises(JournalUnreadable, match=r"journal .* (is damaged|cannot be opened)"):
        Store(path)
