// Distributions and small charts: the histogram-over-time heatmap (a run's reward and length
// distributions per step), a matrix heatmap, histogram bars and plain line charts (snapshots).
import { baseChart, csvCell, download, escapeHtml, PALETTE, styled, themeColors } from "./chart_base.js";
import { t } from "./i18n.js";
import { fmt } from "./ui.js";

// ---------------------------------------------------------------- histogram heatmap
const BINS = 24;

// Re-bin histograms whose edges differ per step onto one common grid; each step's column holds the
// share of that step's values in each bin, so steps with different sample counts compare.
// Round labels for the heatmap's bin axis: about `target` "nice" values (1, 2, 2.5 or 5 x 10^k
// apart) over the bins' range, each written on the bin that holds it; the other bins get no label
// (bin centres such as 17.81, 15.31, 12.81 read as noise).
export function binTickLabels(lo, width, bins = BINS, target = 5) {
  const labels = new Array(bins).fill("");
  if (!(width > 0) || !Number.isFinite(lo)) return labels;
  const span = width * bins;
  const raw = span / target;
  const p = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * p).find((s) => s >= raw) || 10 * p;
  for (let v = Math.ceil(lo / step) * step; v < lo + span; v += step) {
    const i = Math.floor((v - lo) / width + 1e-9);
    if (i >= 0 && i < bins && !labels[i]) labels[i] = String(Number(v.toPrecision(10)));
  }
  return labels;
}

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
  constructor(el, { title, id, runId, onClickStep } = {}) {
    this.el = el;
    this.title = title;
    this.id = id;
    this.runId = runId;
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
    const st = styled();
    const { lo, width, cells, max } = rebin(this.items);
    const yLabels = Array.from({ length: BINS }, (_, i) => fmt(lo + (i + 0.5) * (width || 0), 2));
    this.chart.setOption({
      animation: false,
      title: { text: this.title, left: 8, top: 4, textStyle: st.titleStyle },
      tooltip: { confine: true, formatter: (p) => `${t("axis.step")} ${escapeHtml(this.items[p.data[0]].step)}<br>${escapeHtml(yLabels[p.data[1]])}: ${(p.data[2] * 100).toFixed(1)}%` },
      grid: { left: 52, right: 18, top: 34, bottom: 26 },
      xAxis: { type: "category", data: this.items.map((it) => String(it.step)), axisLabel: st.axisLabel },
      yAxis: { type: "category", data: binTickLabels(lo, width), axisLabel: { ...st.axisLabel, interval: 0 } },
      visualMap: { show: false, min: 0, max: max || 1, inRange: { color: [st.c.grid, "#93c5fd", "#2563eb", "#1e3a8a"] } },
      series: [{ type: "heatmap", data: cells, progressive: 0 }],
    }, { notMerge: true });
    this.el.dataset.points = String(this.items.length);
  }

  // The heatmap as CSV: one row per step, a column per bin of the common grid (its range), the
  // cell the share of that step's samples in the bin (what the colour shows).
  csv() {
    const { lo, width, cells } = rebin(this.items);
    const w = width || 0;
    const head = ["step", ...Array.from({ length: BINS }, (_, i) => `${lo + i * w}..${lo + (i + 1) * w}`)];
    const rows = this.items.map((it) => [it.step, ...new Array(BINS).fill(0)]);
    for (const [col, row, v] of cells) rows[col][row + 1] = v;
    return [head, ...rows].map((r) => r.map(csvCell).join(",")).join("\n") + "\n";
  }

  fileName(ext) {
    return `${this.runId || "chart"}-${String(this.id || this.title).replace(/[^A-Za-z0-9_.-]+/g, "_")}.${ext}`;
  }

  downloadCsv() {
    download(this.fileName("csv"), URL.createObjectURL(new Blob([this.csv()], { type: "text/csv" })));
  }

  downloadPng() {
    download(this.fileName("png"), this.chart.getDataURL({ type: "png", pixelRatio: 2, backgroundColor: themeColors().panel }));
  }

  dispose() {
    this.disposeChart();
  }
}

// A plain matrix heatmap (snapshot views: per-layer gradient variance, head-gradient covariance).
// Returns {chart, dispose, csv, downloadCsv, downloadPng}: the CSV is the matrix (a row per y label,
// a column per x label); files are named `${file}.csv|png`.
export function matrixHeatmap(el, { title, xLabels, yLabels, matrix, diverging = false, file = "heatmap" }) {
  const st = styled();
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
    title: { text: title, left: 8, top: 4, textStyle: st.titleStyle },
    tooltip: { confine: true, formatter: (p) => `${escapeHtml(yLabels[p.data[1]])} × ${escapeHtml(xLabels[p.data[0]])}: ${escapeHtml(fmt(p.data[2], 4))}` },
    grid: { left: 90, right: 60, top: 34, bottom: 40 },
    xAxis: { type: "category", data: xLabels.map(String), axisLabel: st.axisLabel },
    yAxis: { type: "category", data: yLabels.map(String), axisLabel: st.axisLabel },
    // the colour bar's end labels in fmt(): tiny variances read 3.2e-5, not "0"
    visualMap: diverging
      ? { min: -bound, max: bound, calculable: true, right: 0, top: 40, itemHeight: 80, formatter: (v) => fmt(v, 3), textStyle: { color: st.c.muted, fontSize: 10 }, inRange: { color: ["#2563eb", "#f8fafc", "#dc2626"] } }
      : { min: Number.isFinite(lo) ? lo : 0, max: Number.isFinite(hi) && hi > lo ? hi : (Number.isFinite(lo) ? lo + 1 : 1), calculable: true, right: 0, top: 40, itemHeight: 80, formatter: (v) => fmt(v, 3), textStyle: { color: st.c.muted, fontSize: 10 }, inRange: { color: ["#f1f5f9", "#fbbf24", "#dc2626"] } },
    series: [{ type: "heatmap", data: cells }],
  });
  el.dataset.points = String(cells.length);
  const name = String(file).replace(/[^A-Za-z0-9_.-]+/g, "_");
  const csv = () => [["", ...xLabels], ...matrix.map((row, y) => [yLabels[y], ...row])]
    .map((r) => r.map(csvCell).join(",")).join("\n") + "\n";
  return { chart, dispose, csv,
    downloadCsv: () => download(`${name}.csv`, URL.createObjectURL(new Blob([csv()], { type: "text/csv" }))),
    downloadPng: () => download(`${name}.png`, chart.getDataURL({ type: "png", pixelRatio: 2, backgroundColor: themeColors().panel })) };
}

// A bar chart of one histogram (edges, counts).
export function histogramBars(el, { title, edges, counts }) {
  const st = styled();
  const { chart, dispose } = baseChart(el);
  const labels = counts.map((_, i) => fmt((edges[i] + edges[i + 1]) / 2, 3));
  chart.setOption({
    animation: false,
    title: { text: title, left: 8, top: 4, textStyle: st.titleStyle },
    tooltip: { trigger: "axis", confine: true },
    grid: { left: 52, right: 18, top: 34, bottom: 30 },
    xAxis: { type: "category", data: labels, axisLabel: st.axisLabel },
    yAxis: { type: "value", axisLabel: st.axisLabel },
    series: [{ type: "bar", data: counts, itemStyle: { color: "#3b82f6" } }],
  });
  el.dataset.points = String(counts.length);
  return { chart, dispose };
}

// Simple multi-line chart from {label: {steps, values}} (snapshot metric window, run comparison).
export function simpleLines(el, { title, lines, group, legend = true }) {
  const st = styled();
  const { chart, dispose } = baseChart(el);
  if (group) chart.group = group;
  chart.setOption({
    animation: false,
    title: { text: title, left: 8, top: 4, textStyle: st.titleStyle },
    legend: { show: legend, top: 24, left: 8, type: "scroll", textStyle: { fontSize: 10, color: st.c.muted } },
    tooltip: { trigger: "axis", confine: true, valueFormatter: (v) => fmt(v, 4) },
    grid: { left: 52, right: 18, top: legend ? 58 : 34, bottom: 34 },
    xAxis: { type: "value", min: "dataMin", max: "dataMax", minInterval: 1, nameLocation: "middle", nameGap: 20,
      axisLabel: { ...st.axisLabel, formatter: (v) => (Number.isInteger(v) ? String(v) : "") }, name: t("axis.step"), nameTextStyle: { fontSize: 10, color: st.c.muted },
      splitLine: { lineStyle: { color: st.c.grid } } },
    yAxis: { type: "value", scale: true, axisLabel: st.axisLabel, splitLine: { lineStyle: { color: st.c.grid } } },
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
