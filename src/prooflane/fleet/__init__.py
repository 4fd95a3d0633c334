"""The fleet: many daemons followed from one service, their API and page, SSH tunnels to reach them.

Holds the fleet's config file, the followers (one per daemon: its ``/status`` and event stream), the
fleet's HTTP application and page, the SSH tunnels and the fleet-wide view (health, totals, metrics).

May import: the leaves, ``status`` (to read snapshots) and ``server`` (the HTTP harness and the token
check). Never proving math, never the engine. See docs/architecture.md.
"""

from .app import create_fleet_app, run_fleet
from .config import DEFAULT_FLEET_PORT, DaemonSpec, FleetConfig
from .follower import DaemonFollower
from .service import Fleet

__all__ = [
    "DEFAULT_FLEET_PORT",
    "DaemonFollower",
    "DaemonSpec",
    "Fleet",
    "FleetConfig",
    "create_fleet_app",
    "run_fleet",
]
