// prooflane dashboard: renders GET /status, refreshed on every server-sent event from GET /v1/events and
// polled every 1.5 s as a fallback. Plain JS, no build step, no dependencies beyond charts.js and format.js.
//
// Rules this page keeps:
// - It never shows a worker as "idle" unless a fresh snapshot says so: when the data is older than
//   STALE_AFTER_MS, a banner gives its age and every worker state reads "unknown".
// - Job ids and proof kinds are shown whole (CSS wraps them anywhere); nothing is cut or ellipsised.
// - Rows and cards are keyed (job id, partition index, worker id) and updated in place; sizes are fixed
//   where values change every tick, so updates do not move the layout.
// - A restarted daemon (new boot_id) is picked up without a reload; seq only moves forward per boot_id.
//
// For tests and tools, `window.prooflane` exposes the snapshot the page last rendered, and
// `<body data-seq data-boot-id data-stale>` mirror it.
"use strict";

(function () {
  // Relative, so the same page works at a daemon's / and at a fleet's /d/<name>/.
  const STATUS_URL = "status";
  const EVENTS_URL = "v1/events";
  const JOBS_URL = "v1/jobs";
  // Who the page shows, for the banner: the daemon's address, or what the fleet that serves it says.
  const WHERE = document.body.dataset.daemon || `the daemon at ${location.host}`;
  const POLL_MS = 1500;
  const STALE_AFTER_MS = 3000;
  const FETCH_TIMEOUT_MS = 3000;
  const MIN_FETCH_GAP_MS = 200;
  const TICK_MS = 250;
  const HISTORY_POLL_MS = 15000;
  const HISTORY_FETCH_LIMIT = 200; // the journal lists oldest first: take enough to keep the newest
  const RESTART_NOTICE_MS = 10000;
  const FINISHED_TAIL = 4; // finished jobs shown in the live view; the history table below has more
  const TERMINAL_JOB = new Set(["done", "failed", "cancelled"]);
  const PRIORITIES = ["critical", "high", "normal"];
  // Event names of the tracker's feed (prooflane.events.EVENT_TYPES), plus the feed's own control events.
  const EVENT_NAMES = [
    "job_submitted", "job_done", "job_failed", "job_cancelled", "job_expired", "synthesis_started",
    "synthesis_finished",
    "synthesis_failed", "synthesis_pool_sized", "lease_granted", "device_section_finished",
    "finalize_finished", "partition_failed", "partition_skipped", "partition_retried", "worker_registered",
    "worker_died", "worker_lost", "budget_set", "reservation_made", "reservation_shrunk", "reservation_released",
    "allocation_cached", "allocation_used", "allocation_evicted", "snapshot", "message",
  ];
  // Worker states whose processes died: restarting (being replaced) and lost (cannot come back).
  const DOWN_STATES = new Set(["restarting", "lost"]);

  const $ = (sel, root) => (root || document).querySelector(sel);
  const byTestId = (id, root) => $(`[data-testid="${id}"]`, root);

  const state = {
    snapshot: null, // the last snapshot rendered
    receivedAt: 0, // Date.now() when it arrived
    bootId: null,
    seq: -1,
    connection: "connecting", // "live" (SSE open), "polling", "unreachable"
    fetching: false,
    fetchQueued: false,
    lastFetchStart: 0,
    source: null, // EventSource
    restartedAt: 0,
    previousBootId: null,
    historyRows: null, // from /v1/jobs when the snapshot has no recent-jobs list
    historyFetchedAt: 0,
    local: newLocalSeries(), // chart data gathered by the page when the daemon serves none
  };

  // ------------------------------------------------------------------ formatting

  const { fmtBytes, fmtSecs, fmtPct } = window.ProoflaneFormat;

  /** Phase time for partition cells: "1.2s", "0.04s", "12s", "3ms". */
  function fmtPhase(ms) {
    const s = ms / 1000;
    if (ms < 10) return `${Math.round(ms)}ms`;
    if (s < 0.1) return `${s.toFixed(2)}s`;
    if (s < 10) return `${s.toFixed(1)}s`;
    return `${Math.round(s)}s`;
  }

  function clock(ms) { return new Date(ms).toLocaleTimeString([], { hour12: false }); }

  function setText(el, text) {
    if (el && el.textContent !== text) el.textContent = text;
  }

  function setAttr(el, name, value) {
    const v = String(value);
    if (el && el.getAttribute(name) !== v) el.setAttribute(name, v);
  }

  function h(tag, attrs, children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "text") el.textContent = v;
      else el.setAttribute(k, v);
    }
    for (const c of children || []) el.appendChild(c);
    return el;
  }

  // ------------------------------------------------------------------ freshness

  function ageMs() { return state.snapshot ? Date.now() - state.receivedAt : Infinity; }

  function isStale() { return ageMs() > STALE_AFTER_MS; }

  /** Seconds to add to a "secs ago"/"busy secs" value so it counts on between snapshots (0 when stale). */
  function liveExtra() { return isStale() ? 0 : Math.max(0, ageMs()) / 1000; }

  function renderFreshness() {
    const stale = isStale();
    const banner = $("#banner");
    setAttr(document.body, "data-stale", stale ? "true" : "false");
    if (!stale) {
      banner.hidden = true;
    } else {
      banner.hidden = false;
      if (!state.snapshot) {
        setText(banner, `No data yet: waiting for ${WHERE} to answer ${STATUS_URL}. ` +
          "Worker states are unknown.");
        setAttr(banner, "data-age", "");
      } else {
        const age = ageMs() / 1000;
        setText(banner, `Data is ${age.toFixed(1)} s old: ${WHERE} is not answering ` +
          `(last snapshot #${state.seq} at ${clock(state.receivedAt)}). Retrying every ` +
          `${POLL_MS / 1000} s; worker states are unknown until it answers.`);
        setAttr(banner, "data-age", age.toFixed(1));
      }
    }
    const notice = $("#notice");
    const showRestart = state.restartedAt && Date.now() - state.restartedAt < RESTART_NOTICE_MS;
    notice.hidden = !showRestart;
    if (showRestart) {
      setText(notice, `The daemon restarted: boot id ${state.bootId} (was ${state.previousBootId}). ` +
        "Showing the new daemon; charts gathered by this page start again.");
    }
    const conn = stale ? (state.snapshot ? "stale" : "connecting") : state.connection;
    setAttr(document.body, "data-connection", conn);
    setText(byTestId("connection"), conn === "live" ? "live (events)" : conn);
  }

  // ------------------------------------------------------------------ fetching

  function requestRefresh() {
    if (state.fetching) { state.fetchQueued = true; return; }
    const wait = state.lastFetchStart + MIN_FETCH_GAP_MS - Date.now();
    if (wait > 0) {
      state.fetchQueued = true;
      setTimeout(() => { if (state.fetchQueued && !state.fetching) { state.fetchQueued = false; refresh(); } },
        wait);
      return;
    }
    refresh();
  }

  async function refresh() {
    state.fetching = true;
    state.lastFetchStart = Date.now();
    const ctrl = new AbortController();
    const timer = setTimeout(() => ctrl.abort(), FETCH_TIMEOUT_MS);
    try {
      const resp = await fetch(STATUS_URL, { cache: "no-store", signal: ctrl.signal });
      if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
      accept(await resp.json());
    } catch (err) {
      state.connection = "unreachable";
      state.lastError = String(err);
    } finally {
      clearTimeout(timer);
      state.fetching = false;
      renderFreshness();
      if (state.fetchQueued) { state.fetchQueued = false; requestRefresh(); }
    }
  }

  function accept(snap) {
    if (!snap || typeof snap !== "object" || typeof snap.seq !== "number") return;
    if (snap.boot_id !== state.bootId) {
      if (state.bootId !== null) {
        state.previousBootId = state.bootId;
        state.restartedAt = Date.now();
        state.local = newLocalSeries();
        state.historyRows = null;
        state.historyFetchedAt = 0;
      }
      state.bootId = snap.boot_id;
      state.seq = -1;
      ensureEvents(true);
    } else if (snap.seq < state.seq) {
      return; // an older answer that arrived late: seq never goes back within one boot
    }
    state.receivedAt = Date.now();
    ensureEvents(false);
    state.connection = state.source && state.source.readyState === EventSource.OPEN ? "live" : "polling";
    state.seq = snap.seq;
    gatherLocal(snap);
    state.snapshot = snap;
    render(snap);
  }

  function ensureEvents(restart) {
    if (typeof EventSource === "undefined") return;
    if (state.source && !restart && state.source.readyState !== EventSource.CLOSED) return;
    if (state.source) state.source.close();
    const es = new EventSource(EVENTS_URL);
    state.source = es;
    es.onopen = () => { if (state.source === es) { state.connection = "live"; renderFreshness(); } };
    es.onerror = () => {
      if (state.source !== es) return;
      state.connection = "polling";
      requestRefresh();
    };
    for (const name of EVENT_NAMES) es.addEventListener(name, requestRefresh);
    // The daemon dropped events for this page: nothing to replay, the next snapshot has it all.
    es.addEventListener("resync", requestRefresh);
  }

  // ------------------------------------------------------------------ render: header, memory, synthesis

  function render(s) {
    setAttr(document.body, "data-seq", s.seq);
    setAttr(document.body, "data-boot-id", s.boot_id || "");
    renderHeader(s);
    renderMemory(s);
    renderSynthesis(s);
    renderDevices(s);
    renderWorkers(s);
    renderPipelines(s);
    renderCharts(s);
    renderHistory(s);
    renderFreshness();
  }

  function renderHeader(s) {
    setText(byTestId("version"), String(s.version ?? "–"));
    setText(byTestId("boot-id"), String(s.boot_id ?? "–"));
    setText(byTestId("seq"), `#${s.seq}`);
    setText(byTestId("stale-events"), String(s.stale_events ?? 0));
    const inv = byTestId("invariants");
    const ok = s.invariants_ok === true;
    const violations = Array.isArray(s.invariant_violations) ? s.invariant_violations : [];
    const label = ok ? "ok" : `VIOLATED${violations.length ? `: ${violations.join("; ")}` : ""}`;
    if (inv.textContent !== label) {
      inv.replaceChildren(h("span", { class: `badge wrap ${ok ? "ok" : "bad"}`, text: label }));
    }
    setAttr(inv, "data-ok", ok);
    tickHeader();
  }

  function tickHeader() {
    const s = state.snapshot;
    if (!s) return;
    setText(byTestId("uptime"), fmtSecs((s.uptime_secs ?? 0) + liveExtra()));
  }

  function renderMemory(s) {
    const m = s.memory || {};
    const total = Number(m.total_bytes) || 0;
    const reserved = Number(m.reserved_bytes) || 0;
    const frac = total > 0 ? reserved / total : 0;
    const level = total <= 0 ? "unknown" : frac < 0.6 ? "green" : frac < 0.85 ? "amber" : "red";
    const gauge = byTestId("memory-gauge");
    setAttr(gauge, "data-level", level);
    setAttr(gauge, "data-fraction", frac.toFixed(4));
    $(".gauge-fill", gauge).style.width = `${Math.min(100, frac * 100).toFixed(1)}%`;
    const word = { green: "under 60%", amber: "60-85%", red: "above 85%", unknown: "no budget" }[level];
    setText(byTestId("memory-text"), `${fmtBytes(reserved)} of ${fmtBytes(total)} reserved ` +
      `(${fmtPct(frac)}, ${word})`);
    setText(byTestId("memory-reserved"), fmtBytes(reserved));
    setText(byTestId("memory-available"), fmtBytes(m.available_bytes));
    setText(byTestId("memory-total"), fmtBytes(total));
    setText(byTestId("memory-rss"), fmtBytes(m.process_rss_bytes));
    setText(byTestId("memory-cached"), fmtBytes(m.cached_bytes ?? 0));
    renderAllocations(s.allocations || []);
  }

  function renderAllocations(list) {
    const table = byTestId("allocations");
    const body = $("tbody", table);
    byTestId("allocations-empty").hidden = list.length > 0;
    table.hidden = list.length === 0;
    syncKeyed(body, list, (a) => a.name, () => h("tr", { "data-testid": "allocation" }, [
      h("td", { class: "mono wrap" }), h("td", { class: "r" }), h("td", { class: "r" }),
    ]), (row, a) => {
      const [name, size, idle] = row.children;
      setText(name, a.name);
      setText(size, fmtBytes(a.bytes));
      // A key that cannot be evicted is in use: its idle time would be meaningless.
      setText(idle, a.evictable === false ? "in use" : fmtSecs(a.last_used_secs_ago ?? 0));
      setAttr(row, "data-evictable", a.evictable !== false);
    });
  }

  function renderSynthesis(s) {
    const syn = s.synthesis || {};
    const max = Number(syn.max_concurrent) || 0;
    const active = Number(syn.active) || 0;
    setText(byTestId("synthesis-active"), `${active} / ${max} active`);
    byTestId("synthesis-fill").style.width = `${max > 0 ? Math.min(100, (active / max) * 100) : 0}%`;
    const c = s.counters || {};
    const depth = queueDepth(c.queue_depth_by_priority ?? c.queue_depth);
    const dl = byTestId("queue-depth");
    const keys = [...PRIORITIES, ...Object.keys(depth).filter((k) => !PRIORITIES.includes(k))];
    for (const key of keys) {
      let row = $(`[data-priority="${CSS.escape(key)}"]`, dl);
      if (!row) {
        row = h("div", { "data-priority": key }, [h("dt", { text: key }), h("dd", { class: "num" })]);
        dl.appendChild(row);
      }
      setText($("dd", row), depth[key] === undefined ? "0" : String(depth[key]));
    }
    setText(byTestId("queue-total"), String(c.queue_depth ?? 0));
    setText(byTestId("device-queue"), c.device_queue_depth === undefined ? "–" : String(c.device_queue_depth));
    setText(byTestId("total-completed"), String(c.total_completed ?? 0));
    setText(byTestId("total-failed"), String(c.total_failed ?? 0));
    setText(byTestId("total-cancelled"), String(c.total_cancelled ?? 0));
  }

  /** queue_depth is a mapping priority -> depth; a bare number is shown as "total". */
  function queueDepth(raw) {
    if (raw && typeof raw === "object") return raw;
    if (typeof raw === "number") return { total: raw };
    return {};
  }

  // ------------------------------------------------------------------ keyed lists

  /** Make `parent`'s children match `items` in order, keyed by `key`; create or update in place. */
  function syncKeyed(parent, items, key, create, update) {
    const existing = new Map();
    for (const child of Array.from(parent.children)) existing.set(child.dataset.key, child);
    let cursor = parent.firstElementChild;
    const seen = new Set();
    for (const item of items) {
      const k = String(key(item));
      if (seen.has(k)) continue;
      seen.add(k);
      let el = existing.get(k);
      if (!el) {
        el = create(item);
        el.dataset.key = k;
      }
      update(el, item);
      if (el !== cursor) parent.insertBefore(el, cursor);
      else cursor = cursor.nextElementSibling;
    }
    for (const [k, el] of existing) if (!seen.has(k)) el.remove();
  }

  // ------------------------------------------------------------------ devices

  /** Natural order of ids: cpu:2 before cpu:10, cpu:1/w0 before cpu:1/w1. */
  const ID_ORDER = new Intl.Collator("en", { numeric: true, sensitivity: "variant" });
  const byId = (key) => (a, b) => ID_ORDER.compare(String(key(a)), String(key(b)));

  function renderDevices(s) {
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
    ]), (el, d) => {
      const frac = Math.min(1, Math.max(0, Number(d.busy_fraction_1m) || 0));
      setText($(".device-name", el), d.device);
      const workers = d.workers === undefined ? "" : `, ${d.workers} worker${d.workers === 1 ? "" : "s"}`;
      const down = d.workers_down ? ` (${d.workers_down} down)` : "";
      setText($(".device-meta", el), `${d.kind ?? ""}${workers}${down}`);
      $(".busy-fill", el).style.width = `${(frac * 100).toFixed(1)}%`;
      setText($(".device-busy", el), `${fmtPct(frac)} busy (1 min)`);
    });
  }

  // ------------------------------------------------------------------ workers

  function renderWorkers(s) {
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
    setAttr(card, "data-seq", state.seq);
    setText(byTestId("worker-id", card), w.worker_id);
    setText(byTestId("worker-device", card), w.device ?? "");
    setText(byTestId("worker-state", card), stale ? "unknown (stale)" : w.state);
    setText(byTestId("worker-last-known", card), stale ? `last known (snapshot #${state.seq}): ${w.state}` : "");
    if (!stale && DOWN_STATES.has(w.state)) {
      // A dead worker is never shown idle: it says it is down, why, and how often it was restarted.
      const restarts = w.restarts ? ` (restarts: ${w.restarts})` : "";
      setText(byTestId("worker-last-known", card), `${w.last_error || "its processes died"}${restarts}`);
    }
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

  function tickWorker(card, w) {
    const resting = w.state === "idle" || DOWN_STATES.has(w.state);
    const busy = (w.busy_secs ?? 0) + (resting ? 0 : liveExtra());
    setText(byTestId("worker-busy", card), resting && !isStale() ? "—" : fmtSecs(busy));
  }

  // ------------------------------------------------------------------ pipelines

  function renderPipelines(s) {
    // Queued and running jobs first, each in submission order; below them a short, collapsible tail of the
    // finished ones the daemon still keeps in its live view (the newest FINISHED_TAIL, in submission order).
    const list = s.pipelines || [];
    const live = list.filter((j) => !TERMINAL_JOB.has(j.state));
    const finished = list.filter((j) => TERMINAL_JOB.has(j.state));
    const tail = newestFinished(finished, FINISHED_TAIL);
    byTestId("pipelines-empty").hidden = live.length > 0;
    const box = byTestId("finished-box");
    box.hidden = finished.length === 0;
    setAttr(box, "data-count", finished.length);
    setText(byTestId("finished-title"), finished.length > tail.length
      ? `Finished: the newest ${tail.length} of ${finished.length} still in the live view (all in Recently finished)`
      : `Finished: ${finished.length} still in the live view`);
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
      h("ul", { class: "job-failures", "data-testid": "job-failures" }),
    ]);
  }

  /** "circom · <circuit name>" for jobs on a registered circuit, else the proof kind; always whole. */
  function jobKindText(j) {
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
            if (state.snapshot) render(state.snapshot);
          } // else: the job has no circuit (or is unknown): keep null, do not ask again
        })
        .catch(() => circuits.delete(jobId)); // unreachable: ask again on a later snapshot
    }
    return circuits.get(jobId);
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

  function tickJob(row, j) {
    let secs = typeof j.elapsed_secs === "number" ? j.elapsed_secs : j.started_secs_ago ?? 0;
    if (!TERMINAL_JOB.has(j.state)) secs += liveExtra();
    setText(byTestId("job-elapsed", row), fmtSecs(Math.max(0, secs)));
  }

  /** The whole failure reason, without terminal colour codes. */
  function failureReason(x) {
    const raw = x.reason || x.error || x.failure_reason || x.failure || "";
    return String(raw).replace(/\u001b\[[0-9;]*[A-Za-z]/g, "").trim();
  }

  /** The reason's first line, for text in rows and tables; the whole reason goes in the tooltip. */
  function reasonLine(reason) {
    return reason.split("\n", 1)[0].trim();
  }

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

  // ------------------------------------------------------------------ charts

  function newLocalSeries() {
    return { lastCompleted: null, perMinute: new Map(), busy: [], phases: new Map() };
  }

  /** Gather chart data from successive snapshots, used only when the daemon serves no history. */
  function gatherLocal(s) {
    const L = state.local;
    const c = s.counters || {};
    const done = Number(c.total_completed) || 0;
    const minute = Math.floor(Date.now() / 60000);
    if (L.lastCompleted !== null && done > L.lastCompleted) {
      L.perMinute.set(minute, (L.perMinute.get(minute) || 0) + (done - L.lastCompleted));
    }
    L.lastCompleted = done;
    for (const k of L.perMinute.keys()) if (k <= minute - 60) L.perMinute.delete(k);
    const bucket = Math.floor(Date.now() / 10000);
    const last = L.busy[L.busy.length - 1];
    const sample = { bucket, fractions: Object.fromEntries((s.devices || []).map(
      (d) => [d.device, Number(d.busy_fraction_1m) || 0])) };
    if (last && last.bucket === bucket) L.busy[L.busy.length - 1] = sample;
    else L.busy.push(sample);
    while (L.busy.length > 360) L.busy.shift();
    for (const j of s.pipelines || []) {
      for (const p of j.partitions || []) {
        if (p.state === "done" && p.prove_ms != null) {
          L.phases.set(`${j.job_id}/${p.index}`, {
            label: `${j.job_id} #${p.index}`,
            parts: [(p.synth_ms || 0) / 1000, (p.prove_ms || 0) / 1000, (p.finalize_ms || 0) / 1000],
          });
        }
      }
    }
    while (L.phases.size > 60) L.phases.delete(L.phases.keys().next().value);
  }

  /** Per-minute proofs completed over the last hour, oldest first (60 values). */
  function proofsPerMinute(s) {
    const served = s.history && Array.isArray(s.history.proofs_per_minute) ? s.history.proofs_per_minute : null;
    if (served) return served.slice(-60).map((x) => (typeof x === "number" ? x : Number(x.count) || 0));
    const minute = Math.floor(Date.now() / 60000);
    const out = [];
    for (let k = minute - 59; k <= minute; k += 1) out.push(state.local.perMinute.get(k) || 0);
    return out;
  }

  /** Device busy fraction series over the last hour: [{name, values}]. */
  function busySeries(s) {
    const served = s.history && Array.isArray(s.history.busy_fraction_per_minute)
      ? s.history.busy_fraction_per_minute : null;
    if (served) {
      const values = served.slice(-60).map((x) => (typeof x === "number" ? x : Number(x.fraction) || 0));
      return [{ name: "all devices", values }];
    }
    const names = (s.devices || []).map((d) => d.device);
    return names.map((name) => ({ name, values: state.local.busy.map((b) => b.fractions[name] ?? 0) }));
  }

  function phaseRows(s) {
    const served = Array.isArray(s.recent_partitions) ? s.recent_partitions : null;
    if (served) {
      return served.slice(-60).map((p) => ({
        label: `${p.job_id} #${p.index ?? p.partition}`,
        parts: [(p.synth_ms || 0) / 1000, (p.prove_ms || 0) / 1000, (p.finalize_ms || 0) / 1000],
      }));
    }
    return Array.from(state.local.phases.values());
  }

  /** The left label of the hour charts: how far back their first bucket is ("-60 min"). */
  function historySpan(s, buckets) {
    const minute = s.history && typeof s.history.minute_secs === "number" ? s.history.minute_secs : 60;
    const secs = minute * Math.max(buckets, 1);
    return secs >= 120 ? `-${Math.round(secs / 60)} min` : `-${Math.round(secs)} s`;
  }

  function renderCharts(s) {
    const C = window.ProoflaneCharts;
    if (!C) return;
    const perMin = proofsPerMinute(s);
    const total = perMin.reduce((a, b) => a + b, 0);
    setText(byTestId("proofs-hour"), `${total} proofs in the last hour (per minute)`);
    const span = historySpan(s, perMin.length);
    C.bars(byTestId("chart-proofs"), perMin, { left: span, right: "now",
      summary: `${total} proofs completed in the last hour` });

    const series = busySeries(s);
    const now = (s.devices || []).map((d) => `${d.device} ${fmtPct(Number(d.busy_fraction_1m) || 0)}`);
    setText(byTestId("busy-now"), now.length ? `last minute: ${now.join(", ")}` : "no devices");
    C.lines(byTestId("chart-busy"), series, { left: span, right: "now",
      summary: `device busy fraction: ${now.join(", ")}` });

    const rows = phaseRows(s);
    const avg = (i) => rows.length ? rows.reduce((a, r) => a + r.parts[i], 0) / rows.length : 0;
    setText(byTestId("phase-summary"), rows.length
      ? `mean of ${rows.length}: synth ${avg(0).toFixed(2)}s, prove ${avg(1).toFixed(2)}s, ` +
        `finalize ${avg(2).toFixed(2)}s`
      : "no finished partitions yet");
    C.stacked(byTestId("chart-phases"), rows, { left: "older", right: "latest",
      summary: "phase times of recent partitions" });
  }

  // ------------------------------------------------------------------ history

  function servedHistory(s) {
    for (const key of ["recent_jobs", "finished_jobs", "history_jobs"]) {
      if (Array.isArray(s[key])) return s[key];
    }
    return null;
  }

  function renderHistory(s) {
    let rows = servedHistory(s);
    if (rows === null || rows.length === 0) { // e.g. just after a restart: the journal still has them
      maybeFetchHistory();
      rows = state.historyRows || [];
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
      const out = r.outcome ?? r.state ?? "";
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

  function historyDuration(r) {
    if (typeof r.duration_secs === "number") return r.duration_secs;
    if (typeof r.finished_at === "number" && typeof r.submitted_at === "number") {
      return r.finished_at - r.submitted_at;
    }
    return null;
  }

  async function maybeFetchHistory() {
    if (Date.now() - state.historyFetchedAt < HISTORY_POLL_MS) return;
    state.historyFetchedAt = Date.now();
    try {
      const all = [];
      for (const st of ["done", "failed", "cancelled"]) {
        const resp = await fetch(`${JOBS_URL}?state=${st}&limit=${HISTORY_FETCH_LIMIT}`, { cache: "no-store" });
        if (resp.ok) all.push(...(await resp.json()));
      }
      all.sort((a, b) => (a.finished_at ?? 0) - (b.finished_at ?? 0));
      state.historyRows = all.map((j) => ({ ...j, outcome: j.state }));
    } catch (err) {
      // keep the last rows; the stale banner covers an unreachable daemon
    }
  }

  // ------------------------------------------------------------------ ticking and start

  function tick() {
    renderFreshness();
    tickHeader();
    const s = state.snapshot;
    if (!s) return;
    const stale = isStale();
    for (const card of document.querySelectorAll('[data-testid="worker-card"]')) {
      const w = (s.workers || []).find((x) => x.worker_id === card.dataset.key);
      if (!w) continue;
      // Freshness changed since the last render: redraw the card so it never keeps a state it cannot vouch for.
      if ((card.dataset.state === "unknown") !== stale) updateWorkerCard(card, w);
      else tickWorker(card, w);
    }
    for (const row of document.querySelectorAll('[data-testid="pipeline-row"]')) {
      const j = (s.pipelines || []).find((x) => x.job_id === row.dataset.key);
      if (j) tickJob(row, j);
    }
  }

  function poll() {
    if (Date.now() - state.lastFetchStart >= POLL_MS - 50) requestRefresh();
  }

  window.prooflane = {
    get snapshot() { return state.snapshot; },
    get seq() { return state.seq; },
    get bootId() { return state.bootId; },
    get stale() { return isStale(); },
    get connection() { return state.connection; },
    refresh: requestRefresh,
  };

  renderFreshness();
  refresh();
  setInterval(poll, 250);
  setInterval(tick, TICK_MS);
})();
