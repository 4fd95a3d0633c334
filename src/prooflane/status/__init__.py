"""The status tracker: events in, frozen snapshots out.

Holds the tracker (the one writer of its records), the records themselves, the read-out (snapshots,
totals, health), the snapshot's types and JSON encoding, failure-reason cleaning, timing statistics, the
invariant check and the event feed behind ``/v1/events``.

May import: the leaves (``events``, ``states``, ``errors``, ``_version``). It knows nothing of the engine,
HTTP or devices. See docs/architecture.md.
"""

from .feed import RESYNC, EventFeed, FeedItem, Subscription
from .invariants import InvariantCheck, broken_invariants
from .readout import SnapshotHead, TrackerTotals
from .reasons import readable_reason
from .records import TrackerConfig
from .snapshot import Health, StatusSnapshot
from .tracker import LEGAL_TRANSITIONS, Outcome, StatusTracker

__all__ = [
    "LEGAL_TRANSITIONS",
    "RESYNC",
    "EventFeed",
    "FeedItem",
    "Health",
    "InvariantCheck",
    "Outcome",
    "SnapshotHead",
    "StatusSnapshot",
    "StatusTracker",
    "Subscription",
    "TrackerConfig",
    "TrackerTotals",
    "broken_invariants",
    "readable_reason",
]
