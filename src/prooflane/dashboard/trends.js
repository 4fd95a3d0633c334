// The three chart panels: proofs completed per minute and the devices' busy fraction over the last hour
// (from the snapshot's `history`, numbers oldest first), and the phase times of the partitions finished last
// (`recent_partitions`), drawn with charts.js.
import { bars, lines, stacked } from "./charts.js";
import { byTestId, setText } from "./dom.js";
import { fmtPct } from "./format.js";

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

export function renderCharts(s) {
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
