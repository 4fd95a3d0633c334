"""What following real daemons costs the fleet, before and after /status was bounded, tagged and gzipped.

Starts ``--daemons`` real ``prooflane serve --profile tiny`` processes (one data folder each, one keys folder
shared, one device with one worker and one synthesis process each: as many as two cores hold), gives each a
busy queue (``--jobs`` snap-update jobs of 16 partitions, so its state moves every few hundred milliseconds),
and follows them from a :class:`prooflane.fleet.Fleet` in this process (``poll_secs`` 1, event streams on, as
deployed), twice for ``--secs`` each, alternating:

- before: each follower fetches ``/status?jobs=1000`` (the whole live view, what ``/status`` answered before
  its bound) with ``Accept-Encoding: identity`` and no ``If-None-Match``, as the fleet did;
- after: the fleet's own follower (``/status`` bounded, gzip, ``If-None-Match``).

Reports the fleet process's CPU per second, the bytes per second it received from the daemons' ``/status`` (as
sent) and how many answers were 304. Prints a table and writes benchmarks/results/bench_fleet_follow.json.
Asserts nothing.

Usage: python benchmarks/bench_fleet_follow.py [--daemons 10] [--jobs 30] [--secs 15]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psutil

from _common import print_table, write_json
from prooflane import Client
from prooflane.cli.daemon_process import DaemonProcess
from prooflane.fleet import follower as follower_module
from prooflane.fleet.config import DaemonSpec, FleetConfig
from prooflane.fleet.service import Fleet

WARMUP_SECS = 3.0


async def _fetch_whole(self: follower_module.DaemonFollower) -> dict[str, Any]:
    """The follower as it was: the whole live view, not compressed, no tag."""
    plain = {"Accept-Encoding": "identity"}
    answer = await self.request("GET", "/status", params={"jobs": "1000"}, headers=plain)
    self.status_fetches += 1
    if answer.status_code != 200:
        raise ValueError(f"/status answered {answer.status_code}")
    snapshot: dict[str, Any] = answer.json()
    return snapshot


async def follow(urls: list[str], secs: float, before: bool) -> dict[str, Any]:
    own = follower_module.DaemonFollower._fetch_status
    if before:
        follower_module.DaemonFollower._fetch_status = _fetch_whole  # type: ignore[method-assign]
    try:
        specs = tuple(DaemonSpec(name=f"d{i:02d}", url=url) for i, url in enumerate(urls))
        # timeout_secs 10: daemons sharing two cores answer slowly, and a timeout is not what is measured
        fleet = Fleet(
            FleetConfig(port=0, poll_secs=1.0, timeout_secs=10.0, stale_after_secs=30.0, daemons=specs)
        )
        await fleet.start()
        try:
            await asyncio.sleep(WARMUP_SECS)
            followers = list(fleet.followers.values())
            start = [(f.status_fetches, f.status_not_modified, f.status_bytes) for f in followers]
            cpu0, wall0 = time.process_time(), time.monotonic()
            await asyncio.sleep(secs)
            cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
            end = [(f.status_fetches, f.status_not_modified, f.status_bytes) for f in followers]
            up = fleet.health()["up"]
        finally:
            await fleet.close()
    finally:
        follower_module.DaemonFollower._fetch_status = own  # type: ignore[method-assign]
    fetches = sum(e[0] - s[0] for s, e in zip(start, end, strict=True))
    not_modified = sum(e[1] - s[1] for s, e in zip(start, end, strict=True))
    sent = sum(e[2] - s[2] for s, e in zip(start, end, strict=True))
    return {
        "way": "before: whole view, plain, no tag" if before else "after: bounded, gzip, If-None-Match",
        "daemons_up": up,
        "fleet_cpu_per_sec": cpu / wall,
        "status_answers_per_sec": fetches / wall,
        "not_modified_share": not_modified / fetches if fetches else 0.0,
        "status_bytes_per_sec": sent / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--daemons", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=30, help="queued jobs per daemon (snap-update, 16 each)")
    parser.add_argument("--secs", type=float, default=15.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-fleet-follow-") as tmp:
        folder = Path(tmp)
        config = folder / "daemon.toml"
        lean = 'devices = ["cpu:0"]\nworkers_per_device = 1\nsynthesis_workers = 1\n'  # many on two cores
        config.write_text(f'keys_dir = "{folder / "keys"}"\nallowed_roots = ["{folder}"]\n{lean}')
        daemons = [DaemonProcess(folder / f"d{i:02d}", config_file=config, log_path=folder / f"d{i:02d}.log")
                   for i in range(args.daemons)]  # fmt: skip
        daemons[0].start(timeout=600)  # makes the shared keys
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda d: d.start(timeout=600), daemons[1:]))
        try:
            urls = [d.url for d in daemons]
            sector = folder / "sector"
            from prooflane.circuits.profiles import profile_by_name
            from prooflane.circuits.sector import Sector

            Sector.create(sector, profile_by_name("tiny").sector_bytes, seed=1)
            for url in urls:
                with Client(url) as client:
                    for _ in range(args.jobs):
                        client.submit("snap-update", sector=str(sector))
            rss = 0
            for d in daemons:
                tree = psutil.Process(d.pid)
                rss += sum(p.memory_info().rss for p in [tree, *tree.children(recursive=True)])
            rows = []
            for round_ in range(2):
                for before in (True, False) if round_ == 0 else (False, True):
                    row = asyncio.run(follow(urls, args.secs, before))
                    row["round"] = round_
                    rows.append(row)
        finally:
            for d in daemons:
                d.stop()
    columns = ["round", "way", "daemons_up", "fleet_cpu_per_sec", "status_answers_per_sec",
               "not_modified_share", "status_bytes_per_sec"]  # fmt: skip
    print(
        f"{args.daemons} daemons (tiny, {args.jobs} queued snap-update jobs each, {rss / 2**30:.1f} GiB RSS "
        f"in all), {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}, {args.secs:g} s per run"
    )
    print_table(columns, [[row[c] for c in columns] for row in rows])
    write_json("bench_fleet_follow", {"daemons": args.daemons, "jobs": args.jobs, "secs": args.secs,
                                      "daemons_rss_bytes": rss, "rows": rows})  # fmt: skip


if __name__ == "__main__":
    main()
