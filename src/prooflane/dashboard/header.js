// The header's facts: version, uptime (counting on between snapshots), boot id, invariants, the arithmetic
// per curve, stale events and the snapshot number. The feed's label and <body data-*> are the feed's
// (feed.js).
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
  renderArithmetic(byTestId("arithmetic"), s);
  tickHeader();
}

/** What proves each curve ("c-extension", "libraries: why"; per curve when they differ), with the field
 *  products of its MSMs where the C extension says them ("c-extension · avx512-ifma"), whole; a warning
 *  badge when a curve proves on the libraries (the slower path), the health's warnings as its title. */
function renderArithmetic(el, s) {
  const products = s.products && typeof s.products === "object" ? s.products : {};
  const curves = (s.arithmetic && typeof s.arithmetic === "object" ? Object.entries(s.arithmetic) : [])
    .map(([curve, how]) => {
      const runs = products[curve];
      return [curve, runs && runs !== "libraries" ? `${how} · ${runs}` : String(how)];
    });
  const said = new Set(curves.map(([, how]) => String(how)));
  const label = !curves.length ? "–" : said.size === 1 ? [...said][0]
    : curves.map(([curve, how]) => `${curve} ${how}`).join(", ");
  const slow = curves.some(([, how]) => String(how).startsWith("libraries"));
  const warnings = s.health && Array.isArray(s.health.warnings) ? s.health.warnings : [];
  if (el.textContent !== label) {
    el.replaceChildren(h("span", { class: `badge wrap ${slow ? "warn" : "ok"}`, text: label }));
  }
  setAttr(el, "data-warning", slow);
  setAttr(el, "title", warnings.join("\n"));
}

/** The uptime, counting on between snapshots. */
export function tickHeader() {
  const s = feed.snapshot;
  if (!s) return;
  setText(byTestId("uptime"), fmtSecs((s.uptime_secs ?? 0) + liveExtra()));
}
