"""Prometheus text exposition of the status tracker's numbers (``GET /metrics``).

The text is written here rather than through ``prometheus_client``: the tracker already holds every number
(it is the one writer of that state), so a second registry of mutable collectors would be a copy that could
drift from ``/status``. :func:`render` reads one :class:`~prooflane.status.TrackerTotals` and formats it in
the text format 0.0.4; the tests parse the result with ``prometheus_client``'s own parser.

Conventions: ``prooflane_`` prefix, base units (seconds, bytes, ratios), ``_total`` on counters, and labels
of small fixed sets only (kind, outcome, phase, worker, device, state, curve): per-job detail stays in
``/status``. ``prooflane_arithmetic`` is an info gauge (always 1): its labels are the fact.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from ..status.tracker import StatusTracker, TrackerTotals

__all__ = ["CONTENT_TYPE", "render", "render_totals"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The ``Content-Type`` of :func:`render`'s output."""

Labels = tuple[tuple[str, str], ...]
Sample = tuple[str, Labels, float]


def render(tracker: StatusTracker) -> str:
    """The tracker's metrics as Prometheus text. Call on the event loop, like every tracker read."""
    return render_totals(tracker.totals())


def render_totals(t: TrackerTotals) -> str:
    """Format already-copied totals (see :meth:`StatusTracker.totals`)."""
    out: list[str] = []
    _family(out, "prooflane_partitions_total", "counter",
            "Partitions that reached an outcome (done, failed, cancelled), by proof kind.",
            _by_kind_outcome(t.partitions, "prooflane_partitions_total"))  # fmt: skip
    _family(out, "prooflane_jobs_total", "counter",
            "Jobs that reached an outcome (done, failed, cancelled), by proof kind; each counted once.",
            _by_kind_outcome(t.jobs, "prooflane_jobs_total"))  # fmt: skip
    _histograms(out, t)
    _family(out, "prooflane_arithmetic", "gauge",
            "The arithmetic that proves each curve here, always 1: c-extension, or libraries (the slower"
            " path; reason says why).", _arithmetic(t.arithmetic))  # fmt: skip
    _family(out, "prooflane_msm_tables_bytes", "gauge",
            "Each key's fixed-base tables (msm_tables auto): a worker's copy when stored, else 0; state"
            " building, stored or unused (reason says why).", _tables(t))  # fmt: skip
    _family(out, "prooflane_worker_busy_seconds_total", "counter",
            "Seconds each worker spent holding a current lease (its device section).",
            [("prooflane_worker_busy_seconds_total", (("worker", w),), s)
             for w, s in sorted(t.worker_busy_seconds.items())])  # fmt: skip
    _family(out, "prooflane_worker_restarts_total", "counter",
            "Times each worker's processes died and were replaced (or are being), on its device.",
            [("prooflane_worker_restarts_total", (("worker", w), ("device", d)), n)
             for (w, d), n in sorted(t.worker_restarts.items())])  # fmt: skip
    _family(out, "prooflane_workers", "gauge",
            "Listed workers by state (idle, proving, finalizing; restarting and lost: their processes died).",
            [("prooflane_workers", (("state", s),), n) for s, n in t.workers_by_state.items()])  # fmt: skip
    _family(out, "prooflane_device_busy_ratio", "gauge",
            "Share of the last minute each device was busy (0 to 1).",
            [("prooflane_device_busy_ratio", (("device", d),), f)
             for d, f in sorted(t.device_busy_fraction.items())])  # fmt: skip
    for field, help_text in (
        ("total", "Memory of each device with its own (a cuda device), as budgeted."),
        ("keys", "Device memory held by the proving keys' resident G1 bases."),
        ("in_use", "Device memory the partitions in each device's section need now."),
    ):
        name = f"prooflane_device_memory_{field}_bytes"
        _family(out, name, "gauge", help_text,
                [(name, (("device", d),), getattr(m, f"{field}_bytes"))
                 for d, m in sorted(t.device_memory.items())])  # fmt: skip
    for name, kind, help_text, value in (
        ("prooflane_memory_reserved_bytes", "gauge", "Bytes held by live reservations.",
         t.memory_reserved_bytes),
        ("prooflane_memory_budget_bytes", "gauge", "The memory budget.", t.memory_budget_bytes),
        ("prooflane_memory_cached_bytes", "gauge", "Bytes held by cached proving keys.",
         t.memory_cached_bytes),
        ("prooflane_queue_depth", "gauge", "Partitions waiting for synthesis.", t.queue_depth),
        ("prooflane_synthesis_active", "gauge", "Partitions being synthesized.", t.synthesis_active),
        ("prooflane_stale_events_total", "counter",
         "Events dropped because their lease, attempt or job was no longer live.", t.stale_events),
        ("prooflane_illegal_events_total", "counter",
         "Events dropped because they broke the partition state machine.", t.illegal_events),
        ("prooflane_events_total", "counter", "Events received by the status tracker.", t.events),
        ("prooflane_partition_retries_total", "counter", "Partitions sent back for another attempt.",
         t.retries),
        ("prooflane_invariant_violations", "gauge",
         "Status invariants broken now (0 when the status tells the truth).", t.invariant_violations),
        ("prooflane_journal_checks_total", "counter",
         "Comparisons of the live view with the journal.", t.journal_checks),
        ("prooflane_journal_disagreements_total", "counter",
         "Disagreements found anew by those comparisons.", t.journal_disagreed),
        ("prooflane_up", "gauge",
         "1 when the daemon can work (every device has a live worker, health ok), else 0.", int(t.health.ok)),
    ):  # fmt: skip
        _family(out, name, kind, help_text, [(name, (), value)])
    return "".join(out)


def _by_kind_outcome(counts: Mapping[tuple[str, str], int], name: str) -> list[Sample]:
    return [(name, (("kind", k), ("outcome", o)), n) for (k, o), n in sorted(counts.items())]


def _arithmetic(arithmetic: Mapping[str, str]) -> list[Sample]:
    """``{"bls12381": "libraries: PROOFLANE_NATIVE=0"}`` -> ``curve="bls12381", arithmetic="libraries",
    reason="PROOFLANE_NATIVE=0"`` (reason empty for the C extension)."""
    samples: list[Sample] = []
    for curve, said in sorted(arithmetic.items()):
        name, _, reason = said.partition(":")
        labels = (("curve", curve), ("arithmetic", name.strip()), ("reason", reason.strip()))
        samples.append(("prooflane_arithmetic", labels, 1))
    return samples


def _tables(t: TrackerTotals) -> list[Sample]:
    return [
        ("prooflane_msm_tables_bytes", (("key", x.key), ("state", x.state), ("reason", x.reason)), x.bytes)
        for x in t.tables
    ]


def _histograms(out: list[str], t: TrackerTotals) -> None:
    name = "prooflane_partition_phase_seconds"
    samples: list[Sample] = []
    for phase, view in t.phases.items():
        for bound, count in zip((*view.bounds, math.inf), view.cumulative, strict=True):
            samples.append((f"{name}_bucket", (("phase", phase), ("le", _number(bound))), count))
        samples.append((f"{name}_sum", (("phase", phase),), view.sum))
        samples.append((f"{name}_count", (("phase", phase),), view.count))
    _family(
        out, name, "histogram", "Time per partition phase: synth, prove (device section), finalize.", samples
    )


def _family(out: list[str], name: str, kind: str, help_text: str, samples: Iterable[Sample]) -> None:
    out.append(f"# HELP {name} {_escape_help(help_text)}\n# TYPE {name} {kind}\n")
    for sample, labels, value in samples:
        if labels:
            body = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels)
            out.append(f"{sample}{{{body}}} {_number(value)}\n")
        else:
            out.append(f"{sample} {_number(value)}\n")


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


def _escape_label(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _escape_help(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n")
