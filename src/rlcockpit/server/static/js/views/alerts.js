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

function findingItem(f) {
  const msg = lang() === "zh" ? ((f.evidence && f.evidence.message_zh) || f.message) : f.message;
  return h("li", { class: `finding sev-border-${f.severity}` },
    h("div", {}, severityBadge(f.severity), " ", h("b", { text: f.detector }), ` · ${t("axis.step")} ${f.step} · `,
      h("span", { class: "muted", text: t(`finding_status.${f.status}`) })),
    h("div", { class: "finding-msg", text: msg }),
    changesLine(f.evidence && f.evidence.recent_changes, "alerts.finding_changes", "finding-changes"),
    evidenceTable(f.evidence));
}

function libraryLinks(patterns) {
  if (!patterns || !patterns.length) return null;
  const box = h("div", { class: "lib-links" }, h("span", { class: "muted", text: `${t("alerts.library")}: ` }));
  for (const id of patterns) {
    const a = h("a", { class: "chip lib", href: globalHref("library", [id]), text: id, dataset: { pattern: id } });
    box.append(a, " ");
    api.libraryEntry(id).then((e) => { a.textContent = pick(e, "title") || id; }, () => { a.title = t("alerts.library_missing"); });
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

function incidentCard(runId, inc, canControl) {
  return h("article", { class: `incident sev-border-${inc.severity}`, dataset: { incident: inc.incident, severity: inc.severity } },
    h("header", { class: "incident-head" }, severityBadge(inc.severity),
      h("b", { class: "incident-summary", text: ` ${pick(inc, "summary")}` }),
      h("span", { class: "muted", text: ` · ${t("alerts.steps", { from: inc.first_step, to: inc.last_step })} · ${inc.resolved ? t("alerts.resolved") : t("alerts.open")}` })),
    h("div", { class: "muted" }, `${t("alerts.detectors")}: `,
      h("span", { class: "incident-detectors", text: (inc.detectors || []).join(" → ") || "—" })),
    changesLine(changesBefore(inc), "alerts.changes_before", "incident-changes"),
    libraryLinks(inc.patterns),
    snapshotLinks(runId, inc.snapshots),
    canControl ? h("div", { class: "request-links" }, requestButton(runId, inc)) : null,
    h("details", {}, h("summary", { text: t("alerts.findings", { n: (inc.findings || []).length }) }),
      h("ul", { class: "findings" }, (inc.findings || []).map(findingItem))));
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
    body.append(legend, ...res.items.map((inc) => incidentCard(ctx.runId, inc, canControl)));
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
