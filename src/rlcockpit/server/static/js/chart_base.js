// The pieces every chart of the cockpit shares: an ECharts instance that follows its box's size,
// the theme's colours and axis styles, tick labels without float noise, downloads and the CSV / PNG
// tool buttons. `echarts` is the vendored global. (js/charts.js re-exports what views import.)
import { PALETTE as RUN_PALETTE } from "./colors.js";
import { t } from "./i18n.js";

export const PALETTE = RUN_PALETTE.slice(0, 8);

export function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

export function baseChart(el) {
  const chart = echarts.init(el, null, { renderer: "canvas" });
  const ro = new ResizeObserver(() => chart.resize());
  ro.observe(el);
  return { chart, dispose: () => { ro.disconnect(); chart.dispose(); } };
}

// Colours that follow the theme (css/app.css sets them per theme; dark mode flips them).
export function cssVar(name, fallback) {
  if (typeof getComputedStyle !== "function" || typeof document === "undefined") return fallback;  // no page (node)
  const v = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  return v || fallback;
}
export function themeColors() {
  return { ink: cssVar("--ink", "#0f172a"), muted: cssVar("--muted", "#64748b"), grid: cssVar("--chart-grid", "#eef2f7"),
    panel: cssVar("--panel", "#ffffff") };
}
export const axisLabel = { fontSize: 10, color: "#64748b" };
// A value-axis tick as a person writes it: ECharts' ticks carry float noise (0.1 - 7 × 0.005 =
// 0.06500000000000002), which its default label prints whole and the grid then clips.
export function tickLabel(v) {
  if (typeof v !== "number" || !Number.isFinite(v)) return String(v);
  const r = Number(v.toPrecision(6));
  return r === 0 || Math.abs(r) >= 1e-4 ? r.toLocaleString("en-US", { maximumSignificantDigits: 6 }) : String(r);
}
export const titleStyle = { fontSize: 13, fontWeight: 600, color: "#0f172a" };
export function styled() {
  const c = themeColors();
  return { axisLabel: { ...axisLabel, color: c.muted }, titleStyle: { ...titleStyle, color: c.ink }, c };
}

export function download(name, href) {
  const a = document.createElement("a");
  a.href = href;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
}

export function csvCell(v) {
  if (v === null || v === undefined) return "";
  const s = String(v);
  return /[",\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

export function toolButton(cls, text, title, fn) {
  const b = document.createElement("button");
  b.className = `btn tiny ${cls}`;
  b.textContent = text;
  b.title = title;
  b.type = "button";
  b.addEventListener("click", fn);
  return b;
}

// The CSV and PNG buttons alone (the heatmaps' tool strip; the step charts' ends with them).
export function downloadTools(chart) {
  const strip = document.createElement("div");
  strip.className = "chart-tools";
  strip.append(toolButton("ct-csv", "CSV", t("chart.csv_help"), () => chart.downloadCsv()),
    toolButton("ct-png", "PNG", t("chart.png_help"), () => chart.downloadPng()));
  return strip;
}

// ---------------------------------------------------------------- axes and markers
// "45s", "12m", "1h05m": the relative-time axis (time since the run's first step).
export function duration(seconds) {
  if (!Number.isFinite(seconds)) return "";
  const s = Math.round(Math.abs(seconds));
  const sign = seconds < 0 ? "-" : "";
  if (s < 60) return `${sign}${s}s`;
  if (s < 3600) return `${sign}${Math.floor(s / 60)}m${s % 60 ? String(s % 60).padStart(2, "0") + "s" : ""}`;
  return `${sign}${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}

export const X_MODES = ["step", "wall", "rel"];
export const X_LABEL_PX = 80; // room per x tick label: fewer ticks on a narrow chart

// A "nice" ceiling for an axis end set from a value (the KL chart keeps its warning line in view):
// 0.1575 -> 0.16, never the raw 0.15750000000000003 printed as the top label.
export function niceCeil(x) {
  if (!Number.isFinite(x) || x === 0) return x;
  const p = 10 ** (Math.floor(Math.log10(Math.abs(x))) - 1);
  return Number((Math.ceil(x / p) * p).toPrecision(12));
}

// The y axis title: the catalog unit in the current language ("nats" -> "奈特"), as logged if unknown.
export function unitLabel(unit) {
  if (!unit) return "";
  const key = `unit.${String(unit).toLowerCase().replace(/[^a-z0-9]+/g, "_").replace(/^_|_$/g, "")}`;
  return t(key) === key ? unit : t(key);
}
export const MARKER_GAP_PX = 18; // annotations closer than this on screen collapse into one marker

// Group marks (sorted by pixel) so that no two markers are closer than `gap` pixels.
export function collapseMarks(placed, gap = MARKER_GAP_PX) {
  const groups = [];
  for (const m of [...placed].sort((a, b) => a.px - b.px)) {
    const last = groups[groups.length - 1];
    if (last && m.px - last.px < gap) last.marks.push(m);
    else groups.push({ px: m.px, marks: [m] });
  }
  return groups;
}

// The small tool strip of a chart box: smoothing, log scale, CSV and PNG download.
// onChange({smoothing?, log?}) lets the page remember the chart's own settings (URL, prefs).
export function chartTools(chart, { onChange } = {}) {
  const sm = document.createElement("select");
  sm.className = "ct-smooth";
  sm.title = t("chart.smoothing_help");
  for (const v of [0, 0.3, 0.6, 0.8, 0.9, 0.95, 0.99]) {
    const o = document.createElement("option");
    o.value = String(v);
    o.textContent = v === 0 ? t("chart.no_smoothing") : `${t("line.ema")} ${v}`;
    sm.append(o);
  }
  const sync = () => {
    const cur = chart.opts.smoothing ?? 0;
    if (![...sm.options].some((o) => Number(o.value) === cur)) {
      const o = document.createElement("option");
      o.value = String(cur);
      o.textContent = `${t("line.ema")} ${cur}`;
      sm.append(o);
    }
    sm.value = String(cur);
    logBtn.classList.toggle("active", !!chart.opts.log);
  };
  sm.addEventListener("change", () => { chart.setOpts({ smoothing: Number(sm.value) }); onChange && onChange({ smoothing: Number(sm.value) }); });
  const logBtn = toolButton("ct-log", "log", t("chart.log_help"), () => {
    chart.setOpts({ log: !chart.opts.log });
    sync();
    onChange && onChange({ log: !!chart.opts.log });
  });
  const strip = downloadTools(chart);
  strip.prepend(sm, logBtn);
  strip.sync = sync;
  sync();
  return strip;
}
