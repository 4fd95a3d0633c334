// The Memory panel: the gauge of everything the budget holds (reservations and cached proving keys, against
// the budget: green under 60%, amber to 85%, red above), the byte counts, the RSS of the daemon with its
// workers and of the daemon alone, and the cached keys with their size and idle time.
import { $, byTestId, h, setAttr, setText, syncKeyed } from "./dom.js";
import { fmtBytes, fmtPct, fmtSecs } from "./format.js";

/** Bytes the budget holds: `used_bytes`, or reserved + cached from a daemon that does not send it. */
function heldBytes(m) {
  if (typeof m.used_bytes === "number") return m.used_bytes;
  return (Number(m.reserved_bytes) || 0) + (Number(m.cached_bytes) || 0);
}

export function renderMemory(s) {
  const m = s.memory || {};
  const total = Number(m.total_bytes) || 0;
  const reserved = Number(m.reserved_bytes) || 0;
  const cached = Number(m.cached_bytes) || 0;
  const held = heldBytes(m);
  const frac = total > 0 ? held / total : 0;
  const level = total <= 0 ? "unknown" : frac < 0.6 ? "green" : frac < 0.85 ? "amber" : "red";
  const gauge = byTestId("memory-gauge");
  setAttr(gauge, "data-level", level);
  setAttr(gauge, "data-fraction", frac.toFixed(4));
  // Two segments of one bar: the reservations, then the cached keys (hatched).
  const width = (n) => `${total > 0 ? Math.min(100, (n / total) * 100).toFixed(1) : 0}%`;
  const [fill, keys] = gauge.querySelectorAll(".gauge-fill");
  fill.style.width = width(Math.min(reserved, total));
  keys.style.width = width(Math.max(0, Math.min(cached, total - reserved)));
  const word = { green: "under 60%", amber: "60-85%", red: "above 85%", unknown: "no budget" }[level];
  setText(byTestId("memory-text"), `${fmtBytes(held)} of ${fmtBytes(total)} held (${fmtPct(frac)}, ` +
    `${word}): ${fmtBytes(reserved)} reserved + ${fmtBytes(cached)} cached keys`);
  setText(byTestId("memory-used"), fmtBytes(held));
  setText(byTestId("memory-reserved"), fmtBytes(reserved));
  setText(byTestId("memory-available"), fmtBytes(m.available_bytes));
  setText(byTestId("memory-total"), fmtBytes(total));
  setText(byTestId("memory-rss-tree"), fmtBytes(m.tree_rss_bytes));
  setText(byTestId("memory-rss"), fmtBytes(m.process_rss_bytes));
  setText(byTestId("memory-cached"), fmtBytes(cached));
  renderAllocations(s.allocations || []);
  renderTables(s.tables || []);
}

// Each key takes two lines of its own: its whole name, then its size and idle time, so a name is never
// broken at a hyphen; the box shows four whole entries and scrolls by whole entries.
function renderAllocations(list) {
  const keys = byTestId("allocations");
  byTestId("allocations-empty").hidden = list.length > 0;
  keys.hidden = list.length === 0;
  syncKeyed(keys, list, (a) => a.name, () => h("li", { "data-testid": "allocation" }, [
    h("div", { class: "key-name mono", "data-testid": "allocation-name" }),
    h("div", { class: "key-meta num" }, [h("span"), h("span")]),
  ]), (row, a) => {
    const name = $(".key-name", row);
    setText(name, a.name);
    setAttr(name, "title", a.name);
    const [size, idle] = $(".key-meta", row).children;
    setText(size, fmtBytes(a.bytes));
    // A key that cannot be evicted is in use: its idle time would be meaningless.
    setText(idle, a.evictable === false ? "in use" : `idle ${fmtSecs(a.last_used_secs_ago ?? 0)}`);
    setAttr(row, "data-evictable", a.evictable !== false);
  });
}

// Under the cached keys, each key's fixed-base tables (msm_tables = "auto"): its whole name, then their state,
// with a worker's copy when stored or the whole reason when not used, wrapped rather than cut.
function renderTables(list) {
  const box = byTestId("tables");
  box.hidden = list.length === 0;
  syncKeyed(box, list, (t) => t.key, () => h("li", { "data-testid": "table" }, [
    h("div", { class: "key-name mono", "data-testid": "table-key" }),
    h("div", { class: "key-meta", "data-testid": "table-state" }),
  ]), (row, t) => {
    const name = $(".key-name", row);
    setText(name, t.key);
    setAttr(name, "title", t.key);
    setAttr(row, "data-state", t.state);
    setText($(".key-meta", row), tablesText(t));
  });
}

/** "msm tables: stored, 238 MiB a worker", "msm tables: building, ..." or "msm tables: not used, <reason>". */
export function tablesText(t) {
  if (t.state === "stored") return `msm tables: stored, ${fmtBytes(Number(t.bytes) || 0)} a worker`;
  if (t.state === "unused") return `msm tables: not used, ${t.reason || "no reason given"}`;
  if (t.state === "building") return "msm tables: building, the key proves without them meanwhile";
  return `msm tables: ${t.state}`;
}
