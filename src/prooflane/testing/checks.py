"""The checks of a chaos run, each over what the run recorded (samples of ``/healthz`` and ``/status``, every
boot's event stream, the faults injected): each returns the violations it found, in words.

See :mod:`.chaos` for the properties and the run that records what these read.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..states import LIVE_PARTITION_STATES
from .faults import WORKER_KINDS, Fault, ProcessKind, Sample

__all__ = [
    "check_final",
    "check_health_after_kills",
    "check_journal",
    "check_reports",
    "check_samples",
    "live_partitions",
    "mark_back_to_work",
]

_LIVE = frozenset(state.value for state in LIVE_PARTITION_STATES)


def live_partitions(status: dict[str, Any]) -> int:
    """How many partitions of a ``/status`` document are not yet done, failed or cancelled."""
    return sum(
        p["state"] in _LIVE
        for pipeline in status.get("pipelines", [])
        for p in pipeline.get("partitions", [])
    )


def check_samples(samples: list[Sample], devices: list[str]) -> list[str]:
    """Every /status: invariants hold, every configured device is listed, and a device without a live
    worker makes health not ok and is named down."""
    found = []
    for sample in samples:
        status = sample.status
        if status is None:
            continue
        at = f"boot {sample.boot} seq {status['seq']}"
        if not status["invariants_ok"]:
            found.append(f"{at}: invariants broken: {status['invariant_violations']}")
        if status["illegal_events"]:
            found.append(f"{at}: {status['illegal_events']} illegal events")
        listed = {d["device"]: d for d in status["devices"]}
        missing = [d for d in devices if d not in listed]
        if missing and status["workers"]:  # before the first worker registered nothing is listed
            found.append(f"{at}: devices {missing} not listed")
        for name, device in listed.items():
            if device["workers"] == 0 and (
                status["health"]["ok"] or name not in status["health"]["devices_down"]
            ):
                found.append(f"{at}: device {name} has no live worker, but health is {status['health']}")
    return found


def _worker_deaths(events: list[dict[str, Any]]) -> Iterator[tuple[int, str, str]]:
    for e in events:
        if e["_name"] in ("worker_died", "worker_lost"):
            yield e["_id"], e["worker_id"], e.get("reason", "")


def check_health_after_kills(
    faults: list[Fault], samples: list[Sample], events: list[list[dict[str, Any]]]
) -> list[str]:
    """No /healthz 200 after a worker's process was seen dead, until its replacement registered.

    The daemon's events name the dead process's pid (``worker_died``, at seq d) and the replacement
    (``worker_registered`` of the same worker, at seq r). A sample's /healthz is followed by a /status at seq
    s: the /healthz answer came from a state at or before s, so 200 with s < r is a lie (at most the
    replacement could not have answered yet). Only for devices with one worker (with more, another may
    be live).
    """
    found = []
    for fault in faults:
        if fault.kind not in WORKER_KINDS:
            continue
        boot_events = events[fault.boot]
        death = next((d for d in _worker_deaths(boot_events) if f"(pid {fault.pid})" in d[2]), None)
        if death is None:
            continue  # a worker that was still starting, or being ended anyway: nothing was live
        seq, worker_id, _ = death
        registered = [
            e for e in boot_events if e["_name"] == "worker_registered" and e["worker_id"] == worker_id
        ]
        device = registered[0]["device"] if registered else None
        alone = (
            len(
                {
                    e["worker_id"]
                    for e in boot_events
                    if e["_name"] == "worker_registered" and e["device"] == device
                }
            )
            == 1
        )
        if device is None or not alone:
            continue
        back = min((e["_id"] for e in registered if e["_id"] > seq), default=None)
        for sample in samples:
            if sample.boot != fault.boot or sample.asked_at < fault.dead_at or sample.status is None:
                continue
            if sample.healthz == 200 and (back is None or sample.status["seq"] < back):
                found.append(
                    f"/healthz said 200 after {fault.kind} {fault.pid} of {worker_id} was dead (died at "
                    f"seq {seq}, replaced at seq {back}, /status right after at {sample.status['seq']})"
                )
                break
    return found


def check_reports(
    ids: list[str], events: list[list[dict[str, Any]]], daemon_kills: list[float], views: dict[str, Any]
) -> tuple[int, list[str]]:
    """Each job reported done at most once over every boot's stream (exactly once unless the stream it
    ended in was cut by a kill of the daemon); each partition reported finished at most once."""
    found = []
    done: dict[str, int] = dict.fromkeys(ids, 0)
    finished: dict[tuple[str, int], int] = {}
    for boot in events:
        leases = {}
        for e in boot:
            if e["_name"] == "job_done":
                done[e["job_id"]] = done.get(e["job_id"], 0) + 1
            elif e["_name"] == "lease_granted":
                leases[e["token"]] = (e["job_id"], e["partition"])
            elif e["_name"] == "finalize_finished" and e.get("outcome") == "applied":
                key = leases[e["token"]]
                finished[key] = finished.get(key, 0) + 1
    unseen = 0
    last_kill = max(daemon_kills, default=0.0)
    for job_id, count in done.items():
        if count > 1:
            found.append(f"job {job_id} reported done {count} times")
        elif count == 0 and job_id in views and views[job_id].state == "done":
            if (views[job_id].finished_at or 0.0) <= last_kill:
                unseen += 1  # it ended in a boot whose stream the kill cut
            else:
                found.append(f"job {job_id} is done but was never reported done")
    found += [f"partition {k[0]}/{k[1]} reported finished {n} times" for k, n in finished.items() if n > 1]
    return unseen, found


def check_final(status: dict[str, Any]) -> list[str]:
    """After the drain: nothing reserved, every worker live, cached keys only of live workers, once each."""
    found = []
    memory = status["memory"]
    if memory["reserved_bytes"] != 0:
        found.append(f"{memory['reserved_bytes']} bytes still reserved after the drain")
    live = {w["worker_id"] for w in status["workers"] if w["state"] in ("idle", "proving", "finalizing")}
    if dead := [w["worker_id"] for w in status["workers"] if w["worker_id"] not in live]:
        found.append(f"workers {dead} not live after the drain")
    names = [a["name"] for a in status["allocations"]]
    if len(names) != len(set(names)):
        found.append(f"a key is cached twice: {names}")
    if strays := [n for n in names if n.rsplit("@", 1)[-1] not in live]:
        found.append(f"keys cached for workers that are not live: {strays}")
    if sum(a["bytes"] for a in status["allocations"]) != memory["cached_bytes"]:
        found.append(f"cached bytes {memory['cached_bytes']} are not the sum of the allocations")
    if not status["health"]["ok"]:
        found.append(f"not healthy after the drain: {status['health']['reasons']}")
    return found


def check_journal(status: dict[str, Any], journal: Path) -> list[str]:
    """Where a ``/status`` document and the journal (its SQLite file, opened read-only) say different things
    of a job the status lists: its end (done, failed, cancelled, or none yet), a partition's end (the journal
    keeps a live partition pending), a job only one of them holds unfinished; and a queue depth other than
    the partitions the status shows pending. An outside view of what the engine's own check compares."""
    found: list[str] = []
    ended = {"done", "failed", "cancelled"}
    listed = {job["job_id"]: job for job in status["pipelines"]}
    with contextlib.closing(sqlite3.connect(f"file:{journal}?mode=ro", uri=True)) as db:
        for job_id, job in listed.items():
            row = db.execute("SELECT state FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
            if row is None:
                found.append(f"{job_id}: {job['state']} in /status, not in the journal")
                continue
            if ({row[0], job["state"]} & ended) and row[0] != job["state"]:
                found.append(f"{job_id}: {job['state']} in /status, {row[0]} in the journal")
            rows = db.execute("SELECT idx, state FROM partitions WHERE job_id = ?", (job_id,)).fetchall()
            kept = dict(rows)
            for part in job["partitions"]:
                said, stored = part["state"], kept.get(part["index"])
                if ({said, stored} & ended) and said != stored:
                    found.append(
                        f"{job_id}/{part['index']}: {said} (attempt {part['attempt']}) in /status, "
                        f"{stored} in the journal"
                    )
        unfinished = db.execute("SELECT job_id FROM jobs WHERE state IN ('queued', 'running')").fetchall()
    live = status["live_jobs"]
    if live["shown"] == live["total"]:  # every job of the live view listed
        found += [f"{j}: unfinished in the journal, not in /status" for (j,) in unfinished if j not in listed]
        pending = sum(p["state"] == "pending" for job in listed.values() for p in job["partitions"])
    else:  # the rest are counted: by state, and their pending partitions by kind, priority and state
        if len(unfinished) != live["queued"] + live["running"]:
            found.append(f"{len(unfinished)} jobs unfinished in the journal, {live['queued']} queued and "
                         f"{live['running']} running in /status")  # fmt: skip
        pending = sum(g["partitions_pending"] for g in live["groups"])
    if status["counters"]["queue_depth"] != pending:
        found.append(f"queue depth {status['counters']['queue_depth']}, {pending} partitions pending")
    return found


def mark_back_to_work(faults: list[Fault], samples: list[Sample], events: list[list[dict[str, Any]]]) -> None:
    """Set each fault's ``recovered_at`` (monotonic seconds; the daemon stamps its events with the same
    clock): for a prover or finalizer, when the replacement of its worker registered; for a synthesis
    process, the forkserver or the resource tracker, when the next partition finished synthesis; for the
    daemon, when the next boot first answered /healthz with 200. Left None when nothing followed."""
    for fault in faults:
        boot = events[fault.boot] if fault.boot < len(events) else []
        after = [e for e in boot if e.get("at", 0.0) >= fault.dead_at]
        if fault.kind is ProcessKind.DAEMON:
            fault.recovered_at = next(
                (x.asked_at for x in samples if x.boot > fault.boot and x.healthz == 200), None
            )
            continue
        if fault.kind in WORKER_KINDS:
            death = next((d for d in _worker_deaths(boot) if f"(pid {fault.pid})" in d[2]), None)
            found = [e for e in after if e["_name"] == "worker_registered"]
            if death is not None:
                found = [e for e in found if e["worker_id"] == death[1]]
        else:
            found = [e for e in after if e["_name"] == "synthesis_finished"]
        fault.recovered_at = found[0]["at"] if found else None
