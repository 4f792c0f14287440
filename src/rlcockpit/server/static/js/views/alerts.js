// Alerts: incidents (grouped findings) by severity colour, the first-moving signal in the current
// language, evidence, linked failure-library entries and the diagnostic snapshots.
import { api } from "../api.js";
import { lang, pick, t } from "../i18n.js";
import { globalHref, registerView, runHref } from "../router.js";
import { clear, fmt, h, severityBadge, withStates } from "../ui.js";

function evidenceTable(evidence) {
  const entries = Object.entries(evidence || {}).filter(([k]) => !k.endsWith("_zh") && !k.endsWith("_en"));
  if (!entries.length) return null;
  return h("table", { class: "kv evidence" }, entries.map(([k, v]) =>
    h("tr", {}, h("th", { text: k }), h("td", { text: typeof v === "object" && v !== null ? JSON.stringify(v) : fmt(v, 4) }))));
}

function findingItem(f) {
  const msg = lang() === "zh" ? ((f.evidence && f.evidence.message_zh) || f.message) : f.message;
  return h("li", { class: `finding sev-border-${f.severity}` },
    h("div", {}, severityBadge(f.severity), " ", h("b", { text: f.detector }), ` · ${t("axis.step")} ${f.step} · `,
      h("span", { class: "muted", text: t(`finding_status.${f.status}`) })),
    h("div", { class: "finding-msg", text: msg }),
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

function incidentCard(runId, inc) {
  return h("article", { class: `incident sev-border-${inc.severity}`, dataset: { incident: inc.incident, severity: inc.severity } },
    h("header", { class: "incident-head" }, severityBadge(inc.severity),
      h("b", { class: "incident-summary", text: ` ${pick(inc, "summary")}` }),
      h("span", { class: "muted", text: ` · ${t("alerts.steps", { from: inc.first_step, to: inc.last_step })} · ${inc.resolved ? t("alerts.resolved") : t("alerts.open")}` })),
    h("div", { class: "muted", text: `${t("alerts.detectors")}: ${(inc.detectors || []).join(" → ") || "—"}` }),
    libraryLinks(inc.patterns),
    snapshotLinks(runId, inc.snapshots),
    h("details", {}, h("summary", { text: t("alerts.findings", { n: (inc.findings || []).length }) }),
      h("ul", { class: "findings" }, (inc.findings || []).map(findingItem))));
}

function mount(root, ctx) {
  const body = h("div", { class: "alerts-page", id: "alerts" });
  root.append(body);
  withStates(body, () => api.incidents(ctx.runId), (res) => {
    if (!res.items.length) {
      body.append(h("div", { class: "state state-empty", id: "alerts-empty" },
        h("div", { class: "state-title", text: t("alerts.none") }), h("div", { class: "muted", text: t("alerts.none_help") })));
      return;
    }
    const legend = h("div", { class: "sev-legend" }, ["black", "red", "orange", "yellow", "info"].map((s) => [severityBadge(s), " "]));
    body.append(legend, ...res.items.map((inc) => incidentCard(ctx.runId, inc)));
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
