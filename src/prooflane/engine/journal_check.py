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
is three indexed reads of the journal for the jobs the live view lists.
"""

from __future__ import annotations

from ..states import JobState, PartitionState
from ..status.records import Records
from ..store import Store

__all__ = ["CHECK_SECS", "against_journal"]

CHECK_SECS = 5.0
"""How often the engine compares the live view with the journal."""


def against_journal(records: Records, journal: Store, pending: int) -> list[str]:
    """Where the live view (``records``, what ``/status`` reads) and ``journal`` disagree, in words; empty
    when they agree. ``pending``: the partitions waiting in the engine's pending queue now."""
    found: list[str] = []
    listed = list(records.jobs.values())
    stored = journal.job_states([job.job_id for job in listed])
    parts = journal.partition_states_of([job.job_id for job in listed])
    for job in listed:
        said = job.outcome or (JobState.RUNNING if job.started else JobState.QUEUED)
        if job.job_id not in stored:
            found.append(f"job {job.job_id} is {said.value} in the live view and not in the journal")
            continue
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
    for job_id in journal.unfinished_job_ids():
        if job_id not in records.jobs:  # (one listed, ended, is said above)
            found.append(f"job {job_id} is unfinished in the journal and not in the live view")
    shown = records.states[PartitionState.PENDING]
    if shown != pending:
        found.append(f"the live view's queue depth is {shown}; {pending} partitions wait in the queue")
    return found
