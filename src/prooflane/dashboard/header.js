// The header's facts: version, uptime (counting on between snapshots), boot id, invariants, stale events and
// the snapshot number. The feed's label and <body data-*> are the feed's (feed.js).
import { byTestId, h, setAttr, setText } from "./dom.js";
import { feed, liveExtra } from "./feed.js";
import { fmtSecs } from "./format.js";

export function renderHeader(s) {
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

/** The uptime, counting on between snapshots. */
export function tickHeader() {
  const s = feed.snapshot;
  if (!s) return;
  setText(byTestId("uptime"), fmtSecs((s.uptime_secs ?? 0) + liveExtra()));
}
