"""A daemon killed with SIGKILL while it proves, then restarted on the same data folder.

Every accepted job completes, and a partition proven before the kill is not proven again: its attempt
count is unchanged and the restarted daemon grants no lease for it.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from prooflane.client import Client, ServerEvent
from prooflane.models import InlineSector
from tests.support.daemons import snarkjs_verify, start_daemon, wait_done, wait_until


def sector(n: int) -> InlineSector:
    return InlineSector(size=256, seed=f"{n:064x}")


def proven(client: Client, job_ids: list[str]) -> dict[tuple[str, int], int]:
    """(job, partition) -> attempt, for every partition the daemon reports done."""
    return {
        (view.job_id, p.index): p.attempt
        for view in map(client.job, job_ids)
        for p in view.partitions
        if p.state == "done"
    }


def events_since_boot(client: Client) -> list[ServerEvent]:
    """Every event of this boot so far (the stream replays them from id 0)."""
    last: int = client.status()["seq"]
    events: list[ServerEvent] = []
    with contextlib.closing(client.events(last_event_id=0)) as stream:
        for event in stream:
            assert event.name != "resync", "the daemon no longer holds the events of its boot"
            events.append(event)
            if event.id is not None and event.id >= last:
                return events
    return events


def test_sigkill_then_restart_completes_every_job_without_redoing_proven_partitions(
    tmp_path_factory: pytest.TempPathFactory, snarkjs: Path, tmp_path: Path
) -> None:
    first = start_daemon(tmp_path_factory, "restart")
    data = first.data_dir
    with Client(first.url) as client:
        ids = [client.submit(kind, sector=sector(n)) for n, kind in enumerate(["porep-c2", "snap-update"])]
        wait_until("some partitions proven, the jobs still running", lambda: len(proven(client, ids)) >= 3)
        late = client.submit("winning-post", sector=sector(9))  # accepted (202) just before the kill
        ids.append(late)
        before = proven(client, ids)
        seen = events_since_boot(client)[-1]  # what a client following the stream read last
    first.kill()
    assert len(before) < 10 + 16 + 1, "the kill came after everything was proven: nothing was in flight"

    second = start_daemon(tmp_path_factory, "restart", data_dir=data)
    try:
        with Client(second.url) as client:
            check_resume_across_the_restart(client, seen)
            check_after_restart(client, ids, before, snarkjs, tmp_path)
    finally:
        second.stop()


def check_resume_across_the_restart(client: Client, seen: ServerEvent) -> None:
    """The stream resumed with the last id read before the kill: the new boot's numbers started again, so
    that number may well be valid here; the id's boot says it is not, and the stream says so first."""
    assert seen.resume_id is not None and seen.boot_id is not None
    with contextlib.closing(client.events(last_event_id=seen.resume_id)) as stream:
        first = next(stream)
    assert first.name == "resync" and first.boot_id != seen.boot_id
    assert isinstance(first.data, dict) and first.data["boot_id"] == client.status()["boot_id"]


def check_after_restart(
    client: Client, ids: list[str], before: dict[tuple[str, int], int], snarkjs: Path, tmp_path: Path
) -> None:
    views = wait_done(client, ids)
    assert [v.state for v in views] == ["done"] * 3, [v.error for v in views]
    after = {(v.job_id, p.index): p.attempt for v in views for p in v.partitions}
    assert {key: after[key] for key in before} == before
    events = events_since_boot(client)
    leased = {(e.data["job_id"], e.data["partition"]) for e in events if e.name == "lease_granted"}
    assert not leased & set(before), "a partition proven before the kill was proven again"
    # A partition proven before the kill and one proven after it both verify.
    key = client.verification_key("porep-c2")
    found = client.proof(ids[0])
    assert found is not None
    early = min((i for job, i in before if job == ids[0]), default=0)
    for index in {early, len(found.partitions) - 1}:
        part = found.partitions[index]
        said = snarkjs_verify(snarkjs, tmp_path / str(index), key, part.proof, part.public)
        assert "OK!" in said, said
