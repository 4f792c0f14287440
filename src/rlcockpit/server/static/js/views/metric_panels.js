// Every logged metric, chartable (issue 16): a metric search, automatic panels grouped by the
// name's prefix (W&B-style sections, opened on demand so a 90-metric run stays fast), and the
// project's own panels (any metrics, any runs) saved in the store (GET/PUT
// /api/projects/{project}/layout). The three-row dashboard above stays the default layout.
import { api, get, request } from "../api.js";
import { chartTools, PALETTE, StepChart } from "../charts.js";
import { runColor, runLabel, runSwatch } from "../colors.js";
import { t } from "../i18n.js";
import { clear, h } from "../ui.js";

const SEARCH_LIMIT = 48; // charts drawn for one search at most (the count says how many matched)
const enc = encodeURIComponent;

export const layoutApi = {
  get: (project) => get(`/projects/${enc(project)}/layout`),
  put: (project, layout) => request("PUT", `/projects/${enc(project)}/layout`, null, layout),
};

// "kl/token_max" -> "kl"; names without a slash go to "other".
export function sectionOf(name) {
  const i = name.indexOf("/");
  return i > 0 ? name.slice(0, i) : "other";
}

export function groupBySection(names) {
  const out = new Map();
  for (const n of [...names].sort()) {
    const s = sectionOf(n);
    if (!out.has(s)) out.set(s, []);
    out.get(s).push(n);
  }
  return out;
}

// A search matches a name by substring, or by glob when it has a `*` (case-insensitive); several
// words must all match.
export function matches(name, query) {
  const words = String(query || "").toLowerCase().split(/\s+/).filter(Boolean);
  const n = name.toLowerCase();
  return words.every((w) => (w.includes("*")
    ? new RegExp(`^${w.split("*").map((p) => p.replace(/[.+?^${}()|[\]\\]/g, "\\$&")).join(".*")}$`).test(n)
    : n.includes(w)));
}

// Expand a panel's metric list (exact names or globs) against the names the runs have.
export function expandMetrics(patterns, names) {
  const out = [];
  for (const p of patterns) {
    if (p.includes("*")) names.filter((n) => matches(n, p)).forEach((n) => out.includes(n) || out.push(n));
    else if (!out.includes(p)) out.push(p);
  }
  return out;
}

const domId = (name) => name.replace(/[^A-Za-z0-9_-]/g, "_");
const KEY_SEP = "\u0001";

export class MetricExplorer {
  // opts: {runId, project, names, units, runs: [{run_id, name}], xMode, chartOpts(id) -> {smoothing, log},
  //        onChartChange(id, change), openStep(step), query, onQuery(q)}
  constructor(root, opts) {
    this.root = root;
    this.o = opts;
    this.charts = new Map(); // id -> StepChart (section charts and user panels)
    this.sections = groupBySection(opts.names);
    this.layout = { panels: [] };
    this.disposed = false;
  }

  mount() {
    this.search = h("input", { type: "search", id: "metric-search", class: "metric-search", value: this.o.query || "",
      placeholder: t("metrics.search_hint"), "aria-label": t("metrics.search"), oninput: () => this.applySearch() });
    this.count = h("span", { class: "muted small", id: "metric-count" });
    this.formBox = h("div", { class: "panel-form-box", id: "panel-form-box", hidden: true });
    this.panelGrid = h("div", { class: "panel-grid", id: "user-panels" });
    this.sectionBox = h("div", { id: "metric-sections" });
    this.root.append(h("section", { class: "metrics-area", id: "metrics-area" },
      h("div", { class: "metrics-toolbar" },
        h("h3", { class: "section-title", text: t("metrics.title") }), this.search, this.count,
        h("button", { class: "btn", id: "add-panel", onclick: () => this.toggleForm(), text: t("metrics.add_panel") })),
      this.formBox, this.panelGrid, this.sectionBox));
    for (const [section, names] of this.sections) this.sectionBox.append(this.sectionNode(section, names));
    this.applySearch(true);
    if (!this.query()) for (const det of this.sectionBox.children) if (this.openSections().has(det.dataset.section)) det.open = true;
    this.loadLayout();
  }

  sectionNode(section, names) {
    const grid = h("div", { class: "panel-grid" });
    const det = h("details", { class: "metric-section", dataset: { section } },
      h("summary", {}, h("b", { text: section }), h("span", { class: "muted small", text: ` · ${names.length}` })), grid);
    det.grid = grid;
    det.names = names;
    det.addEventListener("toggle", () => {
      if (det.open) this.fillSection(det);
      if (!this.query()) this.rememberSection(section, det.open); // a search opens sections; that is not a choice
    });
    return det;
  }

  // The sections a user opened stay open on the project's dashboards (this browser: localStorage).
  openSections() {
    try {
      return new Set(JSON.parse(localStorage.getItem(`rlcockpit.sections.${this.o.project}`) || "[]"));
    } catch {
      return new Set();
    }
  }

  rememberSection(section, open) {
    const s = this.openSections();
    if (open) s.add(section); else s.delete(section);
    localStorage.setItem(`rlcockpit.sections.${this.o.project}`, JSON.stringify([...s]));
  }

  // Draw the section's charts (those matching the search) and fetch their curves in one request.
  async fillSection(det) {
    const wanted = det.names.filter((n) => !this.query() || matches(n, this.query())).slice(0, SEARCH_LIMIT);
    const fresh = wanted.filter((n) => !this.charts.has(`m:${n}`));
    for (const n of fresh) det.grid.append(this.metricBox(n));
    if (!fresh.length) return;
    try {
      const res = await api.series(this.o.runId, fresh);
      if (this.disposed) return;
      for (const n of fresh) this.charts.get(`m:${n}`)?.setSeries(res.series);
    } catch (err) {
      if (!this.disposed) det.grid.append(h("div", { class: "state state-error small", text: `${t("state.error")}: ${err.message}` }));
    }
  }

  metricBox(name) {
    const id = `m:${name}`;
    const plot = h("div", { class: "chart", id: `metric-${domId(name)}`, dataset: { metric: name, points: "0" } });
    const box = h("section", { class: "chart-box", dataset: { metric: name } }, plot);
    const spec = { id: domId(name), title: name, names: [name], primary: name,
      lines: (data) => { const d = data.get(name); return d && d.steps.length ? [{ name, label: name, steps: d.steps, values: d.values, walls: d.walls }] : []; } };
    const chart = new StepChart(plot, spec, { runId: this.o.runId, xMode: this.o.xMode, units: this.o.units, onClickStep: this.o.openStep });
    chart.opts = { ...this.o.chartOpts(id) };
    box.prepend(chartTools(chart, { onChange: (c) => this.o.onChartChange(id, c) }));
    this.charts.set(id, chart);
    chart.render();
    return box;
  }

  query() {
    return this.search.value.trim();
  }

  applySearch(initial = false) {
    const q = this.query();
    let shown = 0;
    let total = 0;
    for (const det of this.sectionBox.children) {
      const hits = det.names.filter((n) => !q || matches(n, q));
      total += hits.length;
      det.hidden = hits.length === 0;
      det.querySelector("summary .muted").textContent = q ? ` · ${hits.length}/${det.names.length}` : ` · ${det.names.length}`;
      for (const box of det.grid.children) if (box.dataset.metric) box.hidden = !!q && !matches(box.dataset.metric, q);
      if (q && hits.length && shown < SEARCH_LIMIT) {
        shown += hits.length;
        if (det.open) this.fillSection(det);
        else det.open = true; // the toggle event fills it
      }
    }
    this.count.textContent = t("metrics.count", { n: q ? total : this.o.names.length, all: this.o.names.length });
    if (!initial && this.o.onQuery) this.o.onQuery(q);
  }

  // ------------------------------------------------------------------ user panels

  async loadLayout() {
    try {
      const res = await layoutApi.get(this.o.project);
      if (this.disposed) return;
      this.layout = res.layout && Array.isArray(res.layout.panels) ? res.layout : { panels: [] };
    } catch {
      this.layout = { panels: [] };
    }
    this.renderPanels();
  }

  // Read-modify-write of the panels only: the runs page keeps tags and groups in the same document.
  async saveLayout() {
    const current = await layoutApi.get(this.o.project);
    const doc = { ...(current.layout || {}), panels: this.layout.panels };
    this.savedAt = await layoutApi.put(this.o.project, doc);
  }

  // The saved panels, then the panels a shared link brought (?panel=metrics~runs) that are not
  // saved already; those can be saved with ☆.
  shownPanels() {
    const key = (p) => JSON.stringify([p.metrics || [], [...(p.runs || [])].sort()]);
    const saved = new Set(this.layout.panels.map(key));
    const fromUrl = (this.o.urlPanels || []).filter((p) => !saved.has(key(p)))
      .map((p, i) => ({ id: `u${i}`, title: "", metrics: p.metrics, runs: p.runs, fromUrl: true }));
    return [...this.layout.panels, ...fromUrl];
  }

  // Every panel shown, as {metrics, runs}: what "Copy link" puts in the URL.
  currentPanels() {
    return this.shownPanels().map((p) => ({ metrics: p.metrics || [], runs: p.runs || [] }));
  }

  renderPanels() {
    for (const [id, c] of this.charts) if (id.startsWith("p:")) { c.dispose(); this.charts.delete(id); }
    clear(this.panelGrid);
    this.shownPanels().forEach((p) => this.panelGrid.append(this.panelBox(p)));
  }

  async savePanel(panel) {
    const copy = { id: `p${Date.now().toString(36)}`, title: panel.title || "", metrics: panel.metrics, runs: panel.runs || [], log: false };
    this.layout = { ...this.layout, panels: [...this.layout.panels, copy] };
    await this.saveLayout();
    this.renderPanels();
  }

  panelBox(panel) {
    const id = `p:${panel.id}`;
    const runs = [this.o.runId, ...(panel.runs || []).filter((r) => r !== this.o.runId)];
    const metrics = expandMetrics(panel.metrics || [], this.o.names);
    const plot = h("div", { class: "chart", id: `panel-${domId(panel.id)}`, dataset: { panel: panel.id, points: "0" } });
    const remove = panel.fromUrl
      ? h("button", { class: "btn tiny panel-save", title: t("metrics.save_panel"), text: "☆", onclick: () => this.savePanel(panel) })
      : h("button", { class: "btn tiny panel-remove", title: t("metrics.remove_panel"), text: "×", onclick: () => this.removePanel(panel.id) });
    const box = h("section", { class: `chart-box user-panel${panel.fromUrl ? " from-link" : ""}`, dataset: { panel: panel.id } }, plot);
    const many = metrics.length > 1;
    const lines = (data) => {
      const out = [];
      runs.forEach((run) => metrics.forEach((m, mi) => {
        const d = data.get(`${run}${KEY_SEP}${m}`);
        if (!d || !d.steps.length) return;
        const label = runs.length > 1 ? (many ? `${runLabel(run)} · ${m}` : runLabel(run)) : m;
        // several runs: each run in its own colour (the same on every page), metrics by dash;
        // one run: a colour per metric
        const color = runs.length > 1 ? runColor(run) : PALETTE[mi % PALETTE.length];
        out.push({ name: m, label, steps: d.steps, values: d.values, walls: d.walls, color, dashed: runs.length > 1 && mi % 2 === 1 });
      }));
      return out;
    };
    const spec = { id: domId(panel.id), title: panel.title || metrics.join(", "), names: metrics.map((m) => `${this.o.runId}${KEY_SEP}${m}`),
      primary: null, lines, unit: this.o.units[metrics[0]] || "" };
    const chart = new StepChart(plot, spec, { runId: this.o.runId, xMode: this.o.xMode, units: this.o.units, onClickStep: this.o.openStep });
    chart.opts = { ...this.o.chartOpts(id), log: !!panel.log || !!this.o.chartOpts(id).log };
    chart.liveKey = (m) => `${this.o.runId}${KEY_SEP}${m}`;
    box.prepend(h("div", { class: "chart-tools-wrap" }, chartTools(chart, { onChange: (c) => this.o.onChartChange(id, c) }), remove));
    this.charts.set(id, chart);
    box.ready = this.fillPanel(chart, runs, metrics); // resolves once drawn (tests, benchmarks/ui.py)
    return box;
  }

  async fillPanel(chart, runs, metrics) {
    if (!metrics.length) return chart.render();
    try {
      const res = await api.compare(runs, metrics);
      if (this.disposed) return;
      for (const [run, body] of Object.entries(res.runs || {})) {
        for (const [m, s] of Object.entries(body.series || {})) {
          chart.data.set(`${run}${KEY_SEP}${m}`, { steps: [...s.steps], values: [...s.values], walls: [...(s.wall_times || [])] });
        }
      }
      chart.render();
    } catch (err) {
      if (!this.disposed) chart.el.parentNode.append(h("div", { class: "state state-error small", text: `${t("state.error")}: ${err.message}` }));
    }
  }

  async removePanel(panelId) {
    this.layout = { ...this.layout, panels: this.layout.panels.filter((p) => p.id !== panelId) };
    this.renderPanels();
    await this.saveLayout();
  }

  toggleForm() {
    this.formBox.hidden = !this.formBox.hidden;
    if (this.formBox.hidden) return;
    clear(this.formBox);
    const list = h("datalist", { id: "metric-names" }, this.o.names.map((n) => h("option", { value: n })));
    const title = h("input", { id: "panel-title", placeholder: t("metrics.panel_title_hint") });
    const metrics = h("input", { id: "panel-metrics", list: "metric-names", placeholder: t("metrics.panel_metrics_hint"), size: "48" });
    const runBoxes = this.o.runs.filter((r) => r.run_id !== this.o.runId).map((r) =>
      h("label", { class: "check" }, h("input", { type: "checkbox", name: "panel-run", value: r.run_id }), " ", runSwatch(h, r.run_id), runLabel(r.run_id)));
    const log = h("input", { type: "checkbox", id: "panel-log" });
    const form = h("form", { class: "panel-form", id: "panel-form" },
      h("label", { class: "field" }, t("metrics.panel_title"), title),
      h("label", { class: "field wide" }, t("metrics.panel_metrics"), metrics), list,
      runBoxes.length ? h("div", { class: "field" }, t("metrics.panel_runs"), h("div", { class: "run-checks" }, runBoxes)) : null,
      h("label", { class: "check" }, log, ` ${t("metrics.panel_log")}`),
      h("button", { class: "btn primary", type: "submit", id: "panel-save", text: t("metrics.panel_save") }),
      h("span", { class: "muted small", id: "panel-error" }));
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const names = metrics.value.split(",").map((x) => x.trim()).filter(Boolean);
      if (!names.length) { form.querySelector("#panel-error").textContent = t("metrics.panel_need_metric"); return; }
      const runs = [...form.querySelectorAll("input[name=panel-run]:checked")].map((x) => x.value);
      const panel = { id: `p${Date.now().toString(36)}`, title: title.value.trim(), metrics: names, runs, log: log.checked };
      this.layout = { ...this.layout, panels: [...this.layout.panels, panel] };
      try {
        await this.saveLayout();
      } catch (err) {
        form.querySelector("#panel-error").textContent = `${t("state.error")}: ${err.message}`;
        this.layout = { ...this.layout, panels: this.layout.panels.filter((p) => p.id !== panel.id) };
        return;
      }
      this.formBox.hidden = true;
      this.renderPanels();
    });
    this.formBox.append(form);
    metrics.focus();
  }

  // ------------------------------------------------------------------ live, modes, teardown

  append(step, wall, metrics) {
    for (const [id, c] of this.charts) {
      if (id.startsWith("p:")) {
        const keyed = {};
        for (const [m, v] of Object.entries(metrics)) keyed[c.liveKey(m)] = v;
        c.append(step, wall, keyed);
      } else {
        c.append(step, wall, metrics);
      }
    }
  }

  each(fn) {
    this.charts.forEach(fn);
  }

  dispose() {
    this.disposed = true;
    this.charts.forEach((c) => c.dispose());
    this.charts.clear();
  }
}
