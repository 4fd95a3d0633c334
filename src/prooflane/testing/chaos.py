"""A chaos run: a real daemon proves a workload while processes of its tree are killed; then the checks.

One run (:class:`ChaosRun`): start `prooflane serve` (DaemonProcess) on a data folder, submit the workload
(``plan`` of the mix, inline sectors, fixed job ids), kill processes of the daemon's tree at random moments
(:class:`~.faults.FaultInjector`; with ``kill_daemon`` the daemon itself too, restarting it on the
same data folder), sample ``/healthz`` and ``/status`` all along, read every boot's event stream, then
check (:class:`ChaosReport.violations` lists what failed, in words):

- every sample: ``invariants_ok``; every configured device listed; a device without a live worker makes
  ``health`` not ok and is named in ``devices_down``;
- ``/healthz`` never answered 200 after a worker's process was seen dead and before its replacement
  registered (the daemon's own events say when it noticed and when the replacement answered);
- every job done, every partition proof verifies against the kind's verification key (fetched over the API);
- no job reported done twice, no partition reported finished twice (the event streams of every boot);
- the memory budget's reservations back to exactly zero, cached keys only for live workers, health ok;
- no process of the daemon's tree left behind when the daemon ended (stopped, or killed).

Used by ``benchmarks/chaos.py`` (figures) and ``tests/test_chaos.py`` (a small run with a fixed seed).
"""

from __future__ import annotations

import functools
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx

from ..cli.daemon_process import DaemonProcess
from ..cli.workload import DEFAULT_MIX, parse_mix, plan, sector_for
from ..client import Client
from ..errors import DaemonError, DaemonUnreachable, ProoflaneError
from ..models import JobView
from ..states import JobState
from .checks import (
    check_final,
    check_health_after_kills,
    check_reports,
    check_samples,
    live_partitions,
    mark_back_to_work,
)
from .faults import (
    Boot,
    CurrentBoot,
    EventLog,
    Fault,
    FaultInjector,
    ProcessKind,
    Sample,
    daemon_tree,
    kill_and_wait,
    take_sample,
    wait_gone,
)

__all__ = ["DEFAULT_KINDS", "ChaosReport", "ChaosRun", "ChaosSettings"]

T = TypeVar("T")
DEFAULT_KINDS = (
    ProcessKind.FORKSERVER,
    ProcessKind.RESOURCE_TRACKER,
    ProcessKind.SYNTHESIS,
    ProcessKind.PROVER,
)
"""The process kinds a default daemon on cpu devices has (its workers finish and synthesize their own
partitions: no finalizer); a daemon with ``split_prove = true``, or on cuda devices, has finalizers too
(``ProcessKind.FINALIZER``)."""
EXIT_WAIT_SECS = 30.0  # how long the daemon's processes may take to end after it did (else: orphans)
POLL_SECS = 0.25


@dataclass(frozen=True)
class ChaosSettings:
    """What to run: the workload, the faults, and the daemon's extra config (TOML text)."""

    profile: str = "tiny"
    jobs: int = 50
    mix: str = DEFAULT_MIX
    seed: int = 1
    interval: tuple[float, float] = (0.5, 2.5)  # seconds between two faults (drawn uniformly)
    kinds: tuple[ProcessKind, ...] = DEFAULT_KINDS
    quota: int = 0  # faults per kind at most (0: no cap, faults until the queue drained)
    kill_daemon: bool = False
    daemon_kills: int = 3  # with kill_daemon: how many times the daemon itself is killed
    keep_busy: bool = False  # add jobs while some kind has not had its quota of faults
    # Random kills now and then fall on the same partition three times while it computes, which the default
    # max_attempts (3) takes for a partition that kills its process (the daemon cannot tell them apart).
    config: str = "max_attempts = 10\n"
    sample_secs: float = 0.1
    timeout: float = 1800.0  # the whole run, and each wait inside it


@dataclass
class ChaosReport:
    """What a run did and saw; ``violations`` empty means every check held."""

    settings: ChaosSettings
    faults: list[Fault]
    jobs: dict[str, str]  # job id -> final state
    kinds: dict[str, str]  # job id -> proof kind
    partitions: int
    verified_partitions: int
    partitions_retried: int
    drain_secs: float
    boots: int
    samples: int
    unseen_done: int  # jobs whose "job done" event was lost with a killed daemon's stream
    retried: dict[str, list[str]] = field(default_factory=dict)  # "job/index" -> why each retry was
    healthz_secs: list[float] = field(default_factory=list)  # how long each answered /healthz took
    crashed_boots: set[int] = field(default_factory=set)  # boots whose daemon exited by itself
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every check held."""
        return not self.violations

    def healthz_ms(self) -> dict[str, float]:
        """How long /healthz took to answer while faults were injected: median, 99th percentile, most."""
        ms = sorted(1000 * x for x in self.healthz_secs)
        if not ms:
            return {}
        return {"p50": ms[len(ms) // 2], "p99": ms[min(len(ms) - 1, int(len(ms) * 0.99))], "max": ms[-1]}

    def by_kind(self) -> list[dict[str, Any]]:
        """Per process kind: faults injected, survived, and the seconds until the daemon was healthy again."""
        rows = []
        for kind in dict.fromkeys(f.kind for f in self.faults):
            faults = [f for f in self.faults if f.kind is kind]
            back = [f.recovered_at - f.dead_at for f in faults if f.recovered_at is not None]
            survived = [
                f
                for f in faults
                if (
                    f.recovered_at is not None
                    if kind is ProcessKind.DAEMON
                    else f.boot not in self.crashed_boots
                )
            ]
            rows.append(
                {
                    "kind": kind.value,
                    "injected": len(faults),
                    "survived": len(survived),
                    "back_to_work_mean_secs": sum(back) / len(back) if back else None,
                    "back_to_work_max_secs": max(back) if back else None,
                    "back_to_work_seen": len(back),
                }
            )
        return rows

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        s = self.settings
        return {
            "settings": {
                "profile": s.profile, "jobs": s.jobs, "mix": s.mix, "seed": s.seed,
                "interval_secs": list(s.interval), "kinds": [k.value for k in s.kinds], "quota": s.quota,
                "kill_daemon": s.kill_daemon, "daemon_kills": s.daemon_kills, "config": s.config,
            },
            "faults_by_kind": self.by_kind(),
            "faults": [
                {"kind": f.kind.value, "pid": f.pid, "boot": f.boot, "at_secs": f.at - self.faults[0].at,
                 "back_to_work_secs": None if f.recovered_at is None else f.recovered_at - f.dead_at}
                for f in self.faults
            ],
            "jobs": len(self.jobs),
            "jobs_done": sum(state == "done" for state in self.jobs.values()),
            "partitions": self.partitions,
            "verified_partitions": self.verified_partitions,
            "partitions_retried": self.partitions_retried,
            "drain_secs": self.drain_secs,
            "boots": self.boots,
            "samples": self.samples,
            "unseen_done": self.unseen_done,
            "retried_more_than_once": {k: v for k, v in self.retried.items() if len(v) > 1},
            "healthz_ms": self.healthz_ms(),
            "violations": self.violations,
            "ok": self.ok,
        }  # fmt: skip


class ChaosRun:
    """One chaos run on ``data_dir`` (created; dev keys already there are reused)."""

    def __init__(self, settings: ChaosSettings, data_dir: Path) -> None:
        self.settings = settings
        self.data_dir = Path(data_dir)
        self._current = CurrentBoot()
        self._daemons: list[DaemonProcess] = []
        self._logs: list[EventLog] = []
        self._clients: dict[int, Client] = {}
        self._daemon_kills_wall: list[float] = []  # Unix time of each kill of the daemon
        self._violations: list[str] = []
        self._live = True  # jobs still running (faults are injected only then)
        self._probes: dict[int, httpx.Client] = {}
        self._crashed: set[int] = set()  # boots whose daemon exited without being told to

    # -- the run --------------------------------------------------------------------------------------

    def run(self) -> ChaosReport:
        """Run the workload under faults, check everything, stop the daemon; return the report."""
        from .faults import Sampler

        s = self.settings
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._config_file().write_text(s.config)
        self._boot()
        sampler = Sampler(self._current, s.sample_secs)
        sampler.start()
        injector: FaultInjector | None = None
        try:
            started = time.time()
            ids = self._submit(plan(s.jobs, parse_mix(s.mix)), first=0)
            injector = self._injector()
            injector.start()
            ids = self._drain(ids, injector)
            self._live = False
            injector.stop()
            drained = self._drain_end(ids) - started
            final = self._settle()
            sampler.stop()
            return self._report(ids, injector.faults, sampler.samples, final, drained)
        finally:
            self._live = False
            if injector is not None:
                injector.stop()
            sampler.stop()
            self._end()

    def _injector(self) -> FaultInjector:
        s = self.settings
        kinds = s.kinds + ((ProcessKind.DAEMON,) if s.kill_daemon else ())
        quota = dict.fromkeys(s.kinds, s.quota) if s.quota else {}
        if s.kill_daemon:
            quota[ProcessKind.DAEMON] = s.daemon_kills
        return FaultInjector(
            self._current, random.Random(s.seed), kinds, s.interval, self._probe, quota=quota,
            active=lambda: self._live, on_daemon=self._kill_daemon,
        )  # fmt: skip

    def _config_file(self) -> Path:
        return self.data_dir.parent / "chaos.toml"

    def _boot(self) -> Boot:
        """Start the daemon (again) on the data folder; start reading its events."""
        index = len(self._daemons)
        daemon = DaemonProcess(
            self.data_dir, profile=self.settings.profile, config_file=self._config_file(),
            log_path=self.data_dir.parent / f"daemon-{index}.log",
        )  # fmt: skip
        self._daemons.append(daemon)
        daemon.start(timeout=self.settings.timeout)
        boot = Boot(index, daemon.url, daemon.pid)
        events = EventLog(boot)
        events.start()
        self._logs.append(events)
        self._current.set(boot)
        return boot

    def _kill_daemon(self, boot: Boot) -> float:
        """SIGKILL the daemon, check that its processes all end by themselves, start it again; return when
        it was seen dead."""
        self._current.set(None)
        tree = [p.pid for p in daemon_tree(boot.pid)]
        self._daemon_kills_wall.append(time.time())
        if not kill_and_wait(boot.pid):
            self._crashed.add(boot.index)
        dead_at = time.monotonic()
        self._check_gone(tree, f"boot {boot.index} killed")
        self._daemons[boot.index].kill()  # reaps it (and would end leftovers, found above)
        self._logs[boot.index].join(EXIT_WAIT_SECS)
        self._boot()
        return dead_at

    def _probe(self, boot: Boot) -> Sample:
        http = self._probes.get(boot.index)
        if http is None:
            http = self._probes[boot.index] = httpx.Client(base_url=boot.url, timeout=10.0)
        return take_sample(boot, http)

    def _client(self) -> Client:
        """A client of the boot running now (waiting while the daemon restarts)."""
        deadline = time.monotonic() + self.settings.timeout
        while (boot := self._current.get()) is None:
            if time.monotonic() > deadline:
                raise ProoflaneError("the daemon did not come back")
            time.sleep(POLL_SECS)
        if not self._daemons[boot.index].running:
            self._crashed.add(boot.index)
            raise ProoflaneError(
                f"the daemon of boot {boot.index} exited by itself; see {self._daemons[boot.index].log_path}"
            )
        client = self._clients.get(boot.index)
        if client is None:
            client = self._clients[boot.index] = Client(boot.url, timeout=30.0)
        return client

    def _call(self, call: Callable[[Client], T]) -> T:
        """``call`` on the current boot's client, again while the daemon is down (it restarts) or answers
        503 (a process it needed for the request died: "try again", as the daemon says)."""
        deadline = time.monotonic() + self.settings.timeout
        while True:
            try:
                return call(self._client())
            except (DaemonUnreachable, DaemonError) as exc:
                if (isinstance(exc, DaemonError) and exc.status != 503) or time.monotonic() > deadline:
                    raise
                time.sleep(POLL_SECS)

    def _submit(self, kinds: list[str], first: int) -> list[str]:
        """Submit one job per kind, with fixed ids (a retry after a daemon restart is the same job)."""
        size = _sector_bytes(self.settings.profile)
        ids = []
        for n, kind in enumerate(kinds, start=first):
            job_id = f"chaos-{self.settings.seed}-{n:04d}"
            sector = sector_for(n, size)
            self._call(functools.partial(Client.submit, kind=kind, sector=sector, job_id=job_id))
            ids.append(job_id)
        return ids

    def _states(self, ids: list[str]) -> dict[str, str]:
        listed = {v.job_id: v.state.value for v in self._jobs(len(ids))}
        return {job_id: listed.get(job_id) or self._job(job_id).state.value for job_id in ids}

    def _jobs(self, count: int) -> list[JobView]:
        return self._call(functools.partial(Client.jobs, limit=count + 100))

    def _job(self, job_id: str) -> JobView:
        return self._call(functools.partial(Client.job, job_id=job_id))

    def _drain(self, ids: list[str], injector: FaultInjector) -> list[str]:
        """Wait until every job ended; with ``keep_busy``, add jobs while the faults are not all done."""
        s = self.settings
        more = iter(plan(10 * s.jobs + 100, parse_mix(s.mix)))
        deadline = time.monotonic() + s.timeout
        while True:
            states = self._states(ids)
            live = [j for j, state in states.items() if not JobState(state).terminal]
            busy = s.keep_busy and not injector.done()
            if busy and len(live) < 2:
                ids += self._submit([next(more)], first=len(ids))
                continue
            if not live and not busy:
                return ids
            if time.monotonic() > deadline:
                self._violations.append(
                    f"the queue did not drain within {s.timeout:g} s: {len(live)} jobs live"
                )
                return ids
            time.sleep(POLL_SECS)

    def _drain_end(self, ids: list[str]) -> float:
        views = [self._job(j) for j in ids]
        return max((v.finished_at or time.time()) for v in views)

    def _settle(self) -> dict[str, Any]:
        """Wait until the daemon is healthy with nothing reserved; return that /status."""
        deadline = time.monotonic() + self.settings.timeout
        while True:
            status = self._call(Client.status)
            healthy = self._call(Client.health)
            if healthy and status["memory"]["reserved_bytes"] == 0 and not live_partitions(status):
                return status
            if time.monotonic() > deadline:
                self._violations.append(
                    f"the daemon did not settle: health {status['health']}, "
                    f"{status['memory']['reserved_bytes']} bytes reserved"
                )
                return status
            time.sleep(POLL_SECS)

    def _end(self) -> None:
        """Stop the last daemon with SIGTERM; check that every process of its tree ended."""
        boot = self._current.get()
        self._current.set(None)
        if boot is not None and self._daemons[boot.index].running:
            tree = [p.pid for p in daemon_tree(boot.pid)]
            os.kill(boot.pid, signal.SIGTERM)
            self._check_gone(tree, f"boot {boot.index} stopped")
        for daemon in self._daemons:
            daemon.stop()
        for log in self._logs:
            log.join(EXIT_WAIT_SECS)
        for client in self._clients.values():
            client.close()
        for http in self._probes.values():
            http.close()

    def _check_gone(self, pids: list[int], what: str) -> None:
        left = wait_gone(pids, EXIT_WAIT_SECS)
        if left:
            self._violations.append(f"{what}: processes {left} still ran {EXIT_WAIT_SECS:g} s later")

    # -- the checks -----------------------------------------------------------------------------------

    def _report(
        self,
        ids: list[str],
        faults: list[Fault],
        samples: list[Sample],
        final: dict[str, Any],
        drained: float,
    ) -> ChaosReport:
        states = self._states(ids)
        kinds = {v.job_id: v.kind for v in self._jobs(len(ids))}
        views = {j: self._job(j) for j in ids}
        probes = [f.probe for f in faults if f.probe is not None]
        everything = sorted([*samples, *probes], key=lambda x: x.asked_at)
        devices = sorted({w["device"] for w in final["workers"]})
        self._logs[-1].wait_for(int(final["seq"]), self.settings.timeout)
        events = [log.events for log in self._logs]
        violations = list(self._violations)
        violations += [f"the daemon of boot {b} exited by itself" for b in sorted(self._crashed)]
        violations += check_samples(everything, devices)
        violations += check_health_after_kills(faults, everything, events)
        unseen, found = check_reports(ids, events, self._daemon_kills_wall, views)
        violations += found
        violations += check_final(final)
        violations += [
            f"job {j} ended {state}: {views[j].error}" for j, state in states.items() if state != "done"
        ]
        verified, bad = self._verify(ids, kinds)
        violations += bad
        violations += [
            f"event stream of boot {log.boot.index} resynced {log.resyncs} times"
            for log in self._logs
            if log.resyncs
        ]
        mark_back_to_work(faults, everything, events)
        retried: dict[str, list[str]] = {}
        for e in (e for log in events for e in log if e["_name"] == "partition_retried"):
            retried.setdefault(f"{e['job_id']}/{e['partition']}", []).append(e["reason"])
        return ChaosReport(
            settings=self.settings, faults=faults, jobs=states, kinds=kinds,
            partitions=sum(v.total_partitions for v in views.values()), verified_partitions=verified,
            partitions_retried=sum(map(len, retried.values())), retried=retried,
            healthz_secs=[x.healthz_secs for x in samples if x.healthz],
            drain_secs=drained, boots=len(self._daemons), samples=len(samples), unseen_done=unseen,
            violations=violations, crashed_boots=set(self._crashed),
        )  # fmt: skip

    def _verify(self, ids: list[str], kinds: dict[str, str]) -> tuple[int, list[str]]:
        """Every done job's partition proofs against its kind's verification key, fetched over the API."""
        from ..groth16 import Proof, VerificationKey, verify
        from ..groth16.proof import parse_public

        keys: dict[str, VerificationKey] = {}
        verified, bad = 0, []
        for job_id in ids:
            kind = kinds[job_id]
            if kind not in keys:
                keys[kind] = VerificationKey.from_json(
                    self._call(functools.partial(Client.verification_key, kind=kind))
                )
            vk = keys[kind]
            try:
                proof = self._call(functools.partial(Client.proof, job_id=job_id))
            except ProoflaneError as exc:
                bad.append(f"job {job_id}: no proof ({exc})")
                continue
            if proof is None:
                bad.append(f"job {job_id}: no proof")
                continue
            for part in proof.partitions:
                public = parse_public(part.public, vk.curve)
                if verify(vk, public, Proof.from_json(part.proof, curve=vk.curve, public=public)):
                    verified += 1
                else:
                    bad.append(f"job {job_id} partition {part.index}: the proof does not verify")
        return verified, bad


def _sector_bytes(profile: str) -> int:
    from ..circuits import profile_by_name

    return profile_by_name(profile).sector_bytes
