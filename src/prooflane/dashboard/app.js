// prooflane dashboard, the entry module: renders GET /status (fetched by feed.js on every server-sent event
// from GET /v1/events, and polled as a fallback) with one module per panel, and ticks the times that count on
// between snapshots. Native ES modules, no build step, no dependencies.
//
// Rules this page keeps:
// - It never shows a worker as "idle" unless a fresh snapshot says so: when the data is stale, a banner gives
//   its age, every worker state reads "unknown" and every panel is dimmed and says "as of HH:MM:SS"
//   (feed.js, workers.js).
// - Every figure means what its label says (docs/dashboard.md, "What each figure counts").
// - Job ids and proof kinds are shown whole (CSS wraps them anywhere); nothing is cut or ellipsised.
// - Rows and cards are keyed (job id, partition index, worker id) and updated in place; sizes are fixed
//   where values change every tick or every poll (boxes that scroll), so updates do not move the layout.
// - A restarted daemon (new boot_id) is picked up without a reload; seq only moves forward per boot_id.
//
// For tests and tools, `window.prooflane` exposes the snapshot the page last rendered, how long the last
// renders took (`renderMs`, script time, newest last) and the layout shifts seen (`layoutShifts`, the
// Layout Instability API's scores), and `<body data-seq data-boot-id data-stale>` mirror it.
import { setAttr } from "./dom.js";
import { feed, isStale, renderFreshness, requestRefresh, startFeed } from "./feed.js";
import { renderHeader, tickHeader } from "./header.js";
import { renderHistory, resetHistory } from "./history.js";
import { renderPipelines, tickPipelines } from "./jobs.js";
import { renderMemory } from "./memory.js";
import { renderSynthesis } from "./synthesis.js";
import { renderCharts } from "./trends.js";
import { renderDevices, renderWorkers, tickWorkers } from "./workers.js";

const TICK_MS = 250;
const RENDERS_KEPT = 100;
const renderMs = [];
const layoutShifts = [];

function timedRender(s) {
  const start = performance.now();
  render(s);
  renderMs.push(performance.now() - start);
  if (renderMs.length > RENDERS_KEPT) renderMs.shift();
}

function render(s) {
  setAttr(document.body, "data-seq", s.seq);
  setAttr(document.body, "data-boot-id", s.boot_id || "");
  renderCharts(s); // first: it reads no layout, so nothing the others change is laid out in script time
  renderHeader(s);
  renderMemory(s);
  renderSynthesis(s);
  renderDevices(s);
  renderWorkers(s);
  renderPipelines(s);
  renderHistory(s);
  renderFreshness();
}

function tick() {
  renderFreshness();
  tickHeader();
  const s = feed.snapshot;
  if (!s) return;
  tickWorkers(s);
  tickPipelines(s);
}

window.prooflane = {
  get snapshot() { return feed.snapshot; },
  get seq() { return feed.seq; },
  get bootId() { return feed.bootId; },
  get stale() { return isStale(); },
  get connection() { return feed.connection; },
  get renderMs() { return renderMs.slice(); },
  get layoutShifts() { return layoutShifts.slice(); },
  refresh: requestRefresh,
};

if (typeof PerformanceObserver !== "undefined" &&
    (PerformanceObserver.supportedEntryTypes || []).includes("layout-shift")) {
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) if (!e.hadRecentInput) layoutShifts.push(e.value);
  }).observe({ type: "layout-shift", buffered: true });
}

startFeed({ render: timedRender, restarted: resetHistory });
setInterval(tick, TICK_MS);
