"""The live view against the journal: what ``/status`` says of each job it lists, and of the queue, beside
what the journal (the record behind it) holds.

A partition's outcome is decided once, on the event loop, and the journal and the tracker learn it in the
same turn (journal first): between two turns they agree. This check says so, or names where they do not:

- every job the live view lists is in the journal, and where either says it ended (done, failed,
  cancelled), both say the same end; the same for each of its partitions (the journal keeps a partition
  pending until it ends, so only ends are compared);
- every job the journal holds unfinished is listed, unfinished, in the live view;
- the queue depth the live view shows (partitions pending) is what waits in the engine's pending queue.

The engine runs it every ``CHECK_SECS`` and on demand (``Engine.check_journal``); what it finds is an
invariant violation in ``/status``, a reason against health, and counted (``journal_check`` in ``/status``,
``prooflane_journal_checks_total`` and ``prooflane_journal_disagreements_total`` in ``/metrics``). Its cost
is three indexed reads of the journal for the jobs the live view lists. The periodic check compares only
the jobs that changed since they last agreed (a job's ``version`` moves with every change of its view, and
the engine writes the journal in the same turn), every job again at every ``FULL_CHECK_EVERY``-th, and in
slices of ``CHECK_SLICE`` jobs a turn of the event loop, each job's comparison within one turn: a daemon with
1,000 jobs queued once read every one of them at once every 5 s, 0.2 s with the event loop held.
"""

from __future__ import annotations

from ..states import JobState, PartitionState
from ..status.records import Job, Records
from ..store import PartitionRow, Store

__all__ = [
    "CHECK_SECS",
    "CHECK_SLICE",
    "FULL_CHECK_EVERY",
    "against_journal",
    "jobs_against_journal",
    "queue_against_journal",
]

CHECK_SECS = 5.0
"""How often the engine compares the live view with the journal."""
CHECK_SLICE = 16
"""The jobs compared in one turn of the event loop by the periodic check (its reads stay short)."""
FULL_CHECK_EVERY = 12
"""Every this many periodic checks, every job is compared again, not only those that changed."""


def against_journal(records: Records, journal: Store, pending: int) -> list[str]:
    """Where the live view (``records``, what ``/status`` reads) and ``journal`` disagree, in words; empty
    when they agree: every job listed, then the queue. ``pending``: the partitions waiting in the engine's
    pending queue now. (The engine's periodic check runs the same in slices: :func:`jobs_against_journal`,
    :func:`queue_against_journal`.)"""
    return jobs_against_journal(list(records.jobs.values()), journal) + queue_against_journal(
        records, journal, pending
    )


def jobs_against_journal(jobs: list[Job], journal: Store, agreed: dict[str, int] | None = None) -> list[str]:
    """Where ``jobs`` of the live view and the journal disagree (three indexed reads for them all); each
    job found to agree is written in ``agreed`` with its version then, each other taken out of it."""
    found: list[str] = []
    stored = journal.job_states([job.job_id for job in jobs])
    parts = journal.partition_states_of([job.job_id for job in jobs])
    for job in jobs:
        before = len(found)
        _job_against(job, stored, parts, found)
        if agreed is not None:
            if len(found) == before:
                agreed[job.job_id] = job.version
            else:
                agreed.pop(job.job_id, None)
    return found


def queue_against_journal(records: Records, journal: Store, pending: int) -> list[str]:
    """Every job the journal holds unfinished is listed; the queue depth shown is what waits."""
    found = [
        f"job {job_id} is unfinished in the journal and not in the live view"
        for job_id in journal.unfinished_job_ids()
        if job_id not in records.jobs  # (one listed, ended, is said by the jobs' check)
    ]
    shown = records.states[PartitionState.PENDING]
    if shown != pending:
        found.append(f"the live view's queue depth is {shown}; {pending} partitions wait in the queue")
    return found


def _job_against(
    job: Job, stored: dict[str, str], parts: dict[str, list[PartitionRow]], found: list[str]
) -> None:
    """Where one job of the live view and the journal disagree, added to ``found``."""
    said = job.outcome or (JobState.RUNNING if job.started else JobState.QUEUED)
    if job.job_id not in stored:
        found.append(f"job {job.job_id} is {said.value} in the live view and not in the journal")
        return
    kept = JobState(stored[job.job_id])
    if (said.terminal or kept.terminal) and said is not kept:
        found.append(f"job {job.job_id} is {said.value} in the live view and {kept.value} in the journal")
    rows = {row.index: PartitionState(row.state) for row in parts[job.job_id]}
    for part in job.partitions:
        journalled = rows.get(part.index)
        if journalled is None:
            found.append(
                f"partition {part.name} is {part.state.value} in the live view and not in the journal"
            )
        elif (part.state.terminal or journalled.terminal) and part.state is not journalled:
            found.append(
                f"partition {part.name} is {part.state.value} (attempt {part.attempt}) in the live view "
                f"and {journalled.value} in the journal"
            )
