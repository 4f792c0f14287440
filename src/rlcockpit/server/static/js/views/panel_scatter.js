// A metric-vs-metric scatter panel (KL against reward): one point per step where both metrics were
// logged. One run: the points coloured by step (a colour bar, early → late); several runs: a colour
// per run (the same on every page). Clicking a point opens that step's samples.
import { themeColors } from "../charts.js";
import { runColor, runLabel } from "../colors.js";
import { t } from "../i18n.js";
import { fmt } from "../ui.js";
import { compact, headerLayout, KEY_SEP, legendOption, titleOption, yLimits } from "./panel_layout.js";

const STEP_COLORS = ["#440154", "#3b528b", "#21918c", "#5ec962", "#fde725"]; // viridis, early → late

// [[x, y, step]] of one run: the steps where both metrics have a finite value.
export function scatterPoints(xd, yd) {
  if (!xd || !yd) return [];
  const ys = new Map();
  yd.steps.forEach((s, i) => { if (yd.values[i] !== null && Number.isFinite(yd.values[i])) ys.set(s, yd.values[i]); });
  const out = [];
  xd.steps.forEach((s, i) => { const x = xd.values[i]; if (x !== null && Number.isFinite(x) && ys.has(s)) out.push([x, ys.get(s), s]); });
  return out;
}

const esc = (text) => String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);

function download(name, href) {
  const a = Object.assign(document.createElement("a"), { href, download: name });
  document.body.append(a);
  a.click();
  a.remove();
}

export class ScatterPanel {
  // panel: normalised (x: the x metric, metrics[0]: the y metric); runs: this run first
  constructor(el, { panel, runs, runId, title, onClickStep }) {
    Object.assign(this, { el, panel, runs, runId, title });
    this.xName = panel.x;
    this.yName = panel.metrics[0] || "";
    this.data = new Map();
    this.opts = {};
    this.chart = echarts.init(el, null, { renderer: "canvas" });
    this.ro = new ResizeObserver(() => { this.chart.resize(); if (el.clientWidth !== this.width) this.render(); });
    this.ro.observe(el);
    if (onClickStep) this.chart.on("click", (p) => Array.isArray(p.data) && onClickStep(p.data[2]));
    this.render();
  }

  liveKey(m) {
    return `${this.runId}${KEY_SEP}${m}`;
  }

  append(step, wall, keyed) {
    let changed = false;
    for (const m of [this.xName, this.yName]) {
      const key = this.liveKey(m);
      if (!(key in keyed)) continue;
      if (!this.data.has(key)) this.data.set(key, { steps: [], values: [], walls: [] });
      const d = this.data.get(key);
      if (d.steps.length && step <= d.steps[d.steps.length - 1]) continue;
      d.steps.push(step);
      d.values.push(keyed[key]);
      d.walls.push(wall);
      changed = true;
    }
    if (changed && !this.pending) this.pending = setTimeout(() => { this.pending = null; this.render(); }, 40);
  }

  points(run) {
    return scatterPoints(this.data.get(`${run}${KEY_SEP}${this.xName}`), this.data.get(`${run}${KEY_SEP}${this.yName}`));
  }

  setOpts(opts) { Object.assign(this.opts, opts); this.render(); }

  setXMode() {} // its x is a metric

  lastStep() {
    const pts = this.points(this.runId);
    return pts.length ? pts[pts.length - 1][2] : -1;
  }

  render() {
    if (this.chart.isDisposed()) return;
    const c = themeColors();
    const byRun = this.runs.map((run) => ({ run, pts: this.points(run) }));
    const one = this.runs.length === 1;
    const labels = one ? [] : this.runs.map((r) => runLabel(r));
    this.width = this.el.clientWidth;
    const head = headerLayout(this.title, labels, this.chart.getWidth());
    const height = `${this.panel.height + Math.max(0, head.gridTop - 40)}px`;
    if (this.el.style.height !== height) { this.el.style.height = height; this.chart.resize(); }
    const steps = byRun.flatMap((r) => r.pts.map((p) => p[2]));
    const { min, max } = yLimits(this.panel, byRun.flatMap((r) => r.pts.map((p) => p[1])));
    const axis = (name) => ({ type: "value", scale: true, name, nameLocation: "middle", nameGap: 22,
      nameTextStyle: { fontSize: 10, color: c.muted }, axisLabel: { fontSize: 10, color: c.muted, formatter: (v) => compact(v) },
      splitLine: { lineStyle: { color: c.grid } } });
    this.chart.setOption({
      animation: false,
      title: titleOption({ text: this.title, left: 8, top: 4, textStyle: { fontSize: 13, fontWeight: 600, color: c.ink } }, head),
      legend: legendOption({ show: !one, data: labels, textStyle: { color: c.muted } }, head),
      tooltip: { trigger: "item", confine: true, formatter: (p) => `${esc(p.seriesName)}<br>${esc(t("axis.step"))} ${p.data[2]}<br>`
        + `${esc(this.xName)}: <b>${fmt(p.data[0], 4)}</b><br>${esc(this.yName)}: <b>${fmt(p.data[1], 4)}</b>` },
      grid: { left: 56, right: one ? 64 : 18, top: head.gridTop, bottom: 40 },
      xAxis: axis(this.xName),
      yAxis: { ...axis(this.yName), nameLocation: "end", nameGap: 8, nameTextStyle: { fontSize: 10, color: c.muted, align: "left" }, min, max },
      visualMap: one && steps.length ? { type: "continuous", dimension: 2, min: Math.min(...steps), max: Math.max(...steps), right: 4, top: head.gridTop,
        itemWidth: 10, itemHeight: 90, text: [t("axis.step"), ""], textStyle: { fontSize: 10, color: c.muted }, calculable: false,
        inRange: { color: STEP_COLORS } } : null,
      series: byRun.map(({ run, pts }) => ({ type: "scatter", name: one ? this.yName : runLabel(run), data: pts, symbolSize: 6,
        itemStyle: one ? { opacity: 0.9 } : { color: runColor(run), opacity: 0.8 } })),
    }, { notMerge: true });
    this.el.dataset.points = String(this.points(this.runId).length);
  }

  csv() {
    const rows = [["run", "step", this.xName, this.yName]];
    for (const run of this.runs) for (const [x, y, s] of this.points(run)) rows.push([run, s, x, y]);
    return rows.map((r) => r.join(",")).join("\n") + "\n";
  }

  fileName(ext) {
    return `${this.runId}-scatter-${`${this.yName}-vs-${this.xName}`.replace(/[^A-Za-z0-9_.-]+/g, "_")}.${ext}`;
  }

  downloadCsv() { download(this.fileName("csv"), URL.createObjectURL(new Blob([this.csv()], { type: "text/csv" }))); }

  downloadPng() { download(this.fileName("png"), this.chart.getDataURL({ type: "png", pixelRatio: 2, backgroundColor: themeColors().panel })); }

  dispose() {
    clearTimeout(this.pending);
    this.ro.disconnect();
    this.chart.dispose();
  }
}
