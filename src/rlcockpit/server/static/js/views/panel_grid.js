// The project's own panels on the dashboard: loaded from and saved to the project's layout
// (GET/PUT /api/projects/{project}/layout, read-modify-write so the runs page's tags and groups
// stay), drawn in a four-column grid at each panel's width and height, moved with ◀ ▶ or by
// dragging ⠿ onto another panel, resized by dragging its corner grip ◢ (snapped to whole columns
// and to the three heights), edited with ⚙, removed with ×. Panels from a shared link
// (?panel=metrics~runs) come after the saved ones, outlined, and ☆ saves them.
import { api } from "../api.js";
import { chartTools, downloadTools } from "../charts.js";
import { t } from "../i18n.js";
import { clear, h } from "../ui.js";
import { expandMetrics } from "./metric_panels.js";
import { panelForm } from "./panel_form.js";
import { HistPanel } from "./panel_hist.js";
import { dropPanel, KEY_SEP, layoutApi, movePanel, normalizePanel, snapSize, TIME_X } from "./panel_layout.js";
import { PanelChart, panelLines } from "./panel_line.js";
import { ScatterPanel } from "./panel_scatter.js";

const domId = (name) => name.replace(/[^A-Za-z0-9_-]/g, "_");

export class UserPanels {
  // o: the explorer's options ({runId, project, names, units, runs, xMode, chartOpts, onChartChange,
  // openStep, urlPanels}); charts: the explorer's id -> chart map (panels are "p:<id>");
  // onSections(order): the saved section order, once loaded
  constructor(grid, formBox, o, charts, onSections) {
    Object.assign(this, { grid, formBox, o, charts, onSections });
    this.panels = [];
    this.sections = [];
    this.disposed = false;
  }

  async load() {
    let layout = null;
    try {
      layout = (await layoutApi.get(this.o.project)).layout;
    } catch {
      layout = null;
    }
    if (this.disposed) return;
    this.panels = layout && Array.isArray(layout.panels) ? layout.panels.map(normalizePanel) : [];
    this.sections = layout && Array.isArray(layout.sections) ? layout.sections : [];
    this.onSections(this.sections);
    this.render();
  }

  // Read-modify-write of the panels and the section order only.
  async save() {
    const current = await layoutApi.get(this.o.project);
    const doc = { ...(current.layout || {}), panels: this.panels, sections: this.sections };
    this.savedAt = await layoutApi.put(this.o.project, doc);
  }

  async saveSections(order) {
    this.sections = order;
    await this.save();
  }

  shown() {
    const key = (p) => JSON.stringify([p.metrics || [], [...(p.runs || [])].sort()]);
    const saved = new Set(this.panels.map(key));
    const fromUrl = (this.o.urlPanels || []).filter((p) => !saved.has(key(p)))
      .map((p, i) => ({ ...normalizePanel({ id: `u${i}`, metrics: p.metrics, runs: p.runs }), fromUrl: true }));
    return [...this.panels, ...fromUrl];
  }

  // Every panel shown, as {metrics, runs}: what "Copy link" puts in the URL.
  current() {
    return this.shown().map((p) => ({ metrics: p.metrics || [], runs: p.runs || [] }));
  }

  render() {
    for (const [id, c] of this.charts) if (id.startsWith("p:")) { c.dispose(); this.charts.delete(id); }
    clear(this.grid);
    this.shown().forEach((p) => this.grid.append(this.box(p)));
  }

  async change(panels) {
    this.panels = panels;
    this.render();
    await this.save();
  }

  box(panel) {
    const runs = [this.o.runId, ...panel.runs.filter((r) => r !== this.o.runId)];
    const plot = h("div", { class: "chart", id: `panel-${domId(panel.id)}`, dataset: { panel: panel.id, points: "0", kind: panel.kind } });
    const box = h("section", { class: `chart-box user-panel w-${panel.width}${panel.fromUrl ? " from-link" : ""}`,
      dataset: { panel: panel.id, width: String(panel.width), height: String(panel.height) } }, plot);
    const chart = this.chart(panel, runs, plot);
    this.charts.set(`p:${panel.id}`, chart);
    const tools = panel.kind === "line" ? chartTools(chart, { onChange: (c) => this.o.onChartChange(`p:${panel.id}`, c) }) : downloadTools(chart);
    box.prepend(h("div", { class: "chart-tools-wrap" }, tools, ...this.buttons(panel)));
    if (chart.controls) box.append(chart.controls);
    if (!panel.fromUrl) {
      this.draggable(box, panel);
      this.resizable(box, panel);
    }
    box.ready = this.fill(chart, panel, runs); // resolves once drawn (tests, benchmarks/ui.py)
    return box;
  }

  buttons(panel) {
    const btn = (cls, text, title, fn) => h("button", { class: `btn tiny ${cls}`, type: "button", title, text, onclick: fn });
    if (panel.fromUrl) return [btn("panel-save", "☆", t("metrics.save_panel"), () => this.saveFromUrl(panel))];
    return [btn("panel-handle", "⠿", t("metrics.drag_panel"), () => {}),
      btn("panel-left", "◀", t("metrics.move_left"), () => this.change(movePanel(this.panels, panel.id, -1))),
      btn("panel-right", "▶", t("metrics.move_right"), () => this.change(movePanel(this.panels, panel.id, 1))),
      btn("panel-edit", "⚙", t("metrics.edit_panel"), () => this.openForm(panel)),
      btn("panel-remove", "×", t("metrics.remove_panel"), () => this.change(this.panels.filter((p) => p.id !== panel.id)))];
  }

  // ⠿ starts a drag; dropping on another panel puts this one in its place
  draggable(box, panel) {
    const handle = box.querySelector(".panel-handle");
    handle.draggable = true;
    handle.addEventListener("dragstart", (e) => { e.dataTransfer.setData("text/x-rlcockpit-panel", panel.id); e.dataTransfer.effectAllowed = "move"; box.classList.add("dragging"); });
    handle.addEventListener("dragend", () => box.classList.remove("dragging"));
    box.addEventListener("dragover", (e) => { if (e.dataTransfer.types.includes("text/x-rlcockpit-panel")) { e.preventDefault(); box.classList.add("drop-target"); } });
    box.addEventListener("dragleave", () => box.classList.remove("drop-target"));
    box.addEventListener("drop", (e) => {
      e.preventDefault();
      box.classList.remove("drop-target");
      const id = e.dataTransfer.getData("text/x-rlcockpit-panel");
      if (id && id !== panel.id) this.change(dropPanel(this.panels, id, panel.id));
    });
  }

  // ◢ in the corner: a drag shows the snapped size as it goes (the box's columns, an outline of
  // the height), and the release saves it to the project's layout, which draws the panel again
  resizable(box, panel) {
    const grip = h("span", { class: "panel-grip", title: t("metrics.resize_panel"), text: "◢" });
    box.append(grip);
    grip.addEventListener("pointerdown", (e) => {
      if (e.button !== 0) return;
      e.preventDefault();
      grip.setPointerCapture(e.pointerId);
      const columns = getComputedStyle(this.grid).gridTemplateColumns.split(" ").filter(Boolean).length || 4;
      const colPx = (this.grid.clientWidth + 10) / columns;  // a column and its 10 px gap
      const start = { x: e.clientX, y: e.clientY, width: Math.min(panel.width, columns), height: panel.height };
      let size = { width: panel.width, height: panel.height };
      box.classList.add("resizing");
      const move = (ev) => {
        size = snapSize(start, ev.clientX - start.x, ev.clientY - start.y, colPx, columns);
        box.className = box.className.replace(/\bw-\d\b/, `w-${size.width}`);
        box.dataset.resizeTo = `${size.width}x${size.height}`;
        box.style.setProperty("--resize-height", `${size.height}px`);
      };
      const up = () => {
        grip.removeEventListener("pointermove", move);
        box.classList.remove("resizing");
        delete box.dataset.resizeTo;
        if (size.width === panel.width && size.height === panel.height) {
          box.className = box.className.replace(/\bw-\d\b/, `w-${panel.width}`);
          return;
        }
        this.change(this.panels.map((p) => (p.id === panel.id ? { ...p, ...size } : p)));
      };
      grip.addEventListener("pointermove", move);
      grip.addEventListener("pointerup", up, { once: true });
      grip.addEventListener("pointercancel", up, { once: true });
    });
  }

  chart(panel, runs, plot) {
    const base = { runId: this.o.runId, title: panel.title, onClickStep: this.o.openStep };
    if (panel.kind === "scatter") return new ScatterPanel(plot, { ...base, panel, runs, title: panel.title || `${panel.metrics[0]} vs ${panel.x}` });
    if (panel.kind === "hist") return new HistPanel(plot, { ...base, panel, runs, title: panel.title || panel.metrics[0] });
    const metrics = expandMetrics(panel.metrics, this.o.names);
    const keys = [...metrics, ...(panel.x && !TIME_X.includes(panel.x) ? [panel.x] : [])];
    const spec = { id: domId(panel.id), title: panel.title || metrics.join(", "), names: keys.map((m) => `${this.o.runId}${KEY_SEP}${m}`),
      primary: null, lines: panelLines(panel, runs, metrics), unit: this.o.units[metrics[0]] || "", panel };
    const chart = new PanelChart(plot, spec, { runId: this.o.runId, xMode: this.o.xMode, units: this.o.units, onClickStep: this.o.openStep });
    const own = this.o.chartOpts(`p:${panel.id}`);
    chart.opts = { ...own, log: !!panel.log || !!own.log };
    chart.liveKey = (m) => `${this.o.runId}${KEY_SEP}${m}`;
    return chart;
  }

  async fill(chart, panel, runs) {
    try {
      if (panel.kind === "hist") return await chart.load();
      const metrics = panel.kind === "scatter" ? [panel.metrics[0], panel.x]
        : [...expandMetrics(panel.metrics, this.o.names), ...(panel.x && !TIME_X.includes(panel.x) ? [panel.x] : [])];
      if (!metrics.filter(Boolean).length) return chart.render();
      const res = await api.compare(runs, metrics.filter(Boolean));
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

  async saveFromUrl(panel) {
    const { fromUrl, ...copy } = panel;
    await this.change([...this.panels, { ...copy, id: `p${Date.now().toString(36)}` }]);
  }

  // The add / edit form: a new panel goes last, an edited one keeps its place.
  openForm(panel = null) {
    clear(this.formBox);
    this.formBox.hidden = false;
    const form = panelForm({ names: this.o.names, histNames: this.o.histNames || (window.rlcockpit?.state?.summary?.histogram_names) || [], runs: this.o.runs, runId: this.o.runId, panel,
      onCancel: () => { this.formBox.hidden = true; },
      onSubmit: async (next) => {
        const before = this.panels;
        this.panels = panel ? before.map((p) => (p.id === panel.id ? next : p)) : [...before, next];
        try {
          await this.save();
        } catch (err) {
          this.panels = before;
          throw err;
        }
        this.formBox.hidden = true;
        this.render();
      } });
    this.formBox.append(form);
    form.querySelector("#panel-metrics").focus();
    form.scrollIntoView({ block: "nearest" });
  }

  toggleForm() {
    if (!this.formBox.hidden && !this.formBox.querySelector("form[data-editing]:not([data-editing=''])")) { this.formBox.hidden = true; return; }
    this.openForm(null);
  }

  dispose() {
    this.disposed = true;
  }
}
