// The Pipelines panel: the live view counted (a line, and the counts by kind, priority and state: /status
// lists only the running jobs, the next queued and the last ended whole), then one row per job listed
// (queued and running first, in a box of fixed height that scrolls, then a short collapsible tail of
// finished ones, always there), one cell per partition; and what the
// history and failures tables share with it: a job's kind in words (with its circom circuit, asked of
// GET /v1/jobs/{id} when /status leaves it out) and failure reasons in text.
// Job ids and proof kinds are shown whole (CSS wraps them anywhere); nothing is cut or ellipsised.
import { $, byTestId, h, setAttr, setText, syncKeyed } from "./dom.js";
import { JOBS_URL, liveExtra, rerender } from "./feed.js";
import { fmtSecs } from "./format.js";
import { TERMINAL_JOB } from "./states.js";

const FINISHED_TAIL = 4; // finished jobs shown in the live view; the history table below has more

/** Phase time for partition cells: "1.2s", "0.04s", "12s", "3ms". */
function fmtPhase(ms) {
  const s = ms / 1000;
  if (ms < 10) return `${Math.round(ms)}ms`;
  if (s < 0.1) return `${s.toFixed(2)}s`;
  if (s < 10) return `${s.toFixed(1)}s`;
  return `${Math.round(s)}s`;
}

// ------------------------------------------------------------------ text shared with the history table

/** "circom · <circuit name>" for jobs on a registered circuit, else the proof kind; always whole. Takes a
 * /status job (`proof_kind`) or a GET /v1/jobs view (`kind`). */
export function jobKindText(j) {
  const kind = String(j.proof_kind ?? j.kind ?? "");
  const circuit = j.circuit ?? circuitOf(j.job_id, kind);
  return circuit && circuit !== kind ? `${kind} · ${circuit}` : kind;
}

// /status gives a circom job's circuit in `circuit`; from a daemon that leaves it null (or out), the circuit
// comes from GET /v1/jobs/{id}, once per job.
const circuits = new Map(); // job id -> circuit name, or null while unknown / none

function circuitOf(jobId, kind) {
  if (kind !== "circom") return null;
  if (!circuits.has(jobId)) {
    circuits.set(jobId, null);
    fetch(`${JOBS_URL}/${encodeURIComponent(jobId)}`, { cache: "no-store" })
      .then((resp) => (resp.ok ? resp.json() : null))
      .then((view) => {
        if (view && view.circuit) {
          circuits.set(jobId, view.circuit);
          rerender();
        } // else: the job has no circuit (or is unknown): keep null, do not ask again
      })
      .catch(() => circuits.delete(jobId)); // unreachable: ask again on a later snapshot
  }
  return circuits.get(jobId);
}

/** The whole failure reason, without terminal colour codes: `reason` in /status, `error` in a job view. */
export function failureReason(x) {
  const raw = x.reason || x.error || "";
  return String(raw).replace(/\u001b\[[0-9;]*[A-Za-z]/g, "").trim();
}

/** The reason's first line, for text in rows and tables; the whole reason goes in the tooltip. */
export function reasonLine(reason) {
  return reason.split("\n", 1)[0].trim();
}

// ------------------------------------------------------------------ rows

const count = (n) => Number(n || 0).toLocaleString("en-US");

/** The line over the rows: how many jobs the live view holds and how many of them are listed below. */
function renderQueue(s, listedQueued) {
  const live = s.live_jobs;
  if (!live) return;
  const ended = (live.done || 0) + (live.failed || 0) + (live.cancelled || 0);
  const queued = live.queued > listedQueued
    ? `${count(live.queued)} queued (the next ${count(listedQueued)} listed)`
    : `${count(live.queued)} queued`;
  setText(byTestId("queue-summary"), live.total
    ? `${count(live.total)} jobs in the live view: ${count(live.running)} running, ${queued}, ${count(ended)} ended`
    : "no jobs in the live view");
  const groups = live.groups || [];
  syncKeyed(byTestId("queue-groups-rows"), groups, (g) => `${g.proof_kind}\u0000${g.priority}\u0000${g.state}`,
    () => h("tr", { "data-testid": "queue-group" }, [h("td"), h("td"), h("td"), h("td", { class: "r num" }),
      h("td", { class: "r num" })]),
    (row, g) => {
      const cells = row.children;
      setText(cells[0], String(g.proof_kind));
      setText(cells[1], String(g.priority));
      setText(cells[2], String(g.state));
      setText(cells[3], count(g.jobs));
      setText(cells[4], count(g.partitions_pending));
    });
}

export function renderPipelines(s) {
  // Queued and running jobs first, each in submission order; below them a short, collapsible tail of the
  // finished ones the daemon still keeps in its live view (the newest FINISHED_TAIL, in submission order).
  const list = s.pipelines || [];
  const live = list.filter((j) => !TERMINAL_JOB.has(j.state));
  const finished = list.filter((j) => TERMINAL_JOB.has(j.state));
  const tail = newestFinished(finished, FINISHED_TAIL);
  renderQueue(s, live.filter((j) => j.state === "queued").length);
  byTestId("pipelines-empty").hidden = live.length > 0;
  const box = byTestId("finished-box"); // always there (empty or not), so the panel keeps its height
  const lj = s.live_jobs;
  const ended = lj ? (lj.done || 0) + (lj.failed || 0) + (lj.cancelled || 0) : finished.length;
  setAttr(box, "data-count", ended);
  setText(byTestId("finished-title"), ended > tail.length
    ? `Finished: the newest ${tail.length} of ${count(ended)} still in the live view (all in Recently finished)`
    : ended ? `Finished: ${ended} still in the live view` : "Finished: none in the live view");
  syncKeyed(byTestId("pipelines"), live, (j) => j.job_id, createJobRow, updateJobRow);
  syncKeyed(byTestId("pipelines-finished"), tail, (j) => j.job_id, createJobRow, updateJobRow);
}

/** The `n` jobs that ended last, kept in submission order. */
function newestFinished(finished, n) {
  const endedAgo = (j) => (Number(j.started_secs_ago) || 0) - (Number(j.elapsed_secs) || 0);
  const keep = new Set([...finished].sort((a, b) => endedAgo(a) - endedAgo(b)).slice(0, n));
  return finished.filter((j) => keep.has(j));
}

function createJobRow() {
  return h("article", { class: "job", "data-testid": "pipeline-row" }, [
    h("div", { class: "job-meta" }, [
      h("div", { class: "job-id", "data-testid": "job-id" }),
      h("div", { class: "job-kind", "data-testid": "job-kind" }),
      h("div", { class: "job-line" }, [
        h("span", { "data-testid": "job-priority" }),
        h("span", { "data-testid": "job-state" }),
        h("span", { class: "num", "data-testid": "job-elapsed" }),
        h("span", { class: "num", "data-testid": "job-progress" }),
      ]),
    ]),
    h("div", { class: "cells", "data-testid": "job-cells" }),
    h("div", { class: "job-more", "data-testid": "job-more", hidden: true }),
    h("ul", { class: "job-failures", "data-testid": "job-failures" }),
  ]);
}

function updateJobRow(row, j) {
  setAttr(row, "data-job-id", j.job_id);
  setAttr(row, "data-job-state", j.state);
  setText(byTestId("job-id", row), j.job_id);
  setText(byTestId("job-kind", row), jobKindText(j));
  const prio = byTestId("job-priority", row);
  setText(prio, j.priority);
  setAttr(prio, "class", `prio-${j.priority}`);
  setText(byTestId("job-state", row), j.state);
  tickJob(row, j);
  setText(byTestId("job-progress", row), `${j.partitions_done}/${j.total_partitions} done`);
  const parts = j.partitions || [];
  syncKeyed(byTestId("job-cells", row), parts, (p) => p.index, createCell, updateCell);
  const more = byTestId("job-more", row);
  const unlisted = (j.total_partitions || 0) - parts.length;
  more.hidden = unlisted <= 0;
  setText(more, unlisted > 0 ? `${count(unlisted)} more partitions not listed: ${unlistedText(j, parts)}` : "");
  const failures = parts.filter((p) => p.state === "failed" && failureReason(p));
  const jobReason = failureReason(j);
  const items = failures.map((p) => ({
    text: `partition ${p.index}${p.attempt > 1 ? ` (attempt ${p.attempt})` : ""}: `,
    reason: failureReason(p),
  }));
  if (jobReason && !failures.some((p) => jobReason.includes(failureReason(p)))) {
    items.unshift({ text: "job: ", reason: jobReason });
  }
  const ul = byTestId("job-failures", row);
  syncKeyed(ul, items, (t) => t.text + t.reason, () => h("li", { "data-testid": "job-failure" }), (li, t) => {
    setText(li, t.text + reasonLine(t.reason));
    setAttr(li, "title", t.reason);
  });
  ul.hidden = items.length === 0;
}

/** "10 pending, 998 done": the job's partitions by state, less those listed (partition_counts counts all). */
function unlistedText(j, parts) {
  const counts = { ...(j.partition_counts || {}) };
  for (const p of parts) counts[p.state] = (counts[p.state] || 0) - 1;
  return Object.entries(counts).filter(([, n]) => n > 0).map(([state, n]) => `${count(n)} ${state}`).join(", ");
}

function tickJob(row, j) {
  let secs = j.elapsed_secs;
  if (!TERMINAL_JOB.has(j.state)) secs += liveExtra();
  setText(byTestId("job-elapsed", row), fmtSecs(Math.max(0, secs)));
}

/** Between snapshots: the elapsed time of every job shown counts on. */
export function tickPipelines(s) {
  for (const row of document.querySelectorAll('[data-testid="pipeline-row"]')) {
    const j = (s.pipelines || []).find((x) => x.job_id === row.dataset.key);
    if (j) tickJob(row, j);
  }
}

// ------------------------------------------------------------------ partition cells

function createCell() {
  return h("div", { class: "cell", "data-testid": "partition-cell" }, [
    h("div", { class: "c-head" }, [
      h("span", { class: "c-index" }, [h("span", { class: "c-num" }), h("span", { class: "c-attempt" })]),
      h("span", { class: "c-worker" }),
    ]),
    h("div", { class: "c-state" }),
    h("div", { class: "c-l1" }),
    h("div", { class: "c-l2" }),
    h("div", { class: "c-l3" }),
  ]);
}

function updateCell(cell, p) {
  setAttr(cell, "class", `cell p-${p.state}`);
  setAttr(cell, "data-state", p.state);
  setAttr(cell, "data-index", p.index);
  setText($(".c-num", cell), `#${p.index}`);
  setText($(".c-attempt", cell), p.attempt > 1 ? ` try ${p.attempt}` : "");
  const held = p.worker_id && (p.state === "proving" || p.state === "finalizing");
  setText($(".c-worker", cell), held ? p.worker_id : "");
  setText($(".c-state", cell), p.state);
  const times = [];
  if (p.synth_ms != null) times.push(`${fmtPhase(p.synth_ms)} synth`);
  if (p.prove_ms != null) times.push(`${fmtPhase(p.prove_ms)} prove`);
  if (p.finalize_ms != null) times.push(`${fmtPhase(p.finalize_ms)} final`);
  setText($(".c-l1", cell), times[0] || "");
  setText($(".c-l2", cell), times[1] || "");
  setText($(".c-l3", cell), times[2] || "");
  const reason = failureReason(p);
  const title = [`partition ${p.index}: ${p.state}`, p.attempt > 1 ? `attempt ${p.attempt}` : "",
    p.worker_id ? `worker ${p.worker_id}` : "", ...times, reason ? `reason: ${reason}` : ""];
  setAttr(cell, "title", title.filter(Boolean).join("\n"));
}
