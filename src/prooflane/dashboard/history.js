// The finished jobs: the Recently finished table (the newest 25 of the snapshot's recent_jobs, newest first,
// or, while that is empty just after a restart, of the daemon's journal: GET /v1/jobs?state=..., asked at
// most every 15 s) and the Failures list (the snapshot's recent_failures, newest first, which no stream of
// jobs done pushes out; from the journal likewise after a restart), which the failed counts link to.
import { $, byTestId, h, setAttr, setText, syncKeyed } from "./dom.js";
import { JOBS_URL, feed, liveExtra, rerender } from "./feed.js";
import { clock, fmtSecs } from "./format.js";
import { failureReason, jobKindText, reasonLine } from "./jobs.js";
import { TERMINAL_JOB_STATES } from "./states.js";

const HISTORY_ROWS = 25;
const HISTORY_POLL_MS = 15000;
const HISTORY_FETCH_LIMIT = 200; // the journal lists oldest first: take enough to keep the newest

const journal = {
  rows: null, // from /v1/jobs when the snapshot has no recent jobs, newest first
  fetchedAt: 0,
};

// The failures list shows one kind only after a click on that kind's failed count ("" for every kind).
const failures = { kind: "" };

/** Forget the journal's rows (the daemon restarted). */
export function resetHistory() {
  journal.rows = null;
  journal.fetchedAt = 0;
}

export function renderHistory(s) {
  let rows = s.recent_jobs || []; // newest first, as the daemon sends them
  if (rows.length === 0) { // e.g. just after a restart: the journal still has them
    maybeFetchHistory();
    rows = journal.rows || [];
  }
  rows = rows.slice(0, HISTORY_ROWS);
  byTestId("history-empty").hidden = rows.length > 0;
  byTestId("history").hidden = rows.length === 0;
  syncKeyed($("tbody", byTestId("history")), rows, (r) => r.job_id, () => h("tr", {
    "data-testid": "history-row",
  }, [h("td", { class: "mono" }), h("td"), h("td", { class: "r" }), h("td"), h("td"), h("td", { class: "r" })]),
  (tr, r) => {
    const [id, kind, dur, outcome, reason, fin] = tr.children;
    setText(id, r.job_id);
    setText(kind, jobKindText(r));
    const d = historyDuration(r);
    setText(dur, d === null ? "–" : fmtSecs(d));
    const out = r.outcome ?? "";
    setText(outcome, out);
    setAttr(outcome, "class", `outcome-${out}`);
    const why = failureReason(r);
    setText(reason, reasonLine(why));
    setAttr(reason, "title", why);
    let when = "";
    if (typeof r.ended_secs_ago === "number") when = `${fmtSecs(r.ended_secs_ago + liveExtra())} ago`;
    else if (typeof r.finished_at === "number") when = clock(r.finished_at * 1000);
    setText(fin, when);
  });
  renderFailures(s);
}

// ------------------------------------------------------------------ failures

/** The failed jobs to list, newest first: the snapshot's recent_failures (from a daemon without them, the
 * failed ones of recent_jobs), or the journal's failed jobs while the snapshot has no recent jobs. */
function failedJobs(s) {
  if ((s.recent_jobs || []).length === 0 && journal.rows) {
    return journal.rows.filter((r) => r.outcome === "failed");
  }
  if (Array.isArray(s.recent_failures)) return s.recent_failures;
  return (s.recent_jobs || []).filter((r) => r.outcome === "failed");
}

/** When a failed job ended, by the daemon's clock: "14:02:11 (3m 07s ago)". */
function failedAt(s, r) {
  if (typeof r.ended_secs_ago === "number") {
    const at = typeof s.taken_at === "number" ? `${clock((s.taken_at - r.ended_secs_ago) * 1000)} ` : "";
    return `${at}(${fmtSecs(r.ended_secs_ago + liveExtra())} ago)`;
  }
  return typeof r.finished_at === "number" ? clock(r.finished_at * 1000) : "";
}

function renderFailures(s) {
  const all = failedJobs(s);
  const rows = failures.kind ? all.filter((r) => String(r.proof_kind ?? r.kind) === failures.kind) : all;
  const since = s.counters?.total_failed;
  const count = byTestId("failures-count");
  const which = failures.kind ? ` of ${failures.kind}` : "";
  const listed = `${rows.length}${which} listed here, newest first`;
  setText(count, since === 0 ? "none since boot" : typeof since === "number" ? `${since} since boot; ${listed}`
    : listed);
  byTestId("failures-show-all").hidden = !failures.kind;
  byTestId("failures-empty").hidden = rows.length > 0;
  setText(byTestId("failures-empty"), failures.kind ? `no failed ${failures.kind} job listed`
    : "no failed job since boot");
  byTestId("failures").hidden = rows.length === 0;
  syncKeyed($("tbody", byTestId("failures")), rows, (r) => r.job_id, () => h("tr", {
    "data-testid": "failure-row",
  }, [
    h("td", { class: "mono", "data-testid": "failure-job" }), h("td", { "data-testid": "failure-kind" }),
    h("td", { class: "r", "data-testid": "failure-partition" }), h("td", { "data-testid": "failure-reason" }),
    h("td", { class: "r", "data-testid": "failure-time" }),
  ]), (tr, r) => {
    const [id, kind, part, reason, when] = tr.children;
    setAttr(tr, "data-job-id", r.job_id);
    setText(id, r.job_id);
    setText(kind, jobKindText(r));
    const named = r.failed_partition ?? (r.partitions || []).find((p) => p.state === "failed")?.index;
    setText(part, named === null || named === undefined ? "–" : `#${named}`);
    const why = failureReason(r);
    setText(reason, reasonLine(why) || "–");
    setAttr(reason, "title", why);
    setText(when, failedAt(s, r));
  });
}

/** Bring the failures list into view, showing only `kind` ("" for every kind): what a failed count does. */
export function showFailures(kind) {
  failures.kind = kind || "";
  if (feed.snapshot) renderFailures(feed.snapshot);
  const panel = document.getElementById("failures");
  panel.scrollIntoView({ block: "start" });
  panel.focus({ preventScroll: true });
}

/** Make `link` a failed count: `n`, a link to the failures list (of `kind`, or of every kind with ""). */
export function linkFailures(link, n, kind) {
  setText(link, String(n));
  setAttr(link, "data-kind", kind);
  setAttr(link, "data-count", n);
  setAttr(link, "title", `show the failures${kind ? ` of ${kind}` : ""}`);
  if (!link.onclick) {
    link.onclick = (e) => {
      e.preventDefault();
      showFailures(link.dataset.kind);
    };
  }
}

function showAllKinds() {
  failures.kind = "";
  rerender();
}

// A module runs once the document is parsed: the button is there.
byTestId("failures-show-all").addEventListener("click", showAllKinds);

// ------------------------------------------------------------------ the journal

/** `duration_secs` of a recent job; from the journal, the time from submission to the end. */
function historyDuration(r) {
  if (typeof r.duration_secs === "number") return r.duration_secs;
  if (typeof r.finished_at === "number" && typeof r.submitted_at === "number") {
    return r.finished_at - r.submitted_at;
  }
  return null;
}

async function maybeFetchHistory() {
  if (Date.now() - journal.fetchedAt < HISTORY_POLL_MS) return;
  journal.fetchedAt = Date.now();
  try {
    const all = [];
    for (const st of TERMINAL_JOB_STATES) {
      const resp = await fetch(`${JOBS_URL}?state=${st}&limit=${HISTORY_FETCH_LIMIT}`, { cache: "no-store" });
      if (resp.ok) all.push(...(await resp.json()));
    }
    all.sort((a, b) => (b.finished_at ?? 0) - (a.finished_at ?? 0)); // newest first
    journal.rows = all.map((j) => ({ ...j, outcome: j.state }));
  } catch (err) {
    // keep the last rows; the stale banner covers an unreachable daemon
  }
}
