"""A key's fixed-base tables built and stored beside the daemon (``msm_tables = "auto"``):
``python -m prooflane.devices.table_builder KEY DAEMON_PID``.

One process a key, started by the engine once the key is first proven, at the lowest priority (nice 19:
it takes what the workers leave idle), on every core; it ends with the daemon. It maps the tables already
stored for the key, or builds and stores them (``groth16.preload(..., tables=True)``, under the store's
lock: a worker or another daemon building them at once waits for one build), and prints one JSON line:
``{"sections": [...], "bytes": N, "built": bool, "secs": s}``. A failure exits non-zero with one line on
standard error, a folder where the tables could not be stored among them: the workers map only stored
tables, so tables this process would keep in memory alone are of no use to them (it looks before it
builds, and once more after).
"""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING

from .in_child import exit_with
from .roles import Role

if TYPE_CHECKING:
    from ..groth16 import ProvingKey

__all__ = ["main"]

NICENESS = 19


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: python -m prooflane.devices.table_builder KEY DAEMON_PID", file=sys.stderr)
        return 2
    exit_with(int(argv[1]), niceness=NICENESS, name=Role.TABLES)
    from ..groth16 import preload, read_zkey
    from ..groth16.prover import BASES, key_table_bytes, tables_not_storable, tabulated

    started = time.perf_counter()
    try:
        key = read_zkey(argv[0])
        wanted = set(_tabled(key))
        preload(key, BASES, tables=None)  # the stored ones, when they are
        built = set(tabulated(key, stored=True)) != wanted
        if built:
            if (why := tables_not_storable()) is not None:
                print(why, file=sys.stderr)
                return 1
            preload(key, BASES, tables=True)
    except Exception as exc:  # one line for the daemon's log, whatever went wrong
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    sections = list(tabulated(key, stored=True))
    if set(sections) != wanted:  # built, but a write failed (a full disk, say)
        missing = ", ".join(sorted(wanted - set(sections)))
        print(f"built, but not stored ({missing}): {tables_not_storable() or 'the write failed'}",
              file=sys.stderr)  # fmt: skip
        return 1
    nbytes = key_table_bytes(key.curve, key.n_vars, key.n_public, key.domain_size, tuple(sections))
    secs = round(time.perf_counter() - started, 3)
    print(json.dumps({"sections": sections, "bytes": nbytes, "built": built, "secs": secs}), flush=True)
    return 0


def _tabled(key: ProvingKey) -> list[str]:
    """The sections of ``key`` that have tables at all (one too short to fill a window has none)."""
    from ..groth16.prover import BASES, key_table_bytes

    shape = (key.curve, key.n_vars, key.n_public, key.domain_size)
    return [name for name in BASES if key_table_bytes(*shape, (name,))]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
