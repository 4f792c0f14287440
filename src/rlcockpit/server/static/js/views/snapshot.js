// One diagnostic snapshot (seed 000 §2, DESIGN.md §6): gradient-norm histogram, per-layer gradient
// variance heatmap, head-gradient covariance, the metric window, the triggering batch, last samples.
import { api } from "../api.js";
import { label, t } from "../i18n.js";
import { downloadTools, histogramBars, matrixHeatmap, simpleLines } from "../charts.js";
import { registerView, runHref } from "../router.js";
import { clear, fmt, h, severityBadge, withStates } from "../ui.js";
import { sampleView } from "./sample_view.js";

function chartSlot(id) {
  return h("div", { class: "chart snapshot-chart", id });
}

function emptyNote(key) {
  return h("div", { class: "state state-empty small", text: t(key) });
}

// Rows of layer_grad_var are steps and columns layers (diagnostics/snapshots.py); shown with layers
// on the y axis.
function layerVar(p) {
  const v = p.layer_grad_var;
  if (!v || !v.layers || !v.layers.length || !v.values || !v.values.length) return null;
  const byLayer = v.layers.map((_, li) => v.values.map((row) => row[li] ?? null));
  return { xLabels: v.steps, yLabels: v.layers, matrix: byLayer };
}

// The metric window comes as {steps, series: {name: [values]}} or {name: {steps, values}}.
function metricLines(mw) {
  if (!mw) return {};
  if (mw.series && mw.steps) {
    return Object.fromEntries(Object.entries(mw.series).map(([n, vals]) => [n, { steps: mw.steps, values: vals }]));
  }
  return Object.fromEntries(Object.entries(mw).filter(([, s]) => s && s.steps));
}

function sampleTable(samples, detail, idPrefix) {
  if (!samples || !samples.length) return emptyNote("snapshot.no_samples");
  const tbody = h("tbody");
  for (const s of samples) {
    tbody.append(h("tr", { class: "clickable", onclick: () => { clear(detail).append(sampleView(s)); detail.scrollIntoView({ block: "nearest" }); } },
      h("td", { text: String(s.step) }), h("td", { text: String(s.sample_id) }), h("td", { text: s.category ? label("category", s.category) : "—" }),
      h("td", { text: fmt(s.reward, 3) }), h("td", { text: (s.flags || []).map((f) => label("flag", f)).join(", ") || "—" }),
      h("td", { class: "preview", text: (s.response || "").slice(0, 80) })));
  }
  return h("table", { class: "list", id: `${idPrefix}-samples` },
    h("thead", {}, h("tr", {}, ["axis.step", "samples.id", "samples.category", "sample.reward", "samples.flags", "sample.response"].map((k) => h("th", { text: t(k) })))),
    tbody);
}

// One chart panel: drawn by `draw(el)` (returns {dispose}) when there is data, else a note; a
// chart that can download itself (the heatmaps: downloadCsv / downloadPng) gets the CSV / PNG tools.
function chartSection(grid, id, ready, emptyKey, draw, disposers) {
  const el = chartSlot(id);
  const box = h("section", { class: "chart-box" }, ready ? el : emptyNote(emptyKey));
  grid.append(box);
  if (!ready) return;
  const drawn = draw(el);
  disposers.push(drawn.dispose);
  if (drawn.downloadCsv) box.prepend(downloadTools(drawn));
}

function header(ctx, snap, f) {
  return h("div", { class: "snapshot-head" },
    h("a", { class: "btn small", href: runHref(ctx.runId, "alerts"), text: `← ${t("tab.alerts")}` }),
    h("h2", { text: `${t("snapshot.title")} #${snap.snapshot_id} · ${t("axis.step")} ${snap.step}` }),
    f.severity ? severityBadge(f.severity) : null, f.detector ? h("b", { text: ` ${f.detector}` }) : null,
    f.message ? h("div", { class: "finding-msg", text: f.message }) : null);
}

// A "batch" snapshot (the orange tier's save_batch) holds only the triggering batch: no chart panels.
function hasCharts(p) {
  return ["grad_norm_hist", "layer_grad_var", "head_grad_cov", "metric_window"].some((k) => p[k] !== undefined && p[k] !== null);
}

// The metric window as small multiples, one chart per metric: kl/mean at 27 and a clip fraction
// near 0 on one axis would flatten the second.
function metricWindow(grid, lines, disposers) {
  const names = Object.keys(lines);
  if (!names.length) return grid.append(h("section", { class: "chart-box" }, emptyNote("snapshot.no_metrics")));
  const box = h("section", { class: "chart-box snap-metrics", id: "snap-metrics" },
    h("h3", { class: "panel-title pad", text: t("snapshot.metric_window") }));
  const multiples = h("div", { class: "small-multiples" });
  box.append(multiples);
  grid.append(box);
  for (const name of names) {
    const el = h("div", { class: "chart small-chart", dataset: { metric: name } });
    multiples.append(el);
    disposers.push(simpleLines(el, { title: name, lines: { [name]: lines[name] }, legend: false }).dispose);
  }
}

function charts(grid, p, disposers, file) {
  const hist = p.grad_norm_hist;
  chartSection(grid, "snap-grad-hist", hist && hist.counts && hist.counts.length, "snapshot.no_grad",
    (el) => histogramBars(el, { title: t("snapshot.grad_hist", { n: (hist.steps || []).length }), edges: hist.edges, counts: hist.counts }), disposers);
  const lv = layerVar(p);
  chartSection(grid, "snap-layer-var", lv, "snapshot.no_layers",
    (el) => matrixHeatmap(el, { title: t("snapshot.layer_var"), ...lv, file: `${file}-layer-var` }), disposers);
  const cov = p.head_grad_cov;
  chartSection(grid, "snap-head-cov", cov && cov.matrix && cov.matrix.length, "snapshot.no_cov",
    (el) => matrixHeatmap(el, { title: t("snapshot.head_cov"), xLabels: cov.labels, yLabels: cov.labels, matrix: cov.matrix, diverging: true, file: `${file}-head-cov` }), disposers);
  metricWindow(grid, metricLines(p.metric_window), disposers);
}

function render(root, ctx, snap, disposers) {
  const p = snap.payload || {};
  root.append(header(ctx, snap, p.finding || {}));
  if (hasCharts(p)) {
    const grid = h("div", { class: "snapshot-grid" });
    root.append(grid);
    charts(grid, p, disposers, `${ctx.runId}-snapshot${snap.snapshot_id}`);
  } else {
    root.append(h("p", { class: "banner", id: "snap-batch-only", text: t("snapshot.batch_only") }));
  }
  const detail = h("div", { class: "snapshot-sample" });
  root.append(h("h3", { text: t("snapshot.batch") }), sampleTable(p.batch, detail, "snap-batch"),
    h("h3", { text: t("snapshot.last_samples") }), sampleTable(p.last_samples, detail, "snap-last"), detail);
  if (p.config && Object.keys(p.config).length) {
    root.append(h("details", {}, h("summary", { text: t("snapshot.config") }), h("pre", { class: "text", text: JSON.stringify(p.config, null, 2) })));
  }
  if (p.truncated) root.append(h("p", { class: "muted", text: `${t("snapshot.truncated")}: ${JSON.stringify(p.truncated)}` }));
}

function mount(root, ctx) {
  const body = h("div", { class: "snapshot-page", id: "snapshot" });
  root.append(body);
  const disposers = [];
  withStates(body, () => api.snapshot(ctx.runId, ctx.args[0]), (snap) => render(body, ctx, snap, disposers));
  return () => { disposers.forEach((d) => d()); clear(root); };
}

registerView("snapshot", { scope: "run", labelKey: "tab.snapshot", tab: false, mount });
