// The dashboard (DESIGN.md §8, seed 001 Q8): three rows of charts that grow live from the run's
// stream, linked zoom and a shared tooltip across the step charts, a click opens that step's samples.
import { api } from "../api.js";
import { chartTools, downloadTools, GROUP, HistogramHeatmap, StepChart } from "../charts.js";
import { label, t } from "../i18n.js";
import { registerView, runHref } from "../router.js";
import { clear, fmt, h } from "../ui.js";
import { HEATMAPS, chartSpecs, isDistributed, seriesNames } from "./dashboard_specs.js";
import { MetricExplorer } from "./metric_panels.js";
import { overlayFromQuery, overlayToQuery, RunOverlay } from "./overlay.js";

const PREFS_KEY = "rlcockpit.dashboard";
const REFRESH_MS = 1000;
const OVERLAY_REFRESH_MS = 10000; // the curves of selected runs that are still running
const DEFAULTS = { xMode: "step", smoothing: 0.6, klWindow: 10, chart: {} };

function loadPrefs() {
  try {
    return { ...DEFAULTS, chart: {}, ...JSON.parse(localStorage.getItem(PREFS_KEY) || "{}") };
  } catch {
    return { ...DEFAULTS, chart: {} };
  }
}

function savePrefs(prefs) {
  localStorage.setItem(PREFS_KEY, JSON.stringify(prefs));
}

// The view in the URL (so it can be shared): x, smooth, zoom=a~b, cs=id:0.9,..., log=id,..., q.
// Values in the URL win over the remembered preferences.
export function viewFromQuery(query, prefs) {
  const out = { ...prefs, chart: JSON.parse(JSON.stringify(prefs.chart || {})) };
  const x = query.get("x");
  if (["step", "wall", "rel"].includes(x)) out.xMode = x;
  const sm = Number(query.get("smooth"));
  if (query.has("smooth") && sm >= 0 && sm < 1) out.smoothing = sm;
  for (const part of (query.get("cs") || "").split(",").filter(Boolean)) {
    const i = part.lastIndexOf(":");
    const v = Number(part.slice(i + 1));
    if (i > 0 && v >= 0 && v < 1) out.chart[part.slice(0, i)] = { ...(out.chart[part.slice(0, i)] || {}), smoothing: v };
  }
  if (query.has("log")) {
    for (const id of Object.keys(out.chart)) out.chart[id].log = false;
    for (const id of query.get("log").split(",").filter(Boolean)) out.chart[id] = { ...(out.chart[id] || {}), log: true };
  }
  const zoom = (query.get("zoom") || "").split("~").map(Number);
  out.zoom = zoom.length === 2 && zoom.every(Number.isFinite) && zoom[0] < zoom[1] ? zoom : null;
  out.q = query.get("q") || "";
  // panels of a shared link: ?panel=eval/accuracy/math,kl/mean~run_a,run_b (metrics ~ other runs)
  out.panels = query.getAll("panel").map((p) => {
    const [metrics, runs = ""] = p.split("~");
    return { metrics: metrics.split(",").filter(Boolean), runs: runs.split(",").filter(Boolean) };
  }).filter((p) => p.metrics.length);
  // other runs on the charts, or groups of runs: runs=a,b&group=config:optim.lr&band=std (overlay.js)
  out.overlay = overlayFromQuery(query);
  return out;
}

export function viewToQuery(view) {
  const q = new URLSearchParams();
  q.set("x", view.xMode);
  q.set("smooth", String(view.smoothing));
  const cs = Object.entries(view.chart).filter(([, c]) => c.smoothing !== undefined).map(([id, c]) => `${id}:${c.smoothing}`);
  if (cs.length) q.set("cs", cs.join(","));
  const logs = Object.entries(view.chart).filter(([, c]) => c.log).map(([id]) => id);
  if (logs.length) q.set("log", logs.join(","));
  if (view.zoom) q.set("zoom", view.zoom.map((v) => +v.toPrecision(10)).join("~"));
  if (view.q) q.set("q", view.q);
  for (const p of view.panels || []) q.append("panel", `${p.metrics.join(",")}~${(p.runs || []).join(",")}`);
  return overlayToQuery(view.overlay, q);
}

class Dashboard {
  constructor(root, ctx) {
    this.root = root;
    this.ctx = ctx;
    this.prefs = viewFromQuery(ctx.query || new URLSearchParams(), loadPrefs());
    this.charts = {};
    this.heatmaps = {};
    this.tools = {};
    this.timers = [];
    this.baseSpecs = {}; // each chart's own spec (the open run alone); overlay.spec(base) draws many runs
    this.overlay = new RunOverlay({ runId: ctx.runId, state: this.prefs.overlay, onChange: () => this.applyOverlay() });
  }

  chartOpts(id) {
    const own = this.prefs.chart[id] || {};
    const spec = chartSpecs(true).find((c) => c.id === id);
    const fallback = spec && spec.defaultSmoothing !== undefined ? spec.defaultSmoothing : this.prefs.smoothing;
    return { smoothing: own.smoothing ?? fallback, log: !!own.log, klWindow: this.prefs.klWindow };
  }

  onChartChange(id, change) {
    this.prefs.chart[id] = { ...(this.prefs.chart[id] || {}), ...change };
    this.persist();
  }

  mount() {
    const openStep = (step) => this.ctx.navigate(runHref(this.ctx.runId, "samples", [], { step_min: step, step_max: step }));
    this.openStep = openStep;
    const units = (this.ctx.summary && this.ctx.summary.metric_units) || {};
    this.root.append(this.toolbar(), this.overlay.node());
    // a data-parallel run gets a fourth row: step time, rollout time, gradient norm and memory per rank
    this.distributed = isDistributed(this.ctx.summary && this.ctx.summary.metric_names);
    // asked for now, drawn in load(): the charts below take a while to build (issue 29: first chart)
    this.firstSeries = api.series(this.ctx.runId, seriesNames(this.distributed));
    this.firstSeries.catch(() => {}); // load() reports a failure
    const rows = [1, 2, 3, ...(this.distributed ? [4] : [])]
      .map((n) => h("div", { class: `dash-row row-${n}`, dataset: { row: String(n) } }));
    this.root.append(...rows);
    for (const spec of chartSpecs(this.distributed)) {
      const { box, plot } = this.chartBox(spec.id);
      rows[spec.row - 1].append(box);
      const chart = new StepChart(plot, { ...spec, title: t(spec.titleKey), lines: (d, o) => spec.lines(d, o, t), hlines: spec.hlines && ((d, o) => spec.hlines(d, o, t)) },
        { runId: this.ctx.runId, xMode: this.prefs.xMode, onClickStep: openStep, units });
      chart.opts = this.chartOpts(spec.id);
      this.charts[spec.id] = chart;
      this.baseSpecs[spec.id] = chart.spec;
      this.tools[spec.id] = chartTools(chart, { onChange: (c) => this.onChartChange(spec.id, c) });
      box.prepend(this.tools[spec.id]);
    }
    for (const spec of HEATMAPS) {
      const { box, plot } = this.chartBox(spec.id);
      rows[2].append(box);
      this.heatmaps[spec.id] = new HistogramHeatmap(plot, { title: t(spec.titleKey), id: spec.id, runId: this.ctx.runId, onClickStep: openStep });
      box.prepend(downloadTools(this.heatmaps[spec.id]));
    }
    this.samplesBox = h("section", { class: "chart-box samples-box", id: "latest-samples" });
    rows[2].append(this.samplesBox);
    this.explorerRoot = h("div", { id: "explorer-root" });
    this.root.append(this.explorerRoot);
    echarts.connect(GROUP);
    // a zoom (any chart: they are linked) is part of the view in the URL
    this.charts.reward.chart.on("datazoom", () => this.onZoom());
    window.rlcockpit.dashboard = this;
    this.load();
    return () => this.unmount();
  }

  mountExplorer() {
    const s = this.ctx.summary || {};
    this.explorer = new MetricExplorer(this.explorerRoot, {
      runId: this.ctx.runId, project: (s.run && s.run.project) || "default", names: s.metric_names || [],
      units: s.metric_units || {}, loggedKeys: s.logged_keys || {}, runs: (window.rlcockpit.state && window.rlcockpit.state.runs) || [],
      xMode: this.prefs.xMode, chartOpts: (id) => this.chartOpts(id), onChartChange: (id, c) => this.onChartChange(id, c),
      openStep: this.openStep, query: this.prefs.q, onQuery: (q) => { this.prefs.q = q; this.persist(); },
      urlPanels: this.prefs.panels || [], overlay: this.overlay });
    this.explorer.mount();
  }

  allCharts() {
    const out = Object.values(this.charts);
    if (this.explorer) this.explorer.each((c) => out.push(c));
    return out;
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
    const xToggle = (mode, key) => h("button", { class: `btn seg${p.xMode === mode ? " active" : ""}`, id: `x-${mode}`,
      onclick: () => this.setPref({ xMode: mode }), text: t(key) });
    const slider = h("input", { type: "range", id: "smoothing", min: "0", max: "0.99", step: "0.01", value: String(p.smoothing),
      oninput: (e) => this.setPref({ smoothing: Number(e.target.value) }) });
    this.smoothLabel = h("span", { class: "muted", text: p.smoothing.toFixed(2) });
    const klWin = h("input", { type: "number", id: "kl-window", min: "2", max: "500", value: String(p.klWindow), class: "num",
      onchange: (e) => this.setPref({ klWindow: Math.max(2, Math.min(500, Number(e.target.value) || 10)) }) });
    return h("div", { class: "toolbar" },
      h("span", { class: "tb-label", text: t("dash.x_axis") }), xToggle("step", "dash.x_step"), xToggle("wall", "dash.x_wall"), xToggle("rel", "dash.x_rel"),
      h("label", { class: "tb-label", title: t("dash.smoothing_help") }, t("dash.smoothing"), " ", slider, " ", this.smoothLabel),
      h("label", { class: "tb-label" }, t("dash.kl_window"), " ", klWin),
      h("button", { class: "btn", id: "reset-zoom", onclick: () => this.resetZoom(), text: t("dash.reset_zoom") }),
      h("button", { class: "btn", id: "copy-link", title: t("dash.copy_link_help"), onclick: () => this.copyLink(), text: t("dash.copy_link") }),
      h("span", { class: "muted hint", text: t("dash.hint") }));
  }

  setPref(change) {
    Object.assign(this.prefs, change);
    if (change.xMode) {
      this.root.querySelectorAll(".seg").forEach((b) => b.classList.toggle("active", b.id === `x-${change.xMode}`));
      this.prefs.zoom = null; // a zoom range is in the units of the old axis
      this.allCharts().forEach((c) => c.setXMode(change.xMode));
    } else {
      if (change.smoothing !== undefined) {
        // the global slider sets every chart; a chart's own choice is dropped
        for (const c of Object.values(this.prefs.chart)) delete c.smoothing;
        if (this.smoothLabel) this.smoothLabel.textContent = this.prefs.smoothing.toFixed(2);
      }
      for (const [id, c] of Object.entries(this.charts)) c.setOpts(this.chartOpts(id));
      if (this.explorer) for (const [id, c] of this.explorer.charts) c.setOpts({ smoothing: this.chartOpts(id).smoothing, klWindow: this.prefs.klWindow });
      Object.values(this.tools).forEach((tool) => tool.sync());
      this.root.querySelectorAll(".chart-tools").forEach((tool) => tool.sync && tool.sync());
    }
    this.persist();
  }

  // Remember the view (localStorage) and put it in the URL without reloading the page.
  persist() {
    const { zoom, q, panels, overlay, ...keep } = this.prefs;
    savePrefs(keep);
    const hash = runHref(this.ctx.runId, "dashboard", [], viewToQuery(this.prefs));
    if (location.hash !== hash) history.replaceState(null, "", hash);
  }

  // The link carries the whole view, every panel shown included (so it survives layout changes).
  copyLink() {
    if (this.explorer) this.prefs.panels = this.explorer.currentPanels();
    this.persist();
    const url = location.href;
    const btn = this.root.querySelector("#copy-link");
    btn.dataset.copied = url;
    const done = (key) => { btn.textContent = t(key); setTimeout(() => { btn.textContent = t("dash.copy_link"); }, 2000); };
    // the clipboard needs a secure context (https or localhost); else the address bar has the link
    if (navigator.clipboard) navigator.clipboard.writeText(url).then(() => done("dash.link_copied"), () => done("dash.link_in_bar"));
    else done("dash.link_in_bar");
  }

  onZoom() {
    const dz = this.charts.reward.chart.getOption().dataZoom[0];
    const full = dz.start <= 0 && dz.end >= 100;
    this.prefs.zoom = full || dz.startValue === undefined ? null : [dz.startValue, dz.endValue];
    clearTimeout(this.zoomTimer);
    this.zoomTimer = setTimeout(() => !this.disposed && this.persist(), 150);
  }

  applyZoom() {
    if (!this.prefs.zoom) return;
    const [a, b] = this.prefs.zoom;
    this.charts.reward.chart.dispatchAction({ type: "dataZoom", startValue: a, endValue: b });
  }

  resetZoom() {
    this.allCharts().forEach((c) => c.chart.dispatchAction({ type: "dataZoom", start: 0, end: 100 }));
    this.prefs.zoom = null;
    this.persist();
  }

  async load() {
    const runId = this.ctx.runId;
    try {
      const res = await (this.firstSeries || api.series(runId, seriesNames(this.distributed)));
      this.firstSeries = null;
      if (this.disposed) return;
      // the reward chart first, painted before the other charts are computed (issue 29: the first
      // chart a user sees comes ~0.3 s sooner on a busy machine; the rest follow a frame later)
      const first = this.charts.reward;
      first.setSeries(res.series);
      await paintedFrame();
      if (this.disposed) return;
      Object.values(this.charts).forEach((c) => c !== first && c.setSeries(res.series));
      this.updateOverlays();
      this.applyZoom();
      this.overlay.mainSeries = res.series;
      if (this.overlay.active()) this.applyOverlay();
      this.timers.push(setInterval(() => this.refreshOverlay(), OVERLAY_REFRESH_MS));
    } catch (err) {
      if (this.disposed) return;
      this.showError(err);
      return;
    }
    this.unsub = this.ctx.live.subscribe((m) => this.onMessage(m));
    this.loadHeatmaps();
    this.loadSamples();
    this.mountExplorer();
  }

  // Draw the selected runs (or their groups) on every chart, or the open run alone again.
  async applyOverlay() {
    const seq = (this.overlaySeq = (this.overlaySeq || 0) + 1);
    this.persist();
    const on = this.overlay.active();
    try {
      if (on) await this.overlay.load([...seriesNames(this.distributed), ...(this.explorer ? this.explorer.sectionMetrics() : [])]);
    } catch (err) {
      if (!this.disposed) this.overlay.legend.textContent = `${t("state.error")}: ${err.message}`;
      return;
    }
    if (this.disposed || seq !== this.overlaySeq) return;
    if (!on) this.overlay.renderLegend();
    for (const [id, c] of Object.entries(this.charts)) {
      c.spec = on ? this.overlay.spec(this.baseSpecs[id]) : this.baseSpecs[id];
      c.render();
    }
    if (this.explorer) this.explorer.overlaid();
    this.root.classList.toggle("overlaid", on);
    this.updateOverlays();
  }

  // Selected runs that are still running: their curves are fetched again.
  refreshOverlay() {
    if (this.disposed || !this.overlay.active() || !this.overlay.runs) return;
    const live = new Set(this.overlay.runs.filter((r) => r.status === "running").map((r) => r.run_id));
    const stale = this.overlay.others().filter((id) => live.has(id));
    if (!stale.length) return;
    stale.forEach((id) => this.overlay.forget(id));
    this.applyOverlay();
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

  // An empty chart says why: a run still waiting for its first step, or (the run is over, or its
  // other metrics have steps) a metric this run never logged.
  updateOverlays() {
    const all = [...Object.values(this.charts), ...Object.values(this.heatmaps)];
    const hasData = (c) => Number(c.el.dataset.points) > 0 || (c.data && [...c.data.values()].some((d) => d.steps.length))
      || (c.spec && c.spec.overlay && this.overlay.drawn.get(c.spec.id) > 0); // other runs on the chart
    const status = this.status ?? (this.ctx.summary && this.ctx.summary.run && this.ctx.summary.run.status);
    const notLogged = (status && status !== "running") || all.some(hasData);
    for (const c of all) {
      const ov = c.el.box.overlay;
      const has = hasData(c);
      ov.hidden = has;
      if (!has) {
        ov.textContent = t(notLogged ? "state.not_logged" : "state.no_data_yet");
        ov.dataset.reason = notLogged ? "not_logged" : "waiting";
      }
    }
  }

  onMessage({ kind, data }) {
    if (kind === "run" && data && data.status) {
      this.status = data.status;
      this.updateOverlays();
      return;
    }
    if (kind !== "step") return;
    for (const c of Object.values(this.charts)) c.append(data.step, data.wall_time, data.metrics || {});
    if (this.explorer) this.explorer.append(data.step, data.wall_time, data.metrics || {});
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
    if (this.explorer) this.explorer.dispose();
    clearTimeout(this.zoomTimer);
    this.timers.forEach((tm) => clearInterval(tm));
    this.overlay.dispose();
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
        s.category ? h("span", { class: "pill cat", text: label("category", s.category) }) : null,
        h("span", { class: "reward", text: `${t("sample.reward")} ${fmt(s.reward, 3)}` }),
        h("div", { class: "preview", text: (s.response || "").slice(0, 140) }))));
  }
  box.append(list);
}

// Resolves once the browser has painted the frame after now (a hidden tab paints no frames: then
// after 50 ms), so what was drawn before the call is on screen before the next work starts.
function paintedFrame() {
  return new Promise((resolve) => {
    const done = () => setTimeout(resolve, 0);
    if (document.hidden || typeof requestAnimationFrame !== "function") setTimeout(resolve, 50);
    else requestAnimationFrame(done);
  });
}

registerView("dashboard", {
  scope: "run",
  labelKey: "tab.dashboard",
  order: 10,
  mount: (root, ctx) => new Dashboard(root, ctx).mount(),
});
