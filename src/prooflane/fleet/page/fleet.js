// prooflane fleet page: one row per daemon from GET /fleet/status?snapshots=false (polled every second), and each daemon's own
// dashboard (the daemon dashboard's code, served by the fleet at /d/<name>/) on click. A native ES module, no build step.
//
// Rules this page keeps:
// - A daemon that is stale or unreachable shows its health and the time since its last good snapshot, and
//   "—" for every live number: never idle, never zero.
// - When the fleet service itself stops answering, a banner says so and every row's health reads "unknown".
// - Rows are keyed by daemon name and updated in place, in the config's order.
//
// For tests and tools, `window.prooflaneFleet` exposes the status the page last rendered.
//
// The DOM helpers and number formats are the dashboard's own files, served by the fleet at /assets/<name>.
import { $, byTestId, h, setAttr, setText } from "./assets/dom.js";
import { fmtBytes, fmtPct, fmtSecs } from "./assets/format.js";

const STATUS_URL = "fleet/status?snapshots=false"; // rows need the summaries, not whole snapshots
const POLL_MS = 1000;
const FETCH_TIMEOUT_MS = 3000;
const STALE_AFTER_MS = 3000;
const TICK_MS = 250;

const state = { status: null, receivedAt: 0, fetching: false, selected: null, circuits: null, logs: null };

function fmtRate(x) { return x === null || x === undefined ? "–" : x >= 100 ? x.toFixed(0) : x.toFixed(1); }
function fmtMoney(x) {
  if (x === null || x === undefined) return "–";
  return x >= 1 ? `$${x.toFixed(2)}` : x >= 0.01 ? `$${x.toFixed(3)}` : `$${x.toPrecision(2)}`;
}

// ---------------------------------------------------------------- freshness of the fleet's own answer

function ageMs() { return state.status ? Date.now() - state.receivedAt : Infinity; }
function isStale() { return ageMs() > STALE_AFTER_MS; }

function renderFreshness() {
  const stale = isStale();
  setAttr(document.body, "data-stale", stale);
  const banner = $("#banner");
  banner.hidden = !stale;
  if (stale) {
    setText(banner, state.status
      ? `The fleet service at ${location.host} has not answered for ${(ageMs() / 1000).toFixed(1)} s; ` +
        "daemon health is unknown until it answers."
      : `Waiting for the fleet service at ${location.host} to answer ${STATUS_URL}.`);
  }
}

// ---------------------------------------------------------------- fetching

async function refresh() {
  if (state.fetching) return;
  state.fetching = true;
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(), FETCH_TIMEOUT_MS);
  try {
    const resp = await fetch(STATUS_URL, { cache: "no-store", signal: ctrl.signal });
    if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
    state.status = await resp.json();
    state.receivedAt = Date.now();
    render(state.status);
  } catch (err) {
    // the banner says the fleet is not answering once the last answer is old enough
  } finally {
    clearTimeout(timer);
    state.fetching = false;
    renderFreshness();
  }
}

// ---------------------------------------------------------------- rendering

function render(s) {
  setAttr(document.body, "data-taken-at", s.taken_at);
  renderTotals(s.totals);
  const list = s.daemons || [];
  byTestId("daemons-empty").hidden = list.length > 0;
  syncRows($("tbody", byTestId("daemons")), list);
  tick();
}

function renderTotals(t) {
  setText(byTestId("total-up"), `${t.counted.length} / ${t.daemons}`);
  setText(byTestId("total-devices"), `${t.devices_busy} / ${t.devices_idle}`);
  setText(byTestId("total-workers"), `${t.workers_proving} / ${t.workers}`);
  setText(byTestId("total-pph"), fmtRate(t.proofs_per_hour));
  setText(byTestId("total-queue"), String(t.queue_depth + t.device_queue_depth));
  // Held (reservations and cached keys) of what the machines can give: each machine counted once, however
  // many daemons share it; an overcommitted machine (budgets above its memory) is named.
  const machines = t.machines || [];
  const over = machines.filter((m) => m.overcommitted).map((m) => m.hostname || m.machine_id);
  const memory = byTestId("total-memory");
  setText(memory, `${fmtBytes(t.memory_used_bytes)} / ${fmtBytes(t.memory_total_bytes)}`
    + ` on ${machines.length} machine${machines.length === 1 ? "" : "s"}`
    + (over.length ? ` (budgets above memory: ${over.join(", ")})` : ""));
  setAttr(memory, "data-machines", machines.length);
  setText(byTestId("total-cost"), fmtMoney(t.cost_per_hour));
  setText(byTestId("total-cost-proof"), fmtMoney(t.cost_per_proof));
  renderNeed(byTestId("total-need"), t.break_even);
  setText(byTestId("not-counted"), t.not_counted.length
    ? `(totals leave out ${t.not_counted.join(", ")}: not up)` : "");
}

/** One <tr class="daemon"> per daemon (plus a <tr class="ray"> under a Ray-backed one), in order. */
function syncRows(tbody, list) {
  const existing = new Map();
  for (const tr of Array.from(tbody.children)) existing.set(tr.dataset.key, tr);
  const wanted = [];
  for (const d of list) {
    let row = existing.get(`d:${d.name}`) || createRow(d.name);
    updateRow(row, d);
    wanted.push(row);
    const ray = d.summary && d.summary.ray;
    if (ray) {
      const rayRow = existing.get(`r:${d.name}`) || h("tr", { class: "ray", "data-testid": "ray-row" }, [
        h("td", { colspan: "11" })]);
      rayRow.dataset.key = `r:${d.name}`;
      setText(rayRow.firstChild, rayText(ray));
      wanted.push(rayRow);
    }
  }
  const keep = new Set(wanted);
  for (const tr of existing.values()) if (!keep.has(tr)) tr.remove();
  wanted.forEach((tr, i) => { if (tbody.children[i] !== tr) tbody.insertBefore(tr, tbody.children[i] || null); });
}

function rayText(ray) {
  const nodes = Array.isArray(ray.nodes) ? ray.nodes : [];
  const names = nodes.map((n) => {
    if (typeof n !== "object" || n === null) return String(n);
    const id = n.node_id ?? n.name ?? n.address ?? n.NodeManagerAddress ?? "node";
    const alive = n.alive ?? n.Alive;
    return alive === undefined ? String(id) : `${id} (${alive ? "alive" : "dead"})`;
  });
  const where = ray.address ? ` at ${ray.address}` : "";
  return `Ray cluster${where}: ${nodes.length} node${nodes.length === 1 ? "" : "s"}` +
    (names.length ? `: ${names.join(", ")}` : "");
}

function createRow(name) {
  const td = (cls, id, kids) => h("td", { class: cls, "data-testid": id }, kids || []);
  const tr = h("tr", { class: "daemon", "data-testid": "daemon-row", tabindex: "0" }, [
    td("", "d-name", [h("div", { class: "d-name wrap" }), h("div", { class: "d-where", "data-testid": "d-where" }),
      h("div", { class: "d-arith wrap", "data-testid": "d-arith" })]),
    td("", "d-health", [h("span", { class: "health" }), h("span", { class: "health-age num" })]),
    td("live", "d-busy", [
      h("div", { class: "bar-row" }, [h("div", { class: "minibar" }, [h("div", { class: "minibar-fill busy-fill" })])]),
      h("div", { class: "d-busy-text num" })]),
    td("r live num", "d-workers"),
    td("r live num", "d-pph", [h("div", { class: "d-pph-10m" }), h("div", { class: "d-pph-1m sub" })]), td("r num", "d-cost"), td("r live num", "d-cpp"),
    td("r num", "d-need", [h("div", { class: "d-need-rate" }), h("div", { class: "d-need-verdict sub" })]),
    td("r live num", "d-memory", [h("div", { class: "d-mem-used" }), h("div", { class: "d-mem-total sub" })]),
    td("r live num", "d-queue"), td("d-error wrap", "d-error"),
  ]);
  tr.dataset.key = `d:${name}`;
  tr.addEventListener("click", () => select(name));
  tr.addEventListener("keydown", (e) => { if (e.key === "Enter") select(name); });
  return tr;
}

function updateRow(tr, d) {
  const fresh = d.health === "up" && !isStale();
  const s = d.summary;
  setAttr(tr, "data-name", d.name);
  setAttr(tr, "data-health", isStale() ? "unknown" : d.health);
  setAttr(tr, "data-fresh", fresh);
  tr.classList.toggle("not-fresh", !fresh);
  tr.classList.toggle("selected", state.selected === d.name);
  const nameCell = byTestId("d-name", tr);
  $(".d-name", nameCell).replaceChildren(document.createTextNode(d.name),
    ...(s && s.ray ? [h("span", { class: "badge ray", "data-testid": "ray-badge", text: "Ray" })] : []));
  renderWhere($(".d-where", nameCell), d.where);
  renderArithmetic($(".d-arith", nameCell), s && s.arithmetic);
  const dash = "—";
  const live = (text) => (fresh ? text : dash);
  const frac = s && s.busy_fraction_1m !== null ? s.busy_fraction_1m : 0;
  $(".busy-fill", tr).style.width = fresh ? `${(Math.min(1, frac) * 100).toFixed(1)}%` : "0%";
  setText($(".d-busy-text", tr), fresh
    ? `${s.devices_busy} of ${s.devices} proving now; ${fmtPct(frac)} busy (1 min)` : dash);
  setText(byTestId("d-workers", tr), live(s ? `${s.workers_proving} / ${s.workers}` : dash));
  // The daemon dashboard's windows: the 10-minute rate (the one added up, priced and judged by break-even),
  // and under it the last minute's.
  const pph = byTestId("d-pph", tr);
  setText($(".d-pph-10m", pph), live(s ? fmtRate(s.proofs_per_hour_10m ?? s.proofs_per_hour) : dash));
  setText($(".d-pph-1m", pph), fresh && s && s.proofs_per_hour_1m !== undefined
    ? `${fmtRate(s.proofs_per_hour_1m)} last min` : "");
  setText(byTestId("d-cost", tr), fmtMoney(d.cost_per_hour));
  setText(byTestId("d-cpp", tr), live(s ? fmtMoney(s.cost_per_proof) : dash));
  renderNeed(byTestId("d-need", tr), fresh ? d.break_even : d.break_even && { ...d.break_even, reached: null });
  // Held, then "of" the budget on a line of its own (one line overflows the column at 1280 px).
  const memory = byTestId("d-memory", tr);
  setText($(".d-mem-used", memory), live(s ? fmtBytes(s.memory_used_bytes) : dash));
  setText($(".d-mem-total", memory), fresh && s ? `of ${fmtBytes(s.memory_total_bytes)}` : "");
  setText(byTestId("d-queue", tr), live(s ? String(s.queue_depth + s.device_queue_depth) : dash));
  // Every error says how long ago it happened: the daemon's own (why it is not up), and its newest failed
  // job (its age in the snapshot, plus the snapshot's own age). One line each, the whole text in the title.
  const errors = [];
  const seen = Math.max(0, ageMs()) / 1000;
  if (d.health === "stopped") {
    errors.push(`stopped by the fleet (fleet stop) ${fmtSecs((d.stopped_secs_ago || 0) + seen)} ago`);
  } else if (d.health !== "up" && d.last_error) {
    const ago = d.last_error_age_secs === null ? "" : ` (${fmtSecs(d.last_error_age_secs + seen)} ago)`;
    errors.push(`${d.last_error}${ago}`);
  }
  if (s && s.last_error) {
    const ago = fmtSecs((s.last_error.ended_secs_ago || 0) + (d.snapshot_age_secs || 0) + seen);
    const reason = String(s.last_error.reason).split("\n", 1)[0];
    errors.push(`job ${s.last_error.job_id} failed ${ago} ago: ${reason}`);
  }
  const errCell = byTestId("d-error", tr);
  errCell.replaceChildren(...errors.map((text) => h("div", { class: "d-error-line", text })));
  setAttr(errCell, "title", errors.join("\n"));
  tickRow(tr, d);
}

/** What proves each curve there, whole ("c-extension", "libraries (why)"); a warning when a curve proves on
 *  the libraries (the slower path), its words the daemon's own health warnings (the cell's title). Nothing
 *  from a daemon that does not say. */
function renderArithmetic(el, a) {
  const slow = Boolean(a && a.libraries.length);
  setText(el, a ? `arithmetic: ${a.text}` : "");
  setAttr(el, "data-warning", slow);
  el.classList.toggle("warn", slow);
  setAttr(el, "title", a ? (a.warnings.join("\n") || a.text) : "");
}

/** The proofs per hour that pay the cost at the fleet's price per proof, and whether the measured rate
 *  reaches them ("reached" / "short"; nothing said while there is no live rate). */
function renderNeed(cell, be) {
  setAttr(cell, "data-reached", be && be.reached !== null ? String(be.reached) : "");
  // The verdict on a line of its own: "1200 reached" on one line overflows the column at 1280 px.
  setText($(".d-need-rate", cell), be ? fmtRate(be.proofs_per_hour_needed) : "–");
  setText($(".d-need-verdict", cell), !be || be.reached === null ? "" : be.reached ? "reached" : "short");
  cell.classList.toggle("short", Boolean(be) && be.reached === false);
}

/** Where the daemon is, broken only between "scheme://user@" and "host:port" (each kept whole: a port is
 *  never cut from its host); the whole address is the title. */
function renderWhere(el, where) {
  if (el.dataset.where === where) return;
  el.dataset.where = where;
  const at = Math.max(where.lastIndexOf("@"), where.indexOf("://") + 2);
  const parts = at > 0 ? [where.slice(0, at + 1), where.slice(at + 1)] : [where];
  const spans = parts.map((text) => h("span", { class: "nowrap", text }));
  el.replaceChildren(...spans.flatMap((span, i) => (i ? [document.createElement("wbr"), span] : [span])));
  setAttr(el, "title", where);
}

/** Health and the age of the last good snapshot, counting on between answers. */
function tickRow(tr, d) {
  const unknown = isStale();
  const shown = unknown ? "unknown" : d.health;
  const badge = $(".health", tr);
  setText(badge, shown);
  setAttr(badge, "class", `health h-${shown}`);
  let age = "";
  if (d.snapshot_age_secs !== null && d.snapshot_age_secs !== undefined) {
    const secs = d.snapshot_age_secs + (unknown ? 0 : Math.max(0, ageMs()) / 1000);
    age = d.health === "up" && !unknown ? `snapshot ${fmtSecs(secs)} old`
      : `last good snapshot ${fmtSecs(secs)} ago`;
  } else if (d.health !== "up") {
    age = "no snapshot yet";
  }
  setText($(".health-age", tr), age);
}

function tick() {
  renderFreshness();
  const s = state.status;
  if (!s) return;
  for (const d of s.daemons || []) {
    const tr = $(`tr.daemon[data-name="${CSS.escape(d.name)}"]`);
    if (tr) tickRow(tr, d);
  }
}

// ---------------------------------------------------------------- the daemon's own dashboard

function select(name) {
  state.selected = name;
  const panel = byTestId("detail");
  const url = `d/${encodeURIComponent(name)}/`;
  panel.hidden = false;
  setText(byTestId("detail-title"), `${name}: its own dashboard`);
  setAttr(byTestId("detail-open"), "href", url);
  const frame = byTestId("detail-frame");
  if (frame.dataset.name !== name) { frame.dataset.name = name; frame.src = url; }
  if (location.hash !== `#${encodeURIComponent(name)}`) history.replaceState(null, "", `#${encodeURIComponent(name)}`);
  for (const tr of document.querySelectorAll("tr.daemon")) tr.classList.toggle("selected", tr.dataset.name === name);
}

byTestId("detail-close").addEventListener("click", () => {
  state.selected = null;
  byTestId("detail").hidden = true;
  const frame = byTestId("detail-frame");
  frame.removeAttribute("src");
  frame.dataset.name = "";
  history.replaceState(null, "", location.pathname);
  for (const tr of document.querySelectorAll("tr.daemon")) tr.classList.remove("selected");
});

// ---------------------------------------------------------------- circuits, by digest

const CIRCUITS_URL = "fleet/circuits";
const CIRCUITS_MS = 5000;
const WHY = { holds: "holds", other: "other files under the name", missing: "missing", unknown: "not answering" };

async function refreshCircuits() {
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(), FETCH_TIMEOUT_MS);
  try {
    const resp = await fetch(CIRCUITS_URL, { cache: "no-store", signal: ctrl.signal });
    if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
    state.circuits = await resp.json();
    renderCircuits(state.circuits.circuits || []);
  } catch (_) {
    // the daemons' own rows say what is unreachable; the table keeps its last answer
  } finally {
    clearTimeout(timer);
  }
}

function renderCircuits(list) {
  const tbody = byTestId("circuits").querySelector("tbody");
  tbody.replaceChildren(...list.map((c) => {
    const held = Object.entries(c.daemons).filter(([, s]) => s === "holds").map(([d]) => d);
    const not = Object.entries(c.daemons).filter(([, s]) => s !== "holds").map(([d, s]) => `${d} (${WHY[s] || s})`);
    const tr = h("tr", { "data-circuit": c.name, "data-digest": c.digest }, [
      h("td", { text: c.name }), h("td", { class: "mono", text: c.digest }),
      h("td", { "data-testid": "held-by", text: held.join(", ") || "–" }),
      h("td", { "data-testid": "not-held-by", text: not.join(", ") || "–" }),
    ]);
    return tr;
  }));
  byTestId("circuits-empty").hidden = list.length > 0;
}

// ---------------------------------------------------------------- each daemon's last log lines

const LOGS_URL = "fleet/logs?lines=12";
const LOGS_MS = 3000;

async function refreshLogs() {
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(), FETCH_TIMEOUT_MS);
  try {
    // A fleet that lists view tokens reads its daemons' logs only with one: the token typed below, if any.
    const token = byTestId("m-token").value;
    const headers = token ? { "Authorization": `Bearer ${token}` } : {};
    const resp = await fetch(LOGS_URL, { cache: "no-store", signal: ctrl.signal, headers });
    if (resp.status === 401 || resp.status === 403) {
      byTestId("logs-empty").hidden = false;
      setText(byTestId("logs-empty"), "the daemons' logs need a view token here: type the fleet token below");
      return;
    }
    if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
    state.logs = await resp.json();
    renderLogs(state.logs.daemons || {});
  } catch (_) {
    // the banner covers a fleet that does not answer; each block keeps its last lines
  } finally {
    clearTimeout(timer);
  }
}

let shownLogs = "";

/** One block per daemon; rebuilt only when a line changed, so that reading or selecting a quiet log is
 *  not undone every 3 s. */
function renderLogs(daemons) {
  const shown = JSON.stringify(daemons);
  if (shown === shownLogs) return;
  shownLogs = shown;
  const box = byTestId("logs");
  const names = Object.keys(daemons);
  box.replaceChildren(...names.map((name) => {
    const got = daemons[name];
    const n = got.lines.length;
    const what = `last ${n} line${n === 1 ? "" : "s"} of ${got.file}`;
    // A daemon that does not answer: why, and the lines the fleet read of it last, with their age.
    const note = !got.error ? what : got.source === "fleet"
      ? `cannot read: ${got.error}; the ${what} as read ${fmtSecs(got.read_secs_ago)} ago`
      : `cannot read: ${got.error}`;
    return h("div", { class: "log", "data-testid": "log", "data-name": name }, [
      h("div", { class: "log-head" }, [document.createTextNode(name), h("span", { class: "muted", text: note })]),
      ...(got.lines && got.lines.length
        ? [h("pre", { class: "log-lines", "data-testid": "log-lines", text: got.lines.join("\n") })] : []),
    ]);
  }));
  setText(byTestId("logs-empty"), "no daemon log read yet");
  byTestId("logs-empty").hidden = names.length > 0;
}

// ---------------------------------------------------------------- deploy, restart, stop

// The fleet's token stays in this page's memory only (never in storage, never in the address).
const MANAGE_TIMEOUT_MS = 3600 * 1000; // the fleet bounds each step itself (deploy_timeout_secs)

function words(text) { return text.trim() ? text.trim().split(/\s+/) : []; }

function deployBody(form) {
  const body = {};
  const value = (name) => form.elements[name].value.trim();
  if (value("ssh")) body.ssh = value("ssh");
  if (value("ssh_options")) body.ssh_options = words(value("ssh_options"));
  if (value("remote_port")) body.remote_port = Number(value("remote_port"));
  if (value("deploy_dir")) body.deploy_dir = value("deploy_dir");
  if (value("pip_args")) body.pip_args = words(value("pip_args"));
  if (value("cost_per_hour")) body.cost_per_hour = Number(value("cost_per_hour"));
  return body;
}

async function manage(verb) {
  const form = byTestId("manage");
  const result = byTestId("m-result");
  if (!form.reportValidity()) return;
  const name = form.elements.name.value.trim();
  const buttons = form.querySelectorAll("button");
  buttons.forEach((b) => { b.disabled = true; });
  setAttr(result, "data-state", "running");
  setText(result, `${verb} of ${name}: under way (a deploy can take minutes)…`);
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(), MANAGE_TIMEOUT_MS);
  try {
    const resp = await fetch(`fleet/daemons/${encodeURIComponent(name)}/${verb}`, {
      method: "POST", signal: ctrl.signal,
      headers: { "Authorization": `Bearer ${form.elements.token.value}`, "Content-Type": "application/json" },
      body: JSON.stringify(verb === "deploy" ? deployBody(form) : {}),
    });
    const answer = await resp.json().catch(() => ({ detail: `HTTP ${resp.status}` }));
    if (!resp.ok) throw new Error(`${resp.status}: ${answer.detail}`);
    const said = verb === "deploy" ? `deployed ${answer.name} (${answer.version}) at ${answer.where}: ${answer.started}`
      : `${name}: ${answer.stopped || answer.restarted}`;
    setAttr(result, "data-state", "done");
    setText(result, said);
  } catch (err) {
    setAttr(result, "data-state", "failed");
    setText(result, `${verb} of ${name} failed: ${err.message}`);
  } finally {
    clearTimeout(timer);
    buttons.forEach((b) => { b.disabled = false; });
  }
}

byTestId("manage").addEventListener("submit", (e) => { e.preventDefault(); manage("deploy"); });
byTestId("m-restart").addEventListener("click", () => manage("restart"));
byTestId("m-stop").addEventListener("click", () => manage("stop"));

window.prooflaneFleet = {
  get logs() { return state.logs; },
  get status() { return state.status; },
  get circuits() { return state.circuits; },
  get stale() { return isStale(); },
  select,
  refresh,
};

renderFreshness();
refresh().then(() => { if (location.hash.length > 1) select(decodeURIComponent(location.hash.slice(1))); });
setInterval(refresh, POLL_MS);
setInterval(tick, TICK_MS);
refreshCircuits();
setInterval(refreshCircuits, CIRCUITS_MS);
refreshLogs();
setInterval(refreshLogs, LOGS_MS);
