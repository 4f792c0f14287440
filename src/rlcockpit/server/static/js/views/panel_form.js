// The form that adds a panel or edits one (⚙): its kind (lines, scatter, histogram), title,
// metrics, x axis (the dashboard's, step, time, or any logged metric — token and sample counts
// first), y range (min / max, or clip outliers), width and height, the other runs it shows, and
// log scale. The run checkboxes read "name · short id", so runs of the same name differ.
import { runName, runSwatch } from "../colors.js";
import { t } from "../i18n.js";
import { h } from "../ui.js";
import { HEIGHTS, normalizePanel, TIME_X, WIDTHS } from "./panel_layout.js";

const COUNTERS = /token|sample|seen|consumed|examples/i; // x-axis candidates listed first

// The last part of a run id (`<date>-<time>-<hex>` -> `<hex>`): what tells same-named runs apart.
export function shortRunId(runId) {
  const tail = String(runId).split(/[-_.]/).pop();
  return tail.length >= 4 ? tail : String(runId).slice(-8);
}

function select(id, options, value) {
  const el = h("select", { id }, options.map(([v, label]) => h("option", { value: String(v), text: label })));
  el.value = String(value);
  return el;
}

// x-axis choices: the dashboard's own, the three time modes, then the logged metrics
function xSelect(names, value) {
  const el = select("panel-x", [["", t("metrics.x_follow")], ...TIME_X.map((m) => [m, t(`dash.x_${m}`)])], value);
  const counters = names.filter((n) => COUNTERS.test(n));
  const rest = names.filter((n) => !COUNTERS.test(n));
  if (counters.length) el.append(h("optgroup", { label: t("metrics.x_counters") }, counters.map((n) => h("option", { value: n, text: n }))));
  el.append(h("optgroup", { label: t("metrics.x_metrics") }, rest.map((n) => h("option", { value: n, text: n }))));
  el.value = value;
  return el;
}

const field = (label, input, cls = "field") => h("label", { class: cls }, label, input);

// opts: {names, histNames, runs: [{run_id, name}], runId, panel (when editing), onSubmit(panel) -> Promise, onCancel}
export function panelForm(opts) {
  const p = normalizePanel(opts.panel || {});
  const editing = !!opts.panel;
  const kind = select("panel-kind", [["line", t("metrics.kind_line")], ["scatter", t("metrics.kind_scatter")], ["hist", t("metrics.kind_hist")]], p.kind);
  const title = h("input", { id: "panel-title", placeholder: t("metrics.panel_title_hint"), value: p.title });
  const lists = h("span", {}, h("datalist", { id: "metric-names" }, opts.names.map((n) => h("option", { value: n }))),
    h("datalist", { id: "hist-names" }, (opts.histNames || []).map((n) => h("option", { value: n }))));
  const metrics = h("input", { id: "panel-metrics", list: "metric-names", placeholder: t("metrics.panel_metrics_hint"), size: "48", value: p.metrics.join(", ") });
  const metricsLabel = h("span", {});
  const x = xSelect(opts.names, p.x);
  const view = select("panel-view", [["time", t("metrics.view_time")], ["step", t("metrics.view_step")]], p.view);
  const yMin = h("input", { id: "panel-ymin", type: "number", step: "any", class: "num", value: p.y_min ?? "" });
  const yMax = h("input", { id: "panel-ymax", type: "number", step: "any", class: "num", value: p.y_max ?? "" });
  const robust = h("input", { type: "checkbox", id: "panel-robust", checked: p.y_robust });
  const width = select("panel-width", WIDTHS.map((w) => [w, t(`metrics.width_${w}`)]), p.width);
  const height = select("panel-height", Object.entries(HEIGHTS).map(([k, px]) => [px, t(`metrics.height_${k}`)]), p.height);
  const log = h("input", { type: "checkbox", id: "panel-log", checked: p.log });
  const runBoxes = opts.runs.filter((r) => r.run_id !== opts.runId).map((r) =>
    h("label", { class: "check run-check", title: r.run_id },
      h("input", { type: "checkbox", name: "panel-run", value: r.run_id, checked: p.runs.includes(r.run_id) }),
      runSwatch(h, r.run_id), h("span", { text: runName(r.run_id) }), h("span", { class: "muted", text: ` · ${shortRunId(r.run_id)}` })));
  const error = h("span", { class: "muted small", id: "panel-error" });
  const xField = field(t("metrics.panel_x"), x);
  const viewField = field(t("metrics.panel_view"), view);
  const yFields = [field(t("metrics.panel_y_min"), yMin), field(t("metrics.panel_y_max"), yMax),
    h("label", { class: "check" }, robust, ` ${t("metrics.panel_robust")}`)];
  const logField = h("label", { class: "check" }, log, ` ${t("metrics.panel_log")}`);
  const sync = () => {
    const k = kind.value;
    metricsLabel.textContent = t(k === "line" ? "metrics.panel_metrics" : k === "scatter" ? "metrics.panel_y_metric" : "metrics.panel_hist");
    metrics.setAttribute("list", k === "hist" ? "hist-names" : "metric-names");
    xField.hidden = k === "hist";
    viewField.hidden = k !== "hist";
    yFields.forEach((f) => { f.hidden = k === "hist"; });
    logField.hidden = k !== "line";
  };
  kind.addEventListener("change", sync);
  const form = h("form", { class: "panel-form", id: "panel-form", dataset: { editing: editing ? p.id : "" } },
    field(t("metrics.panel_kind"), kind), field(t("metrics.panel_title"), title),
    h("label", { class: "field wide" }, metricsLabel, metrics), lists, xField, viewField, ...yFields,
    field(t("metrics.panel_width"), width), field(t("metrics.panel_height"), height),
    runBoxes.length ? h("div", { class: "field" }, t("metrics.panel_runs"), h("div", { class: "run-checks" }, runBoxes)) : null,
    logField,
    h("button", { class: "btn primary", type: "submit", id: "panel-save", text: t(editing ? "metrics.panel_update" : "metrics.panel_save") }),
    h("button", { class: "btn", type: "button", id: "panel-cancel", text: t("metrics.panel_cancel"), onclick: () => opts.onCancel() }),
    error);
  sync();
  const numOrNull = (input) => (input.value.trim() === "" || !Number.isFinite(Number(input.value)) ? null : Number(input.value));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const names = metrics.value.split(",").map((s) => s.trim()).filter(Boolean);
    if (!names.length) { error.textContent = t("metrics.panel_need_metric"); return; }
    if (kind.value === "scatter" && (!x.value || TIME_X.includes(x.value))) { error.textContent = t("metrics.panel_need_x"); return; }
    const panel = normalizePanel({ ...p, kind: kind.value, title: title.value.trim(), metrics: kind.value === "line" ? names : names.slice(0, 1),
      x: kind.value === "hist" ? "" : x.value, y_min: numOrNull(yMin), y_max: numOrNull(yMax), y_robust: robust.checked,
      width: Number(width.value), height: Number(height.value), view: view.value, log: log.checked,
      runs: [...form.querySelectorAll("input[name=panel-run]:checked")].map((b) => b.value) });
    try {
      await opts.onSubmit(panel);
    } catch (err) {
      error.textContent = `${t("state.error")}: ${err.message}`;
    }
  });
  return form;
}
