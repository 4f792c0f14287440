// ECharts helpers: line charts of step series that grow live, histogram-over-time heatmaps, and the
// annotation registry of the extension API (charts.annotate). `echarts` is the vendored global.
import { t } from "./i18n.js";
import { fmt } from "./ui.js";

export const GROUP = "rlcockpit-dashboard";
export const PALETTE = ["#3b82f6", "#f97316", "#10b981", "#a855f7", "#ef4444", "#0ea5e9", "#eab308", "#64748b"];

// ---------------------------------------------------------------- annotations (extension API)
const marksByRun = new Map(); // runId -> Map(source -> marks)
const annotationListeners = new Set();

// annotate(runId, [{step, label, color?}], source = "default"): vertical mark lines at steps on every
// step chart of that run. Each source owns its marks; calling again replaces that source's marks.
export function annotate(runId, marks, source = "default") {
  if (!Array.isArray(marks)) throw new Error("charts.annotate(runId, marks): marks must be an array of {step, label}");
  const clean = marks.filter((m) => Number.isFinite(m.step)).map((m) => ({ step: m.step, label: String(m.label ?? ""), color: m.color || "#8b5cf6" }));
  if (!marksByRun.has(runId)) marksByRun.set(runId, new Map());
  marksByRun.get(runId).set(source, clean);
  annotationListeners.forEach((fn) => fn(runId));
}

export function clearAnnotations(runId, source = "default") {
  marksByRun.get(runId)?.delete(source);
  annotationListeners.forEach((fn) => fn(runId));
}

export function annotations(runId) {
  return [...(marksByRun.get(runId)?.values() || [])].flat();
}

export function onAnnotations(fn) {
  annotationListeners.add(fn);
  return () => annotationListeners.delete(fn);
}

export const charts = { annotate, clearAnnotations, annotations, onAnnotations };

// ---------------------------------------------------------------- chart base
function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function baseChart(el) {
  const chart = echarts.init(el, null, { renderer: "canvas" });
  const ro = new ResizeObserver(() => chart.resize());
  ro.observe(el);
  return { chart, dispose: () => { ro.disconnect(); chart.dispose(); } };
}

const axisLabel = { fontSize: 10, color: "#64748b" };
const titleStyle = { fontSize: 13, fontWeight: 600, color: "#0f172a" };

// A line chart over the step (or wall-clock) axis. `spec`:
//   id, title (already translated), names: metric names it shows (exact or "prefix*"),
//   lines(data, opts) -> [{label, name (metric), steps, values, color, dashed, width, faint}],
//   hlines(data) -> [{value, label, color}], primary: metric name whose points count and are clicked.
export class StepChart {
  constructor(el, spec, { runId, xMode = "step", group = GROUP, onClickStep } = {}) {
    this.el = el;
    this.spec = spec;
    this.runId = runId;
    this.xMode = xMode;
    this.data = new Map(); // metric name -> {steps, values, walls}
    this.opts = {};
    const { chart, dispose } = baseChart(el);
    this.chart = chart;
    this.disposeChart = dispose;
    chart.group = group;
    if (onClickStep) this.bindClick(onClickStep);
    this.unAnn = onAnnotations((id) => id === runId && this.render());
    this.render(); // title and axes at once; the overlay says loading / no data yet
  }

  wants(name) {
    return this.spec.names.some((n) => (n.endsWith("*") ? name.startsWith(n.slice(0, -1)) : name === n));
  }

  setSeries(series) {
    for (const [name, s] of Object.entries(series || {})) {
      if (!this.wants(name)) continue;
      this.data.set(name, { steps: [...s.steps], values: [...s.values], walls: [...(s.wall_times || s.steps.map(() => null))] });
    }
    this.render();
  }

  // One live step: append every wanted metric; steps at or below the last one are ignored.
  append(step, wall, metrics) {
    let changed = false;
    for (const [name, value] of Object.entries(metrics)) {
      if (!this.wants(name)) continue;
      if (!this.data.has(name)) this.data.set(name, { steps: [], values: [], walls: [] });
      const d = this.data.get(name);
      if (d.steps.length && step <= d.steps[d.steps.length - 1]) continue;
      d.steps.push(step);
      d.values.push(value);
      d.walls.push(wall);
      changed = true;
    }
    if (changed) this.scheduleRender();
  }

  // The primary metric's data, or the first metric's when the chart has no fixed primary.
  primaryData() {
    return this.data.get(this.spec.primary) || [...this.data.values()].find((d) => d.steps.length);
  }

  lastStep() {
    const d = this.primaryData();
    return d && d.steps.length ? d.steps[d.steps.length - 1] : -1;
  }

  setOpts(opts) {
    Object.assign(this.opts, opts);
    this.render();
  }

  setXMode(mode) {
    this.xMode = mode;
    this.render();
  }

  scheduleRender() {
    if (this.pending) return;
    this.pending = setTimeout(() => { this.pending = null; this.render(); }, 40);
  }

  x(step, wall) {
    return this.xMode === "wall" ? (wall ?? 0) * 1000 : step;
  }

  xOfStep(step) {
    if (this.xMode !== "wall") return step;
    const d = this.primaryData();
    if (!d) return null;
    const i = d.steps.indexOf(step);
    return i >= 0 && d.walls[i] ? d.walls[i] * 1000 : null;
  }

  markLine(hlines) {
    const vertical = annotations(this.runId).map((m) => ({ xAxis: this.xOfStep(m.step), name: m.label, label: { formatter: m.label, fontSize: 10, color: m.color }, lineStyle: { color: m.color, type: "solid", width: 1.5 } })).filter((m) => m.xAxis !== null);
    const horizontal = hlines.map((l) => ({ yAxis: l.value, name: l.label, label: { formatter: l.label, position: "insideEndTop", fontSize: 10, color: l.color }, lineStyle: { color: l.color, type: "dashed", width: 1.2 } }));
    return { silent: true, symbol: "none", animation: false, data: [...horizontal, ...vertical] };
  }

  render() {
    if (!this.chart || this.chart.isDisposed()) return;
    const lines = this.spec.lines(this.data, this.opts);
    const hlines = this.spec.hlines ? this.spec.hlines(this.data, this.opts) : [];
    const series = lines.map((l, i) => ({
      type: "line", name: l.label, showSymbol: l.steps.length < 60, symbolSize: 4, sampling: "lttb",
      lineStyle: { width: l.width ?? 1.6, type: l.dashed ? "dashed" : "solid", opacity: l.faint ? 0.35 : 1 },
      itemStyle: { color: l.color || PALETTE[i % PALETTE.length], opacity: l.faint ? 0.35 : 1 },
      data: l.steps.map((s, j) => [this.x(s, l.walls ? l.walls[j] : null), l.values[j], s]),
      markLine: i === 0 ? this.markLine(hlines) : undefined,
      z: l.faint ? 1 : 2,
    }));
    const option = this.option(series);
    if (hlines.length) {
      // keep the target / warning lines in view even when the curve stays below them
      const top = Math.max(...hlines.map((l) => l.value));
      option.yAxis.max = (v) => Math.max(v.max, top + 0.05 * Math.abs(top));
    } else {
      option.yAxis.max = null;
    }
    this.chart.setOption(option, { replaceMerge: ["series"] });
    const primary = this.primaryData();
    this.el.dataset.points = String(primary ? primary.steps.length : 0);
    this.el.dataset.lastStep = String(this.lastStep());
  }

  option(series) {
    const wall = this.xMode === "wall";
    return {
      animation: false,
      title: { text: this.spec.title, left: 8, top: 4, textStyle: titleStyle },
      legend: { top: 24, left: 8, type: "scroll", itemWidth: 14, itemHeight: 8, textStyle: { fontSize: 10 } },
      tooltip: { trigger: "axis", confine: true, formatter: (ps) => this.tooltip(ps) },
      axisPointer: { link: [{ xAxisIndex: "all" }] },
      grid: { left: 52, right: 18, top: 58, bottom: 26 },
      xAxis: { type: wall ? "time" : "value", min: "dataMin", max: "dataMax", axisLabel },
      yAxis: { type: "value", scale: true, axisLabel, splitLine: { lineStyle: { color: "#eef2f7" } } },
      dataZoom: [{ type: "inside", xAxisIndex: 0, filterMode: "none" }],
      series,
    };
  }

  // "step 17" (and the time in wall-clock mode), then each line's value at that step.
  tooltip(params) {
    const ps = (Array.isArray(params) ? params : [params]).filter((p) => Array.isArray(p.data));
    if (!ps.length) return "";
    const [x, , step] = ps[0].data;
    const head = this.xMode === "wall" ? `${new Date(x).toLocaleString()} · ${t("axis.step")} ${step}` : `${t("axis.step")} ${step}`;
    return escapeHtml(head) + ps.map((p) => `<br>${p.marker}${escapeHtml(p.seriesName)} <b>${escapeHtml(fmt(p.data[1], 4))}</b>`).join("");
  }

  // Clicking anywhere in the plot picks the nearest step of the primary metric.
  bindClick(onClickStep) {
    this.chart.getZr().on("click", (e) => {
      if (!this.chart.containPixel("grid", [e.offsetX, e.offsetY])) return;
      const [x] = this.chart.convertFromPixel({ gridIndex: 0 }, [e.offsetX, e.offsetY]);
      const step = this.nearestStep(x);
      if (step !== null) onClickStep(step);
    });
  }

  nearestStep(x) {
    const d = this.primaryData();
    if (!d || !d.steps.length) return null;
    let best = null;
    let bestDist = Infinity;
    d.steps.forEach((s, i) => {
      const dist = Math.abs(this.x(s, d.walls[i]) - x);
      if (dist < bestDist) { bestDist = dist; best = s; }
    });
    return best;
  }

  // Pixel position of the primary metric's point at `step` (used by tests and the benchmark).
  pixelOf(step) {
    const d = this.primaryData();
    const i = d ? d.steps.indexOf(step) : -1;
    if (i < 0) return null;
    const [px, py] = this.chart.convertToPixel({ gridIndex: 0 }, [this.x(step, d.walls[i]), d.values[i]]);
    return { x: px, y: py };
  }

  dispose() {
    clearTimeout(this.pending);
    this.unAnn();
    this.disposeChart();
  }
}

// ---------------------------------------------------------------- histogram heatmap
const BINS = 24;

// Re-bin histograms whose edges differ per step onto one common grid; each step's column holds the
// share of that step's values in each bin, so steps with different sample counts compare.
export function rebin(items, bins = BINS) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const it of items) {
    if (!it.edges.length) continue;
    lo = Math.min(lo, it.edges[0]);
    hi = Math.max(hi, it.edges[it.edges.length - 1]);
  }
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) return { lo: 0, hi: 1, cells: [], max: 0 };
  if (hi <= lo) hi = lo + 1;
  const width = (hi - lo) / bins;
  const cells = [];
  let max = 0;
  items.forEach((it, col) => {
    const total = it.counts.reduce((a, b) => a + b, 0) || 1;
    const acc = new Array(bins).fill(0);
    it.counts.forEach((c, i) => {
      const center = (it.edges[i] + it.edges[i + 1]) / 2;
      acc[Math.min(bins - 1, Math.max(0, Math.floor((center - lo) / width)))] += c / total;
    });
    acc.forEach((v, row) => { if (v > 0) { cells.push([col, row, v]); max = Math.max(max, v); } });
  });
  return { lo, hi, width, cells, max };
}

export class HistogramHeatmap {
  constructor(el, { title, onClickStep } = {}) {
    this.el = el;
    this.title = title;
    this.items = [];
    const { chart, dispose } = baseChart(el);
    this.chart = chart;
    this.disposeChart = dispose;
    if (onClickStep) chart.on("click", (p) => p.data && onClickStep(this.items[p.data[0]].step));
    this.render();
  }

  setItems(items) {
    this.items = [...items].sort((a, b) => a.step - b.step);
    this.render();
  }

  appendItems(items) {
    const last = this.items.length ? this.items[this.items.length - 1].step : -1;
    const fresh = items.filter((it) => it.step > last);
    if (!fresh.length) return;
    this.items.push(...fresh.sort((a, b) => a.step - b.step));
    this.render();
  }

  lastStep() {
    return this.items.length ? this.items[this.items.length - 1].step : -1;
  }

  render() {
    const { lo, width, cells, max } = rebin(this.items);
    const yLabels = Array.from({ length: BINS }, (_, i) => fmt(lo + (i + 0.5) * (width || 0), 2));
    this.chart.setOption({
      animation: false,
      title: { text: this.title, left: 8, top: 4, textStyle: titleStyle },
      tooltip: { confine: true, formatter: (p) => `${t("axis.step")} ${escapeHtml(this.items[p.data[0]].step)}<br>${escapeHtml(yLabels[p.data[1]])}: ${(p.data[2] * 100).toFixed(1)}%` },
      grid: { left: 52, right: 18, top: 34, bottom: 26 },
      xAxis: { type: "category", data: this.items.map((it) => String(it.step)), axisLabel },
      yAxis: { type: "category", data: yLabels, axisLabel: { ...axisLabel, interval: 3 } },
      visualMap: { show: false, min: 0, max: max || 1, inRange: { color: ["#f1f5f9", "#93c5fd", "#2563eb", "#1e3a8a"] } },
      series: [{ type: "heatmap", data: cells, progressive: 0 }],
    }, { notMerge: true });
    this.el.dataset.points = String(this.items.length);
  }

  dispose() {
    this.disposeChart();
  }
}

// A plain matrix heatmap (snapshot views: per-layer gradient variance, head-gradient covariance).
export function matrixHeatmap(el, { title, xLabels, yLabels, matrix, diverging = false }) {
  const { chart, dispose } = baseChart(el);
  const cells = [];
  let lo = Infinity;
  let hi = -Infinity;
  matrix.forEach((row, y) => row.forEach((v, x) => {
    if (v === null || v === undefined) return;
    cells.push([x, y, v]);
    lo = Math.min(lo, v);
    hi = Math.max(hi, v);
  }));
  const bound = Math.max(Math.abs(lo), Math.abs(hi)) || 1;
  chart.setOption({
    animation: false,
    title: { text: title, left: 8, top: 4, textStyle: titleStyle },
    tooltip: { confine: true, formatter: (p) => `${escapeHtml(yLabels[p.data[1]])} × ${escapeHtml(xLabels[p.data[0]])}: ${escapeHtml(fmt(p.data[2], 4))}` },
    grid: { left: 90, right: 60, top: 34, bottom: 40 },
    xAxis: { type: "category", data: xLabels.map(String), axisLabel },
    yAxis: { type: "category", data: yLabels.map(String), axisLabel },
    visualMap: diverging
      ? { min: -bound, max: bound, calculable: true, right: 0, top: 40, itemHeight: 80, inRange: { color: ["#2563eb", "#f8fafc", "#dc2626"] } }
      : { min: Number.isFinite(lo) ? lo : 0, max: Number.isFinite(hi) ? hi : 1, calculable: true, right: 0, top: 40, itemHeight: 80, inRange: { color: ["#f1f5f9", "#fbbf24", "#dc2626"] } },
    series: [{ type: "heatmap", data: cells }],
  });
  el.dataset.points = String(cells.length);
  return { chart, dispose };
}

// A bar chart of one histogram (edges, counts).
export function histogramBars(el, { title, edges, counts }) {
  const { chart, dispose } = baseChart(el);
  const labels = counts.map((_, i) => fmt((edges[i] + edges[i + 1]) / 2, 3));
  chart.setOption({
    animation: false,
    title: { text: title, left: 8, top: 4, textStyle: titleStyle },
    tooltip: { trigger: "axis", confine: true },
    grid: { left: 52, right: 18, top: 34, bottom: 30 },
    xAxis: { type: "category", data: labels, axisLabel },
    yAxis: { type: "value", axisLabel },
    series: [{ type: "bar", data: counts, itemStyle: { color: "#3b82f6" } }],
  });
  el.dataset.points = String(counts.length);
  return { chart, dispose };
}

// Simple multi-line chart from {label: {steps, values}} (snapshot metric window, run comparison).
export function simpleLines(el, { title, lines, group }) {
  const { chart, dispose } = baseChart(el);
  if (group) chart.group = group;
  chart.setOption({
    animation: false,
    title: { text: title, left: 8, top: 4, textStyle: titleStyle },
    legend: { top: 24, left: 8, type: "scroll", textStyle: { fontSize: 10 } },
    tooltip: { trigger: "axis", confine: true, valueFormatter: (v) => fmt(v, 4) },
    grid: { left: 52, right: 18, top: 58, bottom: 26 },
    xAxis: { type: "value", min: "dataMin", max: "dataMax", axisLabel, name: t("axis.step"), nameTextStyle: { fontSize: 10 } },
    yAxis: { type: "value", scale: true, axisLabel },
    dataZoom: [{ type: "inside", xAxisIndex: 0, filterMode: "none" }],
    series: Object.entries(lines).map(([label, s], i) => ({
      type: "line", name: label, showSymbol: s.steps.length < 60, symbolSize: 4,
      itemStyle: { color: PALETTE[i % PALETTE.length] },
      data: s.steps.map((st, j) => [st, s.values[j]]),
    })),
  });
  el.dataset.points = String(Object.values(lines).reduce((a, s) => a + s.steps.length, 0));
  return { chart, dispose };
}
