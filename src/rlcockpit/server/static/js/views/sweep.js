// The sweep view under the runs table (issue 29, item 2): one point per run of the table (its
// filter applies) — a summary column of a metric (last reward/mean) against a config value
// (optim.lr) — coloured per run, or per group (tag, the runs table's group, a name pattern, a
// config key; views/groups.js), so a sweep's best value and its spread over seeds show at a glance.
// In the URL: sweep_y=last:reward/mean&sweep_x=optim.lr&sweep_color=config:algo&sweep_log=1.
import { runColor, runLabel } from "../colors.js";
import { t } from "../i18n.js";
import { runHref } from "../router.js";
import { themeColors } from "../charts.js";
import { clear, fmt, h } from "../ui.js";
import { groupKeys, makeGroups, parseGroupBy } from "./groups.js";

const NAME_PATTERN = "name:-seed\\d+";

const isNum = (v) => typeof v === "number" && Number.isFinite(v);

// The runs as points: [{run, x, y}] for the runs with both values; numeric when every x is a number.
export function sweepPoints(rows, xKey, yOf) {
  const pts = rows.map((r) => ({ run: r, x: r.flat[xKey], y: yOf(r) }))
    .filter((p) => p.x !== undefined && p.x !== null && isNum(p.y));
  return { points: pts, numeric: pts.length > 0 && pts.every((p) => isNum(p.x)) };
}

export class SweepView {
  // opts: {query, summary: SummaryColumns, configKeys: [...], navigate, onChange()}
  constructor(root, opts) {
    this.root = root;
    this.o = opts;
    const q = opts.query;
    this.y = q.get("sweep_y") || "";
    this.x = q.get("sweep_x") || "";
    this.color = q.get("sweep_color") || "run";
    this.log = q.has("sweep_log") ? q.get("sweep_log") === "1" : null; // null: automatic
    this.rows = [];
  }

  toQuery(q) {
    if (this.y) q.set("sweep_y", this.y);
    if (this.x) q.set("sweep_x", this.x);
    if (this.color !== "run") q.set("sweep_color", this.color);
    if (this.log !== null) q.set("sweep_log", this.log ? "1" : "0");
    return q;
  }

  mount() {
    this.controls = h("div", { class: "metrics-toolbar", id: "sweep-controls" });
    this.plot = h("div", { class: "chart sweep-chart", id: "sweep-chart", dataset: { points: "0" } });
    this.note = h("div", { class: "muted small", id: "sweep-note" });
    this.root.append(h("section", { class: "sweep", id: "sweep" }, h("h3", { class: "section-title", text: t("sweep.title") }),
      this.controls, this.note, h("section", { class: "chart-box" }, this.plot)));
    this.chart = echarts.init(this.plot, null, { renderer: "canvas" });
    this.ro = new ResizeObserver(() => this.chart.resize());
    this.ro.observe(this.plot);
    this.chart.on("click", (p) => p.data && p.data.run && this.o.navigate(runHref(p.data.run, "dashboard")));
  }

  // Varying numeric config keys first: the likely x of a sweep.
  xChoices(rows) {
    const keys = this.o.configKeys();
    const varies = (k) => new Set(rows.map((r) => JSON.stringify(r.flat[k]))).size > 1;
    const numeric = (k) => rows.some((r) => isNum(r.flat[k]));
    return [...keys.filter((k) => varies(k) && numeric(k)), ...keys.filter((k) => varies(k) && !numeric(k)), ...keys.filter((k) => !varies(k))];
  }

  controlsFor(rows) {
    const cols = this.o.summary.cols;
    if (!cols.includes(this.y)) this.y = cols[0] || "";
    const xs = this.xChoices(rows);
    if (!xs.includes(this.x)) this.x = xs[0] || "";
    const select = (id, label, options, value, set) => h("label", { class: "tb-label" }, label, " ",
      h("select", { id, onchange: (e) => { set(e.target.value); this.o.onChange(); this.render(this.rows); } },
        options.map(([v, text]) => h("option", { value: v, text, selected: v === value }))));
    const colorOptions = [["run", t("sweep.color_run")], ["group", t("group.by_group")], ["tag", t("group.by_tag")],
      [NAME_PATTERN, `${t("group.by_name")} (-seed\\d+)`], ...this.o.configKeys().map((k) => [`config:${k}`, `${t("group.by_config")} ${k}`])];
    const logBox = h("input", { type: "checkbox", id: "sweep-log", checked: this.logScale(), onchange: (e) => { this.log = e.target.checked; this.o.onChange(); this.render(this.rows); } });
    clear(this.controls).append(
      select("sweep-y", t("sweep.y"), cols.map((c) => [c, this.o.summary.label(c)]), this.y, (v) => { this.y = v; }),
      select("sweep-x", t("sweep.x"), xs.map((k) => [k, k]), this.x, (v) => { this.x = v; this.log = null; }),
      select("sweep-color", t("sweep.color"), colorOptions, this.color, (v) => { this.color = v; }),
      h("label", { class: "check" }, logBox, ` ${t("sweep.log_x")}`));
  }

  // A log x axis by default when the values are positive and span a factor of 10 or more (lr).
  logScale() {
    if (this.log !== null) return this.log;
    const xs = this.rows.map((r) => r.flat[this.x]).filter(isNum);
    return xs.length > 1 && xs.every((v) => v > 0) && Math.max(...xs) / Math.min(...xs) >= 10;
  }

  render(rows) {
    this.rows = rows;
    this.controlsFor(rows);
    const cols = this.o.summary.cols;
    if (!cols.length || !this.x) {
      this.note.textContent = !cols.length ? t("sweep.need_column") : t("sweep.need_config");
      this.chart.clear();
      this.plot.dataset.points = "0";
      return;
    }
    const yOf = (r) => this.o.summary.value(r.run_id, this.y);
    const { points, numeric } = sweepPoints(rows, this.x, yOf);
    this.note.textContent = t("sweep.count", { n: points.length, all: rows.length });
    this.chart.setOption(this.option(points, numeric), { notMerge: true });
    this.plot.dataset.points = String(points.length);
  }

  // One series per colour: each run its own, or each group (a group's colour is views/groups.js's).
  series(points, xOf) {
    const spec = this.color === "run" ? null : parseGroupBy(this.color);
    const point = (p) => ({ value: [xOf(p.x), p.y], run: p.run.run_id, name: runLabel(p.run.run_id), raw: p.x });
    if (!spec || !spec.by) {
      return points.map((p) => ({ type: "scatter", name: runLabel(p.run.run_id), symbolSize: 10, itemStyle: { color: runColor(p.run.run_id) }, data: [point(p)] }));
    }
    const groups = makeGroups(points.map((p) => p.run), spec);
    return groups.map((g) => ({ type: "scatter", name: g.key, symbolSize: 10, itemStyle: { color: g.color },
      data: points.filter((p) => groupKeys(p.run, spec).includes(g.key)).map(point) }));
  }

  option(points, numeric) {
    const c = themeColors();
    const cats = numeric ? [] : [...new Set(points.map((p) => String(p.x)))].sort();
    const xOf = numeric ? (v) => v : (v) => cats.indexOf(String(v));
    const axisLabel = { fontSize: 10, color: c.muted };
    const log = numeric && this.logScale();
    return {
      animation: false,
      legend: { top: 4, left: 8, right: 8, type: "plain", textStyle: { fontSize: 10, color: c.muted } },
      tooltip: { trigger: "item", confine: true, formatter: (p) => `${esc(p.data.name)}<br>${esc(this.x)}: ${esc(fmt(p.data.raw, 4))}<br>${esc(this.o.summary.label(this.y))}: <b>${esc(fmt(p.data.value[1], 4))}</b>` },
      grid: { left: 60, right: 24, top: 56 + 14 * Math.min(6, Math.floor(points.length / 8)), bottom: 40 },
      xAxis: numeric
        ? { type: log ? "log" : "value", scale: true, name: this.x, ...pad(log), nameLocation: "middle", nameGap: 24, axisLabel: { ...axisLabel, formatter: (v) => fmt(v, 3), showMinLabel: false, showMaxLabel: false }, nameTextStyle: axisLabel, splitLine: { lineStyle: { color: c.grid } } }
        : { type: "category", data: cats, name: this.x, nameLocation: "middle", nameGap: 24, axisLabel, nameTextStyle: axisLabel },
      yAxis: { type: "value", scale: true, name: this.o.summary.label(this.y), nameTextStyle: { ...axisLabel, align: "left" }, axisLabel, splitLine: { lineStyle: { color: c.grid } } },
      series: this.series(points, xOf),
    };
  }

  dispose() {
    if (this.ro) this.ro.disconnect();
    if (this.chart) this.chart.dispose();
  }
}

// Room around the points, so the smallest and largest x are not drawn on the plot's edges.
function pad(log) {
  if (log) return { min: (v) => v.min / 1.6, max: (v) => v.max * 1.6 };
  const room = (v) => (v.max - v.min) * 0.08 || Math.abs(v.max) * 0.1 || 1;
  return { min: (v) => v.min - room(v), max: (v) => v.max + room(v) };
}

function esc(text) {
  return String(text).replace(/[&<>"']/g, (ch) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[ch]);
}
