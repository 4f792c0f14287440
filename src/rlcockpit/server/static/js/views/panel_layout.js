// The project's panel layout as a document (issue 29, "panels a user arranges"): what a panel may
// say (kind, metrics, runs, x axis, y range, width, height), its defaults, and the pure helpers
// that arrange panels and sections. server/routes/layouts.py validates the same fields.
import { get, request } from "../api.js";

const enc = encodeURIComponent;
export const KEY_SEP = "\u0001"; // data keys of a panel: `${run}${KEY_SEP}${metric}`
export const TIME_X = ["step", "wall", "rel"]; // the x axes that are not a metric
export const KINDS = ["line", "scatter", "hist"];
export const WIDTHS = [1, 2, 3, 4]; // columns of the four-column panel grid
export const HEIGHTS = { s: 240, m: 360, l: 520 }; // the plot's height in px (the legend adds to it)
export const ROBUST_Q = [0.01, 0.99]; // the outlier-robust y range: 1st to 99th percentile

export const layoutApi = {
  get: (project) => get(`/projects/${enc(project)}/layout`),
  put: (project, layout) => request("PUT", `/projects/${enc(project)}/layout`, null, layout),
};

// The size a panel's resize grip gives it after a drag of (dx, dy) px: its width in grid columns
// (`colPx` a column plus its gap, within `columns`), its height the nearest of HEIGHTS.
export function snapSize(start, dx, dy, colPx, columns = WIDTHS.length) {
  const width = Math.max(1, Math.min(columns, Math.round((start.width * colPx + dx) / colPx)));
  const want = start.height + dy;
  const height = Object.values(HEIGHTS).reduce((best, v) => (Math.abs(v - want) < Math.abs(best - want) ? v : best));
  return { width, height };
}

const num = (v) => (typeof v === "number" && Number.isFinite(v) ? v : null);

// A saved panel with every field present (older layouts have only id/title/metrics/runs/log).
export function normalizePanel(p) {
  return {
    id: String(p.id || `p${Date.now().toString(36)}`), title: p.title || "", metrics: [...(p.metrics || [])],
    runs: [...(p.runs || [])], log: !!p.log, kind: KINDS.includes(p.kind) ? p.kind : "line",
    width: WIDTHS.includes(p.width) ? p.width : 2, height: Object.values(HEIGHTS).includes(p.height) ? p.height : HEIGHTS.s,
    x: typeof p.x === "string" ? p.x : "", y_min: num(p.y_min), y_max: num(p.y_max), y_robust: !!p.y_robust,
    view: p.view === "step" ? "step" : "time",
  };
}

// Move a panel `delta` places (−1 earlier, +1 later); a new list.
export function movePanel(panels, id, delta) {
  const i = panels.findIndex((p) => p.id === id);
  const j = i + delta;
  if (i < 0 || j < 0 || j >= panels.length) return panels;
  const out = [...panels];
  [out[i], out[j]] = [out[j], out[i]];
  return out;
}

// Put panel `id` where `targetId` is (a drop on it): before it when moving up, after it when down.
export function dropPanel(panels, id, targetId) {
  const from = panels.findIndex((p) => p.id === id);
  const to = panels.findIndex((p) => p.id === targetId);
  if (from < 0 || to < 0 || from === to) return panels;
  const out = [...panels];
  const [moved] = out.splice(from, 1);
  out.splice(to, 0, moved);
  return out;
}

// Section names in the saved order first, the others after them in their own order.
export function orderSections(names, order) {
  const saved = order || [];
  const rank = new Map(saved.map((n, i) => [n, i]));
  return [...names].map((n, i) => [n, i]).sort(([a, i], [b, j]) =>
    (rank.get(a) ?? saved.length + i) - (rank.get(b) ?? saved.length + j)).map(([n]) => n);
}

// The q-quantile by nearest rank, rounded towards the middle: with 30 values the 99th percentile
// is the second largest, so a single spike never sets the range.
export function quantile(sorted, q) {
  if (!sorted.length) return null;
  const pos = q * (sorted.length - 1);
  return sorted[q < 0.5 ? Math.ceil(pos) : Math.floor(pos)];
}

// The y axis limits of a panel: its manual min / max, else with y_robust the extent of the values
// that lie within the 1st–99th percentile band widened by half its width each side (so the
// ordinary extremes stay in view and a spike does not), 5% padding; else null (the chart's own
// scale). `values`: every drawn value.
export function yLimits(panel, values) {
  let lo = panel.y_min;
  let hi = panel.y_max;
  if (panel.y_robust && (lo === null || hi === null)) {
    const sorted = values.filter((v) => v !== null && v !== undefined && Number.isFinite(v)).sort((a, b) => a - b);
    if (sorted.length) {
      const p1 = quantile(sorted, ROBUST_Q[0]);
      const p99 = quantile(sorted, ROBUST_Q[1]);
      const inside = sorted.filter((v) => v >= p1 - (p99 - p1) / 2 && v <= p99 + (p99 - p1) / 2);
      const a = inside[0];
      const b = inside[inside.length - 1];
      const pad = (b - a) * 0.05 || Math.abs(b) * 0.05 || 1;
      if (lo === null) lo = a - pad;
      if (hi === null) hi = b + pad;
    }
  }
  return { min: lo, max: hi };
}

// 12500 -> "12.5k", 3e6 -> "3M": ticks of a token or sample count.
export function compact(v) {
  const a = Math.abs(v);
  const cut = (x, s) => `${Number(x.toFixed(x < 100 ? 1 : 0))}${s}`;
  if (a >= 1e9) return (v < 0 ? "-" : "") + cut(a / 1e9, "G");
  if (a >= 1e6) return (v < 0 ? "-" : "") + cut(a / 1e6, "M");
  if (a >= 1e4) return (v < 0 ? "-" : "") + cut(a / 1e3, "k");
  return Number.isInteger(v) ? String(v) : String(Number(v.toPrecision(4)));
}

// --------------------------------------------------------------- title and legend that wrap
let ctx2d = null;
function textWidth(text, font) {
  if (!ctx2d) ctx2d = document.createElement("canvas").getContext("2d");
  ctx2d.font = font;
  return ctx2d.measureText(String(text)).width;
}

const TITLE_FONT = "600 13px sans-serif";
const LEGEND_FONT = "10px sans-serif";
export const HEAD = { titleLine: 17, legendRow: 12, legendGap: 8, legendPad: 5, icon: 14 + 5 };

// Lines of `text` broken at spaces to fit `width` (a word longer than the width breaks anywhere).
export function wrapCount(text, width, font = TITLE_FONT) {
  let lines = 1;
  let cur = 0;
  const space = textWidth(" ", font);
  for (const word of String(text).split(/\s+/).filter(Boolean)) {
    const w = textWidth(word, font);
    if (cur && cur + space + w > width) { lines += 1; cur = 0; }
    cur += (cur ? space : 0) + w;
    while (cur > width) { lines += 1; cur -= width; }
  }
  return lines;
}

// Rows of a plain (never paged) ECharts legend of `labels` in `width` px, as ECharts lays them out.
export function legendRows(labels, width) {
  let rows = labels.length ? 1 : 0;
  let x = 0;
  for (const label of labels) {
    const w = HEAD.icon + textWidth(label, LEGEND_FONT);
    if (x && x + w > width) { rows += 1; x = 0; }
    x += w + HEAD.legendGap;
  }
  return rows;
}

// Where the title, the legend and the plot go in a chart `width` px wide: the title wraps, the
// legend takes as many rows as its entries need, the plot starts below both (and the unit name).
export function headerLayout(title, labels, width) {
  const titleWidth = Math.max(80, width - 16);
  const titleLines = title ? wrapCount(title, titleWidth) : 0;
  const legendTop = 4 + titleLines * HEAD.titleLine + 2;
  const rows = legendRows(labels, width - 16 - 2 * HEAD.legendPad - 4);
  const legendHeight = rows ? rows * HEAD.legendRow + (rows - 1) * HEAD.legendGap + 2 * HEAD.legendPad : 0;
  return { titleWidth, titleLines, legendTop, rows, gridTop: legendTop + legendHeight + 18 };
}

export function titleOption(base, head) {
  return { ...base, textStyle: { ...base.textStyle, width: head.titleWidth, overflow: "break", lineHeight: HEAD.titleLine } };
}

export function legendOption(base, head) {
  return { ...base, type: "plain", top: head.legendTop, left: 8, right: 8, itemGap: HEAD.legendGap, padding: HEAD.legendPad,
    textStyle: { ...(base.textStyle || {}), fontSize: 10, lineHeight: HEAD.legendRow } };
}
