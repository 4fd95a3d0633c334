// Tiny inline-SVG charts for the prooflane dashboard: bars, lines and stacked bars.
// No dependencies. Each function redraws its container completely; the container's size is fixed by CSS,
// so a redraw never moves the layout. Sizes come from a ResizeObserver, never read in a render: a read
// there would force the layout of everything the render changed before it (on the first render, the whole
// page), in script time. A chart whose size is not known yet is drawn when the observer says it (before
// the frame is painted), and again whenever its size changes.

const NS = "http://www.w3.org/2000/svg";
const PAD = { left: 36, right: 8, top: 22, bottom: 20 };
const LEGEND_Y = 11;

function svgEl(tag, attrs, text) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

const sizes = new WeakMap(); // container -> { width, height }, as the observer last said
const draws = new WeakMap(); // container -> its latest drawing, done again when its size changes
const observer = typeof ResizeObserver === "undefined" ? null : new ResizeObserver((entries) => {
  for (const entry of entries) {
    const { width, height } = entry.contentRect;
    sizes.set(entry.target, { width, height });
    const draw = draws.get(entry.target);
    if (draw) draw();
  }
});

/** Draw now if the container's size is known (or cannot be observed), else when it is. */
function whenSized(container, draw) {
  draws.set(container, draw);
  if (observer === null || sizes.has(container)) {
    draw();
    return;
  }
  observer.observe(container);
}

function frame(container) {
  const known = sizes.get(container) || { width: container.clientWidth, height: container.clientHeight };
  const width = Math.max(200, known.width || 400);
  const height = Math.max(120, known.height || 180);
  const svg = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, width, height, role: "img" });
  const plot = {
    x0: PAD.left, y0: PAD.top,
    w: width - PAD.left - PAD.right, h: height - PAD.top - PAD.bottom,
  };
  return { svg, plot, width, height };
}

function yAxis(svg, plot, max, fmt) {
  for (const frac of [0, 0.5, 1]) {
    const y = plot.y0 + plot.h - frac * plot.h;
    svg.appendChild(svgEl("line", { class: "axis", x1: plot.x0, x2: plot.x0 + plot.w, y1: y, y2: y }));
    svg.appendChild(svgEl("text", { x: plot.x0 - 4, y: y + 3, "text-anchor": "end" }, fmt(max * frac)));
  }
}

function xLabels(svg, plot, left, right) {
  const y = plot.y0 + plot.h + 14;
  svg.appendChild(svgEl("text", { x: plot.x0, y }, left));
  svg.appendChild(svgEl("text", { x: plot.x0 + plot.w, y, "text-anchor": "end" }, right));
}

function replace(container, svg, summary) {
  svg.setAttribute("aria-label", summary);
  svg.appendChild(svgEl("title", {}, summary));
  container.replaceChildren(svg);
}

/** Vertical bars, one per value (oldest first). */
export function bars(container, values, opts) {
  whenSized(container, () => drawBars(container, values, opts));
}

function drawBars(container, values, opts) {
  const { svg, plot } = frame(container);
  const max = Math.max(1, ...values);
  yAxis(svg, plot, max, (v) => (Number.isInteger(v) ? String(v) : v.toFixed(1)));
  const n = Math.max(values.length, 1);
  const slot = plot.w / n;
  values.forEach((v, i) => {
    const h = (v / max) * plot.h;
    if (h <= 0) return;
    svg.appendChild(svgEl("rect", {
      class: "bar", x: plot.x0 + i * slot + 0.5, y: plot.y0 + plot.h - h,
      width: Math.max(1, slot - 1), height: h,
    }));
  });
  xLabels(svg, plot, opts.left || "", opts.right || "");
  replace(container, svg, opts.summary || "");
}

/** Lines of fractions in [0, 1] (oldest first), one per series: [{name, values}]. */
export function lines(container, series, opts) {
  whenSized(container, () => drawLines(container, series, opts));
}

function drawLines(container, series, opts) {
  const { svg, plot } = frame(container);
  yAxis(svg, plot, 1, (v) => `${Math.round(v * 100)}%`);
  series.forEach((s, k) => {
    const n = s.values.length;
    if (n === 0) return;
    const step = n > 1 ? plot.w / (n - 1) : 0;
    const pts = s.values.map((v, i) => {
      const x = plot.x0 + (n > 1 ? i * step : plot.w);
      const y = plot.y0 + plot.h - Math.min(1, Math.max(0, v)) * plot.h;
      return `${x.toFixed(1)},${y.toFixed(1)}`;
    });
    svg.appendChild(svgEl("polyline", { class: `line c${k % 6}`, points: pts.join(" ") }));
    const lx = plot.x0 + k * 120;
    svg.appendChild(svgEl("line", { class: `line c${k % 6}`, x1: lx, x2: lx + 14, y1: LEGEND_Y - 3, y2: LEGEND_Y - 3 }));
    svg.appendChild(svgEl("text", { class: "legend-text", x: lx + 18, y: LEGEND_Y }, s.name));
  });
  xLabels(svg, plot, opts.left || "", opts.right || "");
  replace(container, svg, opts.summary || "");
}

/** Stacked bars in seconds: rows = [{label, parts: [synth, prove, finalize]}], oldest first. */
export function stacked(container, rows, opts) {
  whenSized(container, () => drawStacked(container, rows, opts));
}

function drawStacked(container, rows, opts) {
  const { svg, plot } = frame(container);
  const classes = ["s-synth", "s-prove", "s-finalize"];
  const names = ["synth", "prove", "finalize"];
  const max = Math.max(0.001, ...rows.map((r) => r.parts.reduce((a, b) => a + b, 0)));
  yAxis(svg, plot, max, (v) => `${v.toFixed(v < 10 ? 1 : 0)}s`);
  const n = Math.max(rows.length, 1);
  const slot = plot.w / n;
  rows.forEach((r, i) => {
    let y = plot.y0 + plot.h;
    r.parts.forEach((v, j) => {
      const h = (v / max) * plot.h;
      if (h <= 0) return;
      y -= h;
      const rect = svgEl("rect", {
        class: classes[j], x: plot.x0 + i * slot + 0.5, y, width: Math.max(1, slot - 1), height: h,
      });
      rect.appendChild(svgEl("title", {}, `${r.label}: ${v.toFixed(2)}s ${names[j]}`));
      svg.appendChild(rect);
    });
  });
  names.forEach((name, j) => {
    const x = plot.x0 + j * 76;
    svg.appendChild(svgEl("rect", { class: classes[j], x, y: LEGEND_Y - 8, width: 9, height: 9 }));
    svg.appendChild(svgEl("text", { class: "legend-text", x: x + 12, y: LEGEND_Y }, name));
  });
  xLabels(svg, plot, opts.left || "", opts.right || "");
  replace(container, svg, opts.summary || "");
}
