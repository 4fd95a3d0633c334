// The Devices and Workers panels: one entry per device and one card per worker, both in id order. A worker
// card never shows a state a fresh snapshot does not vouch for: while the data is stale it reads "unknown",
// and a dead worker (restarting or lost) says so, with why and how often it was restarted, never "idle". A
// worker that was restarted says so on its card once it is back too: how often, when last and why.
import { $, byTestId, h, setAttr, setText, syncKeyed } from "./dom.js";
import { feed, isStale, liveExtra } from "./feed.js";
import { clock, fmtBytes, fmtPct, fmtSecs } from "./format.js";

// Worker states whose processes died: restarting (being replaced) and lost (cannot come back).
const DOWN_STATES = new Set(["restarting", "lost"]);

/** Natural order of ids: cpu:2 before cpu:10, cpu:1/w0 before cpu:1/w1. */
const ID_ORDER = new Intl.Collator("en", { numeric: true, sensitivity: "variant" });
const byId = (key) => (a, b) => ID_ORDER.compare(String(key(a)), String(key(b)));

// ------------------------------------------------------------------ devices

export function renderDevices(s) {
  const list = [...(s.devices || [])].sort(byId((d) => d.device));
  byTestId("devices-empty").hidden = list.length > 0;
  syncKeyed(byTestId("devices"), list, (d) => d.device, () => h("div", { "data-testid": "device" }, [
    h("div", { class: "device-head" }, [
      h("span", { class: "device-name" }), h("span", { class: "device-meta num" }),
    ]),
    h("div", { class: "bar-row" }, [
      h("div", { class: "minibar" }, [h("div", { class: "minibar-fill busy-fill" })]),
      h("span", { class: "num device-busy" }),
    ]),
    h("div", { class: "device-memory num", "data-testid": "device-memory", hidden: true }),
  ]), (el, d) => {
    const frac = Math.min(1, Math.max(0, Number(d.busy_fraction_1m) || 0));
    setText($(".device-name", el), d.device);
    const workers = d.workers === undefined ? "" : `, ${d.workers} worker${d.workers === 1 ? "" : "s"}`;
    const down = d.workers_down ? ` (${d.workers_down} down)` : "";
    setText($(".device-meta", el), `${d.kind ?? ""}${workers}${down}`);
    $(".busy-fill", el).style.width = `${(frac * 100).toFixed(1)}%`;
    setText($(".device-busy", el), `${fmtPct(frac)} busy (1 min)`);
    // A device with memory of its own (cuda): what its budget holds, in the snapshot's own terms.
    const memory = $(".device-memory", el), m = d.memory;
    memory.hidden = !m;
    if (m) {
      const keys = `${fmtBytes(m.keys_bytes)} resident key bases (${m.keys})`;
      setText(memory, `device memory: ${fmtBytes(m.in_use_bytes)} in use + ${keys} of ${fmtBytes(m.total_bytes)}`);
    }
  });
}

// ------------------------------------------------------------------ workers

export function renderWorkers(s) {
  const list = [...(s.workers || [])].sort(byId((w) => w.worker_id));
  byTestId("workers-empty").hidden = list.length > 0;
  syncKeyed(byTestId("workers"), list, (w) => w.worker_id, createWorkerCard, updateWorkerCard);
}

function createWorkerCard() {
  const field = (label, id) => [h("dt", { text: label }), h("dd", { "data-testid": id, class: "num" })];
  return h("article", { class: "worker", "data-testid": "worker-card" }, [
    h("div", { class: "worker-head" }, [
      h("span", { class: "worker-id mono", "data-testid": "worker-id" }),
      h("span", { class: "worker-device", "data-testid": "worker-device" }),
    ]),
    h("div", { class: "worker-state", "data-testid": "worker-state" }),
    h("div", { class: "last-known", "data-testid": "worker-last-known" }),
    h("div", { class: "restarts", "data-testid": "worker-restarts" }),
    h("dl", {}, [
      ...field("job", "worker-job"),
      ...field("partition", "worker-partition"),
      ...field("busy", "worker-busy"),
      ...field("busy total", "worker-busy-total"),
      ...field("finalizing", "worker-finalizing"),
    ]),
  ]);
}

function updateWorkerCard(card, w) {
  const stale = isStale();
  const shown = stale ? "unknown" : w.state;
  setAttr(card, "data-worker-id", w.worker_id);
  setAttr(card, "data-state", shown);
  setAttr(card, "data-seq", feed.seq);
  setText(byTestId("worker-id", card), w.worker_id);
  setText(byTestId("worker-device", card), w.device ?? "");
  setText(byTestId("worker-state", card), stale ? "unknown (stale)" : w.state);
  setText(byTestId("worker-last-known", card), stale ? `last known (snapshot #${feed.seq}): ${w.state}` : "");
  if (!stale && DOWN_STATES.has(w.state)) {
    // A dead worker is never shown idle: it says it is down, why, and how often it was restarted.
    const restarts = w.restarts ? ` (restarts: ${w.restarts})` : "";
    setText(byTestId("worker-last-known", card), `${w.last_error || "its processes died"}${restarts}`);
  } else if (!stale && w.stuck) {
    // Alive, but its work has run past stall_secs: it may be hung (stopped, deadlocked), and says so.
    setText(byTestId("worker-last-known", card), `hung? ${w.stuck}`);
  }
  card.classList.toggle("stuck", !stale && Boolean(w.stuck));
  setAttr(card, "data-stuck", !stale && w.stuck ? "true" : "false");
  const known = byTestId("worker-last-known", card);
  setAttr(known, "title", known.textContent);
  const restarts = byTestId("worker-restarts", card);
  const restartText = restartLine(w);
  setText(restarts, restartText);
  setAttr(restarts, "title", restartText);
  setAttr(restarts, "data-count", w.restarts ?? 0);
  const job = byTestId("worker-job", card);
  setText(job, w.current_job ?? "—");
  setAttr(job, "data-value", w.current_job ?? "");
  job.classList.add("wrap", "mono");
  const part = byTestId("worker-partition", card);
  const hasPart = w.current_partition !== null && w.current_partition !== undefined;
  setText(part, hasPart ? String(w.current_partition) : "—");
  setAttr(part, "data-value", hasPart ? String(w.current_partition) : "");
  tickWorker(card, w);
  setText(byTestId("worker-busy-total", card), fmtSecs(w.busy_seconds_total ?? 0));
  const fin = w.finalizing || [];
  const finEl = byTestId("worker-finalizing", card);
  // Grouped by job, so each (whole) job id appears once: "<job id> #6 #9".
  const groups = new Map();
  for (const f of fin) groups.set(f.job_id, [...(groups.get(f.job_id) || []), `#${f.partition}`]);
  const finText = Array.from(groups, ([job, parts]) => `${job} ${parts.join(" ")}`).join("; ");
  setText(finEl, fin.length ? finText : "—");
  setAttr(finEl, "data-count", fin.length);
  finEl.classList.add("wrap");
}

/** "restarted 2× · last 14:02:11: <why>" (the time by the daemon's clock); the reason is left out while the
 * worker is down (the line above gives it); "" for a worker never restarted. */
function restartLine(w) {
  const down = DOWN_STATES.has(w.state);
  const why = w.last_error && !down ? `: ${w.last_error}` : "";
  if (!w.restarts) return why ? `last died${why}` : "";
  const taken = feed.snapshot && feed.snapshot.taken_at;
  const ago = w.last_restart_secs_ago;
  const when = typeof ago === "number" && typeof taken === "number" ? ` · last ${clock((taken - ago) * 1000)}` : "";
  return `restarted ${w.restarts}×${when}${why}`;
}

function tickWorker(card, w) {
  const resting = w.state === "idle" || DOWN_STATES.has(w.state);
  const busy = (w.busy_secs ?? 0) + (resting ? 0 : liveExtra());
  setText(byTestId("worker-busy", card), resting && !isStale() ? "—" : fmtSecs(busy));
}

/** Between snapshots: busy times count on, and a card whose freshness changed is redrawn, so it never keeps
 * a state it cannot vouch for. */
export function tickWorkers(s) {
  const stale = isStale();
  for (const card of document.querySelectorAll('[data-testid="worker-card"]')) {
    const w = (s.workers || []).find((x) => x.worker_id === card.dataset.key);
    if (!w) continue;
    if ((card.dataset.state === "unknown") !== stale) updateWorkerCard(card, w);
    else tickWorker(card, w);
  }
}
