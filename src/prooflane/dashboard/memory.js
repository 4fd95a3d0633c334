// The Memory panel: the gauge of reserved bytes against the budget (green under 60%, amber to 85%, red
// above), the byte counts, and the cached proving keys with their size and idle time.
import { $, byTestId, h, setAttr, setText, syncKeyed } from "./dom.js";
import { fmtBytes, fmtPct, fmtSecs } from "./format.js";

export function renderMemory(s) {
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
