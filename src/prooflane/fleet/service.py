"""The fleet service: many daemons, one page. A client of each daemon's HTTP API, nothing more.

``prooflane fleet --config fleet.toml`` follows every daemon in the config, each with its own task: the task
fetches ``/status`` every ``poll_secs`` and at once whenever the daemon's event stream (``/v1/events``) says
something happened (at most every ``_MIN_FETCH_GAP_SECS``); without an event stream it simply polls. Every
request is bounded by ``timeout_secs``; failures back off (doubling from ``poll_secs`` up to
``backoff_max_secs``) and the next success resets that. A slow or hung daemon therefore only ever holds its
own task: the fleet's answers are built from what each task last stored, and never wait on a daemon.

The fleet watches and manages (it deploys, stops and restarts daemons on their hosts over SSH:
:mod:`.deploy`); it does not schedule. Pooling machines into one engine is the Ray backend's
job; the fleet only shows which daemons are Ray-backed and their nodes, when their ``/status`` says so.

Here: :class:`Fleet` (the daemons followed, added and removed, the config saved); following one daemon is
:mod:`.follower`, the HTTP side and :func:`~.app.run_fleet` :mod:`.app`. See docs/fleet.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from .._version import __version__
from .config import DaemonSpec, FleetConfig
from .follower import DaemonFollower
from .ssh import SshTunnels
from .view import DaemonFacts, daemon_entry, fleet_metrics, fleet_totals, relabel_metrics

__all__ = ["Fleet", "FleetConflict"]

log = logging.getLogger("prooflane.fleet")


class FleetConflict(Exception):
    """Raised when a daemon is added under a name the fleet already has."""


class Fleet:
    """The daemons being followed, in config order; adds and removes them, saving the config file."""

    def __init__(
        self,
        config: FleetConfig,
        config_path: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.config_path = config_path
        self.clock = clock
        self.tunnels = SshTunnels(config.timeout_secs, known_hosts_file=config.ssh_known_hosts_file)
        self.followers: dict[str, DaemonFollower] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.closing = asyncio.Event()
        # Daemons a deploy, stop or restart is under way for (one at a time each; only the loop touches it).
        self.operations: set[str] = set()
        # Daemons the fleet stopped on purpose (fleet stop), and when (Unix time): shown as "stopped" until
        # a deploy or restart, or until they answer again. Only the loop touches it.
        self.stopped: dict[str, float] = {}

    async def start(self) -> None:
        """Start one task per configured daemon."""
        for spec in self.config.daemons:
            self._spawn(spec)

    async def close(self) -> None:
        """Stop every follower and end the SSH tunnels."""
        self.closing.set()
        for name in list(self._tasks):
            await self._stop(name)
        await self.tunnels.close()

    async def add(self, spec: DaemonSpec) -> None:
        """Follow one more daemon and save the config; :class:`FleetConflict` when the name is taken."""
        daemons = self._daemons_on_disk()
        if spec.name in self.followers or any(d.name == spec.name for d in daemons):
            raise FleetConflict(f"a daemon named {spec.name!r} is already in the fleet")
        self._save((*daemons, spec))

    async def put(self, spec: DaemonSpec) -> None:
        """Follow ``spec`` and save the config, in place of a daemon of the same name if there is one (its
        follower is started again with the new spec; a new name goes last)."""
        daemons = self._daemons_on_disk()
        if spec.name in self.followers:
            await self._stop(spec.name)
        if any(d.name == spec.name for d in daemons):
            self._save(tuple(spec if d.name == spec.name else d for d in daemons))
        else:
            self._save((*daemons, spec))

    async def remove(self, name: str) -> bool:
        """Stop following ``name`` and save the config; False when there is no such daemon."""
        if name not in self.followers:
            return False
        spec = self.followers[name].spec
        self._save(tuple(d for d in self._daemons_on_disk() if d.name != name))
        await self._stop(name)
        if spec.ssh:
            await self.tunnels.forget(spec)
        return True

    def status(self, *, snapshots: bool = True) -> dict[str, Any]:
        """``GET /fleet/status``: every daemon's entry and the fleet's totals, from stored facts only.
        Without ``snapshots``, the entries leave out the daemons' whole snapshots (the page needs rows)."""
        entries = self.entries()
        if not snapshots:
            entries = [{k: v for k, v in e.items() if k != "snapshot"} for e in entries]
        return {
            "version": __version__,
            "taken_at": time.time(),
            "stale_after_secs": self.config.stale_after_secs,
            "daemons": entries,
            "totals": fleet_totals(entries),
        }

    def entries(self) -> list[dict[str, Any]]:
        """One entry per daemon, in config order."""
        now, wall = self.clock(), time.time()
        stale_after = self.config.stale_after_secs
        return [daemon_entry(self._facts(f), now, stale_after, wall) for f in self.followers.values()]

    def _facts(self, follower: DaemonFollower) -> DaemonFacts:
        facts = follower.facts()
        stopped = self.stopped.get(follower.spec.name)
        return facts if stopped is None else dataclasses.replace(facts, stopped_at=stopped)

    async def metrics(self) -> str:
        """Every reachable daemon's ``/metrics`` labelled by daemon, then the fleet's own gauges."""
        entries = self.entries()
        up = [self.followers[e["name"]] for e in entries if e["health"] == "up"]
        answers = await asyncio.gather(*(f.get("/metrics") for f in up), return_exceptions=True)
        texts = [
            (f.spec.name, a.text)
            for f, a in zip(up, answers, strict=True)
            if isinstance(a, httpx.Response) and a.status_code == 200
        ]
        return relabel_metrics(texts) + fleet_metrics(entries)

    def health(self) -> dict[str, Any]:
        """``GET /healthz``: the fleet service runs; how many daemons answer."""
        entries = self.entries()
        return {
            "ok": True,
            "version": __version__,
            "daemons": len(entries),
            "reachable": sum(1 for e in entries if e["reachable"]),
            "up": sum(1 for e in entries if e["health"] == "up"),
            "unreachable": [e["name"] for e in entries if not e["reachable"]],
            "ssh_masters": self.tunnels.masters(),
        }

    def _spawn(self, spec: DaemonSpec) -> None:
        follower = DaemonFollower(spec, self.config, self.tunnels, self.clock)
        self.followers[spec.name] = follower
        self._tasks[spec.name] = asyncio.create_task(follower.run(), name=f"fleet:{spec.name}")

    async def _stop(self, name: str) -> None:
        task = self._tasks.pop(name)
        follower = self.followers.pop(name, None)
        task.cancel()
        if follower is not None:
            follower.notify()  # ends the dashboard event streams that follow it
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def _daemons_on_disk(self) -> tuple[DaemonSpec, ...]:
        """The daemons the config file lists now (a daemon added there by hand since the start included);
        without a file, the ones followed."""
        if self.config_path is None:
            return self.config.daemons
        return FleetConfig.load(self.config_path).daemons

    def _save(self, daemons: tuple[DaemonSpec, ...]) -> None:
        """Save ``daemons`` into the config file, keeping the file's other keys as they are there
        (command-line overrides such as ``--port`` are not written), and follow every daemon saved that is
        not followed yet: the one added, and any the file gained by hand."""
        if self.config_path is not None:
            on_disk = FleetConfig.load(self.config_path)
            dataclasses.replace(on_disk, daemons=daemons).save(self.config_path)
        self.config = dataclasses.replace(self.config, daemons=daemons)
        for spec in daemons:
            if spec.name not in self.followers:
                self._spawn(spec)
