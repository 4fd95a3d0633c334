// DOM helpers shared by the prooflane dashboard and the fleet page (which loads this file from the fleet's
// /assets/dom.js): finding elements, setting text and attributes only when they change (so an update that
// changes nothing touches nothing), building elements, and keeping a keyed list of children in order.
// No dependencies.

/** The first element under `root` (the document by default) matching `sel`. */
export const $ = (sel, root) => (root || document).querySelector(sel);

/** The first element under `root` with `data-testid="<id>"`. */
export const byTestId = (id, root) => $(`[data-testid="${id}"]`, root);

/** Set `el`'s text, as text (never markup), when it differs. */
export function setText(el, text) {
  if (el && el.textContent !== text) el.textContent = text;
}

/** Set `el`'s attribute `name` to String(value) when it differs. */
export function setAttr(el, name, value) {
  const v = String(value);
  if (el && el.getAttribute(name) !== v) el.setAttribute(name, v);
}

/** A new `<tag>` with attributes `attrs` (`text` sets its text) and `children` appended. */
export function h(tag, attrs, children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "text") el.textContent = v;
    else el.setAttribute(k, v);
  }
  for (const c of children || []) el.appendChild(c);
  return el;
}

/** Make `parent`'s children match `items` in order, keyed by `key`; create or update in place. */
export function syncKeyed(parent, items, key, create, update) {
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
