// Number and time formats shared by the prooflane dashboard and the fleet page (which loads this file from the
// fleet's /assets/format.js): bytes, durations, percentages, clock times. No dependencies.

/** Bytes in binary units: "512 B", "1.50 KiB", "23.4 MiB"; "–" when unknown. */
export function fmtBytes(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = Number(n);
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return `${v.toFixed(i === 0 ? 0 : v < 10 ? 2 : 1)} ${units[i]}`;
}

/** A duration: "4.2 s", "3m 07s", "2h 05m", "1d 3h"; "–" when unknown. */
export function fmtSecs(s) {
  if (s === null || s === undefined || Number.isNaN(s)) return "–";
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${String(Math.floor(s % 60)).padStart(2, "0")}s`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${h}h ${String(m % 60).padStart(2, "0")}m`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

/** A fraction as a whole percentage: 0.987 -> "99%". */
export function fmtPct(f) { return `${Math.round(f * 100)}%`; }

/** A moment (ms since the epoch) as a local 24-hour clock time: "14:03:27". */
export function clock(ms) { return new Date(ms).toLocaleTimeString([], { hour12: false }); }
