"""Fixed-base tables by default (``msm_tables = "auto"``): built in the background once a key is proven,
used by every cpu worker from its next partition, where they fit.

A key's tables (about ten times its bases; the MSMs of a warm partition 1.2x faster, docs/groth16.md) cost a
build of seconds to minutes, once a machine: too long to hold up a key's first partition, and too much
memory for every key of every daemon. So, with ``auto``:

- the first time a cpu worker takes a partition of a key, the key is looked at once: its tables are used
  only when every cpu worker's copy (each counted, as key rows are) fits in a quarter of the memory
  budget, and a partition, the key and its tables fit in half of it; and only where tables can be stored
  on disk (``$PROOFLANE_TABLES`` not set empty, its folder writable: workers map only stored tables).
  Otherwise the log says why, and the key proves without;
- an eligible key's tables are built by one process of their own (:mod:`prooflane.devices.table_builder`,
  nice 19: the workers' idle time), or found already stored (a restart, another daemon, ``prooflane prove
  --msm-tables``) in a few milliseconds; the key proves without them meanwhile;
- once they are stored, each cpu worker's next partition of the key takes its allocation again with the
  tables' bytes (``key+tables:<key>@<worker>`` in ``/status`` and the dashboard's cached keys) and maps them
  (``DeviceWorker.map_tables``). Only when those bytes fit then, without waiting: else the worker proves
  without, and tries again at its next partition. An eviction drops the tables with the key.

``msm_tables = true`` (tables built by each worker's first load of a key, counted up front) and ``false``
are unchanged; :func:`counted_up_front` is the one test of which mode counts them at admission.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
from typing import TYPE_CHECKING

from .. import events as ev
from ..config import Config
from ..groth16.prover import tables_folder, tables_not_storable
from ..kinds import CircuitMeta

if TYPE_CHECKING:
    from .pipeline import Pipeline

__all__ = ["AUTO", "KeyTables", "counted_up_front"]

log = logging.getLogger("prooflane.engine")

AUTO = "auto"
BUDGET_SHARE = 4
"""Every cpu worker's tables of a key within 1/BUDGET_SHARE of the memory budget (``auto``)."""
BUILDER = ("-m", "prooflane.devices.table_builder")
"""The builder's command after the interpreter: it is given the key's path and the daemon's pid."""


def counted_up_front(config: Config) -> bool:
    """Whether a key's tables are in each worker's key allocation from the start (``msm_tables = true``:
    admission and headroom count them); with ``auto`` they are added later, only where they fit."""
    return config.msm_tables is True


class KeyTables:
    """Which keys' tables are stored (``auto``), each looked at once and built at most once a daemon."""

    def __init__(self, pipeline: Pipeline) -> None:
        self._pipeline = pipeline
        cfg = pipeline.config
        self.auto = cfg.msm_tables == AUTO and not cfg.ray.address
        self._workers = sum(1 for d in cfg.devices if d.startswith("cpu")) * cfg.workers_per_device
        self._state: dict[str, ev.TablesState] = {}  # key path -> what is known of its tables

    def may_use(self, meta: CircuitMeta) -> bool:
        """Whether a cpu worker may keep the key's tables: ``msm_tables = true``, or ``auto`` and the key
        eligible (what ``GET /v1/kinds`` counts in ``proving_key_bytes``)."""
        if counted_up_front(self._pipeline.config):
            return True
        known = self._state.get(meta.key_path)
        return self.auto and known is not ev.TablesState.UNUSED and self._not_used(meta) is None

    def stored(self, meta: CircuitMeta) -> bool:
        """Whether the key's tables are stored for the workers to map (``auto``)."""
        return self._state.get(meta.key_path) is ev.TablesState.STORED

    def want(self, meta: CircuitMeta) -> None:
        """A cpu worker is about to prove the key: look at it, the first time, and start its build."""
        if not self.auto or meta.key_path in self._state:
            return
        why = self._not_used(meta) or tables_not_storable()
        if why is not None:
            self._set(meta, ev.TablesState.UNUSED, reason=why)
            log.info("msm tables of %s: not used (%s)", meta.key_name, why,
                     extra={"key": meta.key_name, "reason": why})  # fmt: skip
            return
        self._set(meta, ev.TablesState.BUILDING)
        self._pipeline.spawn(self._build(meta), f"tables of {meta.key_name}")

    def _set(self, meta: CircuitMeta, state: ev.TablesState, *, nbytes: int = 0, reason: str = "") -> None:
        """The one way a key's state changes: here and in the live view (``/status``'s ``tables``) at once."""
        self._state[meta.key_path] = state
        self._pipeline.post(
            ev.TablesChanged(at=self._pipeline.clock(), key=meta.key_name, state=state.value, nbytes=nbytes,
                             reason=reason)
        )  # fmt: skip

    def _not_used(self, meta: CircuitMeta) -> str | None:
        tables, total = meta.table_alloc_bytes, self._pipeline.budget.total
        if tables == 0:
            return "this curve's arithmetic keeps none"
        if tables_folder() is None:
            return tables_not_storable()  # says so, touching no folder
        if self._workers * tables > total // BUDGET_SHARE:
            return (
                f"{self._workers} cpu workers x {_mib(tables)} of tables is more than a quarter of the "
                f"memory budget ({_mib(total)})"
            )
        if meta.partition_bytes + meta.worker_key_bytes(True) > total // 2:
            return (
                f"a partition, the key and its tables need more than half the memory budget ({_mib(total)})"
            )
        return None

    async def _build(self, meta: CircuitMeta) -> None:
        started = time.monotonic()
        log.info("msm tables of %s: looked for, or built in the background (%s)", meta.key_name,
                 _mib(meta.table_alloc_bytes), extra={"key": meta.key_name})  # fmt: skip
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable, *BUILDER, meta.key_path, str(os.getpid()),
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
        except OSError as exc:
            self._failed(meta, f"could not start its builder: {exc}")
            return
        try:
            out, err = await process.communicate()
        finally:
            if process.returncode is None:  # the daemon stops: the build ends with it
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        took = time.monotonic() - started
        if (stop := _stopped_by(process.returncode)) is not None:  # a stop of the daemon's process group
            self._set(meta, ev.TablesState.UNUSED, reason=f"the build was stopped by {stop}")
            log.info("msm tables of %s: the build was stopped by %s; the key proves without them",
                     meta.key_name, stop, extra={"key": meta.key_name, "reason": stop})  # fmt: skip
            return
        try:
            report = json.loads(out.decode().strip().splitlines()[-1]) if process.returncode == 0 else None
        except (ValueError, IndexError):
            report = None
        if report is None:
            said = err.decode(errors="replace").strip().splitlines()
            self._failed(meta, said[-1] if said else f"exit status {process.returncode}")
            return
        self._set(meta, ev.TablesState.STORED, nbytes=int(report["bytes"]))
        how = f"built in {took:.1f} s" if report["built"] else "found stored"
        log.info(
            "msm tables of %s: %s (%s); cpu workers map them from their next partition", meta.key_name, how,
            _mib(int(report["bytes"])),
            extra={"key": meta.key_name, "built": bool(report["built"]), "secs": round(took, 3),
                   "bytes": int(report["bytes"])},
        )  # fmt: skip
        self._pipeline.kick.set()

    def _failed(self, meta: CircuitMeta, reason: str) -> None:
        self._set(meta, ev.TablesState.UNUSED, reason=f"the build failed: {reason}")
        log.warning("msm tables of %s: the build failed (%s); the key proves without them", meta.key_name,
                    reason, extra={"key": meta.key_name, "reason": reason})  # fmt: skip


def _stopped_by(returncode: int | None) -> str | None:
    """The signal's name when a builder ended by SIGTERM or SIGINT: a stop asked for (``kill -TERM -PGID``
    can reach it before it leaves them to the daemon), not a failure."""
    if returncode is not None and -returncode in (signal.SIGTERM, signal.SIGINT):
        return signal.Signals(-returncode).name
    return None


def _mib(nbytes: int) -> str:
    return f"{nbytes / (1 << 20):,.0f} MiB"
