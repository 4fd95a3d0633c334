// The Recently finished table: the last 25 jobs of the snapshot's recent_jobs or, while that is empty (just
// after a restart), of the daemon's journal (GET /v1/jobs?state=..., asked at most every 15 s).
import { $, byTestId, h, setAttr, setText, syncKeyed } from "./dom.js";
import { JOBS_URL, liveExtra } from "./feed.js";
import { clock, fmtSecs } from "./format.js";
import { failureReason, jobKindText, reasonLine } from "./jobs.js";
import { TERMINAL_JOB_STATES } from "./states.js";

const HISTORY_POLL_MS = 15000;
const HISTORY_FETCH_LIMIT = 200; // the journal lists oldest first: take enough to keep the newest

const journal = {
  rows: null, // from /v1/jobs when the snapshot has no recent jobs, oldest first
  fetchedAt: 0,
};

/** Forget the journal's rows (the daemon restarted). */
export function resetHistory() {
  journal.rows = null;
  journal.fetchedAt = 0;
}

export function renderHistory(s) {
  let rows = s.recent_jobs || [];
  if (rows.length === 0) { // e.g. just after a restart: the journal still has them
    maybeFetchHistory();
    rows = journal.rows || [];
  }
  rows = rows.slice(-25).reverse(); // newest first
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
}

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
    all.sort((a, b) => (a.finished_at ?? 0) - (b.finished_at ?? 0));
    journal.rows = all.map((j) => ({ ...j, outcome: j.state }));
  } catch (err) {
    // keep the last rows; the stale banner covers an unreachable daemon
  }
}
