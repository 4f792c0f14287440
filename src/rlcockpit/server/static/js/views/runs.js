// Runs: the runs table (names, groups, tags, status, config columns and metric summary columns
// chosen by the user — views/summary_cols.js —, sorting and filtering, the config diff of the
// selected runs, the sweep view under it — views/sweep.js) and the comparison view that overlays any
// metrics of two or more runs, legends by run name (/api/compare). Tags and groups come from the
// run's config (`tags`, `group`) or are set here; those set here are kept in the project's saved
// layout (`runs: {run_id: {tags, group}}`, PUT /api/projects/{project}/layout).
import { api } from "../api.js";
import { t } from "../i18n.js";
import { chartTools, StepChart, X_MODES } from "../charts.js";
import { registerRuns, runColor, runLabel, runSwatch } from "../colors.js";
import { globalHref, registerView, runHref } from "../router.js";
import { clear, fmt, fmtTime, h, withStates } from "../ui.js";
import { layoutApi } from "./metric_panels.js";
import { crossRunSearch } from "./metric_search.js";
import { flatten, loadRuns, withMeta } from "./run_meta.js";
import { SummaryColumns } from "./summary_cols.js";
import { SweepView } from "./sweep.js";

export { flatten };

const COMPARE_DEFAULT = ["reward/mean", "kl/mean", "policy/entropy", "response/length_mean"];
const COMPARE_CHOICES = [...COMPARE_DEFAULT, "policy/clip_frac", "policy/loss", "value/loss", "grad/norm/actor",
  "response/truncated_frac", "eval/reward/mean"];
const COLS_KEY = "rlcockpit.runs.columns";
const BASE_COLS = ["name", "project", "group", "tags", "status", "started", "last_step", "heartbeat"];

function emptyRuns() {
  return h("div", { class: "state state-empty", id: "runs-empty" },
    h("div", { class: "state-title", text: t("runs.none") }),
    h("p", { text: t("runs.none_help") }),
    h("pre", { class: "code", text: "rlcockpit demo\n# or\nrlcockpit train --config examples/ppo_tiny.yaml --store sqlite:///rlcockpit.db" }),
    h("p", { text: t("runs.none_sdk") }),
    h("pre", { class: "code", text: 'import rlcockpit\nrun = rlcockpit.init(project="demo", store="sqlite:///rlcockpit.db")\nrun.log(step, {"reward/mean": 0.42})' }),
    h("p", { class: "muted", text: t("runs.none_serve") }));
}

const show = (v) => (v === undefined ? "—" : Array.isArray(v) ? v.join(", ") : typeof v === "number" ? fmt(v, 4) : String(v));

// The keys whose values differ between the runs (a key missing in one run differs too).
export function configDiff(runs) {
  const flat = runs.map((r) => flatten(r.config));
  const keys = [...new Set(flat.flatMap((f) => Object.keys(f)))].sort();
  return keys.filter((k) => new Set(flat.map((f) => JSON.stringify(f[k]))).size > 1);
}

class RunsTable {
  constructor(root, ctx, items, meta) {
    this.root = root;
    this.ctx = ctx;
    this.items = items.map((r) => withMeta(r, meta));
    this.selected = new Set();
    this.sort = { key: ctx.query.get("sort") || "started", desc: ctx.query.get("desc") !== "0" };
    this.filter = ctx.query.get("filter") || "";
    const fromUrl = (ctx.query.get("cols") || "").split(",").filter(Boolean);
    this.cols = fromUrl.length ? fromUrl : JSON.parse(localStorage.getItem(COLS_KEY) || "[]");
    this.configKeys = [...new Set(this.items.flatMap((r) => Object.keys(r.flat)))].sort();
    this.summary = new SummaryColumns({ query: ctx.query, onChange: () => this.summaryChanged() });
  }

  value(r, key) {
    switch (key) {
      case "name": return r.name || r.run_id;
      case "tags": return r.tags.join(", ");
      case "started": return r.started_at || 0;
      case "heartbeat": return r.heartbeat_at || 0;
      case "last_step": return r.last_step ?? -1;
      default:
        if (key.startsWith("sum:")) return this.summary.value(r.run_id, key.slice(4));
        return key.startsWith("config:") ? r.flat[key.slice(7)] : r[key];
    }
  }

  visible() {
    const words = this.filter.toLowerCase().split(/\s+/).filter(Boolean);
    const rows = this.items.filter((r) => {
      const hay = [r.name, r.run_id, r.project, r.group, r.status, t(`status.${r.status}`), ...r.tags,
        ...Object.entries(r.flat).map(([k, v]) => `${k}=${v}`)].join(" ").toLowerCase();
      return words.every((w) => hay.includes(w));
    });
    const { key, desc } = this.sort;
    const cmp = (a, b) => {
      const [x, y] = [this.value(a, key), this.value(b, key)];
      if (x === y) return 0;
      if (x === undefined || x === null) return 1;
      if (y === undefined || y === null) return -1;
      return (typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y))) * (desc ? -1 : 1);
    };
    return rows.sort(cmp);
  }

  mount() {
    this.filterInput = h("input", { type: "search", id: "runs-filter", class: "metric-search", value: this.filter,
      placeholder: t("runs.filter_hint"), oninput: () => { this.filter = this.filterInput.value; this.render(); } });
    this.compareBtn = h("button", { class: "btn primary", id: "compare-btn", disabled: true, text: t("runs.compare"),
      onclick: () => this.ctx.navigate(globalHref("compare", [], { runs: [...this.selected].join(",") })) });
    this.diffBtn = h("button", { class: "btn", id: "diff-btn", disabled: true, text: t("runs.config_diff"), onclick: () => this.renderDiff() });
    this.table = h("table", { class: "list", id: "runs-list" });
    this.diffBox = h("div", { id: "config-diff" });
    this.summaryChooser = this.summary.chooser(this.metricNames());
    this.summaryNote = h("div", { id: "summary-note" });
    const sweepBox = h("div", { id: "sweep-root" });
    this.root.append(h("div", { class: "metrics-toolbar" }, this.filterInput, this.columnChooser(), this.summaryChooser,
      h("span", { class: "muted small", id: "runs-count" })), this.table, this.summaryNote,
    h("div", { class: "toolbar" }, this.compareBtn, this.diffBtn, h("span", { class: "muted", text: t("runs.compare_help") })), this.diffBox, sweepBox);
    this.sweep = new SweepView(sweepBox, { query: this.ctx.query, summary: this.summary, configKeys: () => this.configKeys,
      navigate: this.ctx.navigate, onChange: () => this.persistUrl() });
    this.sweep.mount();
    this.render();
    if (this.summary.cols.length) this.summaryChanged();
  }

  // metric names to suggest for summary columns: the open run's
  metricNames() {
    const s = window.rlcockpit.state && window.rlcockpit.state.summary;
    return (s && s.metric_names) || [];
  }

  async summaryChanged() {
    const open = this.summaryChooser.open;
    const next = this.summary.chooser(this.metricNames());
    next.open = open;
    this.summaryChooser.replaceWith(next);
    this.summaryChooser = next;
    await this.summary.load();
    if (this.disposed) return;
    this.summary.status(this.summaryNote);
    this.render();
  }

  columnChooser() {
    const box = h("details", { class: "col-chooser", id: "runs-columns" }, h("summary", { class: "btn", text: t("runs.columns") }));
    const list = h("div", { class: "col-list" });
    if (!this.configKeys.length) list.append(h("div", { class: "muted small", text: t("runs.no_config") }));
    for (const k of this.configKeys) {
      list.append(h("label", { class: "check" }, h("input", { type: "checkbox", value: k, checked: this.cols.includes(k),
        onchange: (e) => {
          this.cols = e.target.checked ? [...this.cols, k] : this.cols.filter((c) => c !== k);
          localStorage.setItem(COLS_KEY, JSON.stringify(this.cols));
          this.render();
        } }), ` ${k}`));
    }
    box.append(list);
    return box;
  }

  persistUrl() {
    const q = new URLSearchParams();
    if (this.filter) q.set("filter", this.filter);
    q.set("sort", this.sort.key);
    q.set("desc", this.sort.desc ? "1" : "0");
    if (this.cols.length) q.set("cols", this.cols.join(","));
    this.summary.toQuery(q);
    if (this.sweep) this.sweep.toQuery(q);
    history.replaceState(null, "", globalHref("runs", [], q));
  }

  header() {
    const cell = (key, label) => {
      const active = this.sort.key === key;
      return h("th", { class: `sortable${active ? " sorted" : ""}`, dataset: { sort: key }, title: t("runs.sort_help"),
        onclick: () => { this.sort = { key, desc: active ? !this.sort.desc : key !== "name" }; this.render(); } },
      label, active ? (this.sort.desc ? " ↓" : " ↑") : "");
    };
    return h("thead", {}, h("tr", {}, h("th", {}),
      BASE_COLS.map((c) => cell(c, t(`runs.${c}`))), this.cols.map((k) => cell(`config:${k}`, k)),
      this.summary.cols.map((c) => cell(`sum:${c}`, this.summary.label(c))), h("th", {})));
  }

  row(r) {
    const box = h("input", { type: "checkbox", "aria-label": r.run_id, checked: this.selected.has(r.run_id), onchange: (e) => {
      if (e.target.checked) this.selected.add(r.run_id); else this.selected.delete(r.run_id);
      this.compareBtn.disabled = this.selected.size < 2;
      this.diffBtn.disabled = this.selected.size < 2;
    } });
    const edit = h("button", { class: "btn tiny run-edit", title: t("runs.edit_help"), text: "✎", onclick: () => this.editRow(r, tr) });
    const tr = h("tr", { dataset: { run: r.run_id } }, h("td", {}, box),
      h("td", {}, runSwatch(h, r.run_id), h("a", { href: runHref(r.run_id, "dashboard"), text: r.name || r.run_id }), h("div", { class: "muted small", text: r.run_id })),
      h("td", { text: r.project }), h("td", { class: "run-group", text: r.group || "" }),
      h("td", { class: "run-tags" }, r.tags.map((x) => h("span", { class: "pill tag", text: x }))),
      h("td", {}, h("span", { class: `status status-${r.status}`, text: t(`status.${r.status}`) })),
      h("td", { text: fmtTime(r.started_at) }), h("td", { text: fmt(r.last_step ?? null) }), h("td", { text: fmtTime(r.heartbeat_at) }),
      this.cols.map((k) => h("td", { class: "config-cell", dataset: { key: k }, text: show(r.flat[k]) })),
      this.summary.cols.map((c) => this.summaryCell(r, c)), h("td", {}, edit));
    return tr;
  }

  summaryCell(r, c) {
    const v = this.summary.value(r.run_id, c);
    const best = c.startsWith("at_best:") ? this.summary.bestStep(r.run_id) : null;
    return h("td", { class: "sum-cell num-cell", dataset: { col: c, value: v === null ? "" : String(v) }, text: fmt(v, 4),
      title: best === null ? null : `${t("axis.step")} ${best}` });
  }

  render() {
    const rows = this.visible();
    clear(this.table).append(this.header(), h("tbody", {}, rows.map((r) => this.row(r))));
    this.root.querySelector("#runs-count").textContent = t("runs.count", { n: rows.length, all: this.items.length });
    if (this.sweep) this.sweep.render(rows);
    this.persistUrl();
  }

  // Tags and group of one run, saved in its project's layout.
  editRow(r, tr) {
    const tags = h("input", { class: "run-tags-input", value: r.tags.join(", "), placeholder: t("runs.tags_hint") });
    const group = h("input", { class: "run-group-input", value: r.group, placeholder: t("runs.group") });
    const msg = h("span", { class: "muted small" });
    const save = h("button", { class: "btn small primary run-save", text: t("runs.save"), onclick: async () => {
      const next = { tags: tags.value.split(",").map((x) => x.trim()).filter(Boolean), group: group.value.trim() };
      try {
        const res = await layoutApi.get(r.project);
        const layout = res.layout || { panels: [] };
        layout.runs = { ...(layout.runs || {}), [r.run_id]: next };
        await layoutApi.put(r.project, layout);
      } catch (err) {
        msg.textContent = `${t("state.error")}: ${err.message}`;
        return;
      }
      Object.assign(r, next);
      this.render();
    } });
    const form = h("tr", { class: "run-edit-row" }, h("td", { colspan: String(BASE_COLS.length + this.cols.length + this.summary.cols.length + 2) },
      h("label", { class: "tb-label" }, t("runs.tags"), " ", tags), " ", h("label", { class: "tb-label" }, t("runs.group"), " ", group), " ", save, " ", msg));
    tr.after(form);
    tags.focus();
  }

  dispose() {
    this.disposed = true;
    if (this.sweep) this.sweep.dispose();
  }

  renderDiff() {
    const runs = this.visible().filter((r) => this.selected.has(r.run_id)); // in the table's order
    const keys = configDiff(runs);
    clear(this.diffBox).append(h("h3", { text: t("runs.config_diff") }));
    if (!keys.length) return this.diffBox.append(h("div", { class: "muted", id: "config-diff-same", text: t("runs.config_same") }));
    this.diffBox.append(h("table", { class: "list", id: "config-diff-table" },
      h("thead", {}, h("tr", {}, h("th", { text: t("runs.config_key") }), runs.map((r) => h("th", { text: r.name || r.run_id })))),
      h("tbody", {}, keys.map((k) => h("tr", { dataset: { key: k } }, h("th", { text: k }), runs.map((r) => h("td", { text: show(r.flat[k]) })))))));
  }
}

function mountRuns(root, ctx) {
  const body = h("div", { class: "runs-page" });
  let table = null;
  root.append(h("h2", { text: t("runs.title") }), body);
  withStates(body, loadRuns, ({ items, meta }) => {
    if (!items.length) return body.append(emptyRuns());
    table = new RunsTable(body, ctx, items, meta);
    table.mount();
    body.append(crossRunSearch()); // which runs logged a metric (views/metric_search.js)
  });
  return () => {
    if (table) table.dispose();
    clear(root);
  };
}

// One metric of several runs, a line per run (legend: the run's name), with the step charts'
// tools: smoothing (raw faint behind), log scale, CSV and PNG; linked zoom across the page.
function compareChart(grid, name, series, units, xMode, runOf) {
  const el = h("div", { class: "chart", dataset: { metric: name } });
  const box = h("section", { class: "chart-box" }, el);
  grid.append(box);
  const runsShown = Object.keys(series);
  const spec = { id: `compare-${name}`, title: name, names: runsShown, primary: null, unit: units[name] || "", relPerLine: true,
    lines: (data) => runsShown.map((r) => {
      const d = data.get(r);
      return d && d.steps.length ? { name, label: r, steps: d.steps, values: d.values, walls: d.walls, color: runColor(runOf.get(r)) } : null;
    }).filter(Boolean) };
  const chart = new StepChart(el, spec, { group: "rlcockpit-compare", units, xMode });
  chart.opts = { smoothing: 0 };
  chart.setSeries(series);
  box.prepend(chartTools(chart));
  return chart;
}

function mountCompare(root, ctx) {
  const runs = (ctx.query.get("runs") || "").split(",").filter(Boolean);
  const names = (ctx.query.get("names") || COMPARE_DEFAULT.join(",")).split(",").filter(Boolean);
  const disposers = [];
  root.append(h("h2", { text: t("compare.title") }));
  if (runs.length < 2) {
    root.append(h("div", { class: "state state-empty", text: t("compare.need_two") }),
      h("a", { class: "btn", href: globalHref("runs"), text: t("tab.runs") }));
    return () => clear(root);
  }
  const other = names.filter((n) => !COMPARE_CHOICES.includes(n));
  const extra = h("input", { id: "compare-extra", class: "metric-search", list: "compare-names", value: other.join(", "),
    placeholder: t("compare.any_metric_hint") });
  const datalist = h("datalist", { id: "compare-names" });
  const chooser = h("form", { class: "filters", id: "compare-metrics" }, COMPARE_CHOICES.map((n) =>
    h("label", { class: "check" }, h("input", { type: "checkbox", name: n, checked: names.includes(n) }), ` ${n}`)),
  h("label", { class: "field" }, t("compare.any_metric"), extra), datalist,
  h("button", { class: "btn primary", type: "submit", text: t("compare.apply") }));
  chooser.addEventListener("submit", (e) => {
    e.preventDefault();
    const typed = extra.value.split(",").map((x) => x.trim()).filter(Boolean);
    const chosen = [...COMPARE_CHOICES.filter((n) => chooser.elements[n].checked), ...typed];
    ctx.navigate(globalHref("compare", [], { runs: runs.join(","), names: chosen.join(","), x: xMode }));
  });
  const grid = h("div", { class: "compare-grid", id: "compare-charts" });
  const who = h("div", { class: "muted", id: "compare-runs", text: `${t("compare.runs")}: ${runs.join(", ")}` });
  const whoSwatches = () => { who.textContent = `${t("compare.runs")}: `; runs.forEach((r, i) => who.append(i ? ", " : "", runSwatch(h, r), runLabel(r))); };
  // the dashboard's x axes: step, wall clock, or time since each run's first step (in the URL: x=)
  const charts = [];
  let xMode = X_MODES.includes(ctx.query.get("x")) ? ctx.query.get("x") : "step";
  const setX = (mode) => {
    xMode = mode;
    axisBar.querySelectorAll(".seg").forEach((b) => b.classList.toggle("active", b.id === `x-${mode}`));
    charts.forEach((c) => c.setXMode(mode));
    const q = new URLSearchParams(ctx.query);
    q.set("x", mode);
    const hash = globalHref("compare", [], Object.fromEntries(q));
    if (location.hash !== hash) history.replaceState(null, "", hash);
  };
  const xToggle = (mode, key) => h("button", { class: `btn seg${xMode === mode ? " active" : ""}`, id: `x-${mode}`,
    type: "button", onclick: () => setX(mode), text: t(key) });
  const axisBar = h("div", { class: "toolbar", id: "compare-axis" }, h("span", { class: "tb-label", text: t("dash.x_axis") }),
    xToggle("step", "dash.x_step"), xToggle("wall", "dash.x_wall"), xToggle("rel", "dash.x_rel"));
  root.append(who, chooser, axisBar, grid);
  withStates(grid, () => Promise.all([api.compare(runs, names), api.runs(), api.run(runs[0]).catch(() => null)]), ([res, list, first]) => {
    // one colour per run on every chart (colors.js: by start order); two runs of the same name
    // are told apart by a short id
    registerRuns(list.items);
    const label = (r) => runLabel(r);
    const runOf = new Map(runs.map((r) => [label(r), r]));
    whoSwatches();
    if (first) for (const n of first.metric_names || []) datalist.append(h("option", { value: n }));
    const shown = [...new Set(Object.values(res.runs || {}).flatMap((b) => Object.keys(b.series || {})))];
    const order = [...names.filter((n) => !n.includes("*")), ...shown.filter((n) => !names.includes(n))];
    const units = (first && first.metric_units) || {};
    for (const name of order) {
      const series = {};
      for (const [run, body] of Object.entries(res.runs || {})) {
        const sr = body.series && body.series[name];
        if (sr && sr.steps.length) series[label(run)] = sr;
      }
      if (!Object.keys(series).length) {
        grid.append(h("div", { class: "state state-empty small", text: `${name}: ${t("state.no_data")}` }));
        continue;
      }
      const chart = compareChart(grid, name, series, units, xMode, runOf);
      charts.push(chart);
      disposers.push(() => chart.dispose());
    }
    echarts.connect("rlcockpit-compare");
  });
  return () => { disposers.forEach((d) => d()); clear(root); };
}

registerView("runs", { scope: "global", labelKey: "tab.runs", order: 10, mount: mountRuns });
registerView("compare", { scope: "global", labelKey: "tab.compare", tab: false, mount: mountCompare });
