// The runs table's summary columns (issue 29, item 2): any metric's last, min or max value over
// the run, or its value "at best eval" — at the step where an eval metric (eval/reward/mean by
// default) is best — read for every run in one request (GET /api/summaries, docs/server.md).
// A column is "<stat>:<metric>" (last:reward/mean); in the URL: sum=last:reward/mean,at_best:reward/mean
// &best=eval/reward/mean&best_mode=max; the columns are remembered (localStorage).
import { get } from "../api.js";
import { t } from "../i18n.js";
import { clear, h } from "../ui.js";

export const STATS = ["last", "min", "max", "at_best"];
const SUM_KEY = "rlcockpit.runs.summaries";
const DEFAULT_BEST = "eval/reward/mean";
const SUGGEST = ["reward/mean", "eval/reward/mean", "kl/mean", "policy/entropy", "response/length_mean", "eval/accuracy/mean"];

export function parseColumn(text) {
  const i = String(text).indexOf(":");
  const stat = i > 0 ? text.slice(0, i) : "";
  return STATS.includes(stat) && text.slice(i + 1) ? { stat, metric: text.slice(i + 1) } : null;
}

// "last reward/mean", "reward/mean at best eval/reward/mean" in the current language
export function columnLabel(col, best) {
  const c = parseColumn(col);
  if (!c) return col;
  return t(`summary.col_${c.stat}`, { metric: c.metric, best });
}

export class SummaryColumns {
  // opts: {query, onChange()}: the columns from the URL, else the remembered ones
  constructor({ query, onChange }) {
    const fromUrl = (query.get("sum") || "").split(",").filter((c) => parseColumn(c));
    let kept = [];
    try {
      kept = JSON.parse(localStorage.getItem(SUM_KEY) || "[]").filter((c) => parseColumn(c));
    } catch {
      kept = [];
    }
    this.cols = query.has("sum") ? fromUrl : kept;
    this.best = query.get("best") || DEFAULT_BEST;
    this.bestMode = query.get("best_mode") === "min" ? "min" : "max";
    this.onChange = onChange;
    this.values = new Map(); // run id -> {best_step, best_value, metrics: {name: {last, min, max, at_best}}}
    this.error = null;
  }

  toQuery(q) {
    if (this.cols.length) q.set("sum", this.cols.join(","));
    if (this.cols.some((c) => c.startsWith("at_best:"))) {
      q.set("best", this.best);
      if (this.bestMode !== "max") q.set("best_mode", this.bestMode);
    }
    return q;
  }

  async load() {
    const parsed = this.cols.map(parseColumn);
    if (!parsed.length) {
      this.values = new Map();
      return;
    }
    try {
      const res = await get("/summaries", { names: [...new Set(parsed.map((c) => c.metric))], stats: [...new Set(parsed.map((c) => c.stat))],
        best: this.best, best_mode: this.bestMode });
      this.values = new Map(Object.entries(res.runs || {}));
      this.error = null;
    } catch (err) {
      this.values = new Map();
      this.error = err;
    }
  }

  value(runId, col) {
    const c = parseColumn(col);
    const run = this.values.get(runId);
    const m = c && run && run.metrics && run.metrics[c.metric];
    return m ? m[c.stat] ?? null : null;
  }

  bestStep(runId) {
    const run = this.values.get(runId);
    return run ? run.best_step : null;
  }

  label(col) {
    return columnLabel(col, this.best);
  }

  set(cols) {
    this.cols = [...new Set(cols)];
    localStorage.setItem(SUM_KEY, JSON.stringify(this.cols));
    this.onChange();
  }

  // The column picker: a metric (suggested from the open run's metrics), the statistics, Add; the
  // columns shown, each with ×; the eval metric that "at best" reads and whether best is its max.
  chooser(metricNames = []) {
    const box = h("details", { class: "col-chooser", id: "summary-columns" }, h("summary", { class: "btn", text: t("summary.columns") }));
    const listId = "summary-metric-names";
    const metric = h("input", { id: "summary-metric", class: "metric-search", list: listId, placeholder: t("summary.metric_hint") });
    const names = [...new Set([...SUGGEST, ...metricNames])];
    const datalist = h("datalist", { id: listId }, names.map((n) => h("option", { value: n })));
    const checks = STATS.map((s) => h("label", { class: "check" }, h("input", { type: "checkbox", value: s, checked: s === "last", dataset: { stat: s } }),
      ` ${t(`summary.stat_${s}`)}`));
    const add = h("button", { class: "btn small primary", type: "button", id: "summary-add", text: t("summary.add"), onclick: () => {
      const m = metric.value.trim();
      const stats = checks.map((c) => c.querySelector("input")).filter((i) => i.checked).map((i) => i.value);
      if (m && stats.length) this.set([...this.cols, ...stats.map((s) => `${s}:${m}`)]);
    } });
    const best = h("input", { id: "summary-best", class: "metric-search", list: listId, value: this.best,
      onchange: () => { this.best = best.value.trim() || DEFAULT_BEST; this.onChange(); } });
    const mode = h("select", { id: "summary-best-mode", onchange: () => { this.bestMode = mode.value; this.onChange(); } },
      ["max", "min"].map((v) => h("option", { value: v, text: t(`summary.best_${v}`), selected: this.bestMode === v })));
    const shown = h("div", { class: "summary-shown", id: "summary-shown" });
    for (const c of this.cols) {
      shown.append(h("span", { class: "pill tag", dataset: { col: c } }, this.label(c), " ",
        h("button", { class: "btn tiny", type: "button", title: t("summary.remove"), text: "×", onclick: () => this.set(this.cols.filter((x) => x !== c)) })));
    }
    box.append(h("div", { class: "col-list summary-panel" },
      h("label", { class: "field" }, t("summary.metric"), metric), datalist, h("div", { class: "summary-stats" }, checks), add, shown,
      h("label", { class: "field", title: t("summary.best_help") }, t("summary.best"), best), mode));
    return box;
  }

  // A note under the table when the summaries could not be read.
  status(node) {
    clear(node);
    if (this.error) node.append(h("div", { class: "state state-error small", text: `${t("state.error")}: ${this.error.message}` }));
  }
}
