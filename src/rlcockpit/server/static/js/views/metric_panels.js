// Every logged metric, chartable (issue 16): a metric search, automatic panels grouped by the
// name's prefix (W&B-style sections, opened on demand so a 90-metric run stays fast), and the
// project's own panels (views/panel_grid.js: any metrics, any runs, arranged by the user) saved in
// the store (GET/PUT /api/projects/{project}/layout), sections in the project's saved order. The
// three-row dashboard above stays the default layout.
import { api } from "../api.js";
import { chartTools, StepChart } from "../charts.js";
import { t } from "../i18n.js";
import { h } from "../ui.js";
import { metricMatcher } from "../search.js";
import { UserPanels } from "./panel_grid.js";
import { normalizePanel, orderSections } from "./panel_layout.js";

export { layoutApi } from "./panel_layout.js";

const SEARCH_LIMIT = 48; // charts drawn for one search at most (the count says how many matched)

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

// A search matches a name, or the key it was logged as (`key`, an imported run's logged_keys), by
// substring, by glob when it has a `*`, or by /regex/ (case-insensitive); several words must all
// match (js/search.js).
export function matches(name, query, key) {
  return metricMatcher(query)(name, key);
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

export class MetricExplorer {
  // opts: {runId, project, names, units, runs: [{run_id, name}], xMode, chartOpts(id) -> {smoothing, log},
  //        onChartChange(id, change), openStep(step), query, onQuery(q)}
  constructor(root, opts) {
    this.root = root;
    this.o = opts;
    this.charts = new Map(); // id -> StepChart (section charts and user panels)
    this.sections = groupBySection(opts.names);
    this.disposed = false;
  }

  mount() {
    this.search = h("input", { type: "search", id: "metric-search", class: "metric-search", value: this.o.query || "",
      placeholder: t("metrics.search_hint"), "aria-label": t("metrics.search"), title: t("search.help"), oninput: () => this.applySearch() });
    this.count = h("span", { class: "muted small", id: "metric-count" });
    this.formBox = h("div", { class: "panel-form-box", id: "panel-form-box", hidden: true });
    this.panelGrid = h("div", { class: "panel-grid", id: "user-panels" });
    this.sectionBox = h("div", { id: "metric-sections" });
    this.root.append(h("section", { class: "metrics-area", id: "metrics-area" },
      h("div", { class: "metrics-toolbar" },
        h("h3", { class: "section-title", text: t("metrics.title") }), this.search, this.count,
        h("button", { class: "btn", id: "add-panel", onclick: () => this.toggleForm(), text: t("metrics.add_panel") })),
      this.formBox, this.panelGrid, this.sectionBox));
    this.panels = new UserPanels(this.panelGrid, this.formBox, this.o, this.charts, (order) => this.orderSections(order));
    for (const [section, names] of this.sections) this.sectionBox.append(this.sectionNode(section, names));
    this.applySearch(true);
    if (!this.query()) for (const det of this.sectionBox.children) if (this.openSections().has(det.dataset.section)) det.open = true;
    this.loadLayout();
  }

  sectionNode(section, names) {
    const grid = h("div", { class: "panel-grid" });
    const det = h("details", { class: "metric-section", dataset: { section } },
      h("summary", {}, h("b", { text: section }), h("span", { class: "muted small", text: ` · ${names.length}` }),
        this.sectionMover(section, -1, "↑", "metrics.section_up"), this.sectionMover(section, 1, "↓", "metrics.section_down")), grid);
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
    const wanted = det.names.filter((n) => !this.query() || matches(n, this.query(), this.loggedKey(n))).slice(0, SEARCH_LIMIT);
    const fresh = wanted.filter((n) => !this.charts.has(`m:${n}`));
    for (const n of fresh) det.grid.append(this.metricBox(n));
    if (!fresh.length) return;
    try {
      const res = await api.series(this.o.runId, fresh);
      if (this.disposed) return;
      for (const n of fresh) this.charts.get(`m:${n}`)?.setSeries(res.series);
      // the runs selected on the dashboard (or their groups) on these charts too
      const ov = this.o.overlay;
      if (ov && ov.active()) {
        await ov.load(fresh);
        if (this.disposed) return;
        for (const n of fresh) this.overlayChart(this.charts.get(`m:${n}`));
      }
    } catch (err) {
      if (!this.disposed) det.grid.append(h("div", { class: "state state-error small", text: `${t("state.error")}: ${err.message}` }));
    }
  }

  metricBox(name) {
    const id = `m:${name}`;
    const plot = h("div", { class: "chart", id: `metric-${domId(name)}`, dataset: { metric: name, points: "0" } });
    const key = this.loggedKey(name);
    const box = h("section", { class: "chart-box", dataset: { metric: name, ...(key ? { loggedAs: key } : {}) },
      ...(key ? { title: t("search.logged_as", { key }) } : {}) }, plot);
    const spec = { id: domId(name), title: name, names: [name], primary: name,
      lines: (data) => { const d = data.get(name); return d && d.steps.length ? [{ name, label: name, steps: d.steps, values: d.values, walls: d.walls }] : []; } };
    const chart = new StepChart(plot, spec, { runId: this.o.runId, xMode: this.o.xMode, units: this.o.units, onClickStep: this.o.openStep });
    chart.baseSpec = spec;
    chart.opts = { ...this.o.chartOpts(id) };
    box.prepend(chartTools(chart, { onChange: (c) => this.o.onChartChange(id, c) }));
    this.charts.set(id, chart);
    chart.render();
    return box;
  }

  // A section chart with the dashboard's overlay (the selected runs in their colours, or the
  // groups with their bands), or its own run alone again.
  overlayChart(chart) {
    if (!chart || !chart.baseSpec) return;
    const ov = this.o.overlay;
    chart.spec = ov && ov.active() ? ov.spec(chart.baseSpec) : chart.baseSpec;
    chart.render();
  }

  // The selection changed (the dashboard loaded the runs' curves of sectionMetrics() first).
  overlaid() {
    for (const [id, c] of this.charts) if (id.startsWith("m:")) this.overlayChart(c);
  }

  // The metrics of the section charts drawn so far.
  sectionMetrics() {
    return [...this.charts.keys()].filter((id) => id.startsWith("m:")).map((id) => id.slice(2));
  }

  query() {
    return this.search.value.trim();
  }

  loggedKey(name) {
    return (this.o.loggedKeys || {})[name];
  }

  applySearch(initial = false) {
    const q = this.query();
    let shown = 0;
    let total = 0;
    for (const det of this.sectionBox.children) {
      const hits = det.names.filter((n) => !q || matches(n, q, this.loggedKey(n)));
      total += hits.length;
      det.hidden = hits.length === 0;
      det.querySelector("summary .muted").textContent = q ? ` · ${hits.length}/${det.names.length}` : ` · ${det.names.length}`;
      for (const box of det.grid.children) if (box.dataset.metric) box.hidden = !!q && !matches(box.dataset.metric, q, box.dataset.loggedAs);
      if (q && hits.length && shown < SEARCH_LIMIT) {
        shown += hits.length;
        if (det.open) this.fillSection(det);
        else det.open = true; // the toggle event fills it
      }
    }
    const bad = metricMatcher(q).error;
    this.count.textContent = bad ? t("search.bad_regex", { error: bad })
      : t("metrics.count", { n: q ? total : this.o.names.length, all: this.o.names.length });
    if (!initial && this.o.onQuery) this.o.onQuery(q);
  }

  // ------------------------------------------------------------------ section order, user panels

  // ↑ / ↓ in a section's header move it; the order is saved in the project's layout.
  sectionMover(section, delta, text, key) {
    return h("button", { class: `btn tiny section-move section-${delta < 0 ? "up" : "down"}`, type: "button", title: t(key), text,
      onclick: (e) => {
        e.preventDefault(); // not a toggle of the section
        const nodes = [...this.sectionBox.children];
        const i = nodes.findIndex((d) => d.dataset.section === section);
        const j = i + delta;
        if (i < 0 || j < 0 || j >= nodes.length) return;
        if (delta < 0) this.sectionBox.insertBefore(nodes[i], nodes[j]); else this.sectionBox.insertBefore(nodes[j], nodes[i]);
        const shown = [...this.sectionBox.children].map((d) => d.dataset.section);
        // sections this run lacks keep their saved place after the ones shown
        this.panels.saveSections([...shown, ...this.panels.sections.filter((s) => !shown.includes(s))]);
      } });
  }

  orderSections(order) {
    const byName = new Map([...this.sectionBox.children].map((d) => [d.dataset.section, d]));
    for (const name of orderSections([...byName.keys()], order)) this.sectionBox.append(byName.get(name));
  }

  loadLayout() {
    return this.panels.load();
  }

  // Every panel shown, as {metrics, runs}: what "Copy link" puts in the URL.
  currentPanels() {
    return this.panels.current();
  }

  toggleForm() {
    this.panels.toggleForm();
  }

  // One panel's box, drawn (benchmarks/ui.py times this); `box.ready` resolves once drawn.
  panelBox(panel) {
    return this.panels.box(normalizePanel(panel));
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
    if (this.panels) this.panels.dispose();
    this.charts.forEach((c) => c.dispose());
    this.charts.clear();
  }
}
