"""The status invariants: one function computes every broken one from the tracker's records.

:func:`broken_invariants` is what ``StatusTracker.invariants()`` returns (cached per ``seq``), what
``/status`` serves as ``invariants_ok`` and ``invariant_violations``, ``/metrics`` as
``prooflane_invariant_violations``, and what the tests check after every event. It recomputes everything
from the records, trusting no count the fold keeps:

- every worker ever registered is listed, live (idle, proving, finalizing) or visibly restarting or lost: none
  is silently absent (the fold never removes one), and a restarting or lost worker holds no lease; every live
  lease is held by a listed worker;
- each partition in proving is the current lease of exactly one worker, and each proving worker's partition
  is in proving (the same for finalizing and finalizing leases);
- no partition outside proving/finalizing holds a lease;
- active synthesis equals the partitions synthesizing, and every per-state count equals a recount;
- reserved memory equals the sum of live reservations (the host's, and each device's);
- a worker holds a key's fixed-base tables (``key+tables:<key>@<worker>``) only where ``tables`` says that
  key's tables are stored;
- every terminal job has an end time and is counted exactly once (the counters equal the terminal jobs, those
  gone from the live view included), and has no live partition.

:class:`InvariantCheck` gives the same answer for a tracker that asks at every new ``seq``: what depends on
one job alone (its partitions' states, its done count, leases outside proving/finalizing, its end) is
recounted only when the job's ``version`` moved, which every write to the job or its partitions does
(:class:`prooflane.status.records.Job`); everything across jobs and workers is checked afresh every time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from .. import events as ev
from ..states import LIVE_PARTITION_STATES, JobState, PartitionState
from .records import Job, Records

__all__ = ["InvariantCheck", "broken_invariants"]

P = PartitionState


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What the invariants read of one job at one ``version``: its partitions per state, the partitions that
    must hold a lease (name, state, lease), and the broken invariants of the job alone."""

    job: Job
    version: int
    outcome: JobState  # what it counted among the ends (meaningful where ``ended``)
    ended: bool
    states: tuple[tuple[PartitionState, int], ...]
    leased: tuple[tuple[str, PartitionState, ev.LeaseToken | None], ...]
    problems: tuple[str, ...]


def broken_invariants(records: Records) -> list[str]:
    """Every broken invariant of ``records``, in words; empty when all hold. Recounts every job."""
    return _broken(records, _job_facts)


class InvariantCheck:
    """:func:`broken_invariants` for one tracker, asked again at every new ``seq``: a job's own facts are
    recounted only when its ``version`` moved (see the module docstring), and their sums (the partitions by
    state, the jobs ended by outcome) are kept as they change, so a read costs the jobs that changed and a
    look at each one's version, not a recount of every job (most of a ``/status`` at 1,000 jobs once).

    Invariant: ``_states`` and ``_terminal`` are the sums of the facts in ``_facts``, one per job of the
    records it last read; ``_flagged`` the jobs among them with problems or leased partitions."""

    def __init__(self) -> None:
        self._facts: dict[str, JobFacts] = {}
        self._states: Counter[PartitionState] = Counter()
        self._terminal: Counter[JobState] = Counter()
        self._flagged: set[str] = set()

    def __call__(self, records: Records) -> list[str]:
        known = self._facts
        jobs = records.jobs
        for job_id, job in jobs.items():  # a version compared per job; recounted where it moved
            fact = known.get(job_id)
            if fact is None or fact.job is not job or fact.version != job.version:
                self._count(job_id, fact, _job_facts(job))
        if len(known) > len(jobs):  # jobs gone from the live view are forgotten
            for job_id in [j for j in known if j not in jobs]:
                self._count(job_id, known[job_id], None)
        return _problems(records, [known[j] for j in self._flagged], self._states, self._terminal)

    def _count(self, job_id: str, old: JobFacts | None, new: JobFacts | None) -> None:
        """Replace ``old`` by ``new`` (None: none) in the sums."""
        for fact, sign in ((old, -1), (new, 1)):
            if fact is None:
                continue
            for state, n in fact.states:
                self._states[state] += sign * n
            if fact.ended:
                self._terminal[fact.outcome] += sign
        if new is None:
            del self._facts[job_id]
            self._flagged.discard(job_id)
            return
        self._facts[job_id] = new
        if new.problems or new.leased:
            self._flagged.add(job_id)
        else:
            self._flagged.discard(job_id)


def _broken(records: Records, facts_of: Callable[[Job], JobFacts]) -> list[str]:
    states: Counter[PartitionState] = Counter()
    terminal: Counter[JobState] = Counter()
    flagged = []
    for job in records.jobs.values():
        facts = facts_of(job)
        for state, n in facts.states:
            states[state] += n
        if facts.ended:
            terminal[facts.outcome] += 1
        if facts.problems or facts.leased:
            flagged.append(facts)
    return _problems(records, flagged, states, terminal)


def _problems(
    records: Records, flagged: list[JobFacts], states: Counter[PartitionState], ended: Counter[JobState]
) -> list[str]:
    """Every broken invariant, given the jobs with problems or leased partitions and the sums over all jobs
    of their partitions by state and of their ends."""
    problems = _worker_problems(records)
    current = Counter(w.current for w in records.workers.values() if w.current is not None)
    finalizing = Counter(t for w in records.workers.values() for t in w.finalizing)
    terminal = Counter(records.pruned) + ended
    for facts in flagged:
        problems.extend(facts.problems)
        if facts.leased:
            problems.extend(_lease_problems(facts, current, finalizing))
    counted = records.states
    if states[P.SYNTHESIZING] != counted[P.SYNTHESIZING]:
        problems.append(
            f"active synthesis is {counted[P.SYNTHESIZING]} "
            f"but {states[P.SYNTHESIZING]} partitions are synthesizing"
        )
    if +states != +counted:
        problems.append(f"partition state counts {dict(+counted)} != recount {dict(+states)}")
    for where, ledger in (
        ("", records.memory),
        *((f"device {d}: ", m) for d, m in records.device_memory.items()),
    ):
        live = ledger.live_reservation_bytes()
        if ledger.reserved_bytes != live:
            problems.append(
                f"{where}reserved {ledger.reserved_bytes} bytes != sum of live reservations {live}"
            )
    problems.extend(_table_problems(records))
    for outcome in (JobState.DONE, JobState.FAILED, JobState.CANCELLED):
        jobs = sum(n for (_, o), n in records.jobs_total.items() if o == outcome.value)
        if jobs != terminal[outcome]:
            problems.append(f"{jobs} jobs counted {outcome.value} but {terminal[outcome]} ended so")
    return problems


def _table_problems(records: Records) -> list[str]:
    """A worker holds a key's tables only where ``tables`` says they are stored (the cached keys and the
    tables' state, both on the page, must agree)."""
    held = records.memory.allocation_names()
    return [
        f"allocation {name} holds the tables of {t.key}, which are {t.state}, not stored"
        for t in records.tables.values()
        if t.state != ev.TablesState.STORED
        for name in held
        if name.startswith(ev.key_allocation(t.key, "", tables=True))
    ]


def _worker_problems(records: Records) -> list[str]:
    problems: list[str] = []
    for token, held in records.leases.items():
        holder = records.workers.get(held.worker_id)
        if holder is None or (holder.current != token and token not in holder.finalizing):
            problems.append(f"lease {token} is live but worker {held.worker_id} does not hold it")
    for w in records.workers.values():
        if not w.live and (w.current is not None or w.finalizing):
            problems.append(f"worker {w.worker_id} is {w.state.value} but holds a lease")
        if records.devices.get(w.device.name) is not w.device:
            problems.append(f"worker {w.worker_id} is on device {w.device.name}, which is not listed")
        if w.current is not None:
            lease = records.leases.get(w.current)
            if lease is None or lease.partition.state is not P.PROVING:
                problems.append(f"worker {w.worker_id} is proving but its lease's partition is not")
        for token in w.finalizing:
            lease = records.leases.get(token)
            if lease is None or lease.partition.state is not P.FINALIZING:
                problems.append(f"worker {w.worker_id} finalizes lease {token}, whose partition is not")
    return problems


def _job_facts(job: Job) -> JobFacts:
    """The job's own facts, recounted from its partitions (one pass: this runs for every partition of every
    job that changed)."""
    version = job.version
    problems = []
    leased = []
    done = live = 0
    for p in job.partitions:
        state = p.state
        if state is P.DONE:
            done += 1
        elif state is P.PROVING or state is P.FINALIZING:
            live += 1
            leased.append((p.name, state, p.lease))
            continue
        elif state in LIVE_PARTITION_STATES:
            live += 1
        if p.lease is not None:
            problems.append(f"partition {p.name} is {state.value} but holds lease {p.lease}")
    if job.done != done:
        problems.append(f"job {job.job_id} counts {job.done} partitions done, recount {done}")
    ended = job.outcome is not None
    if ended and (job.ended_at is None or not job.counted):
        problems.append(f"job {job.job_id} ended without an end time or without being counted")
    if ended and live:
        problems.append(f"job {job.job_id} ended with live partitions")
    if not ended and job.counted:
        problems.append(f"job {job.job_id} is counted but has not ended")
    states = tuple(Counter(p.state for p in job.partitions).items())
    outcome = job.outcome if job.outcome is not None else JobState.QUEUED
    return JobFacts(job, version, outcome, ended, states, tuple(leased), tuple(problems))


def _lease_problems(
    facts: JobFacts, current: Counter[ev.LeaseToken], finalizing: Counter[ev.LeaseToken]
) -> list[str]:
    """Each partition proving must be the current lease of exactly one worker, each one finalizing a
    finalizing lease of exactly one (given how many workers hold each lease as current / finalizing)."""
    problems = []
    for name, state, lease in facts.leased:
        if state is P.PROVING:
            if lease is None or current[lease] != 1:
                holders = current[lease] if lease is not None else 0
                problems.append(f"partition {name} is proving but the current lease of {holders} workers")
        elif lease is None or finalizing[lease] != 1:
            problems.append(f"partition {name} is finalizing but no single worker finalizes it")
    return problems
