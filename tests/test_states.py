"""The one table of states and transitions."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from prooflane import states
from prooflane.errors import IllegalTransition
from prooflane.states import JobState, PartitionState, check_job_move, check_partition_move

P = PartitionState
SRC = Path(states.__file__).parent


def test_each_state_type_is_defined_exactly_once() -> None:
    for name in ("JobState", "PartitionState", "WorkerState", "Priority"):
        homes = [p for p in SRC.rglob("*.py") if re.search(rf"^class {name}\b", p.read_text(), re.M)]
        assert [p.name for p in homes] == ["states.py"], name


def test_the_forward_path_is_legal() -> None:
    path = [P.PENDING, P.SYNTHESIZING, P.SYNTHESIZED, P.PROVING, P.FINALIZING, P.DONE]
    for old, new in itertools.pairwise(path):
        check_partition_move(old, new)


@pytest.mark.parametrize("old", sorted(states.LIVE_PARTITION_STATES))
def test_every_live_partition_can_fail_or_be_cancelled(old: PartitionState) -> None:
    check_partition_move(old, P.FAILED)
    check_partition_move(old, P.CANCELLED)


def test_a_retry_comes_from_work_in_progress_only() -> None:
    for old in (P.SYNTHESIZING, P.SYNTHESIZED, P.PROVING, P.FINALIZING):
        check_partition_move(old, P.PENDING)
    with pytest.raises(IllegalTransition, match="expected one of"):
        check_partition_move(P.PENDING, P.PENDING)


@pytest.mark.parametrize("old", sorted(states.TERMINAL_PARTITION_STATES))
def test_terminal_partitions_never_move(old: PartitionState) -> None:
    for new in P:
        with pytest.raises(IllegalTransition, match=f"got {old.value}"):
            check_partition_move(old, new)


def test_skipping_a_phase_is_illegal() -> None:
    with pytest.raises(IllegalTransition, match=r"expected one of \['synthesized'\], got pending"):
        check_partition_move(P.PENDING, P.PROVING)


def test_job_transitions() -> None:
    check_job_move(JobState.QUEUED, JobState.RUNNING)
    check_job_move(JobState.QUEUED, JobState.DONE)  # resumed with every partition already proven
    check_job_move(JobState.RUNNING, JobState.CANCELLED)
    with pytest.raises(IllegalTransition):
        check_job_move(JobState.RUNNING, JobState.QUEUED)
    with pytest.raises(IllegalTransition):
        check_job_move(JobState.DONE, JobState.FAILED)


def test_terminal_sets_match_the_enums() -> None:
    assert {s for s in JobState if s.terminal} == states.TERMINAL_JOB_STATES
    assert {s for s in P if s.terminal} == states.TERMINAL_PARTITION_STATES
    assert set(P) == states.LIVE_PARTITION_STATES | states.TERMINAL_PARTITION_STATES
