// A user panel's line chart: a StepChart whose x axis may be a fixed time mode or any logged metric
// (tokens or samples seen: each line's points are joined with the x metric by step), whose y range
// may be fixed or outlier-robust, and whose title and legend wrap instead of being cut or paged
// (the plot moves down and the panel grows by what they need).
import { PALETTE, StepChart } from "../charts.js";
import { runColor, runLabel } from "../colors.js";
import { fmt } from "../ui.js";
import { compact, headerLayout, KEY_SEP, legendOption, TIME_X, titleOption, yLimits } from "./panel_layout.js";

const BASE_TOP = 60; // StepChart's own grid top: title and one legend row

// The lines of a panel: a colour per run (the same on every page) with metrics by dash when there
// are several runs, a colour per metric for one run; labels "name · short id" where names repeat.
export function panelLines(panel, runs, metrics) {
  const many = metrics.length > 1;
  return (data) => {
    const out = [];
    runs.forEach((run) => metrics.forEach((m, mi) => {
      const d = data.get(`${run}${KEY_SEP}${m}`);
      if (!d || !d.steps.length) return;
      const label = runs.length > 1 ? (many ? `${runLabel(run)} · ${m}` : runLabel(run)) : m;
      const color = runs.length > 1 ? runColor(run) : PALETTE[mi % PALETTE.length];
      const line = { name: m, label, steps: d.steps, values: d.values, walls: d.walls, color, dashed: runs.length > 1 && mi % 2 === 1 };
      out.push(TIME_X.includes(panel.x) || !panel.x ? line : joinX(line, data.get(`${run}${KEY_SEP}${panel.x}`)));
    }));
    return out;
  };
}

// The line's points where the x metric was logged at the same step; `xs` holds their x.
export function joinX(line, xd) {
  const at = new Map();
  if (xd) xd.steps.forEach((s, i) => { if (xd.values[i] !== null && Number.isFinite(xd.values[i])) at.set(s, xd.values[i]); });
  const keep = line.steps.map((s, i) => (at.has(s) ? i : -1)).filter((i) => i >= 0);
  const pick = (arr) => (arr ? keep.map((i) => arr[i]) : arr);
  return { ...line, steps: pick(line.steps), values: pick(line.values), walls: pick(line.walls), xs: keep.map((i) => at.get(line.steps[i])) };
}

function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

export class PanelChart extends StepChart {
  // spec.panel: the normalised panel; a panel with its own x axis leaves the dashboard's linked
  // zoom group (its x is not the others' x) and ignores the dashboard's x toggle.
  constructor(el, spec, opts) {
    const x = spec.panel.x;
    super(el, spec, { ...opts, xMode: TIME_X.includes(x) ? x : opts.xMode, group: x ? `panel-${spec.panel.id}` : undefined });
    this.lastWidth = el.clientWidth;
    // a new width re-wraps the title and legend
    this.ro = new ResizeObserver(() => { if (el.clientWidth !== this.lastWidth) { this.lastWidth = el.clientWidth; this.scheduleRender(); } });
    this.ro.observe(el);
    if (this.xMetric()) { this.xMode = "metric"; this.render(); }
  }

  xMetric() {
    const x = this.spec.panel.x;
    return x && !TIME_X.includes(x) ? x : "";
  }

  setXMode(mode) {
    if (!this.spec.panel.x) super.setXMode(mode);
  }

  // the x of a point: the joined metric value (the line's xs), or for a step alone (annotations,
  // clicks) the x metric of this run at that step
  x(step, wall, zero, line, j) {
    if (this.xMode !== "metric") return super.x(step, wall, zero);
    if (line && line.xs) return line.xs[j];
    const d = this.data.get(`${this.runId}${KEY_SEP}${this.xMetric()}`);
    const i = d ? d.steps.indexOf(step) : -1;
    return i >= 0 ? d.values[i] : null;
  }

  xAxisOption(st) {
    const mode = this.xMode;
    if (mode !== "metric") return super.xAxisOption(st);
    this.xMode = "step";
    const base = super.xAxisOption(st);
    this.xMode = mode;
    return { ...base, name: this.xMetric(), minInterval: undefined, scale: true, axisLabel: { ...st.axisLabel, formatter: (v) => compact(v) } };
  }

  render() {
    if (this.spec.panel && this.chart && !this.chart.isDisposed()) {
      const labels = [...new Set(this.drawnLines().filter((l) => !l.raw).map((l) => l.label))];
      this.head = headerLayout(this.spec.title, labels, this.chart.getWidth());
      const height = `${this.spec.panel.height + Math.max(0, this.head.gridTop - BASE_TOP)}px`;
      if (this.el.style.height !== height) { this.el.style.height = height; this.chart.resize(); }
    }
    super.render();
  }

  option(series) {
    const o = super.option(series);
    if (!this.head) return o;
    o.title = titleOption(o.title, this.head);
    o.legend = legendOption(o.legend, this.head);
    o.grid = { ...o.grid, top: this.head.gridTop };
    // the robust range from the raw values (smoothing keeps them in data[3])
    const values = series.filter((s, i) => !this.rawSeries.has(i)).flatMap((s) => s.data.map((d) => d[3] ?? d[1]));
    const { min, max } = yLimits(this.spec.panel, values);
    o.yAxis.min = this.opts.log && !(min > 0) ? null : min; // a log axis starts above 0
    o.yAxis.max = max;
    return o;
  }

  placeMarkers() {
    super.placeMarkers();
    const layer = this.el.parentNode && this.el.parentNode.querySelector(":scope > .ann-layer");
    if (layer && this.head) layer.style.top = `${this.head.gridTop - 6}px`;
  }

  tooltip(params) {
    const text = super.tooltip(params);
    const ps = (Array.isArray(params) ? params : [params]).filter((p) => Array.isArray(p.data));
    if (this.xMode !== "metric" || !text || !ps.length) return text;
    return `${escapeHtml(this.xMetric())} ${escapeHtml(fmt(ps[0].data[0], 4))} · ${text}`;
  }

  dispose() {
    this.ro.disconnect();
    super.dispose();
  }
}
