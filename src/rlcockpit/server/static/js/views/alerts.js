// Alerts: incidents (grouped findings) by severity colour, the first-moving signal in the current
// language, evidence, linked failure-library entries and the diagnostic snapshots. Live-parameter
// changes noted before a finding (its evidence's recent_changes) are shown as context: "changes
// before this incident" on the card and "changes before this finding" under each finding — never as
// the cause, which is the behaviour the finding names.
import { api } from "../api.js";
import { lang, pick, t } from "../i18n.js";
import { globalHref, registerView, runHref } from "../router.js";
import { clear, fmt, h, severityBadge, withStates } from "../ui.js";
import { controlAvailable, fmtValue } from "./control_common.js";
import { withoutSeedRefs } from "./library.js";

// The live parameter to look at first for a library pattern (the ticket form preselects it; the
// tickets page prefers undoing the last live change before the incident when there is one).
const PATTERN_PARAMS = {
  lr_too_high: "actor_lr", kl_explosion: "actor_lr", kl_token_spike: "actor_lr", update_ratio_out_of_band: "actor_lr",
  grad_explosion: "grad_clip_actor", kl_monotonic_rise: "kl_coef", too_many_ppo_epochs: "ppo_epochs",
  clip_frac_out_of_band: "clip_eps", entropy_collapse: "temperature", entropy_blowup: "temperature",
  reward_scale_spike: "reward_scale", critic_divergence: "critic_lr", length_hacking: "max_new_tokens",
  truncation_rise: "max_new_tokens",
};

const CONTEXT_KEYS = new Set(["recent_changes"]); // shown as a context line, not as a table row
const LIBRARY_SHOWN = 5; // library entries shown per incident, most relevant first; the rest behind "more"
const SEV_WEIGHT = { info: 0.5, yellow: 1, orange: 2, red: 3, black: 4 };
const ZOOM_HALF = 20; // "open the dashboard at step N" zooms to N ± 20 steps
// The metric a finding's signal names (evidence.signal is a label such as "KL"), else its detector's.
const SIGNAL_METRICS = { KL: "kl/mean", entropy: "policy/entropy", reward: "reward/mean", "reward std": "reward/std",
  "explained variance": "value/explained_var", "reward vs length": "response/length_mean", "update ratio": "update/ratio" };
const DETECTOR_METRICS = { kl_tiers: "kl/mean", kl_trend: "kl/mean", entropy: "policy/entropy", entropy_trend: "policy/entropy",
  gradients: "grad/norm/actor", length_hacking: "response/length_mean", critic: "value/loss", reward_shape: "reward/std" };

function evidenceTable(evidence) {
  const entries = Object.entries(evidence || {}).filter(([k]) => !k.endsWith("_zh") && !k.endsWith("_en") && !CONTEXT_KEYS.has(k));
  if (!entries.length) return null;
  return h("table", { class: "kv evidence" }, entries.map(([k, v]) =>
    h("tr", {}, h("th", { text: k }), h("td", { text: typeof v === "object" && v !== null ? JSON.stringify(v) : fmt(v, 4) }))));
}

// Python's f"{v:.4g}" for floats, so the context line reads like the incident summary ("5e-05").
function fmtG(v) {
  if (typeof v !== "number" || Number.isInteger(v) || !Number.isFinite(v)) return fmtValue(v);
  const exp = Math.floor(Math.log10(Math.abs(v)));
  if (exp >= -4 && exp < 4) return String(Number(v.toPrecision(4)));
  return v.toExponential(3).replace(/\.?0+e/, "e").replace(/e([+-])(\d)$/, "e$10$2");
}

// One recent change: "actor_lr 5e-05 → 0.005 at step 99, by fault-injector".
function changeText(c) {
  const moves = Object.entries(c.changes || {}).map(([k, d]) => `${k} ${fmtG(d && d.before)} → ${fmtG(d && d.after)}`);
  return t("alerts.change_at", { change: moves.join(", "), step: c.step, by: c.by || "?" });
}

function changesLine(changes, labelKey, cls) {
  if (!Array.isArray(changes) || !changes.length) return null;
  return h("div", { class: `changes-context ${cls}`, title: t("alerts.changes_help") },
    h("span", { class: "muted", text: `${t(labelKey)}: ` }),
    changes.map((c, i) => [i ? "; " : "", h("span", { class: "change", dataset: { step: String(c.step) }, text: changeText(c) })]));
}

// The changes noted before the incident's first finding, once each, oldest first (what the summary names).
function changesBefore(inc) {
  const seen = new Map();
  for (const f of inc.findings || []) {
    for (const c of (f.evidence && f.evidence.recent_changes) || []) {
      if (c.step < inc.first_step) seen.set(JSON.stringify(c), c);
    }
  }
  return [...seen.values()].sort((a, b) => a.step - b.step);
}

// The metric behind a finding, when the run logged it: a metric named in the evidence, else the
// one its signal label or its detector stands for.
function findingMetric(f, names) {
  const ev = f.evidence || {};
  const named = Object.values(ev).filter((v) => typeof v === "string");
  return [...named, SIGNAL_METRICS[ev.signal], DETECTOR_METRICS[f.detector]].find((n) => n && names.has(n)) || null;
}

// A small line of the metric around the finding's step, with the step marked (an SVG, no chart).
function sparkline(runId, metric, step) {
  const box = h("span", { class: "finding-spark", dataset: { metric }, title: `${metric} · ${t("axis.step")} ${step}` });
  api.series(runId, [metric], { step_min: Math.max(0, step - ZOOM_HALF), step_max: step + ZOOM_HALF }).then((res) => {
    const s = res.series && res.series[metric];
    const pts = s ? s.steps.map((x, i) => [x, s.values[i]]).filter(([, y]) => Number.isFinite(y)) : [];
    if (pts.length < 2) { box.remove(); return; }
    const [w, ht] = [160, 30];
    const xs = pts.map((p) => p[0]);
    const ys = pts.map((p) => p[1]);
    const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
    const px = (x) => (x1 > x0 ? ((x - x0) / (x1 - x0)) * (w - 2) + 1 : w / 2);
    const py = (y) => (y1 > y0 ? ht - 2 - ((y - y0) / (y1 - y0)) * (ht - 4) : ht / 2);
    const ns = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("width", w); svg.setAttribute("height", ht); svg.setAttribute("viewBox", `0 0 ${w} ${ht}`);
    const mark = document.createElementNS(ns, "line");
    Object.entries({ x1: px(step), x2: px(step), y1: 0, y2: ht, stroke: "#dc2626", "stroke-width": 1, "stroke-dasharray": "2 2" })
      .forEach(([k, v]) => mark.setAttribute(k, v));
    const line = document.createElementNS(ns, "polyline");
    Object.entries({ points: pts.map(([x, y]) => `${px(x).toFixed(1)},${py(y).toFixed(1)}`).join(" "), fill: "none",
      stroke: "#2563eb", "stroke-width": 1.5 }).forEach(([k, v]) => line.setAttribute(k, v));
    svg.append(mark, line);
    box.dataset.points = String(pts.length);
    box.append(svg, h("span", { class: "muted small", text: ` ${metric}` }));
  }, () => box.remove());
  return box;
}

// The raw evidence, folded away behind a button (not a <details>: the incident's findings are one).
function evidenceToggle(table) {
  table.hidden = true;
  const btn = h("button", { class: "btn tiny evidence-toggle", type: "button", text: t("alerts.evidence"),
    onclick: () => { table.hidden = !table.hidden; btn.classList.toggle("active", !table.hidden); } });
  return h("div", { class: "finding-evidence" }, btn, table);
}

function dashboardLink(runId, step) {
  return h("a", { class: "btn small finding-dashboard", href: runHref(runId, "dashboard", [], { zoom: `${Math.max(0, step - ZOOM_HALF)}~${step + ZOOM_HALF}` }),
    title: t("alerts.open_dashboard_help"), text: t("alerts.open_dashboard", { step }) });
}

// A finding: what it says, a sparkline of its metric, a link to the dashboard zoomed on its step;
// the raw evidence behind a disclosure.
function findingItem(runId, f, names) {
  const msg = withoutSeedRefs(lang() === "zh" ? ((f.evidence && f.evidence.message_zh) || f.message) : f.message);
  const metric = findingMetric(f, names);
  const evidence = evidenceTable(f.evidence);
  return h("li", { class: `finding sev-border-${f.severity}`, dataset: { step: String(f.step) } },
    h("div", {}, severityBadge(f.severity), " ", h("b", { text: f.detector }), ` · ${t("axis.step")} ${f.step} · `,
      h("span", { class: "muted", text: t(`finding_status.${f.status}`) })),
    h("div", { class: "finding-msg", text: msg }),
    h("div", { class: "finding-tools" }, metric ? sparkline(runId, metric, f.step) : null, " ", dashboardLink(runId, f.step)),
    changesLine(f.evidence && f.evidence.recent_changes, "alerts.finding_changes", "finding-changes"),
    evidence ? evidenceToggle(evidence) : null);
}

// The incident's library entries by relevance: each finding that names one adds its severity's
// weight, divided by the entry's place in that finding's list (a detector names its best match first).
export function rankPatterns(inc) {
  const score = new Map((inc.patterns || []).map((p) => [p, 0]));
  for (const f of inc.findings || []) {
    (f.patterns || []).forEach((p, i) => score.set(p, (score.get(p) || 0) + (SEV_WEIGHT[f.severity] || 1) / (1 + i)));
  }
  return [...score.entries()].sort((a, b) => b[1] - a[1]).map(([p]) => p); // stable: ties keep the incident's order
}

function libraryLinks(inc) {
  const patterns = rankPatterns(inc);
  if (!patterns.length) return null;
  const box = h("div", { class: "lib-links" }, h("span", { class: "muted", text: `${t("alerts.library")}: ` }));
  const link = (id) => {
    const a = h("a", { class: "chip lib", href: globalHref("library", [id]), text: id, dataset: { pattern: id } });
    api.libraryEntry(id).then((e) => { a.textContent = withoutSeedRefs(pick(e, "title")) || id; }, () => { a.title = t("alerts.library_missing"); });
    return [a, " "];
  };
  patterns.slice(0, LIBRARY_SHOWN).forEach((id) => box.append(...link(id)));
  const rest = patterns.slice(LIBRARY_SHOWN);
  if (rest.length) {
    const more = h("button", { class: "btn small lib-more", type: "button", text: t("alerts.library_more", { n: rest.length }),
      onclick: () => { more.replaceWith(...rest.flatMap(link)); } });
    box.append(more);
  }
  return box;
}

function snapshotLinks(runId, snapshots) {
  if (!snapshots || !snapshots.length) return null;
  return h("div", { class: "snap-links" }, h("span", { class: "muted", text: `${t("alerts.snapshots")}: ` }),
    snapshots.map((s) => h("a", { class: "btn small snapshot-link", href: runHref(runId, "snapshot", [s.snapshot_id]),
      text: `${t(`snapshot.kind.${s.kind}`) === `snapshot.kind.${s.kind}` ? s.kind : t(`snapshot.kind.${s.kind}`)} @${s.step}` })));
}

// "Request a change": the tickets page of this run, its form prefilled from the incident.
function requestButton(runId, inc) {
  const param = (inc.patterns || []).map((p) => PATTERN_PARAMS[p]).find(Boolean);
  const reason = t("alerts.request_reason", { from: inc.first_step, to: inc.last_step, summary: pick(inc, "summary") });
  const query = { before: inc.first_step, reason, ...(param ? { param } : {}) };
  return h("a", { class: "btn small primary request-change", href: runHref(runId, "tickets", [], query),
    title: t("alerts.request_help"), text: t("alerts.request_change") });
}

function incidentCard(runId, inc, canControl, names) {
  return h("article", { class: `incident sev-border-${inc.severity}`, dataset: { incident: inc.incident, severity: inc.severity } },
    h("header", { class: "incident-head" }, severityBadge(inc.severity),
      h("b", { class: "incident-summary", text: ` ${withoutSeedRefs(pick(inc, "summary"))}` }),
      h("span", { class: "muted", text: ` · ${t("alerts.steps", { from: inc.first_step, to: inc.last_step })} · ${inc.resolved ? t("alerts.resolved") : t("alerts.open")}` })),
    h("div", { class: "muted" }, `${t("alerts.detectors")}: `,
      h("span", { class: "incident-detectors", text: (inc.detectors || []).join(" → ") || "—" })),
    changesLine(changesBefore(inc), "alerts.changes_before", "incident-changes"),
    libraryLinks(inc),
    snapshotLinks(runId, inc.snapshots),
    canControl ? h("div", { class: "request-links" }, requestButton(runId, inc)) : null,
    h("details", {}, h("summary", { text: t("alerts.findings", { n: (inc.findings || []).length }) }),
      h("ul", { class: "findings" }, (inc.findings || []).map((f) => findingItem(runId, f, names)))));
}

function mount(root, ctx) {
  const body = h("div", { class: "alerts-page", id: "alerts" });
  root.append(body);
  const load = () => Promise.all([api.incidents(ctx.runId), controlAvailable()]);
  withStates(body, load, ([res, canControl]) => {
    if (!res.items.length) {
      body.append(h("div", { class: "state state-empty", id: "alerts-empty" },
        h("div", { class: "state-title", text: t("alerts.none") }), h("div", { class: "muted", text: t("alerts.none_help") })));
      return;
    }
    const legend = h("div", { class: "sev-legend" }, ["black", "red", "orange", "yellow", "info"].map((s) => [severityBadge(s), " "]));
    const names = new Set((ctx.summary && ctx.summary.metric_names) || []);
    body.append(legend, ...res.items.map((inc) => incidentCard(ctx.runId, inc, canControl, names)));
  });
  const unsub = ctx.live ? ctx.live.subscribe((m) => {
    if (m.kind === "finding" && !body.querySelector(".new-findings")) {
      body.prepend(h("div", { class: "new-findings banner" }, t("alerts.new_findings"), " ",
        h("button", { class: "btn small", onclick: () => ctx.navigate(location.hash), text: t("alerts.refresh") })));
    }
  }, { replay: false }) : null;
  return () => { if (unsub) unsub(); clear(root); };
}

registerView("alerts", { scope: "run", labelKey: "tab.alerts", order: 30, mount });
