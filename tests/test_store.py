"""The SQLite journal: jobs, partitions and proofs survive reopening."""

from __future__ import annotations

from pathlib import Path

from prooflane.store import CircuitRecord, Store


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
