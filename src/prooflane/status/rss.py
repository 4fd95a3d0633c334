"""The memory the daemon's processes hold: its own resident set, and that of its whole process tree.

The daemon proves in child processes (workers, finalizers, the synthesis pool), so its own RSS says little
about what proving costs the machine; the tree's RSS (the daemon and every descendant, summed) does. Walking
the tree reads every process of the machine, so it is sampled at most once a second of the tracker's clock,
and only at a new ``seq``: two reads of the same ``seq`` give the same figure (a snapshot is a function of its
``seq`` but for the moment it was read: ``taken_at``, ``uptime_secs``, ages, the daemon's own RSS).
"""

from __future__ import annotations

import functools
import os
import socket
from dataclasses import dataclass
from pathlib import Path

import psutil

from ..shm import parked_bytes
from .snapshot import MachineStatus

__all__ = ["TREE_SAMPLE_SECS", "ProcessMemory", "RssSample", "this_machine"]

TREE_SAMPLE_SECS = 1.0
"""The least time between two walks of the process tree (seconds of the tracker's clock)."""


@dataclass(frozen=True, slots=True)
class RssSample:
    """Resident bytes: the daemon's own process, and the daemon with all its descendants."""

    process: int
    tree: int


class ProcessMemory:
    """Samples the RSS of this process and of its process tree (see the module's docstring)."""

    def __init__(self) -> None:
        self._process = psutil.Process()
        self._tree: tuple[int, float, int] | None = None  # (seq, when, bytes) of the last walk

    def sample(self, now: float, seq: int) -> RssSample:
        """The daemon's RSS now, and its tree's as of the last walk (walked again if due)."""
        own = self._process.memory_info().rss
        kept = self._tree
        if kept is None or (kept[0] != seq and now - kept[1] >= TREE_SAMPLE_SECS):
            kept = self._tree = (seq, now, own + self._descendants())
        elif kept[0] != seq:  # a new seq within the second: it shows the last walk, and keeps showing it
            kept = self._tree = (seq, kept[1], kept[2])
        return RssSample(own, kept[2])

    def _descendants(self) -> int:
        """The RSS of every descendant process, summed (one that ends while it is read counts nothing), and
        the daemon's synthesized partitions in shared memory (:mod:`prooflane.shm`), which are in no
        process's RSS while they wait for a worker."""
        total = parked_bytes(self._process.pid)
        for child in self._process.children(recursive=True):
            try:
                total += child.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return total


@functools.cache
def this_machine() -> MachineStatus:
    """This machine, read once: its names, memory and cores."""
    hostname = socket.gethostname()
    machine_id = hostname
    for path in (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id")):
        try:
            machine_id = path.read_text().strip() or machine_id
            break
        except OSError:
            continue
    return MachineStatus(hostname, machine_id, psutil.virtual_memory().total, os.cpu_count() or 1)
