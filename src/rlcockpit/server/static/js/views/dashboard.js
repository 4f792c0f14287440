// The dashboard (DESIGN.md §8, seed 001 Q8): three rows of charts that grow live from the run's
// stream, linked zoom and a shared tooltip across the step charts, a click opens that step's samples.
import { api } from "../api.js";
import { GROUP, HistogramHeatmap, StepChart } from "../charts.js";
import { t } from "../i18n.js";
import { registerView, runHref } from "../router.js";
import { clear, fmt, h } from "../ui.js";
import { CHARTS, HEATMAPS, seriesNames } from "./dashboard_specs.js";

const PREFS_KEY = "rlcockpit.dashboard";
const REFRESH_MS = 1000;

function loadPrefs() {
  try {
    return { xMode: "step", smoothing: 0.6, klWindow: 10, ...JSON.parse(localStorage.getItem(PREFS_KEY) || "{}") };
  } catch {
    return { xMode: "step", smoothing: 0.6, klWindow: 10 };
  }
}

function savePrefs(prefs) {
  localStorage.setItem(PREFS_KEY, JSON.stringify(prefs));
}

class Dashboard {
  constructor(root, ctx) {
    this.root = root;
    this.ctx = ctx;
    this.prefs = loadPrefs();
    this.charts = {};
    this.heatmaps = {};
    this.timers = [];
  }

  mount() {
    const openStep = (step) => this.ctx.navigate(runHref(this.ctx.runId, "samples", [], { step_min: step, step_max: step }));
    this.root.append(this.toolbar());
    const rows = [1, 2, 3].map((n) => h("div", { class: `dash-row row-${n}`, dataset: { row: String(n) } }));
    this.root.append(...rows);
    for (const spec of CHARTS) {
      const { box, plot } = this.chartBox(spec.id);
      rows[spec.row - 1].append(box);
      const chart = new StepChart(plot, { ...spec, title: t(spec.titleKey), lines: (d, o) => spec.lines(d, o, t), hlines: spec.hlines && ((d, o) => spec.hlines(d, o, t)) },
        { runId: this.ctx.runId, xMode: this.prefs.xMode, onClickStep: openStep });
      chart.opts = { smoothing: this.prefs.smoothing, klWindow: this.prefs.klWindow };
      this.charts[spec.id] = chart;
    }
    for (const spec of HEATMAPS) {
      const { box, plot } = this.chartBox(spec.id);
      rows[2].append(box);
      this.heatmaps[spec.id] = new HistogramHeatmap(plot, { title: t(spec.titleKey), onClickStep: openStep });
    }
    this.samplesBox = h("section", { class: "chart-box samples-box", id: "latest-samples" });
    rows[2].append(this.samplesBox);
    echarts.connect(GROUP);
    window.rlcockpit.dashboard = this;
    this.load();
    return () => this.unmount();
  }

  chartBox(id) {
    const plot = h("div", { class: "chart", id: `chart-${id}`, dataset: { points: "0" } });
    const overlay = h("div", { class: "chart-empty", text: t("state.loading") });
    const box = h("section", { class: "chart-box" }, plot, overlay);
    box.overlay = overlay;
    plot.box = box;
    return { box, plot };
  }

  toolbar() {
    const p = this.prefs;
    const xToggle = (mode) => h("button", { class: `btn seg${p.xMode === mode ? " active" : ""}`, id: `x-${mode}`,
      onclick: () => this.setPref({ xMode: mode }), text: t(mode === "step" ? "dash.x_step" : "dash.x_wall") });
    const slider = h("input", { type: "range", id: "smoothing", min: "0", max: "0.99", step: "0.01", value: String(p.smoothing),
      oninput: (e) => this.setPref({ smoothing: Number(e.target.value) }) });
    this.smoothLabel = h("span", { class: "muted", text: p.smoothing.toFixed(2) });
    const klWin = h("input", { type: "number", id: "kl-window", min: "2", max: "500", value: String(p.klWindow), class: "num",
      onchange: (e) => this.setPref({ klWindow: Math.max(2, Math.min(500, Number(e.target.value) || 10)) }) });
    return h("div", { class: "toolbar" },
      h("span", { class: "tb-label", text: t("dash.x_axis") }), xToggle("step"), xToggle("wall"),
      h("label", { class: "tb-label" }, t("dash.smoothing"), " ", slider, " ", this.smoothLabel),
      h("label", { class: "tb-label" }, t("dash.kl_window"), " ", klWin),
      h("button", { class: "btn", id: "reset-zoom", onclick: () => this.resetZoom(), text: t("dash.reset_zoom") }),
      h("span", { class: "muted hint", text: t("dash.hint") }));
  }

  setPref(change) {
    Object.assign(this.prefs, change);
    savePrefs(this.prefs);
    if (change.xMode) {
      this.root.querySelectorAll(".seg").forEach((b) => b.classList.toggle("active", b.id === `x-${change.xMode}`));
      Object.values(this.charts).forEach((c) => c.setXMode(change.xMode));
    } else {
      if (this.smoothLabel) this.smoothLabel.textContent = this.prefs.smoothing.toFixed(2);
      Object.values(this.charts).forEach((c) => c.setOpts({ smoothing: this.prefs.smoothing, klWindow: this.prefs.klWindow }));
    }
  }

  resetZoom() {
    Object.values(this.charts).forEach((c) => c.chart.dispatchAction({ type: "dataZoom", start: 0, end: 100 }));
  }

  async load() {
    const runId = this.ctx.runId;
    try {
      const res = await api.series(runId, seriesNames());
      if (this.disposed) return;
      Object.values(this.charts).forEach((c) => c.setSeries(res.series));
      this.updateOverlays();
    } catch (err) {
      if (this.disposed) return;
      this.showError(err);
      return;
    }
    this.unsub = this.ctx.live.subscribe((m) => this.onMessage(m));
    this.loadHeatmaps();
    this.loadSamples();
  }

  showError(err) {
    Object.values(this.charts).forEach((c) => {
      const ov = c.el.box.overlay;
      clear(ov);
      ov.classList.add("error");
      ov.append(h("div", { text: `${t("state.error")}: ${err.message}` }),
        h("button", { class: "btn", onclick: () => this.ctx.navigate(location.hash), text: t("state.retry") }));
      ov.hidden = false;
    });
  }

  updateOverlays() {
    for (const c of [...Object.values(this.charts), ...Object.values(this.heatmaps)]) {
      const ov = c.el.box.overlay;
      const has = Number(c.el.dataset.points) > 0 || (c.data && [...c.data.values()].some((d) => d.steps.length));
      ov.hidden = has;
      if (!has) ov.textContent = t("state.no_data_yet");
    }
  }

  onMessage({ kind, data }) {
    if (kind !== "step") return;
    for (const c of Object.values(this.charts)) c.append(data.step, data.wall_time, data.metrics || {});
    this.updateOverlays();
    this.throttle("heatmaps", () => this.loadHeatmaps(true));
    this.throttle("samples", () => this.loadSamples());
  }

  throttle(key, fn) {
    this.pendingRefresh = this.pendingRefresh || {};
    if (this.pendingRefresh[key]) return;
    this.pendingRefresh[key] = setTimeout(() => { this.pendingRefresh[key] = null; if (!this.disposed) fn(); }, REFRESH_MS);
  }

  async loadHeatmaps(incremental = false) {
    for (const spec of HEATMAPS) {
      const hm = this.heatmaps[spec.id];
      try {
        const opts = incremental && hm.lastStep() >= 0 ? { step_min: hm.lastStep() + 1 } : {};
        const res = await api.histograms(this.ctx.runId, spec.name, opts);
        if (this.disposed) return;
        if (incremental) hm.appendItems(res.items);
        else hm.setItems(res.items);
      } catch (err) {
        if (this.disposed) return;
        hm.el.box.overlay.textContent = `${t("state.error")}: ${err.message}`;
        hm.el.box.overlay.hidden = false;
        continue;
      }
    }
    this.updateOverlays();
  }

  async loadSamples() {
    const box = this.samplesBox;
    try {
      const res = await api.samples(this.ctx.runId, { order: "step_desc", limit: 6 });
      if (this.disposed) return;
      renderLatestSamples(box, res.items, this.ctx.runId);
    } catch (err) {
      if (this.disposed) return;
      clear(box).append(h("h3", { class: "panel-title", text: t("dash.latest_samples") }),
        h("div", { class: "state state-error", text: err.message }),
        h("button", { class: "btn", onclick: () => this.loadSamples(), text: t("state.retry") }));
    }
  }

  unmount() {
    this.disposed = true;
    if (this.unsub) this.unsub();
    Object.values(this.pendingRefresh || {}).forEach((tm) => tm && clearTimeout(tm));
    Object.values(this.charts).forEach((c) => c.dispose());
    Object.values(this.heatmaps).forEach((c) => c.dispose());
    if (window.rlcockpit.dashboard === this) delete window.rlcockpit.dashboard;
  }
}

function renderLatestSamples(box, items, runId) {
  clear(box).append(h("h3", { class: "panel-title", text: t("dash.latest_samples") }));
  if (!items.length) {
    box.append(h("div", { class: "state state-empty small", text: t("state.no_samples_yet") }));
    return;
  }
  const list = h("ul", { class: "latest-list" });
  for (const s of items) {
    list.append(h("li", {},
      h("a", { href: runHref(runId, "samples", [s.step, s.sample_id]) },
        h("span", { class: "pill", text: `${t("axis.step")} ${s.step}` }),
        s.category ? h("span", { class: "pill cat", text: s.category }) : null,
        h("span", { class: "reward", text: `${t("sample.reward")} ${fmt(s.reward, 3)}` }),
        h("div", { class: "preview", text: (s.response || "").slice(0, 140) }))));
  }
  box.append(list);
}

registerView("dashboard", {
  scope: "run",
  labelKey: "tab.dashboard",
  order: 10,
  mount: (root, ctx) => new Dashboard(root, ctx).mount(),
});
