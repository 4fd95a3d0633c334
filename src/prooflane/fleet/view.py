"""What the fleet shows, computed from facts: each daemon's last snapshot, when it came, what failed since.

Pure functions over plain data, so the rules are tested without a network:

- A daemon's health is ``connecting`` (no answer yet), ``unreachable`` (its last attempt failed),
  ``stopped`` (the same, after the fleet stopped it on purpose, and it has not answered since), ``stale``
  (its last good snapshot is older than ``stale_after_secs``) or ``up``. Only ``up`` daemons have live
  numbers; the others keep their last snapshot and the time since it, and are never counted as idle or zero.
- Fleet totals add up the ``up`` daemons and name the ones left out.
- Proofs per hour are the daemon's own, over the last minute and the last ten (its dashboard's windows);
  the 10-minute one is added up, priced and judged by break-even, and the page says so. Cost per proof is
  cost per hour divided by proofs per hour (none while no proof was made).
- Break-even: with a cost per hour and the fleet's price per proof, the proofs per hour a daemon needs to
  pay for itself (cost per hour / price per proof), and whether its measured proofs per hour reach it
  (unknown while it is not up).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..states import TERMINAL_JOB_STATES
from ..status.timing import THROUGHPUT_WINDOWS

__all__ = [
    "RATE_WINDOWS_SECS",
    "RATE_WINDOW_SECS",
    "DaemonFacts",
    "Health",
    "arithmetic_of",
    "break_even",
    "daemon_entry",
    "fleet_totals",
    "health",
    "machine_of",
    "machines",
    "natural_key",
    "proofs_per_hour",
    "relabel_metrics",
    "summarize",
]

Health = Literal["connecting", "up", "stale", "unreachable", "stopped"]
_TERMINAL = frozenset(state.value for state in TERMINAL_JOB_STATES)


@dataclass(frozen=True)
class DaemonFacts:
    """What the fleet knows of one daemon at one moment (times in seconds on one clock)."""

    name: str
    where: str
    snapshot: Mapping[str, Any] | None
    received_at: float | None  # when the last good snapshot arrived
    received_wall: float | None  # the same moment as a Unix time, for people
    failures: int  # failed attempts since the last good one
    last_error: str | None
    last_error_wall: float | None
    feed: str  # "events" while the daemon's event stream is open, else "polling"
    cost_per_hour: float | None
    price_per_proof: float | None = None  # the fleet's, what one proof earns
    deploy_dir: str = ""  # the daemon's folder on its host when the fleet deployed it (it can stop it)
    stopped_at: float | None = None  # Unix time the fleet stopped it on purpose (``fleet stop``), if it did
    status_fetches: int = 0  # GET /status answers since the fleet started following it
    status_not_modified: int = 0  # of them 304: nothing but the clock moved
    status_bytes: int = 0  # bytes they carried, as sent (gzipped)


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key ordering numbers by value: ``cpu:2`` before ``cpu:10``, ``cpu:1/w0`` before ``cpu:1/w1``."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", text) if part)


def health(facts: DaemonFacts, now: float, stale_after_secs: float) -> Health:
    """The daemon's health at ``now``, from stored facts only."""
    if facts.failures > 0:
        return "stopped" if _stopped_since_last_answer(facts) else "unreachable"
    if facts.received_at is None:
        return "connecting"
    if now - facts.received_at > stale_after_secs:
        return "stale"
    return "up"


RATE_WINDOWS_SECS: tuple[float, float] = THROUGHPUT_WINDOWS
"""The windows of the fleet's proofs per hour: the daemon dashboard's own (1 and 10 minutes)."""
RATE_WINDOW_SECS = RATE_WINDOWS_SECS[-1]
"""The window of the rate the fleet adds up, prices (cost per proof) and judges break-even by: 10 minutes."""


def proofs_per_hour(snapshot: Mapping[str, Any], window: float = RATE_WINDOW_SECS) -> float:
    """Proofs completed over the last ``window`` seconds (one of :data:`RATE_WINDOWS_SECS`), as a rate per
    hour: the daemon's own figure (``history.proofs_per_hour_1m`` / ``_10m``, what its dashboard shows).

    A daemon from before those figures: its per-minute history's last ``window`` seconds, over that window
    or its uptime when shorter, at least one bucket.
    """
    history = snapshot.get("history") or {}
    own = history.get(f"proofs_per_hour_{round(window / 60)}m")
    if isinstance(own, int | float):
        return float(own)
    counts = [float(x) for x in history.get("proofs_per_minute") or []]
    bucket = float(history.get("minute_secs") or 60.0)
    if not counts:
        return 0.0
    counts = counts[-max(1, math.ceil(window / bucket)) :]
    uptime = float(snapshot.get("uptime_secs") or 0.0)
    span = max(min(len(counts) * bucket, uptime), bucket)
    return sum(counts) * 3600.0 / span


def summarize(snapshot: Mapping[str, Any], cost_per_hour: float | None) -> dict[str, Any]:
    """The numbers of one daemon's row, from its snapshot."""
    workers = sorted(snapshot.get("workers") or [], key=lambda w: natural_key(str(w.get("worker_id", ""))))
    devices = sorted(snapshot.get("devices") or [], key=lambda d: natural_key(str(d.get("device", ""))))
    proving_devices = {w.get("device") for w in workers if w.get("state") == "proving"}
    by_state: dict[str, int] = {}
    for w in workers:
        by_state[str(w.get("state"))] = by_state.get(str(w.get("state")), 0) + 1
    fractions = [float(d.get("busy_fraction_1m") or 0.0) for d in devices]
    counters = snapshot.get("counters") or {}
    memory = snapshot.get("memory") or {}
    pph = proofs_per_hour(snapshot, RATE_WINDOW_SECS)
    return {
        "version": snapshot.get("version"),
        "boot_id": snapshot.get("boot_id"),
        "seq": snapshot.get("seq"),
        "uptime_secs": snapshot.get("uptime_secs"),
        "invariants_ok": snapshot.get("invariants_ok"),
        "devices": len(devices),
        "devices_busy": sum(1 for d in devices if d.get("device") in proving_devices),
        "devices_idle": sum(1 for d in devices if d.get("device") not in proving_devices),
        "busy_fraction_1m": sum(fractions) / len(fractions) if fractions else None,
        "workers": len(workers),
        "workers_proving": by_state.get("proving", 0),
        "workers_by_state": by_state,
        "jobs_running": _unfinished_jobs(snapshot),
        "queue_depth": int(counters.get("queue_depth") or 0),
        "device_queue_depth": int(counters.get("device_queue_depth") or 0),
        "total_completed": int(counters.get("total_completed") or 0),
        "total_failed": int(counters.get("total_failed") or 0),
        "memory_reserved_bytes": int(memory.get("reserved_bytes") or 0),
        # everything the budget holds (reservations and cached keys); older daemons: reservations only
        "memory_used_bytes": int(memory.get("used_bytes", memory.get("reserved_bytes")) or 0),
        "memory_total_bytes": int(memory.get("total_bytes") or 0),
        "machine": machine_of(snapshot),
        "arithmetic": arithmetic_of(snapshot),
        "process_rss_bytes": memory.get("process_rss_bytes"),
        "proofs_per_hour": pph,  # over the last RATE_WINDOW_SECS
        "proofs_per_hour_1m": proofs_per_hour(snapshot, RATE_WINDOWS_SECS[0]),
        "proofs_per_hour_10m": proofs_per_hour(snapshot, RATE_WINDOWS_SECS[1]),
        "rate_window_secs": RATE_WINDOW_SECS,
        "cost_per_hour": cost_per_hour,
        "cost_per_proof": _per_proof(cost_per_hour, pph),
        "last_error": last_error(snapshot),
        "ray": ray_info(snapshot),
    }


def arithmetic_of(snapshot: Mapping[str, Any]) -> dict[str, Any] | None:
    """What proves each curve on the daemon (its ``/status``'s ``arithmetic``), for its row: ``curves``
    (curve -> as the daemon says it), ``text`` (``c-extension``; ``libraries (<why>)``; per curve when they
    differ: ``bn128 c-extension, bls12381 libraries (<why>)``), ``libraries`` (the curves on the slower
    path: the row is a warning when there is one) and ``warnings`` (the daemon's own health warnings). None
    for a daemon that does not say (from before the field)."""
    given = snapshot.get("arithmetic")
    if not isinstance(given, Mapping) or not given:
        return None
    curves = {str(curve): str(said) for curve, said in given.items()}
    shown = {curve: _arithmetic_text(said) for curve, said in curves.items()}
    texts = set(shown.values())
    text = texts.pop() if len(texts) == 1 else ", ".join(f"{c} {t}" for c, t in shown.items())
    health = snapshot.get("health")
    warnings = health.get("warnings") if isinstance(health, Mapping) else None
    return {
        "curves": curves,
        "text": text,
        "libraries": [curve for curve, said in curves.items() if said.startswith("libraries")],
        "warnings": [str(w) for w in warnings] if isinstance(warnings, list) else [],
    }


def _arithmetic_text(said: str) -> str:
    """``libraries: PROOFLANE_NATIVE=0`` -> ``libraries (PROOFLANE_NATIVE=0)``; ``c-extension`` as it is."""
    name, _, why = said.partition(":")
    return f"{name.strip()} ({why.strip()})" if why.strip() else said


def _unfinished_jobs(snapshot: Mapping[str, Any]) -> int:
    """The jobs queued or running: counted in ``live_jobs`` (``pipelines`` lists only some of them), or,
    from a daemon without it, those its pipelines list."""
    live = snapshot.get("live_jobs")
    if isinstance(live, Mapping):
        return int(live.get("queued") or 0) + int(live.get("running") or 0)
    return sum(1 for j in snapshot.get("pipelines") or [] if j.get("state") not in _TERMINAL)


def last_error(snapshot: Mapping[str, Any]) -> dict[str, Any] | None:
    """The newest failed job's id and reason: from the snapshot's ``recent_failures`` (kept apart from
    ``recent_jobs``, so a failure is still there however many jobs finished after it), its live pipelines,
    and its recent jobs (a daemon from before ``recent_failures``)."""
    failed = list(snapshot.get("recent_failures") or [])
    failed += [j for j in snapshot.get("recent_jobs") or [] if j.get("outcome", j.get("state")) == "failed"]
    failed += [j for j in snapshot.get("pipelines") or [] if j.get("state") == "failed"]
    if not failed:
        return None
    newest = min(failed, key=lambda j: float(j.get("ended_secs_ago") or 0.0))
    reason = str(newest.get("reason") or newest.get("error") or "")
    # How long before the snapshot was taken it failed (a live pipeline just failed: 0); the page adds the
    # snapshot's own age.
    ago = float(newest.get("ended_secs_ago") or 0.0)
    return {"job_id": newest.get("job_id"), "reason": reason, "ended_secs_ago": ago}


def ray_info(snapshot: Mapping[str, Any]) -> dict[str, Any] | None:
    """Whether it runs on a Ray cluster, and its nodes, when its snapshot says so (``ray``, ``nodes``)."""
    ray = snapshot.get("ray")
    nodes = snapshot.get("nodes")
    if not ray and not nodes:
        return None
    info = dict(ray) if isinstance(ray, Mapping) else {"enabled": bool(ray)}
    if nodes is not None and "nodes" not in info:
        info["nodes"] = nodes
    return info


def _stopped_since_last_answer(facts: DaemonFacts) -> bool:
    """Whether the fleet stopped it on purpose after its last good snapshot (one that came after the stop
    says someone started it again)."""
    if facts.stopped_at is None:
        return False
    return facts.received_wall is None or facts.received_wall <= facts.stopped_at


def daemon_entry(
    facts: DaemonFacts, now: float, stale_after_secs: float, wall_now: float | None = None
) -> dict[str, Any]:
    """One daemon in ``GET /fleet/status``: health, its last snapshot whole, when it came, and its row.

    ``wall_now`` (Unix time, default: the last error's own time) dates the last error: every error shown
    carries its age, so an error of minutes ago never reads as news."""
    state = health(facts, now, stale_after_secs)
    age = None if facts.received_at is None else max(0.0, now - facts.received_at)
    snapshot = dict(facts.snapshot) if facts.snapshot is not None else None
    summary = summarize(snapshot, facts.cost_per_hour) if snapshot is not None else None
    live_rate = summary["proofs_per_hour"] if summary is not None and state == "up" else None
    return {
        "name": facts.name,
        "where": facts.where,
        "health": state,
        "reachable": state in ("up", "stale"),
        "fresh": state == "up",
        "feed": facts.feed if state == "up" else None,
        "snapshot_age_secs": age,
        "snapshot_received_at": facts.received_wall,
        "failures": facts.failures,
        "last_error": facts.last_error,
        "last_error_at": facts.last_error_wall,
        "last_error_age_secs": _age(facts.last_error_wall, wall_now),
        "cost_per_hour": facts.cost_per_hour,
        "deploy_dir": facts.deploy_dir or None,
        "stopped_at": facts.stopped_at if state == "stopped" else None,
        "stopped_secs_ago": _age(facts.stopped_at, wall_now) if state == "stopped" else None,
        "summary": summary,
        "break_even": break_even(facts.cost_per_hour, facts.price_per_proof, live_rate),
        "following": {
            "status_fetches": facts.status_fetches,
            "status_not_modified": facts.status_not_modified,
            "status_bytes": facts.status_bytes,
        },
        "snapshot": snapshot,
    }


def break_even(
    cost_per_hour: float | None, price_per_proof: float | None, measured: float | None
) -> dict[str, Any] | None:
    """The proofs per hour that pay ``cost_per_hour`` at ``price_per_proof``, the ``measured`` rate (None
    when there is no live one) and whether it reaches them; None unless both prices are known."""
    if cost_per_hour is None or price_per_proof is None or price_per_proof <= 0:
        return None
    needed = cost_per_hour / price_per_proof
    return {
        "price_per_proof": price_per_proof,
        "proofs_per_hour_needed": needed,
        "proofs_per_hour": measured,
        "reached": None if measured is None else measured >= needed,
    }


def _age(at: float | None, now: float | None) -> float | None:
    if at is None:
        return None
    return max(0.0, (at if now is None else now) - at)


def machine_of(snapshot: Mapping[str, Any]) -> dict[str, Any] | None:
    """The machine a snapshot says its daemon runs on (``machine``), or None (a daemon from before)."""
    machine = snapshot.get("machine")
    if not isinstance(machine, Mapping) or not machine.get("machine_id"):
        return None
    return {k: machine.get(k) for k in ("hostname", "machine_id", "memory_bytes", "cpus")}


def machines(counted: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The machines of the counted daemons: each once, with its daemons, its memory, and the sum of their
    budgets (more than the machine has: ``overcommitted``). A daemon that does not say its machine is a
    machine of its own."""
    found: dict[str, dict[str, Any]] = {}
    for e in counted:
        summary = e["summary"]
        machine = summary.get("machine") or {"machine_id": f"daemon:{e['name']}", "hostname": e["name"]}
        entry = found.setdefault(str(machine["machine_id"]), {
            "machine_id": machine["machine_id"], "hostname": machine.get("hostname"),
            "memory_bytes": machine.get("memory_bytes"), "daemons": [], "budgets_bytes": 0, "used_bytes": 0,
        })  # fmt: skip
        entry["daemons"].append(e["name"])
        entry["budgets_bytes"] += int(summary["memory_total_bytes"])
        entry["used_bytes"] += int(summary["memory_used_bytes"])
    for entry in found.values():
        physical = entry["memory_bytes"]
        entry["overcommitted"] = physical is not None and entry["budgets_bytes"] > int(physical)
        # What the machine can give its daemons: their budgets, but never more than it has.
        entry["memory_total_bytes"] = entry["budgets_bytes"] if physical is None else min(
            entry["budgets_bytes"], int(physical)
        )  # fmt: skip
    return list(found.values())


def fleet_totals(entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Totals over the ``up`` daemons; the others are named, never added as zeros. Memory is summed per
    machine, not per daemon: two daemons on one machine share its memory, and their budgets together never
    count for more than the machine has (``machines`` says which machines are overcommitted)."""
    counted = [e for e in entries if e["health"] == "up" and e["summary"] is not None]
    keys = ("devices", "devices_busy", "devices_idle", "workers", "workers_proving", "jobs_running",
            "queue_depth", "device_queue_depth", "memory_reserved_bytes", "memory_used_bytes")  # fmt: skip
    totals: dict[str, Any] = {key: sum(int(e["summary"][key]) for e in counted) for key in keys}
    per_machine = machines(counted)
    totals["machines"] = per_machine
    totals["memory_total_bytes"] = sum(m["memory_total_bytes"] for m in per_machine)
    pph = sum(float(e["summary"]["proofs_per_hour"]) for e in counted)
    costs = [e["cost_per_hour"] for e in entries if e["cost_per_hour"] is not None]
    cost = sum(costs) if costs else None  # every declared machine costs money, reachable or not
    totals.update(
        daemons=len(entries),
        reachable=sum(1 for e in entries if e["reachable"]),
        counted=[e["name"] for e in counted],
        not_counted=[e["name"] for e in entries if e["name"] not in {c["name"] for c in counted}],
        proofs_per_hour=pph,
        cost_per_hour=cost,
        cost_per_proof=_per_proof(cost, pph),
        cost_declared_by=[e["name"] for e in entries if e["cost_per_hour"] is not None],
    )
    prices = [e["break_even"]["price_per_proof"] for e in entries if e.get("break_even")]
    # The whole fleet pays for itself when the up daemons' proofs pay every declared cost (a machine that is
    # down still costs money); unknown while any daemon with a cost is not up.
    measured = pph if all(e["health"] == "up" for e in entries if e.get("break_even")) else None
    totals["break_even"] = break_even(cost, prices[0], measured) if prices else None
    return totals


def _per_proof(cost_per_hour: float | None, pph: float) -> float | None:
    if cost_per_hour is None or pph <= 0:
        return None
    return cost_per_hour / pph


# --- Prometheus ----------------------------------------------------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(.*)$")


def relabel_metrics(texts: Iterable[tuple[str, str]]) -> str:
    """Merge several daemons' Prometheus texts into one, each sample labelled ``daemon="<name>"``.

    ``texts`` holds (daemon name, its ``/metrics`` text). One ``# HELP``/``# TYPE`` per family is kept (the
    first seen); the samples of a family stay together, as the text format requires.
    """
    families: dict[str, list[str]] = {}
    headers: dict[str, list[str]] = {}
    for name, text in texts:
        family = ""
        for line in text.splitlines():
            if line.startswith("# HELP ") or line.startswith("# TYPE "):
                family = line.split()[2]
                families.setdefault(family, [])
                kept = headers.setdefault(family, [])
                if not any(h.split()[1] == line.split()[1] for h in kept):
                    kept.append(line)
                continue
            match = _SAMPLE.match(line)
            if line.startswith("#") or match is None:
                continue
            metric, labels, rest = match.groups()
            inner = labels[1:-1] if labels else ""
            label = f'daemon="{_escape(name)}"' + (f",{inner}" if inner.strip() else "")
            families.setdefault(family or metric, []).append(f"{metric}{{{label}}} {rest}")
    out: list[str] = []
    for family, samples in families.items():
        out += headers.get(family, [])
        out += samples
    return "\n".join(out) + ("\n" if out else "")


def fleet_metrics(entries: Sequence[Mapping[str, Any]]) -> str:
    """The fleet's own gauges per daemon: up, snapshot age, proofs per hour, cost per hour."""
    lines: list[str] = []

    def family(metric: str, help_text: str, values: list[tuple[str, float | None]]) -> None:
        lines.extend([f"# HELP {metric} {help_text}", f"# TYPE {metric} gauge"])
        for name, value in values:
            if value is not None and math.isfinite(value):
                lines.append(f'{metric}{{daemon="{_escape(name)}"}} {value!r}')

    family("prooflane_fleet_daemon_up", "1 when the daemon answered within stale_after_secs, else 0.",
           [(e["name"], 1.0 if e["health"] == "up" else 0.0) for e in entries])  # fmt: skip
    family("prooflane_fleet_snapshot_age_seconds", "Seconds since the daemon's last good snapshot.",
           [(e["name"], e["snapshot_age_secs"]) for e in entries])  # fmt: skip
    family("prooflane_fleet_proofs_per_hour", "Proofs per hour over the last 10 minutes (up only).",
           [(e["name"], e["summary"]["proofs_per_hour"] if e["health"] == "up" else None)
            for e in entries])  # fmt: skip
    family("prooflane_fleet_cost_per_hour", "What the daemon's machine costs per hour, as declared.",
           [(e["name"], e["cost_per_hour"]) for e in entries])  # fmt: skip
    family("prooflane_fleet_proofs_per_hour_needed",
           "Proofs per hour that pay the daemon's cost_per_hour at the fleet's price_per_proof.",
           [(e["name"], (e.get("break_even") or {}).get("proofs_per_hour_needed"))
            for e in entries])  # fmt: skip
    for name, help_text in (
        ("status_fetches", "GET /status answers from the daemon since the fleet started."),
        ("status_not_modified", "Of those, the 304s: nothing but the clock had moved."),
        ("status_bytes", "Bytes those answers carried, as sent (gzipped)."),
    ):
        metric = f"prooflane_fleet_{name}_total"
        lines.extend([f"# HELP {metric} {help_text}", f"# TYPE {metric} counter"])
        lines += [f'{metric}{{daemon="{_escape(e["name"])}"}} {e["following"][name]}' for e in entries]
    return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
