"""/metrics text: parses with the reference parser, conventional names, base units, no per-job labels."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from prooflane import events as ev
from prooflane.server.metrics import CONTENT_TYPE, render
from prooflane.status.tracker import StatusTracker, TrackerConfig
from tests.support.clock import ManualClock
from tests.support.tracker import metric_samples


def _busy_tracker() -> tuple[StatusTracker, ManualClock]:
    clock = ManualClock(500.0)
    tracker = StatusTracker(
        TrackerConfig(memory_total_bytes=1 << 20, sample_rss=False), clock=clock, strict=True
    )
    minter = ev.LeaseMinter()

    def send(event: Any) -> None:
        tracker.apply(event)

    send(ev.WorkerRegistered(at=clock.now, worker_id='cpu0/w"0', device="cpu0"))
    send(
        ev.JobSubmitted(
            at=clock.now, job_id="ps-snap-update-1", kind="snap-update", priority="normal", partitions=2
        )
    )
    send(ev.ReservationMade(at=clock.now, name="ps-snap-update-1/0#1", nbytes=4096))
    send(ev.SynthesisStarted(at=clock.now, job_id="ps-snap-update-1", partition=0))
    clock.now += 0.2
    send(ev.SynthesisFinished(at=clock.now, job_id="ps-snap-update-1", partition=0, synth_ms=200.0))
    token = minter.mint()
    send(ev.LeaseGranted(at=clock.now, token=token, worker_id='cpu0/w"0', device="cpu0",
                         job_id="ps-snap-update-1", partition=0))  # fmt: skip
    clock.now += 1.5
    send(ev.DeviceSectionFinished(at=clock.now, token=token, prove_ms=1500.0))
    clock.now += 0.5
    send(ev.FinalizeFinished(at=clock.now, token=token, finalize_ms=500.0))
    send(ev.FinalizeFinished(at=clock.now, token=token, finalize_ms=500.0))  # stale
    send(ev.JobFailed(at=clock.now, job_id="ps-snap-update-1", reason="partition 1 failed", partition=1))
    return tracker, clock


def test_metrics_text_parses_and_carries_the_numbers() -> None:
    tracker, _ = _busy_tracker()
    samples = metric_samples(render(tracker))
    assert samples[("prooflane_partitions_total", (("kind", "snap-update"), ("outcome", "done")))] == 1
    assert samples[("prooflane_partitions_total", (("kind", "snap-update"), ("outcome", "failed")))] == 1
    assert samples[("prooflane_jobs_total", (("kind", "snap-update"), ("outcome", "failed")))] == 1
    assert samples[("prooflane_worker_busy_seconds_total", (("worker", 'cpu0/w"0'),))] == 1.5
    assert samples[("prooflane_memory_reserved_bytes", ())] == 4096
    assert samples[("prooflane_memory_budget_bytes", ())] == 1 << 20
    assert samples[("prooflane_queue_depth", ())] == 0
    assert samples[("prooflane_stale_events_total", ())] == 1
    assert samples[("prooflane_invariant_violations", ())] == 0


def test_dead_and_lost_workers_are_counted_by_state_and_up_follows_health() -> None:
    tracker, clock = _busy_tracker()
    tracker.apply(ev.WorkerRegistered(at=clock.now, worker_id="cpu1/w0", device="cpu1"))
    workers = "prooflane_workers"
    samples = metric_samples(render(tracker))
    assert samples[("prooflane_up", ())] == 1
    assert {dict(k[1])["state"]: v for k, v in samples.items() if k[0] == workers} == {
        "idle": 2, "synthesizing": 0, "proving": 0, "finalizing": 0, "restarting": 0, "lost": 0,
    }  # fmt: skip
    tracker.apply(ev.WorkerDied(at=clock.now, worker_id='cpu0/w"0', reason="exit code -9"))
    tracker.apply(ev.WorkerLost(at=clock.now, worker_id="cpu1/w0", reason="no device"))
    samples = metric_samples(render(tracker))
    assert samples[(workers, (("state", "restarting"),))] == 1
    assert samples[(workers, (("state", "lost"),))] == 1
    assert samples[(workers, (("state", "idle"),))] == 0
    assert samples[("prooflane_up", ())] == 0
    tracker.apply(ev.WorkerRegistered(at=clock.now, worker_id='cpu0/w"0', device="cpu0"))
    assert metric_samples(render(tracker))[("prooflane_up", ())] == 0  # cpu1 still has no live worker
    tracker.apply(ev.WorkerRegistered(at=clock.now, worker_id="cpu1/w0", device="cpu1"))
    assert metric_samples(render(tracker))[("prooflane_up", ())] == 1


def test_phase_histogram_is_cumulative_in_seconds() -> None:
    tracker, _ = _busy_tracker()
    samples = metric_samples(render(tracker))
    prove = {k[1]: v for k, v in samples.items() if k[0] == "prooflane_partition_phase_seconds_bucket"
             and ("phase", "prove") in k[1]}  # fmt: skip
    le = {dict(labels)["le"]: v for labels, v in prove.items()}
    assert le["1"] == 0 and le["2.5"] == 1 and le["+Inf"] == 1
    assert samples[("prooflane_partition_phase_seconds_sum", (("phase", "prove"),))] == 1.5
    assert samples[("prooflane_partition_phase_seconds_count", (("phase", "synth"),))] == 1
    counts = [v for (name, labels), v in samples.items() if name.endswith("_bucket")]
    assert all(c >= 0 for c in counts)


def test_no_metric_carries_a_job_label() -> None:
    tracker, _ = _busy_tracker()
    text = render(tracker)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert "job" not in sample.labels and "job_id" not in sample.labels
            assert "ps-snap-update-1" not in sample.labels.values()


def test_counters_never_go_down_as_jobs_leave_the_live_view() -> None:
    tracker, clock = _busy_tracker()
    before = metric_samples(render(tracker))
    clock.now += 3600
    tracker.apply(ev.WorkerDied(at=clock.now, worker_id='cpu0/w"0', reason="exit"))
    after = metric_samples(render(tracker))
    for key, value in before.items():
        if key[0].endswith("_total"):
            assert after[key] >= value, key


def test_content_type_is_the_text_format() -> None:
    assert CONTENT_TYPE.startswith("text/plain; version=0.0.4")


def test_worker_restarts_are_counted_per_worker_and_device() -> None:
    tracker, clock = _busy_tracker()
    tracker.apply(ev.WorkerRegistered(at=clock.now, worker_id="cpu1/w0", device="cpu1"))
    name = "prooflane_worker_restarts_total"
    families = {f.name: f for f in text_string_to_metric_families(render(tracker))}
    assert families["prooflane_worker_restarts"].type == "counter"  # the parser drops the _total
    restarts = {k[1]: v for k, v in metric_samples(render(tracker)).items() if k[0] == name}
    assert restarts == {
        (("device", "cpu0"), ("worker", 'cpu0/w"0')): 0,  # every listed worker, never restarted: 0
        (("device", "cpu1"), ("worker", "cpu1/w0")): 0,
    }
    for reason in ("exit code -9", "killed by signal 9"):
        tracker.apply(ev.WorkerDied(at=clock.now, worker_id="cpu1/w0", reason=reason))
        tracker.apply(ev.WorkerRegistered(at=clock.now, worker_id="cpu1/w0", device="cpu1"))
    tracker.apply(ev.WorkerLost(at=clock.now, worker_id='cpu0/w"0', reason="device gone"))  # not a restart
    restarts = {k[1]: v for k, v in metric_samples(render(tracker)).items() if k[0] == name}
    assert restarts == {
        (("device", "cpu0"), ("worker", 'cpu0/w"0')): 0,
        (("device", "cpu1"), ("worker", "cpu1/w0")): 2,
    }


def test_arithmetic_is_an_info_gauge_per_curve_and_libraries_leave_up_at_one() -> None:
    arithmetic = {"bn128": "c-extension", "bls12381": "libraries: PROOFLANE_NATIVE=0"}
    tracker = StatusTracker(TrackerConfig(sample_rss=False, arithmetic=arithmetic), clock=ManualClock(1.0))
    tracker.apply(ev.WorkerRegistered(at=1.0, worker_id="cpu0/w0", device="cpu0"))
    samples = metric_samples(render(tracker))
    assert {k[1]: v for k, v in samples.items() if k[0] == "prooflane_arithmetic"} == {
        (("arithmetic", "c-extension"), ("curve", "bn128"), ("reason", "")): 1,
        (("arithmetic", "libraries"), ("curve", "bls12381"), ("reason", "PROOFLANE_NATIVE=0")): 1,
    }
    assert samples[("prooflane_up", ())] == 1  # the slower path is a warning, never down


def test_each_key_s_tables_are_a_gauge_of_a_worker_s_copy_with_their_state_and_reason() -> None:
    tracker = StatusTracker(TrackerConfig(sample_rss=False), clock=ManualClock(1.0))
    tracker.apply(ev.TablesChanged(at=1.0, key="circom:merkle", state="stored", nbytes=238 << 20))
    tracker.apply(ev.TablesChanged(at=1.0, key="porep-c2@tiny/bn128", state="unused", reason='a "full" disk'))
    samples = metric_samples(render(tracker))
    assert {k[1]: v for k, v in samples.items() if k[0] == "prooflane_msm_tables_bytes"} == {
        (("key", "circom:merkle"), ("reason", ""), ("state", "stored")): 238 << 20,
        (("key", "porep-c2@tiny/bn128"), ("reason", 'a "full" disk'), ("state", "unused")): 0,
    }
