// The dashboard's feed: GET /status, fetched again on every server-sent event from GET /v1/events and polled
// every 1.5 s as a fallback; which answers count (seq only moves forward per boot_id, a new boot_id is a
// restarted daemon); how old the data is; and the banner, notice and feed label that say so.
//
// Each fetch names the last answer's ETag (If-None-Match): a 304 says the snapshot kept is current but for
// the clock, so the page keeps it, counts it fresh, and goes on adding the time since it arrived to its
// clock fields (liveExtra: the same fields as prooflane.status.ages, docs/status.md).
//
// It never shows a worker as "idle" unless a fresh snapshot says so: when the data is older than
// STALE_AFTER_MS, a banner gives its age, the panels show every worker state as "unknown", and every panel
// with a live figure (each <section data-live>) is dimmed, its heading saying "as of HH:MM:SS".
import { $, byTestId, setAttr, setText } from "./dom.js";
import { EVENT_NAMES } from "./events.js";
import { clock } from "./format.js";

// Relative, so the same page works at a daemon's / and at a fleet's /d/<name>/.
const STATUS_URL = "status";
const EVENTS_URL = "v1/events";
export const JOBS_URL = "v1/jobs";
// Who the page shows, for the banner: the daemon's address, or what the fleet that serves it says.
const WHERE = document.body.dataset.daemon || `the daemon at ${location.host}`;
const POLL_MS = 1500;
const POLL_CHECK_MS = 250;
const STALE_AFTER_MS = 3000;
const FETCH_TIMEOUT_MS = 3000;
const MIN_FETCH_GAP_MS = 200;
const RESTART_NOTICE_MS = 10000;

/** What the feed knows; the panels read `snapshot` and `seq`, nothing writes them but this module. */
export const feed = {
  snapshot: null, // the last snapshot rendered
  receivedAt: 0, // Date.now() when it arrived: its clock fields count on from then
  confirmedAt: 0, // Date.now() of the last answer that vouched for it (200, or 304 to its ETag)
  etag: null, // its ETag, sent back as If-None-Match
  bootId: null,
  seq: -1,
  connection: "connecting", // "live" (SSE open), "polling", "unreachable"
  fetching: false,
  fetchQueued: false,
  lastFetchStart: 0,
  source: null, // EventSource
  restartedAt: 0,
  previousBootId: null,
};

// What the page does with an accepted snapshot, and when the daemon restarted (set by startFeed).
const hooks = { render: () => {}, restarted: () => {} };

// ------------------------------------------------------------------ freshness

/** How long since the daemon last vouched for the snapshot shown. */
function ageMs() { return feed.snapshot ? Date.now() - feed.confirmedAt : Infinity; }

/** Whether the data is too old to vouch for (or there is none yet). */
export function isStale() { return ageMs() > STALE_AFTER_MS; }

/** Seconds to add to a "secs ago"/"busy secs" value so it counts on between snapshots (0 when stale). */
export function liveExtra() { return isStale() ? 0 : Math.max(0, Date.now() - feed.receivedAt) / 1000; }

/** The stale banner, the restart notice, the feed label and <body data-stale data-connection>. */
export function renderFreshness() {
  const stale = isStale();
  const banner = $("#banner");
  setAttr(document.body, "data-stale", stale ? "true" : "false");
  if (!stale) {
    banner.hidden = true;
  } else {
    banner.hidden = false;
    if (!feed.snapshot) {
      setText(banner, `No data yet: waiting for ${WHERE} to answer ${STATUS_URL}. ` +
        "Worker states are unknown.");
      setAttr(banner, "data-age", "");
    } else {
      const age = ageMs() / 1000;
      setText(banner, `Data is ${age.toFixed(1)} s old: ${WHERE} is not answering ` +
        `(last snapshot #${feed.seq} at ${clock(feed.confirmedAt)}). Retrying every ` +
        `${POLL_MS / 1000} s; worker states are unknown until it answers.`);
      setAttr(banner, "data-age", age.toFixed(1));
    }
  }
  const notice = $("#notice");
  const showRestart = feed.restartedAt && Date.now() - feed.restartedAt < RESTART_NOTICE_MS;
  notice.hidden = !showRestart;
  if (showRestart) {
    setText(notice, `The daemon restarted: boot id ${feed.bootId} (was ${feed.previousBootId}). ` +
      "Showing the new daemon; charts gathered by this page start again.");
  }
  markPanels(stale);
  const conn = stale ? (feed.snapshot ? "stale" : "connecting") : feed.connection;
  setAttr(document.body, "data-connection", conn);
  setText(byTestId("connection"), conn === "live" ? "live (events)" : conn);
}

/** While stale, every live panel says when its figures are from (CSS dims it: body[data-stale]). */
function markPanels(stale) {
  const text = !stale ? "" : feed.snapshot ? `as of ${clock(feed.confirmedAt)} (stale)` : "no data yet";
  for (const panel of document.querySelectorAll("section[data-live]")) {
    setAttr(panel, "data-as-of", stale && feed.snapshot ? clock(feed.confirmedAt) : "");
    const mark = byTestId("as-of", panel);
    setText(mark, text);
    mark.hidden = !stale;
  }
}

// ------------------------------------------------------------------ fetching

/** Fetch /status soon: now, or after the one in flight, at most once per MIN_FETCH_GAP_MS. */
export function requestRefresh() {
  if (feed.fetching) { feed.fetchQueued = true; return; }
  const wait = feed.lastFetchStart + MIN_FETCH_GAP_MS - Date.now();
  if (wait > 0) {
    feed.fetchQueued = true;
    setTimeout(() => { if (feed.fetchQueued && !feed.fetching) { feed.fetchQueued = false; refresh(); } },
      wait);
    return;
  }
  refresh();
}

async function refresh() {
  feed.fetching = true;
  feed.lastFetchStart = Date.now();
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(), FETCH_TIMEOUT_MS);
  try {
    const headers = feed.etag && feed.snapshot ? { "If-None-Match": feed.etag } : {};
    const resp = await fetch(STATUS_URL, { cache: "no-store", signal: ctrl.signal, headers });
    if (resp.status === 304 && feed.snapshot) {
      confirmed();
    } else {
      if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
      accept(await resp.json(), resp.headers.get("ETag"));
    }
  } catch (err) {
    feed.connection = "unreachable";
  } finally {
    clearTimeout(timer);
    feed.fetching = false;
    renderFreshness();
    if (feed.fetchQueued) { feed.fetchQueued = false; requestRefresh(); }
  }
}

/** The daemon said the snapshot kept is current (304): fresh again; its clock fields count on. */
function confirmed() {
  feed.confirmedAt = Date.now();
  feed.connection = feed.source && feed.source.readyState === EventSource.OPEN ? "live" : "polling";
}

function accept(snap, etag) {
  if (!snap || typeof snap !== "object" || typeof snap.seq !== "number") return;
  if (snap.boot_id !== feed.bootId) {
    if (feed.bootId !== null) {
      feed.previousBootId = feed.bootId;
      feed.restartedAt = Date.now();
      hooks.restarted();
    }
    feed.bootId = snap.boot_id;
    feed.seq = -1;
    ensureEvents(true);
  } else if (snap.seq < feed.seq) {
    return; // an older answer that arrived late: seq never goes back within one boot
  }
  feed.receivedAt = feed.confirmedAt = Date.now();
  feed.etag = etag || null;
  ensureEvents(false);
  feed.connection = feed.source && feed.source.readyState === EventSource.OPEN ? "live" : "polling";
  feed.seq = snap.seq;
  feed.snapshot = snap;
  hooks.render(snap);
}

/** Render the snapshot shown again (something it refers to became known). */
export function rerender() {
  if (feed.snapshot) hooks.render(feed.snapshot);
}

function ensureEvents(restart) {
  if (typeof EventSource === "undefined") return;
  if (feed.source && !restart && feed.source.readyState !== EventSource.CLOSED) return;
  if (feed.source) feed.source.close();
  const es = new EventSource(EVENTS_URL);
  feed.source = es;
  es.onopen = () => { if (feed.source === es) { feed.connection = "live"; renderFreshness(); } };
  es.onerror = () => {
    if (feed.source !== es) return;
    feed.connection = "polling";
    requestRefresh();
  };
  for (const name of EVENT_NAMES) es.addEventListener(name, requestRefresh);
}

function poll() {
  if (Date.now() - feed.lastFetchStart >= POLL_MS - 50) requestRefresh();
}

/** Start fetching: `render(snapshot)` for every snapshot accepted, `restarted()` when the boot_id changes. */
export function startFeed({ render, restarted }) {
  hooks.render = render;
  hooks.restarted = restarted;
  renderFreshness();
  refresh();
  setInterval(poll, POLL_CHECK_MS);
}
