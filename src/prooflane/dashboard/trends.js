// The three chart panels: the throughput (proofs and partitions per hour over the last minute and the last
// ten, from the snapshot's `history`; the jobs ended since boot by kind, from its `counters`, each failed
// count a link to the failures list) with the proofs completed per minute over the last hour, the devices'
// busy fraction over the last hour (from `history`, numbers oldest first), and the phase times of the
// partitions finished last (`recent_partitions`), drawn with charts.js.
import { bars, lines, stacked } from "./charts.js";
import { $, byTestId, h, setAttr, setText, syncKeyed } from "./dom.js";
import { fmtPct } from "./format.js";
import { linkFailures } from "./history.js";

/** Per-minute proofs completed over the last hour, oldest first (60 values). */
function proofsPerMinute(s) {
  return s.history.proofs_per_minute.slice(-60);
}

/** Device busy fraction over the last hour, all devices together: [{name, values}]. */
function busySeries(s) {
  return [{ name: "all devices", values: s.history.busy_fraction_per_minute.slice(-60) }];
}

function phaseRows(s) {
  return s.recent_partitions.slice(-60).map((p) => ({
    label: `${p.job_id} #${p.index}`,
    parts: [(p.synth_ms || 0) / 1000, (p.prove_ms || 0) / 1000, (p.finalize_ms || 0) / 1000],
  }));
}

/** The left label of the hour charts: how far back their first bucket is ("-60 min"). */
function historySpan(s, buckets) {
  const secs = s.history.minute_secs * Math.max(buckets, 1);
  return secs >= 120 ? `-${Math.round(secs / 60)} min` : `-${Math.round(secs)} s`;
}

/** A rate per hour: "1,240", "96", "4.5", "0"; "–" from a daemon that does not send it. */
function fmtRate(x) {
  if (typeof x !== "number" || Number.isNaN(x)) return "–";
  if (x === 0 || x >= 100) return Math.round(x).toLocaleString("en");
  return x.toFixed(1);
}

function renderThroughput(h) {
  setText(byTestId("throughput-proofs-1m"), fmtRate(h.proofs_per_hour_1m));
  setText(byTestId("throughput-proofs-10m"), fmtRate(h.proofs_per_hour_10m));
  setText(byTestId("throughput-partitions-1m"), fmtRate(h.partitions_per_hour_1m));
  setText(byTestId("throughput-partitions-10m"), fmtRate(h.partitions_per_hour_10m));
}

/** One row per proof kind that ended a job since boot, in name order: done, failed, cancelled. */
function renderKinds(c) {
  const done = c.completed_by_kind || {};
  const failed = c.failed_by_kind || {};
  const cancelled = c.cancelled_by_kind || {};
  const kinds = [...new Set([...Object.keys(done), ...Object.keys(failed), ...Object.keys(cancelled)])].sort();
  syncKeyed(byTestId("kind-rows"), kinds, (k) => k, () => h("tr", { "data-testid": "kind-row" }, [
    h("td", { class: "kind-name" }), h("td", { class: "r num" }),
    h("td", { class: "r num" }, [h("a", { href: "#failures", class: "failed-link" })]),
    h("td", { class: "r num" }),
  ]), (tr, kind) => {
    setAttr(tr, "data-kind", kind);
    const [name, d, f, x] = tr.children;
    setText(name, kind);
    setText(d, String(done[kind] ?? 0));
    linkFailures($("a", f), failed[kind] ?? 0, kind);
    setText(x, String(cancelled[kind] ?? 0));
  });
}

export function renderCharts(s) {
  renderThroughput(s.history);
  renderKinds(s.counters || {});
  const perMin = proofsPerMinute(s);
  const total = perMin.reduce((a, b) => a + b, 0);
  setText(byTestId("proofs-hour"), `${total} proofs in the last hour (per minute)`);
  const span = historySpan(s, perMin.length);
  bars(byTestId("chart-proofs"), perMin, { left: span, right: "now",
    summary: `${total} proofs completed in the last hour` });

  const series = busySeries(s);
  const now = (s.devices || []).map((d) => `${d.device} ${fmtPct(Number(d.busy_fraction_1m) || 0)}`);
  setText(byTestId("busy-now"), now.length ? `last minute: ${now.join(", ")}` : "no devices");
  lines(byTestId("chart-busy"), series, { left: span, right: "now",
    summary: `device busy fraction: ${now.join(", ")}` });

  const rows = phaseRows(s);
  const avg = (i) => rows.length ? rows.reduce((a, r) => a + r.parts[i], 0) / rows.length : 0;
  setText(byTestId("phase-summary"), rows.length
    ? `mean of ${rows.length}: synth ${avg(0).toFixed(2)}s, prove ${avg(1).toFixed(2)}s, ` +
      `finalize ${avg(2).toFixed(2)}s`
    : "no finished partitions yet");
  stacked(byTestId("chart-phases"), rows, { left: "older", right: "latest",
    summary: "phase times of recent partitions" });
}
