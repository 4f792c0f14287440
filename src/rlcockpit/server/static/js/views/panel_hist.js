// A histogram panel: any distribution the run logged (GET /api/runs/{run}/histograms), over time
// as a heatmap (HistogramHeatmap, each step's column the share of its values per bin), or at one
// step (a slider picks it; the last by default) as the share per bin, the other runs overlaid in
// their own colours (each at its step nearest to the chosen one).
import { api } from "../api.js";
import { HistogramHeatmap, themeColors } from "../charts.js";
import { runColor, runLabel } from "../colors.js";
import { t } from "../i18n.js";
import { fmt, h } from "../ui.js";
import { headerLayout, legendOption, titleOption } from "./panel_layout.js";

const REFRESH_MS = 2000; // live: refetch at most this often

// The item of `items` (sorted by step) at `step`, or the last one before it.
export function itemAt(items, step) {
  let best = null;
  for (const it of items) if (it.step <= step) best = it; else break;
  return best || items[0] || null;
}

// [[bin centre, share of the step's values]] of one histogram.
export function shares(item) {
  const total = item.counts.reduce((a, b) => a + b, 0) || 1;
  return item.counts.map((c, i) => [(item.edges[i] + item.edges[i + 1]) / 2, c / total]);
}

export class HistPanel {
  constructor(el, { panel, runs, runId, title, onClickStep }) {
    Object.assign(this, { el, panel, runs, runId, title });
    this.name = panel.metrics[0] || "";
    this.items = new Map(); // run -> items sorted by step
    this.opts = {};
    this.step = null; // the chosen step of the "step" view (null: the last)
    el.style.height = `${panel.height}px`;
    if (panel.view === "time") {
      this.heat = new HistogramHeatmap(el, { title, id: panel.id, runId, onClickStep });
      this.chart = this.heat.chart;
    } else {
      this.chart = echarts.init(el, null, { renderer: "canvas" });
      this.ro = new ResizeObserver(() => this.chart.resize());
      this.ro.observe(el);
      this.slider = h("input", { type: "range", class: "hist-step", min: "0", max: "0", value: "0", "aria-label": t("axis.step"),
        oninput: () => { this.step = this.steps()[Number(this.slider.value)] ?? null; this.render(); } });
      this.stepLabel = h("span", { class: "muted small hist-step-label" });
      this.controls = h("div", { class: "hist-controls" }, this.stepLabel, this.slider);
    }
  }

  async load() {
    const runs = this.heat ? [this.runId] : this.runs;
    const res = await Promise.all(runs.map((r) => api.histograms(r, this.name).catch(() => ({ items: [] }))));
    runs.forEach((r, i) => this.items.set(r, [...(res[i].items || [])].sort((a, b) => a.step - b.step)));
    this.render();
  }

  steps() {
    return (this.items.get(this.runId) || []).map((it) => it.step);
  }

  liveKey(m) { return m; }

  // a live step: refetch (throttled); the heatmap keeps its columns, the view its chosen step
  append() {
    if (this.pending) return;
    this.pending = setTimeout(() => { this.pending = null; this.load(); }, REFRESH_MS);
  }

  setOpts(opts) { Object.assign(this.opts, opts); }

  setXMode() {}

  lastStep() {
    const s = this.steps();
    return s.length ? s[s.length - 1] : -1;
  }

  render() {
    if (this.heat) { this.heat.setItems(this.items.get(this.runId) || []); return; }
    if (this.chart.isDisposed()) return;
    const steps = this.steps();
    const step = this.step ?? steps[steps.length - 1];
    this.slider.max = String(Math.max(0, steps.length - 1));
    this.slider.value = String(Math.max(0, steps.indexOf(step)));
    this.stepLabel.textContent = steps.length ? `${t("axis.step")} ${step}` : "";
    const c = themeColors();
    const shown = this.runs.map((run) => ({ run, item: itemAt(this.items.get(run) || [], step ?? Infinity) })).filter((r) => r.item);
    const one = this.runs.length === 1;
    const labels = shown.map((r) => `${runLabel(r.run)} · ${t("axis.step")} ${r.item.step}`);
    const head = headerLayout(this.title, one ? [] : labels, this.chart.getWidth());
    this.el.style.height = `${this.panel.height + Math.max(0, head.gridTop - 40)}px`;
    this.chart.resize();
    this.chart.setOption({
      animation: false,
      title: titleOption({ text: this.title, left: 8, top: 4, textStyle: { fontSize: 13, fontWeight: 600, color: c.ink } }, head),
      legend: legendOption({ show: !one, data: labels, textStyle: { color: c.muted } }, head),
      tooltip: { trigger: "axis", confine: true, valueFormatter: (v) => `${(v * 100).toFixed(1)}%` },
      grid: { left: 52, right: 18, top: head.gridTop, bottom: 30 },
      xAxis: { type: "value", scale: true, axisLabel: { fontSize: 10, color: c.muted, formatter: (v) => fmt(v, 2) }, splitLine: { lineStyle: { color: c.grid } } },
      yAxis: { type: "value", axisLine: { onZero: false }, axisLabel: { fontSize: 10, color: c.muted, formatter: (v) => `${Math.round(v * 100)}%` }, splitLine: { lineStyle: { color: c.grid } } },
      series: shown.map((r, i) => ({ type: "line", step: "middle", name: labels[i], data: shares(r.item), symbol: "none",
        lineStyle: { width: 1.4, color: one ? "#3b82f6" : runColor(r.run) }, itemStyle: { color: one ? "#3b82f6" : runColor(r.run) },
        areaStyle: { opacity: 0.15, color: one ? "#3b82f6" : runColor(r.run) } })),
    }, { notMerge: true });
    this.el.dataset.points = String(shown.length ? shown[0].item.counts.length : 0);
    this.el.dataset.step = String(step ?? "");
  }

  // the shown distributions as CSV: a row per run and bin
  csv() {
    if (this.heat) return this.heat.csv();
    const step = this.step ?? this.steps()[this.steps().length - 1];
    const rows = [["run", "step", "bin_lo", "bin_hi", "count"]];
    for (const run of this.runs) {
      const it = itemAt(this.items.get(run) || [], step ?? Infinity);
      if (it) it.counts.forEach((n, i) => rows.push([run, it.step, it.edges[i], it.edges[i + 1], n]));
    }
    return rows.map((r) => r.join(",")).join("\n") + "\n";
  }

  downloadCsv() {
    if (this.heat) return this.heat.downloadCsv();
    const a = Object.assign(document.createElement("a"), { href: URL.createObjectURL(new Blob([this.csv()], { type: "text/csv" })),
      download: `${this.runId}-${this.name.replace(/[^A-Za-z0-9_.-]+/g, "_")}.csv` });
    document.body.append(a);
    a.click();
    a.remove();
  }

  downloadPng() {
    if (this.heat) return this.heat.downloadPng();
    const a = Object.assign(document.createElement("a"), { href: this.chart.getDataURL({ type: "png", pixelRatio: 2, backgroundColor: themeColors().panel }),
      download: `${this.runId}-${this.name.replace(/[^A-Za-z0-9_.-]+/g, "_")}.png` });
    document.body.append(a);
    a.click();
    a.remove();
  }

  dispose() {
    clearTimeout(this.pending);
    if (this.ro) this.ro.disconnect();
    if (this.heat) this.heat.dispose(); else this.chart.dispose();
  }
}
