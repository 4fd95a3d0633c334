// The Synthesis panel: the pool's active count against its size, the partitions waiting for synthesis (in
// total and by priority) and for a device, and the jobs ended since boot (done, failed, cancelled); the
// failed count links to the failures list.
import { $, byTestId, h, setText } from "./dom.js";
import { linkFailures } from "./history.js";

const PRIORITIES = ["critical", "high", "normal"];

export function renderSynthesis(s) {
  const syn = s.synthesis || {};
  const max = Number(syn.max_concurrent) || 0;
  const active = Number(syn.active) || 0;
  setText(byTestId("synthesis-active"), `${active} / ${max} active`);
  byTestId("synthesis-fill").style.width = `${max > 0 ? Math.min(100, (active / max) * 100) : 0}%`;
  const c = s.counters || {};
  // A mapping priority -> partitions pending (the rows for the three priorities are in index.html).
  const depth = c.queue_depth_by_priority || {};
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
  linkFailures(byTestId("total-failed"), c.total_failed ?? 0, "");
  setText(byTestId("total-cancelled"), String(c.total_cancelled ?? 0));
}
