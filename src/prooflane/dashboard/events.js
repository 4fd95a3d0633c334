// The names of the server-sent events the dashboard subscribes to on GET /v1/events (each one makes it fetch
// /status again). tests/test_dashboard_modules.py checks these lists against the Python side. No dependencies.

/** The tracker's events, named as the SSE stream names them: the keys of prooflane.events.EVENT_TYPES. */
export const TRACKER_EVENTS = [
  "job_submitted", "job_done", "job_failed", "job_cancelled", "job_expired", "journal_checked",
  "synthesis_started", "synthesis_finished", "synthesis_failed", "synthesis_pool_sized", "lease_granted",
  "device_section_finished", "finalize_finished", "partition_failed", "partition_retried", "worker_registered",
  "worker_died", "worker_lost", "budget_set", "reservation_made", "reservation_shrunk", "reservation_released",
  "allocation_cached", "allocation_used", "allocation_evicted", "tables_changed",
];

/** The feeds' own events: "resync" (the daemon dropped events for this page: nothing to replay, the next
 * snapshot has it all; prooflane.status.feed.RESYNC), "snapshot" (the fleet's stream for a daemon's panel at
 * /d/<name>/: it holds a new snapshot) and "message" (what EventSource calls a frame without an event name). */
export const CONTROL_EVENTS = ["snapshot", "resync", "message"];

/** Every event name the page listens for. */
export const EVENT_NAMES = [...TRACKER_EVENTS, ...CONTROL_EVENTS];
