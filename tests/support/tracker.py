"""Driving a real status tracker by hand: a strict tracker, events stamped by a manual clock, and the
steps of a partition's life as one call each (``Script``)."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from prooflane import events as ev
from prooflane.status.tracker import Outcome, StatusTracker, TrackerConfig
from tests.support.clock import ManualClock


class Script:
    """Drives a strict tracker with events stamped by a fake clock."""

    def __init__(self, strict: bool = True, **config: Any) -> None:
        self.clock = ManualClock()
        config.setdefault("sample_rss", False)
        self.tracker = StatusTracker(
            TrackerConfig(**config), clock=self.clock, wall_clock=lambda: 1.7e9, strict=strict, boot_id="b"
        )
        self.minter = ev.LeaseMinter()
        self.devices: dict[str, str] = {}

    def __call__(self, cls: type[ev.EventBase], **fields: Any) -> Outcome:
        event: Any = cls(at=self.clock.now, **fields)
        return self.tracker.apply(event)

    def worker(self, worker_id: str, device: str = "cpu0") -> None:
        self.devices[worker_id] = device
        assert self(ev.WorkerRegistered, worker_id=worker_id, device=device) is Outcome.APPLIED

    def job(self, job_id: str, partitions: int = 2, kind: str = "porep-c2") -> None:
        fields = {"job_id": job_id, "kind": kind, "priority": "normal", "partitions": partitions}
        assert self(ev.JobSubmitted, **fields) is Outcome.APPLIED

    def synthesize(self, job_id: str, index: int, attempt: int = 1) -> None:
        assert self(ev.SynthesisStarted, job_id=job_id, partition=index, attempt=attempt) is Outcome.APPLIED
        self.clock.advance(1.0)
        finished = self(
            ev.SynthesisFinished, job_id=job_id, partition=index, synth_ms=1000.0, attempt=attempt
        )
        assert finished is Outcome.APPLIED

    def lease(self, worker_id: str, job_id: str, index: int, attempt: int = 1) -> ev.LeaseToken:
        token = self.minter.mint()
        outcome = self(
            ev.LeaseGranted,
            token=token,
            worker_id=worker_id,
            device=self.devices[worker_id],
            job_id=job_id,
            partition=index,
            attempt=attempt,
        )
        assert outcome is Outcome.APPLIED
        return token

    def start(self, worker_id: str, job_id: str, index: int) -> ev.LeaseToken:
        self.synthesize(job_id, index)
        return self.lease(worker_id, job_id, index)

    def prove_end(self, token: ev.LeaseToken) -> Outcome:
        return self(ev.DeviceSectionFinished, token=token, prove_ms=500.0)

    def finalize(self, token: ev.LeaseToken) -> Outcome:
        return self(ev.FinalizeFinished, token=token, finalize_ms=250.0)

    def prove_job(self, job_id: str, worker_id: str = "W0", kind: str = "porep-c2") -> None:
        """A one-partition job, submitted and proven on ``worker_id`` to the end (done)."""
        self.job(job_id, partitions=1, kind=kind)
        token = self.start(worker_id, job_id, 0)
        assert self.prove_end(token) is Outcome.APPLIED
        assert self.finalize(token) is Outcome.APPLIED
        assert self(ev.JobDone, job_id=job_id) is Outcome.APPLIED

    def fail_job(self, job_id: str, reason: str, partitions: int = 2, kind: str = "porep-c2") -> None:
        """A job submitted and failed at its partition 0 (the others cancelled with it)."""
        self.job(job_id, partitions=partitions, kind=kind)
        assert self(ev.JobFailed, job_id=job_id, reason=reason, partition=0) is Outcome.APPLIED

    def status(self) -> dict[str, Any]:
        snapshot = self.tracker.snapshot()
        assert self.tracker.invariants() == []
        return snapshot.to_json()


def worker_of(status: dict[str, Any], worker_id: str) -> dict[str, Any]:
    return next(w for w in status["workers"] if w["worker_id"] == worker_id)


def job_of(status: dict[str, Any], job_id: str) -> dict[str, Any]:
    return next(j for j in status["pipelines"] if j["job_id"] == job_id)


def states_of(status: dict[str, Any], job_id: str) -> list[str]:
    return [p["state"] for p in job_of(status, job_id)["partitions"]]


def metric_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus text, by name and sorted labels (parsed by prometheus_client)."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out
