"""The folders of shared-memory files where a daemon keeps its synthesized partitions for its workers
(:mod:`prooflane.devices.parcel`): their names, the bytes they hold, and their removal once their daemon has
ended.

Each folder is ``/dev/shm/prooflane-parcels-<pid>-<random>``, ``pid`` the daemon's: whatever reads the
daemon's memory (:mod:`prooflane.status.rss`) finds its folders by that name, and a new daemon removes the
folders of one that ended without removing its own (killed by SIGKILL).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import psutil

__all__ = ["SHARED_ROOT", "parked_bytes", "shared_folder", "sweep"]

SHARED_ROOT = Path("/dev/shm")
"""Where the folders are made (memory, not disk)."""
_PREFIX = "prooflane-parcels-"


def shared_folder(root: Path = SHARED_ROOT) -> str | None:
    """A new folder for this process's parcels under ``root``, after removing those of ended processes;
    None when ``root`` cannot hold one (then parcels travel inline)."""
    try:
        sweep(root)
        return tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-", dir=root)
    except OSError:
        return None


def parked_bytes(pid: int, root: Path = SHARED_ROOT) -> int:
    """Bytes of the parcels of process ``pid``'s folders (memory that is no process's resident set until a
    worker maps it)."""
    total = 0
    for folder in root.glob(f"{_PREFIX}{pid}-*"):
        try:
            total += sum(entry.stat().st_size for entry in os.scandir(folder))
        except OSError:
            continue  # removed while read
    return total


def sweep(root: Path = SHARED_ROOT) -> list[Path]:
    """Remove the folders of parcels whose process has ended; the folders removed."""
    removed = []
    for folder in root.glob(f"{_PREFIX}*"):
        pid = folder.name[len(_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed
