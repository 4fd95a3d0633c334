"""Workloads for `prooflane bench` and `prooflane demo`: a mix of proof kinds, submitted and measured."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..client import Client
from ..errors import ProoflaneError
from ..models import InlineSector

__all__ = ["DEFAULT_MIX", "WorkloadResult", "parse_mix", "plan", "run_workload", "sector_for"]

DEFAULT_MIX = "porep-c2=2,snap-update=1,window-post=1,winning-post=1"
PHASES = ("synth_ms", "prove_ms", "finalize_ms")
POLL_SECS = 0.5
ENDED_LISTED = 1000  # /status?ended=: the jobs that ended within the retention, each with its phase times


class MixError(ProoflaneError):
    """Raised when a `--mix` text is not `kind=weight,...` with whole positive weights."""


def parse_mix(text: str) -> dict[str, int]:
    """Parse ``porep-c2=2,snap-update=1`` into ``{"porep-c2": 2, "snap-update": 1}``."""
    mix: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        kind, sep, weight = item.partition("=")
        kind = kind.strip()
        if not kind:
            raise MixError(f"mix item {item!r}: expected KIND=WEIGHT")
        if not sep:
            weight = "1"
        if not weight.strip().isdigit() or int(weight) < 1:
            raise MixError(f"mix item {item!r}: the weight must be a whole number >= 1")
        if kind in mix:
            raise MixError(f"mix names {kind!r} twice")
        mix[kind] = int(weight)
    if not mix:
        raise MixError("the mix is empty: expected KIND=WEIGHT[,KIND=WEIGHT...]")
    return mix


def plan(jobs: int, mix: Mapping[str, int]) -> list[str]:
    """``jobs`` kinds in the proportions of ``mix``, interleaved (smooth weighted round robin)."""
    total = sum(mix.values())
    credit = dict.fromkeys(mix, 0)
    order: list[str] = []
    for _ in range(jobs):
        for kind, weight in mix.items():
            credit[kind] += weight
        pick = max(credit, key=lambda k: credit[k])
        credit[pick] -= total
        order.append(pick)
    return order


def sector_for(index: int, size: int) -> InlineSector:
    """An inline sector spec; the daemon creates the sector, deterministic from its seed."""
    return InlineSector(size=size, seed=f"{index + 1:064x}")


@dataclass
class WorkloadResult:
    """What one workload run measured (all times in seconds unless named ``_ms``)."""

    jobs: int
    partitions: int
    partitions_proven: int  # the partitions of the jobs that completed: the partition proofs made
    wall_secs: float
    completed: int
    failed: int
    phase_ms: dict[str, dict[str, float]]
    device_busy_fraction: float
    busy_fraction_1m: float | None
    by_kind: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    @property
    def proofs_per_hour(self) -> float:
        """Completed jobs per hour of wall time."""
        return self.completed * 3600.0 / self.wall_secs if self.wall_secs > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        return {
            "jobs": self.jobs,
            "partitions": self.partitions,
            "partitions_proven": self.partitions_proven,
            "completed": self.completed,
            "failed": self.failed,
            "wall_secs": self.wall_secs,
            "jobs_per_hour": self.proofs_per_hour,
            "proofs_per_hour": self.proofs_per_hour,  # the same (a job has one proof), for older readers
            "partitions_per_hour": self.partitions_proven * 3600.0 / self.wall_secs
            if self.wall_secs
            else 0.0,
            "phase_ms": self.phase_ms,
            "device_busy_fraction": self.device_busy_fraction,
            "device_busy_fraction_1m_at_end": self.busy_fraction_1m,
            "completed_by_kind": self.by_kind,
            "errors": self.errors,
        }


def run_workload(
    client: Client,
    kinds: list[str],
    *,
    sector_size: int = 0,
    sectors: list[str] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    on_sample: Callable[[dict[str, Any]], None] | None = None,
) -> WorkloadResult:
    """Submit one job per entry of ``kinds`` at once, wait for all, and measure the run from `/status`.

    Job ``n`` proves ``sectors[n]`` (a sector folder) when given, else an inline sector of ``sector_size``
    bytes. ``on_sample`` sees every `/status` snapshot taken while the jobs run.
    """
    start_busy = _busy_seconds(client.status())
    devices = max(1, len(client.status().get("devices", [])))
    started_at = time.time()  # the daemon stamps finished_at in Unix time
    ids = [
        client.submit(kind, sector=sectors[n] if sectors else sector_for(n, sector_size))
        for n, kind in enumerate(kinds)
    ]
    timings: dict[tuple[str, int], dict[str, float]] = {}
    finished: dict[str, str] = {}
    snapshot: dict[str, Any] = {}
    while len(finished) < len(ids):
        time.sleep(POLL_SECS)
        snapshot = client.status(ended=ENDED_LISTED)  # every job that ended since the last poll, whole
        _collect_timings(snapshot, timings, set(ids))
        if on_sample is not None:
            on_sample(snapshot)
        # One request for every job's state: polling job by job would load the daemon being measured.
        listed = {view.job_id: view for view in client.jobs(limit=len(ids) + 100)}
        for job_id in ids:
            view = listed.get(job_id) or client.job(job_id)  # older than the listing: ask for it alone
            if view.state.terminal:
                finished[job_id] = view.state.value
        if on_progress is not None:
            on_progress(len(finished), len(ids))
    views = [client.job(job_id) for job_id in ids]
    # The run ends when the last job ended, as the daemon recorded it (not when a poll noticed).
    wall = max((v.finished_at or time.time()) for v in views) - started_at
    snapshot = client.status(ended=ENDED_LISTED)
    _collect_timings(snapshot, timings, set(ids))
    busy = _busy_seconds(snapshot) - start_busy
    return WorkloadResult(
        jobs=len(ids),
        partitions=sum(v.total_partitions for v in views),
        partitions_proven=sum(v.total_partitions for v in views if v.state == "done"),
        wall_secs=wall,
        completed=sum(v.state == "done" for v in views),
        failed=sum(v.state != "done" for v in views),
        phase_ms=_phase_summary(timings),
        device_busy_fraction=busy / (wall * devices) if wall > 0 else 0.0,
        busy_fraction_1m=_mean([d.get("busy_fraction_1m") for d in snapshot.get("devices", [])]),
        by_kind=_count_by_kind(views),
        errors=[f"{v.job_id}: {v.error}" for v in views if v.error],
    )


def _busy_seconds(snapshot: Mapping[str, Any]) -> float:
    """Seconds all devices together spent in device sections so far.

    Workers of one device share its lock, so their device sections never overlap: the sum over a device's
    workers is that device's busy time, and the sum over all workers is the devices' total.
    """
    return float(sum(w.get("busy_seconds_total", 0.0) for w in snapshot.get("workers", [])))


def _collect_timings(
    snapshot: Mapping[str, Any], into: dict[tuple[str, int], dict[str, float]], jobs: set[str]
) -> None:
    for pipeline in snapshot.get("pipelines", []):
        if pipeline["job_id"] not in jobs:
            continue
        for partition in pipeline.get("partitions", []):
            if partition.get("state") != "done":
                continue
            into[(pipeline["job_id"], partition["index"])] = {
                phase: float(partition.get(phase) or 0.0) for phase in PHASES
            }


def _phase_summary(timings: Mapping[tuple[str, int], Mapping[str, float]]) -> dict[str, dict[str, float]]:
    summary: dict[str, dict[str, float]] = {}
    for phase in PHASES:
        values = sorted(t[phase] for t in timings.values())
        if values:
            summary[phase.removesuffix("_ms")] = {
                "mean_ms": statistics.fmean(values),
                "p50_ms": statistics.median(values),
                "max_ms": values[-1],
                "count": float(len(values)),
            }
    return summary


def _mean(values: list[Any]) -> float | None:
    numbers = [float(v) for v in values if isinstance(v, int | float)]
    return statistics.fmean(numbers) if numbers else None


def _count_by_kind(views: list[Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for view in views:
        if view.state == "done":
            counts[view.kind] = counts.get(view.kind, 0) + 1
    return counts
