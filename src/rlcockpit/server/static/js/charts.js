// ECharts helpers: line charts of step series that grow live, their tool strip, and the annotation
// registry of the extension API (charts.annotate). `echarts` is the vendored global. The shared
// pieces are in chart_base.js, the distributions and small charts in charts_dist.js; both are
// re-exported here, so views import from this one module.
import { baseChart, collapseMarks, csvCell, download, duration, escapeHtml, MARKER_GAP_PX, niceCeil, PALETTE, styled, themeColors, tickLabel,
  unitLabel, X_LABEL_PX, X_MODES } from "./chart_base.js";
import { t } from "./i18n.js";
import { ema } from "./stats.js";
import { fmt } from "./ui.js";

export const GROUP = "rlcockpit-dashboard";
// the palette of lines within one run's chart; lines of different runs take colors.runColor(run)

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

// A line chart over the step, wall-clock or relative-time axis. `spec`:
//   id, title (already translated), names: metric names it shows (exact or "prefix*"),
//   lines(data, opts) -> [{label, name (metric), steps, values, color, dashed, width, faint}],
//   hlines(data) -> [{value, label, color}], primary: metric name whose points count and are clicked,
//   ownSmoothing: the spec draws its own EMA from opts.smoothing (the reward chart); other charts
//   get the generic one: the EMA in full colour, the raw curve faint behind it.
// opts: {smoothing (0..0.99, TensorBoard's debiased EMA), log (log-scale y), klWindow}.
export class StepChart {
  constructor(el, spec, { runId, xMode = "step", group = GROUP, onClickStep, units = {} } = {}) {
    this.el = el;
    this.spec = spec;
    this.runId = runId;
    this.xMode = X_MODES.includes(xMode) ? xMode : "step";
    this.units = units;
    this.data = new Map(); // metric name -> {steps, values, walls}
    this.opts = {};
    this.hovered = false;
    this.rawSeries = new Set();
    const { chart, dispose } = baseChart(el);
    this.chart = chart;
    this.disposeChart = dispose;
    chart.group = group;
    if (onClickStep) this.bindClick(onClickStep);
    // one tooltip: only the hovered chart shows its box; the others show the crosshair
    this.onEnter = () => this.setHovered(true);
    this.onLeave = () => { if (!this.chart.isDisposed()) this.chart.dispatchAction({ type: "hideTip" }); this.setHovered(false); };
    el.addEventListener("mouseenter", this.onEnter);
    el.addEventListener("mouseleave", this.onLeave);
    chart.on("datazoom", () => this.placeMarkers());
    chart.on("finished", () => this.markersStale && this.placeMarkers());
    this.unAnn = onAnnotations((id) => id === runId && this.render());
    this.render(); // title and axes at once; the overlay says loading / no data yet
  }

  setHovered(on) {
    this.hovered = on;
    if (!this.chart.isDisposed()) this.chart.setOption({ tooltip: { showContent: on } });
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
    this.xMode = X_MODES.includes(mode) ? mode : "step";
    this.render();
  }

  scheduleRender() {
    if (this.pending) return;
    this.pending = setTimeout(() => { this.pending = null; this.render(); }, 40);
  }

  // the first wall time of the chart's data: zero of the relative-time axis
  t0() {
    let t = Infinity;
    for (const d of this.data.values()) for (const w of d.walls) if (w !== null && w !== undefined) { t = Math.min(t, w); break; }
    return Number.isFinite(t) ? t : 0;
  }

  x(step, wall, zero = this.zero) {
    if (this.xMode === "wall") return (wall ?? 0) * 1000;
    if (this.xMode === "rel") return (wall ?? zero) - zero;
    return step;
  }

  // The zero of a line's relative time: the chart's first wall time, or with spec.relPerLine
  // (several runs in one chart, the comparison) the line's own first one, so every run starts at 0.
  zeroOf(line) {
    if (!this.spec.relPerLine || !line.walls) return this.zero;
    const w = line.walls.find((v) => v !== null && v !== undefined);
    return w ?? this.zero;
  }

  xOfStep(step) {
    if (this.xMode === "step") return step;
    const d = this.primaryData();
    if (!d) return null;
    const i = d.steps.indexOf(step);
    return i >= 0 && d.walls[i] ? this.x(step, d.walls[i]) : null;
  }

  // Vertical annotation lines (no labels: the markers above the plot carry them, collapsed so
  // they never overlap) within the data's x range, plus the horizontal target / warning lines.
  markLine(hlines, xRange) {
    const inRange = (x) => x !== null && (!xRange || (x >= xRange[0] && x <= xRange[1]));
    const vertical = annotations(this.runId).map((m) => ({ xAxis: this.xOfStep(m.step), name: m.label, label: { show: false },
      lineStyle: { color: m.color, type: "solid", width: 1.2, opacity: 0.75 } })).filter((m) => inRange(m.xAxis));
    const horizontal = hlines.map((l) => ({ yAxis: l.value, name: l.label, label: { formatter: l.label, position: "insideEndTop", fontSize: 10, color: l.color }, lineStyle: { color: l.color, type: "dashed", width: 1.2 } }));
    return { silent: true, symbol: "none", animation: false, data: [...horizontal, ...vertical] };
  }

  // The drawn lines: the spec's, with the generic EMA (raw faint behind) when smoothing is on.
  drawnLines() {
    const lines = this.spec.lines(this.data, this.opts);
    const s = this.opts.smoothing ?? 0;
    if (this.spec.ownSmoothing || !(s > 0)) return lines;
    const out = [];
    lines.forEach((l, i) => {
      if (l.faint || l.derived) { out.push(l); return; }
      const color = l.color || PALETTE[i % PALETTE.length];
      // the smoothed line first: the legend takes its symbol from the first series of a name
      out.push({ ...l, color, values: ema(l.values, s), rawValues: l.values });
      out.push({ ...l, color, faint: true, raw: true });
    });
    return out;
  }

  render() {
    if (!this.chart || this.chart.isDisposed()) return;
    this.zero = this.t0();
    const lines = this.drawnLines();
    const hlines = this.spec.hlines ? this.spec.hlines(this.data, this.opts) : [];
    const log = !!this.opts.log;
    const yOf = (v) => (log && !(v > 0) ? null : v);
    let xMin = Infinity;
    let xMax = -Infinity;
    const series = lines.map((l, i) => {
      const zero = this.zeroOf(l);
      const data = l.steps.map((s, j) => {
        const x = this.x(s, l.walls ? l.walls[j] : null, zero, l, j); // the line and index: a subclass's own x (panels)
        if (x < xMin) xMin = x;
        if (x > xMax) xMax = x;
        return [x, yOf(l.values[j]), s, l.rawValues ? l.rawValues[j] : null, l.notes ? l.notes[j] : null];
      });
      if (l.band) return bandSeries(l, data, yOf);
      return {
        type: "line", name: l.label, showSymbol: !l.raw && l.steps.length < 60, symbolSize: 4, sampling: "lttb",
        lineStyle: { width: l.width ?? 1.6, type: l.dashed ? "dashed" : "solid", opacity: l.faint ? (l.raw ? 0.25 : 0.35) : 1 },
        itemStyle: { color: l.color || PALETTE[i % PALETTE.length], opacity: l.faint ? 0.35 : 1 },
        emphasis: { disabled: !!l.raw }, tooltip: l.raw ? { show: false } : undefined,
        data, z: l.faint ? 1 : 2,
      };
    });
    const xRange = Number.isFinite(xMin) ? [xMin, xMax] : null;
    this.rawSeries = new Set(series.map((sr, i) => (sr.raw ? i : -1)).filter((i) => i >= 0));
    const first = series.find((sr) => sr.type === "line");
    if (first) first.markLine = this.markLine(hlines, xRange);
    const option = this.option(series);
    if (hlines.length && !log) {
      // keep the target / warning lines in view even when the curve stays below them
      const top = Math.max(...hlines.map((l) => l.value));
      option.yAxis.max = (v) => niceCeil(Math.max(v.max, top + 0.05 * Math.abs(top)));
      // that end is rarely a tick: its label would print over the tick below it
      option.yAxis.axisLabel = { ...option.yAxis.axisLabel, showMaxLabel: false };
    } else {
      option.yAxis.max = option.yAxis.max ?? null; // a subclass's option() may fix it (panels' y range)
    }
    this.chart.setOption(option, { replaceMerge: ["series"] });
    const primary = this.primaryData();
    this.el.dataset.points = String(primary ? primary.steps.length : 0);
    this.el.dataset.lastStep = String(this.lastStep());
    this.el.dataset.xMode = this.xMode;
    this.xRange = xRange;
    this.markersStale = true;
    this.placeMarkers();
  }

  unit() {
    const name = this.spec.primary || [...this.data.keys()][0] || this.spec.names[0];
    return unitLabel(this.spec.unit ?? this.units[name] ?? "");
  }

  xAxisOption(st) {
    const mode = this.xMode;
    // hideOverlap: labels that would touch (the last two ticks, wall-clock times) are left out
    const label = { ...st.axisLabel, hideOverlap: true };
    const splitNumber = Math.max(2, Math.min(5, Math.floor((this.el.clientWidth || 400) / X_LABEL_PX)));
    const base = { min: "dataMin", max: "dataMax", axisLabel: label, splitNumber, nameLocation: "middle", nameGap: 20,
      nameTextStyle: { fontSize: 10, color: st.c.muted }, splitLine: { lineStyle: { color: st.c.grid } } };
    if (mode === "wall") return { ...base, type: "time", name: t("axis.wall") };
    if (mode === "rel") return { ...base, type: "value", name: t("axis.rel"), axisLabel: { ...label, formatter: (v) => duration(v) } };
    // integer step ticks: a zoomed axis never shows step 12.4
    return { ...base, type: "value", name: t("axis.step"), minInterval: 1,
      axisLabel: { ...label, formatter: (v) => (Number.isInteger(v) ? String(v) : "") } };
  }

  option(series) {
    const st = styled();
    const unit = this.unit();
    return {
      animation: false,
      title: { text: this.spec.title, left: 8, top: 4, textStyle: st.titleStyle },
      legend: { top: 24, left: 8, right: 8, type: "scroll", itemWidth: 14, itemHeight: 8, textStyle: { fontSize: 10, color: st.c.muted },
        data: [...new Set(series.map((s) => s.name))] },
      tooltip: { trigger: "axis", confine: true, showContent: this.hovered, formatter: (ps) => this.tooltip(ps) },
      axisPointer: { link: [{ xAxisIndex: "all" }] },
      grid: { left: 56, right: 18, top: 60, bottom: 36 },
      xAxis: this.xAxisOption(st),
      yAxis: { type: this.opts.log ? "log" : "value", scale: true, axisLabel: { ...st.axisLabel, formatter: tickLabel }, name: unit, nameGap: 8,
        nameTextStyle: { fontSize: 10, color: st.c.muted, align: "left" }, splitLine: { lineStyle: { color: st.c.grid } } },
      dataZoom: [{ type: "inside", xAxisIndex: 0, filterMode: "none" }],
      series,
    };
  }

  // "step 17" (and the time in the time modes), then each line's value at that step.
  tooltip(params) {
    const ps = (Array.isArray(params) ? params : [params]).filter((p) => Array.isArray(p.data) && !this.rawSeries.has(p.seriesIndex));
    if (!ps.length) return "";
    const [x, , step] = ps[0].data;
    let head = `${t("axis.step")} ${step}`;
    if (this.xMode === "wall") head = `${new Date(x).toLocaleString()} · ${head}`;
    if (this.xMode === "rel") head = `${duration(x)} · ${head}`;
    return escapeHtml(head) + ps.map((p) => {
      const raw = p.data[3];
      const rawText = raw === null || raw === undefined ? "" : ` <span style="opacity:.7">(${escapeHtml(t("line.raw"))} ${escapeHtml(fmt(raw, 4))})</span>`;
      const note = p.data[4] ? ` <span style="opacity:.7">${escapeHtml(p.data[4])}</span>` : "";
      return `<br>${p.marker}${escapeHtml(p.seriesName)} <b>${escapeHtml(fmt(p.data[1], 4))}</b>${rawText}${note}`;
    }).join("");
  }

  // Annotation markers above the plot: marks closer than MARKER_GAP_PX collapse into one marker
  // (its count; hovering lists every mark); marks outside the visible x range are not shown.
  placeMarkers() {
    this.markersStale = false;
    const box = this.el.parentNode;
    if (!box || this.chart.isDisposed()) return;
    let layer = box.querySelector(":scope > .ann-layer");
    const marks = annotations(this.runId);
    if (!marks.length) { if (layer) layer.remove(); return; }
    if (!layer) { layer = document.createElement("div"); layer.className = "ann-layer"; box.append(layer); }
    layer.replaceChildren();
    const left = 56;
    const right = this.el.clientWidth - 18;
    const placed = [];
    for (const m of marks) {
      const x = this.xOfStep(m.step);
      if (x === null || (this.xRange && (x < this.xRange[0] || x > this.xRange[1]))) continue;
      let px;
      try { px = this.chart.convertToPixel({ xAxisIndex: 0 }, x); } catch { px = null; }
      if (!Number.isFinite(px) || px < left - 1 || px > right + 1) continue;
      placed.push({ ...m, px });
    }
    for (const g of collapseMarks(placed)) {
      const text = g.marks.map((m) => `${t("axis.step")} ${m.step}: ${m.label}`).join("\n");
      const marker = document.createElement("span");
      marker.className = `ann-marker${g.marks.length > 1 ? " many" : ""}`;
      marker.style.left = `${g.px}px`;
      marker.style.borderColor = g.marks[0].color;
      marker.textContent = g.marks.length > 1 ? String(g.marks.length) : "◆";
      marker.title = text;
      marker.dataset.count = String(g.marks.length);
      const pop = document.createElement("span");
      pop.className = "ann-pop";
      pop.textContent = text;
      marker.append(pop);
      layer.append(marker);
    }
  }

  // The chart's curves as CSV: one row per step, a column per drawn line (raw and smoothed).
  csv() {
    const lines = this.drawnLines().filter((l) => !l.raw && !l.band);
    const steps = [...new Set(lines.flatMap((l) => l.steps))].sort((a, b) => a - b);
    const walls = new Map();
    const cols = lines.map((l) => {
      const m = new Map();
      l.steps.forEach((s, j) => { m.set(s, l.values[j]); if (l.walls && l.walls[j] !== null) walls.set(s, l.walls[j]); });
      return m;
    });
    const rawCols = lines.map((l) => (l.rawValues ? new Map(l.steps.map((s, j) => [s, l.rawValues[j]])) : null));
    const head = ["step", "wall_time"];
    lines.forEach((l, i) => { head.push(l.name && l.label !== l.name ? `${l.name} ${l.label}` : l.label); if (rawCols[i]) head.push(`${l.label} (raw)`); });
    const rows = [head.map(csvCell).join(",")];
    for (const s of steps) {
      const row = [s, walls.get(s) ?? ""];
      cols.forEach((m, i) => { row.push(m.get(s) ?? ""); if (rawCols[i]) row.push(rawCols[i].get(s) ?? ""); });
      rows.push(row.map(csvCell).join(","));
    }
    return rows.join("\n") + "\n";
  }

  fileName(ext) {
    return `${this.runId || "chart"}-${String(this.spec.id || this.spec.title).replace(/[^A-Za-z0-9_.-]+/g, "_")}.${ext}`;
  }

  downloadCsv() {
    download(this.fileName("csv"), URL.createObjectURL(new Blob([this.csv()], { type: "text/csv" })));
  }

  downloadPng() {
    download(this.fileName("png"), this.chart.getDataURL({ type: "png", pixelRatio: 2, backgroundColor: themeColors().panel }));
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
    this.el.removeEventListener("mouseenter", this.onEnter);
    this.el.removeEventListener("mouseleave", this.onLeave);
    this.disposeChart();
  }
}

// A band around a line (a group of runs: mean ± std or min–max): `line.band = {lower, upper}`,
// drawn as a filled polygon per segment behind the lines, named like its line (the legend toggles
// both), never in the tooltip. `data` are the line's points [x, y, step, ...].
function bandSeries(l, data, yOf) {
  const pts = data.map((d, j) => [d[0], yOf(l.band.lower[j]), yOf(l.band.upper[j])]);
  const ok = (p) => p && p.every((v) => v !== null && v !== undefined && Number.isFinite(v));
  return {
    type: "custom", name: l.label, silent: true, clip: true, z: 0, tooltip: { show: false }, data: pts,
    encode: { x: 0, y: [1, 2] }, itemStyle: { color: l.color }, band: true,
    renderItem: (params, api) => {
      const a = pts[params.dataIndex];
      const b = pts[params.dataIndex + 1];
      if (!ok(a) || !ok(b)) return null;
      const points = [api.coord([a[0], a[1]]), api.coord([b[0], b[1]]), api.coord([b[0], b[2]]), api.coord([a[0], a[2]])];
      return { type: "polygon", shape: { points }, style: { fill: l.color, opacity: l.bandOpacity ?? 0.18 } };
    },
  };
}

export { chartTools, collapseMarks, downloadTools, duration, niceCeil, PALETTE, themeColors, tickLabel, unitLabel, X_MODES } from "./chart_base.js";
export { HistogramHeatmap, histogramBars, matrixHeatmap, rebin, simpleLines } from "./charts_dist.js";
