// The run header: run picker, status, the open incidents worst first, current phase with progress,
// step rate and the connection state. It listens to the run's live stream for phase, finding, run
// and step messages. When the bar is too narrow the least important items go first (the rate, then
// the phase, the step, the extra alert chips): the worst open incident always stays in view.
import { api } from "./api.js";
import { runSwatch } from "./colors.js";
import { pick, t } from "./i18n.js";
import { navigate, runHref } from "./router.js";
import { stepRate } from "./stats.js";
import { clear, fmt, h } from "./ui.js";

const HEADER_CHIPS = 3; // open incidents shown as chips, worst first; the rest as "+N"
const SEV_RANK = { info: 0, yellow: 1, orange: 2, red: 3, black: 4 };
const INCIDENT_REFRESH_MS = 1000; // a burst of findings on the stream asks for the incidents once

// Open incidents that page someone (yellow and above), worst first, then the most recent.
export function openIncidents(items) {
  return (items || []).filter((inc) => !inc.resolved && (SEV_RANK[inc.severity] || 0) >= 1)
    .sort((a, b) => SEV_RANK[b.severity] - SEV_RANK[a.severity] || b.last_step - a.last_step);
}

function phaseName(phase) {
  const key = `phase.${String(phase).toLowerCase()}`;
  return t(key) === key ? String(phase).toUpperCase() : t(key);
}

export function runPicker(runs, currentId, currentView) {
  const select = h("select", { id: "run-picker", class: "run-picker", "aria-label": t("header.run"),
    onchange: (e) => navigate(runHref(e.target.value, currentView || "dashboard")) });
  if (!currentId) select.append(h("option", { value: "", text: t("header.pick_run") }));
  for (const r of runs) {
    const label = r.name && r.name !== r.run_id ? `${r.name} · ${r.run_id}` : r.run_id;
    select.append(h("option", { value: r.run_id, selected: r.run_id === currentId, text: label }));
  }
  return select;
}

export class RunHeader {
  constructor(node, { run, live, summary }) {
    this.node = node;
    this.run = run;
    this.live = live;
    this.summary = summary;
    this.steps = [];
    this.walls = [];
    this.alerts = [];
    this.phase = null;
    this.status = run.status;
  }

  async start() {
    this.render();
    const runId = this.run.run_id;
    const [phases, incidents, rate] = await Promise.allSettled([
      api.phases(runId, { limit: 1 }),
      api.incidents(runId),
      this.initialRate(),
    ]);
    if (phases.status === "fulfilled") this.phase = phases.value.current;
    if (incidents.status === "fulfilled") this.alerts = openIncidents(incidents.value.items);
    if (rate.status === "fulfilled" && rate.value) [this.steps, this.walls] = rate.value;
    if (this.stopped) return;
    this.render();
    this.unsub = this.live.subscribe((m) => this.onMessage(m));
    this.unstate = this.live.onState((s) => this.renderConnection(s));
    // the bar's room changes with the window and when the user slot beside it is drawn
    this.resizer = new ResizeObserver(() => this.fit());
    for (const el of [this.node, ...(this.node.parentElement ? this.node.parentElement.children : [])]) this.resizer.observe(el);
  }

  // A finding changes the incidents (a new one, an escalation, a resolution): ask for them again.
  refreshIncidents() {
    if (this.incidentTimer) return;
    this.incidentTimer = setTimeout(async () => {
      this.incidentTimer = null;
      try {
        this.alerts = openIncidents((await api.incidents(this.run.run_id)).items);
        if (!this.stopped) this.render();
      } catch {
        // keep the chips shown; the next finding asks again
      }
    }, INCIDENT_REFRESH_MS);
  }

  async initialRate() {
    const names = this.summary.metric_names || [];
    const name = names.includes("reward/mean") ? "reward/mean" : names[0];
    const last = this.summary.last_step;
    if (!name || last === null || last === undefined) return null;
    const res = await api.series(this.run.run_id, [name], { step_min: Math.max(0, last - 20) });
    const s = res.series[name];
    return s ? [s.steps, s.wall_times] : null;
  }

  onMessage({ kind, data }) {
    if (kind === "step") {
      this.steps.push(data.step);
      this.walls.push(data.wall_time);
      if (this.steps.length > 50) { this.steps.shift(); this.walls.shift(); }
    } else if (kind === "phase") {
      this.phase = data;
    } else if (kind === "finding") {
      this.refreshIncidents();
      return;
    } else if (kind === "run") {
      this.status = data.status;
    } else {
      return;
    }
    this.render();
  }

  render() {
    clear(this.node);
    const rate = stepRate(this.steps, this.walls);
    const lastStep = this.steps.length ? this.steps[this.steps.length - 1] : this.summary.last_step;
    this.node.append(
      runSwatch(h, this.run.run_id, { id: "run-swatch" }),
      h("span", { class: `status status-${this.status}`, id: "run-status", text: t(`status.${this.status}`) }),
      this.alertsNode(),
      ...this.degradedNode(),
      h("span", { class: "hdr-item", id: "run-step", dataset: { drop: "5" }, text: `${t("header.step")} ${fmt(lastStep ?? null)}` }),
      this.phaseNode(),
      h("span", { class: "hdr-item", id: "step-rate", title: t("header.step_rate_help"), dataset: { drop: "1" },
        text: `${t("header.step_rate")} ${rate === null ? "—" : `${rate >= 100 ? Math.round(rate).toLocaleString("en-US") : rate.toFixed(2)}/s`}` }),
      h("span", { class: "conn", id: "conn-state" }),
    );
    this.renderConnection(this.live.state);
    this.fit();
  }

  // Hide the least important items (data-drop 1 first: the rate, the word "Phase", the chips after
  // the first, the phase's status, the step, the phase) until the header fits its row; the status, the worst open
  // incident and the connection state are never hidden.
  fit() {
    const items = [...this.node.querySelectorAll("[data-drop]")].sort((a, b) => a.dataset.drop - b.dataset.drop);
    const count = () => this.countMore && this.countMore();
    for (const el of items) el.style.display = "";
    count();
    for (const el of items) {
      if (this.node.scrollWidth <= this.node.clientWidth + 1) break;
      el.style.display = "none";
      count();
    }
  }

  phaseNode() {
    const p = this.phase;
    if (!p) return h("span", { class: "hdr-item muted", id: "run-phase", dataset: { drop: "6" }, text: `${t("header.phase")} —` });
    const pct = p.progress === null || p.progress === undefined ? null : Math.round(p.progress * 100);
    return h("span", { class: "hdr-item phase", id: "run-phase", dataset: { drop: "6" },
      title: `${t("header.phase")} · ${t(`phase_status.${p.status}`)} · ${t("header.step")} ${p.step}` },
      h("span", { class: "phase-label", dataset: { drop: "2" }, text: `${t("header.phase")} ` }), h("b", { text: phaseName(p.phase) }),
      h("span", { class: "phase-status", dataset: { drop: "4" }, text: ` · ${t(`phase_status.${p.status}`)}` }),
      h("span", { class: "progress" }, h("span", { class: "progress-bar", style: { width: `${pct ?? (p.status === "finished" ? 100 : 0)}%` } })),
      pct === null ? null : h("span", { class: "muted", text: ` ${pct}%` }));
  }

  // One chip per open incident, the worst first ("critical · kl_tiers @4"; the summary on hover);
  // the chips after the first may be hidden by fit(), the "+N" then counts them too.
  alertsNode() {
    const box = h("span", { class: "hdr-alerts", id: "hdr-alerts" });
    if (!this.alerts.length) box.append(h("span", { class: "muted", text: t("header.no_alerts") }));
    const href = runHref(this.run.run_id, "alerts");
    const shown = this.alerts.slice(0, HEADER_CHIPS);
    shown.forEach((inc, i) => {
      const summary = pick(inc, "summary");
      box.append(h("a", { class: `chip sev-${inc.severity}`, href, dataset: { incident: inc.incident, severity: inc.severity, ...(i ? { drop: "3" } : {}) },
        title: `${summary ? `${summary} · ` : ""}${t("alerts.steps", { from: inc.first_step, to: inc.last_step })}`,
        text: `${t(`sev.${inc.severity}`)} · ${(inc.detectors || [])[0] || "?"} @${inc.first_step}` }));
    });
    if (this.alerts.length > 1) {
      // "+N" counts the incidents not shown as chips: those past HEADER_CHIPS, and any chip fit() hid
      const more = h("a", { class: "chip more", id: "hdr-alerts-more", href, title: t("header.more_alerts_help") });
      box.append(more);
      this.countMore = () => {
        const hidden = [...box.querySelectorAll(".chip[data-incident]")].filter((c) => c.style.display === "none").length;
        const n = this.alerts.length - shown.length + hidden;
        more.textContent = `+${n}`;
        more.style.display = n ? "" : "none";
      };
    } else {
      this.countMore = null;
    }
    return box;
  }

  degradedNode() {
    // steps logged but not in the store (spooled while it could not be written, or lost): docs/telemetry.md
    const missing = this.summary.missing_steps || 0;
    if (!missing) return [];
    return [h("span", { class: "status status-failed", id: "run-degraded", title: t("header.degraded_help"),
      text: `${t("header.degraded")} · ${missing}` })];
  }

  // The stream's state; a run that is over shows its status instead of a green "live".
  renderConnection(state) {
    const el = this.node.querySelector("#conn-state");
    if (!el) return;
    el.dataset.state = state;
    if (state === "open" && this.status && this.status !== "running") {
      el.className = "conn conn-ended";
      el.textContent = t(`status.${this.status}`);
      return;
    }
    el.className = `conn conn-${state}`;
    el.textContent = t(`conn.${state}`);
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.incidentTimer);
    if (this.resizer) this.resizer.disconnect();
    if (this.unsub) this.unsub();
    if (this.unstate) this.unstate();
  }
}
