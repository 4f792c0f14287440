// Many runs as one view (issue 29): the dashboard's run selector overlays any set of runs on every
// chart of its rows — the open run and the selected ones, each in its own colour (colors.js, the
// same on every page), legends by run name (name · short id when two runs share a name) — or
// groups them (by a config key, tag, the runs table's group or a name pattern; views/groups.js)
// into one line per group, the mean over its runs with a band (mean ± std or min–max).
// In the URL: runs=a,b&group=config:optim.lr&band=std|minmax.
import { api } from "../api.js";
import { runColor, runLabel, runSwatch } from "../colors.js";
import { t } from "../i18n.js";
import { ema } from "../stats.js";
import { clear, h } from "../ui.js";
import { aggregate, BANDS, groupByText, makeGroups, parseGroupBy } from "./groups.js";
import { runsWithMeta } from "./run_meta.js";

// lines a chart shows for its own run but not per run in an overlay (a target, a faint companion)
const OVERLAY_SKIP = new Set(["kl/target", "response/length_max"]);
const GROUP_BY = ["", "config", "tag", "group", "name"];

export function overlayFromQuery(query) {
  const band = query.get("band");
  return { runs: (query.get("runs") || "").split(",").filter(Boolean), group: parseGroupBy(query.get("group")),
    band: BANDS.includes(band) ? band : "std" };
}

export function overlayToQuery(state, q) {
  if (!state) return q;
  if (state.runs.length) q.set("runs", state.runs.join(","));
  if (state.group.by) q.set("group", groupByText(state.group));
  if (state.group.by && state.band !== "std") q.set("band", state.band);
  return q;
}

// The metrics a chart overlays and their labels: its spec's lines on every metric the runs have.
function chartMetrics(spec, names, opts, tr) {
  const fake = new Map(names.filter((n) => spec_wants(spec, n)).map((n) => [n, { steps: [0], values: [0], walls: [null] }]));
  const out = new Map();
  for (const l of spec.lines(fake, opts, tr)) {
    if (!l.name || l.derived || OVERLAY_SKIP.has(l.name) || out.has(l.name)) continue;
    out.set(l.name, l.label);
  }
  return out;
}

function spec_wants(spec, name) {
  return spec.names.some((n) => (n.endsWith("*") ? name.startsWith(n.slice(0, -1)) : name === n));
}

export class RunOverlay {
  // opts: {runId, state: overlayFromQuery(...), onChange(state)}
  constructor(opts) {
    this.runId = opts.runId;
    this.state = opts.state;
    this.onChange = opts.onChange;
    this.series = new Map(); // run id -> {metric name: {steps, values, wall_times, downsampled}}
    this.fetched = new Map(); // run id -> the metric names asked for (a run may lack some of them)
    this.mainSeries = {}; // the open run's first answer (its curves' `downsampled`)
    this.runs = null; // runs with their config, tags and group (run_meta.js), loaded when needed
    this.drawn = new Map(); // chart id -> lines drawn in the overlay (an empty chart says why only when 0)
  }

  active() {
    return this.others().length > 0 || !!this.state.group.by;
  }

  others() {
    return this.state.runs.filter((r) => r !== this.runId);
  }

  // ------------------------------------------------------------------ the selector
  node() {
    this.count = h("span", { class: "overlay-count" });
    this.list = h("div", { class: "overlay-list", id: "overlay-list" }, h("div", { class: "muted small", text: t("state.loading") }));
    this.filter = h("input", { type: "search", class: "metric-search", id: "overlay-filter", placeholder: t("overlay.filter_hint"),
      oninput: () => this.renderList() });
    const all = h("button", { class: "btn small", type: "button", id: "overlay-all", text: t("overlay.all_shown"), onclick: () => this.pickShown(true) });
    const none = h("button", { class: "btn small", type: "button", id: "overlay-none", text: t("overlay.none"), onclick: () => this.pickShown(false) });
    this.picker = h("details", { class: "col-chooser overlay-picker", id: "overlay-picker" },
      h("summary", { class: "btn", title: t("overlay.help") }, t("overlay.runs"), " ", this.count),
      h("div", { class: "col-list overlay-panel" }, h("div", { class: "overlay-tools" }, this.filter, all, none), this.list));
    this.picker.addEventListener("toggle", () => this.picker.open && this.ensureRuns().then(() => this.renderList()));
    // another kind of grouping starts from an empty key (a config key is not a name pattern)
    this.groupSel = h("select", { id: "group-by", onchange: () => { this.groupKey.value = ""; this.setGroup(); } },
      GROUP_BY.map((g) => h("option", { value: g, text: t(`group.by_${g || "none"}`), selected: this.state.group.by === g })));
    this.groupKey = h("input", { id: "group-key", class: "num wide", list: "group-keys", value: this.state.group.key,
      placeholder: t("group.key_hint"), onchange: () => this.setGroup() });
    this.keyList = h("datalist", { id: "group-keys" });
    this.bandSel = h("select", { id: "group-band", onchange: () => { this.state.band = this.bandSel.value; this.changed(); } },
      BANDS.map((b) => h("option", { value: b, text: t(`group.band_${b}`), selected: this.state.band === b })));
    this.bandLabel = h("label", { class: "tb-label", title: t("group.band_help") }, t("group.band"), " ", this.bandSel);
    this.legend = h("div", { class: "overlay-legend", id: "overlay-legend" });
    this.bar = h("div", { class: "overlay-bar", id: "overlay-bar" }, this.picker,
      h("label", { class: "tb-label", title: t("group.help") }, t("group.by"), " ", this.groupSel), this.groupKey, this.keyList,
      this.bandLabel, this.legend);
    this.syncControls();
    return this.bar;
  }

  syncControls() {
    const by = this.groupSel.value;
    this.groupKey.hidden = by !== "config" && by !== "name";
    this.groupKey.placeholder = by === "name" ? t("group.pattern_hint") : t("group.key_hint");
    this.bandLabel.hidden = !this.state.group.by;
    this.count.textContent = `(${this.others().length + 1})`;
  }

  // none, a config key or a name pattern (both need their text; a pattern defaults to -seed\d+),
  // a tag or the runs table's group
  setGroup() {
    const by = this.groupSel.value;
    if (by === "name" && !this.groupKey.value.trim()) this.groupKey.value = "-seed\\d+";
    const key = this.groupKey.value.trim();
    const needsKey = by === "config" || by === "name";
    this.state.group = !by || (needsKey && !key) ? { by: "", key: "" } : { by, key: needsKey ? key : "" };
    this.changed();
  }

  async ensureRuns() {
    if (!this.runs) {
      this.runs = await runsWithMeta();
      const keys = [...new Set(this.runs.flatMap((r) => Object.keys(r.flat)))].sort();
      clear(this.keyList).append(...keys.map((k) => h("option", { value: k })));
    }
    return this.runs;
  }

  shownRuns() {
    const words = this.filter.value.toLowerCase().split(/\s+/).filter(Boolean);
    return (this.runs || []).filter((r) => {
      const hay = [r.name, r.run_id, r.group, ...r.tags, ...Object.entries(r.flat).map(([k, v]) => `${k}=${v}`)].join(" ").toLowerCase();
      return words.every((w) => hay.includes(w));
    });
  }

  renderList() {
    clear(this.list);
    for (const r of this.shownRuns()) {
      const main = r.run_id === this.runId;
      const box = h("input", { type: "checkbox", value: r.run_id, checked: main || this.state.runs.includes(r.run_id), disabled: main,
        onchange: (e) => this.toggle(r.run_id, e.target.checked) });
      this.list.append(h("label", { class: "check overlay-run", dataset: { run: r.run_id } }, box, " ", runSwatch(h, r.run_id), runLabel(r.run_id),
        h("span", { class: "muted small", text: ` ${t(`status.${r.status}`)}` })));
    }
  }

  toggle(runId, on) {
    const set = new Set(this.state.runs);
    if (on) set.add(runId); else set.delete(runId);
    this.state.runs = this.inStartOrder(set);
    this.changed();
  }

  // the selected runs in start order (the order of their colours), the open run left out
  inStartOrder(set) {
    const order = [...(this.runs || [])].sort((a, b) => ((a.started_at ?? Infinity) - (b.started_at ?? Infinity)) || (a.run_id < b.run_id ? -1 : 1));
    return order.map((r) => r.run_id).filter((id) => set.has(id) && id !== this.runId);
  }

  pickShown(on) {
    const shown = new Set(this.shownRuns().map((r) => r.run_id));
    const set = new Set(this.state.runs);
    for (const id of shown) if (on) set.add(id); else set.delete(id);
    this.state.runs = this.inStartOrder(set);
    this.renderList();
    this.changed();
  }

  changed() {
    this.syncControls();
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.onChange(this.state), 120);
  }

  // ------------------------------------------------------------------ data
  // The curves of `names` for the selected runs (only those not asked for yet: the dashboard's rows
  // first, the All-metrics sections as they open), and the runs' meta for grouping.
  async load(names) {
    const want = [...new Set(names)];
    const missing = this.others().filter((r) => want.some((n) => !(this.fetched.get(r) || new Set()).has(n)));
    const meta = this.state.group.by || this.others().length ? this.ensureRuns() : null;
    if (missing.length) {
      const ask = want.filter((n) => missing.some((r) => !(this.fetched.get(r) || new Set()).has(n)));
      const res = await api.compare(missing, ask, { max_points: 1000 });
      for (const r of missing) {
        this.series.set(r, { ...(this.series.get(r) || {}), ...((res.runs && res.runs[r] && res.runs[r].series) || {}) });
        this.fetched.set(r, new Set([...(this.fetched.get(r) || []), ...ask]));
      }
    }
    await meta;
    this.groups = this.state.group.by ? makeGroups(this.members(), this.state.group) : null;
    this.renderLegend();
  }

  // The runs on the charts: the open one first, then the selected in start order.
  members() {
    const byId = new Map((this.runs || []).map((r) => [r.run_id, r]));
    const ids = [this.runId, ...this.others()];
    return ids.map((id) => byId.get(id) || { run_id: id, name: id, tags: [], group: "", flat: {} });
  }

  renderLegend() {
    clear(this.legend);
    if (!this.active()) return;
    if (this.groups) {
      for (const g of this.groups) {
        this.legend.append(h("span", { class: "overlay-item", dataset: { group: g.key, color: g.color, n: String(g.runs.length) } },
          h("span", { class: "run-swatch", style: { background: g.color } }), `${g.key} (${t("group.n_runs", { n: g.runs.length })})`));
      }
      return;
    }
    for (const id of [this.runId, ...this.others()]) {
      this.legend.append(h("span", { class: "overlay-item", dataset: { run: id, color: runColor(id) } }, runSwatch(h, id), runLabel(id)));
    }
  }

  // One metric of one run: the open run's live curve (the chart's own data), or the fetched one.
  curve(runId, name, data) {
    if (runId === this.runId) {
      const d = data.get(name);
      return d ? { ...d, downsampled: !!(this.mainSeries[name] && this.mainSeries[name].downsampled) } : null;
    }
    const s = (this.series.get(runId) || {})[name];
    return s ? { steps: s.steps, values: s.values, walls: s.wall_times || s.steps.map(() => null), downsampled: !!s.downsampled } : null;
  }

  // ------------------------------------------------------------------ the charts
  // The dashboard chart's spec with its lines per run (or per group) in the runs' colours.
  spec(base) {
    return { ...base, ownSmoothing: false, relPerLine: true, overlay: true, lines: (data, opts) => this.lines(base, data, opts) };
  }

  metricNames(data) {
    const names = new Set(data.keys());
    for (const s of this.series.values()) Object.keys(s).forEach((n) => names.add(n));
    return [...names];
  }

  lines(base, data, opts) {
    const metrics = chartMetrics(base, this.metricNames(data), opts, t);
    const many = metrics.size > 1;
    const out = [];
    const bands = [];
    let k = 0;
    for (const [name, metricLabel] of metrics) {
      const dashed = k++ > 0;
      const label = (who) => (many ? `${who} · ${metricLabel}` : who);
      if (this.groups) {
        for (const g of this.groups) {
          const agg = aggregate(g.runs.map((r) => this.curve(r, name, data)), this.state.band);
          if (!agg.steps.length) continue;
          const text = label(g.key);
          const s = opts.smoothing ?? 0;
          const smooth = (v) => (s > 0 ? ema(v, s) : v);
          out.push({ name, label: text, steps: agg.steps, values: agg.mean, walls: agg.walls, color: g.color, dashed, width: 2,
            notes: agg.n.map((n) => `n=${n}`), group: g.key });
          bands.push({ name, label: text, steps: agg.steps, values: agg.mean, walls: agg.walls, color: g.color, derived: true,
            band: { lower: smooth(agg.lower), upper: smooth(agg.upper) } });
        }
        continue;
      }
      for (const r of [this.runId, ...this.others()]) {
        const d = this.curve(r, name, data);
        if (!d || !d.steps.length) continue;
        out.push({ name, label: label(runLabel(r)), steps: d.steps, values: d.values, walls: d.walls, color: runColor(r), dashed, run: r });
      }
    }
    this.drawn.set(base.id, out.length);
    return [...out, ...bands];
  }

  // A run's curves are fetched again (a run still training): everything asked for is asked again.
  forget(runId) {
    this.series.delete(runId);
    this.fetched.delete(runId);
  }

  dispose() {
    clearTimeout(this.timer);
  }
}
