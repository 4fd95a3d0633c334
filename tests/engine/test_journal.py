"""The journal behind a running engine: a proof changed on disk behind the engine's back is never served,
and health says the journal is damaged from the first read that found it; a second engine on the same data
folder is refused at start."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from prooflane.config import Config
from prooflane.engine.journal_check import CHECK_SLICE
from prooflane.server import create_app
from prooflane.states import JobState
from prooflane.store import JournalInUse, JournalUnreadable
from tests.support.engine import running

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


async def test_a_proof_changed_on_disk_is_refused_and_health_says_the_journal_is_damaged(
    engine_config: Callable[..., Config], sector: Path
) -> None:
    config = engine_config()
    async with running(config, sector=sector) as h:
        job_id = await h.submit("winning-post")
        assert await h.done(job_id) is JobState.DONE
    journal = config.data_dir / "journal.sqlite3"
    with contextlib.closing(sqlite3.connect(journal)) as db, db:  # one digit of the stored proof changed
        (text,) = db.execute("SELECT proof FROM partitions WHERE job_id = ?", (job_id,)).fetchone()
        digit = next(c for c in text if c.isdigit())
        db.execute(
            "UPDATE partitions SET proof = ? WHERE job_id = ?",
            (text.replace(digit, str((int(digit) + 1) % 10), 1), job_id),
        )
    async with running(config, sector=sector) as h:  # the job is in the journal only now
        assert h.engine.health().ok
        with pytest.raises(JournalUnreadable, match="does not match the digest"):
            await h.engine.wait_proof(job_id, 0)
        health = h.engine.health()
        assert not health.ok and any("does not match the digest" in r for r in health.reasons)
        app = create_app(h.engine, h.engine.config)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
        ) as http:
            answer = await http.get(f"/v1/jobs/{job_id}/proof")
        assert answer.status_code == 500 and "does not match the digest" in answer.json()["detail"]
        assert h.engine.job(job_id) is not None  # its state is still readable: no proof is read for it


async def test_a_second_engine_on_the_same_data_folder_is_refused_at_start(
    engine_config: Callable[..., Config],
) -> None:
    config = engine_config()
    async with running(config):
        with pytest.raises(JournalInUse, match="in use by another prooflane daemon"):
            async with running(config):
                pass


async def test_the_periodic_check_reads_the_jobs_that_changed_in_slices_and_finds_a_disagreement(
    engine_config: Callable[..., Config], sector: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Jobs that agreed and have not changed since are not read again (once: every job, every 5 s, in one
    turn of the event loop); each slice is read in a turn of its own; a job that changes and then
    disagrees with the journal is found."""
    config = engine_config()
    async with running(config, sector=sector) as h:
        held = h.gate.hold(lambda step: step.call == "synthesize_partition")
        jobs = [await h.submit("winning-post") for _ in range(40)]
        await held.reached.wait()
        read: list[list[str]] = []
        journal = h.engine._pipeline.journal
        real = journal.job_states

        def job_states(job_ids: list[str]) -> dict[str, str]:
            read.append(job_ids)
            return real(job_ids)

        monkeypatch.setattr(journal, "job_states", job_states)
        agreed: dict[str, int] = {}
        assert await h.engine._check_in_slices(agreed) == []
        assert sorted(j for ids in read for j in ids) == sorted(jobs)  # every job, the first time
        assert max(map(len, read)) <= CHECK_SLICE
        read.clear()
        assert await h.engine._check_in_slices(agreed) == []
        assert read == [] or read == [[]]  # nothing changed: nothing read
        assert await h.engine.cancel(jobs[-1])  # the job changed...
        journal.set_job_state(jobs[-1], JobState.DONE)  # ...and the journal says otherwise, behind its back
        assert await h.engine._check_in_slices(agreed) == [
            f"job {jobs[-1]} is cancelled in the live view and done in the journal"
        ]
        held.release.set()
