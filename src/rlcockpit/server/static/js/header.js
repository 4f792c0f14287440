// The run header: run picker, status, current phase with progress, step rate, newest alerts and the
// connection state. It listens to the run's live stream for phase, finding, run and step messages.
import { api } from "./api.js";
import { runSwatch } from "./colors.js";
import { t } from "./i18n.js";
import { navigate, runHref } from "./router.js";
import { stepRate } from "./stats.js";
import { clear, fmt, h } from "./ui.js";

const ALERT_SEVERITIES = ["yellow", "orange", "red", "black"];
const HEADER_CHIPS = 3; // newest alerts shown as chips; the rest as "+N" (the header stays one row at 1440 px)
const SEV_RANK = { info: 0, yellow: 1, orange: 2, red: 3, black: 4 };

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
    const [phases, findings, rate] = await Promise.allSettled([
      api.phases(runId, { limit: 1 }),
      api.findings(runId, { severities: ALERT_SEVERITIES }),
      this.initialRate(),
    ]);
    if (phases.status === "fulfilled") this.phase = phases.value.current;
    if (findings.status === "fulfilled") this.alerts = findings.value.items.slice(-5).reverse();
    if (rate.status === "fulfilled" && rate.value) [this.steps, this.walls] = rate.value;
    this.render();
    this.unsub = this.live.subscribe((m) => this.onMessage(m));
    this.unstate = this.live.onState((s) => this.renderConnection(s));
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
    } else if (kind === "finding" && SEV_RANK[data.severity] >= 1) {
      this.alerts = [data, ...this.alerts].slice(0, 5);
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
      h("span", { class: "hdr-item", id: "run-step", text: `${t("header.step")} ${fmt(lastStep ?? null)}` }),
      ...this.degradedNode(),
      this.phaseNode(),
      h("span", { class: "hdr-item", id: "step-rate", title: t("header.step_rate_help"),
        text: `${t("header.step_rate")} ${rate === null ? "—" : `${rate.toFixed(2)}/s`}` }),
      this.alertsNode(),
      h("span", { class: "conn", id: "conn-state" }),
    );
    this.renderConnection(this.live.state);
  }

  phaseNode() {
    const p = this.phase;
    if (!p) return h("span", { class: "hdr-item muted", id: "run-phase", text: `${t("header.phase")} —` });
    const pct = p.progress === null || p.progress === undefined ? null : Math.round(p.progress * 100);
    return h("span", { class: "hdr-item phase", id: "run-phase", title: `${t("header.phase")} · ${t("header.step")} ${p.step}` },
      `${t("header.phase")} `, h("b", { text: phaseName(p.phase) }),
      ` · ${t(`phase_status.${p.status}`)}`,
      h("span", { class: "progress" }, h("span", { class: "progress-bar", style: { width: `${pct ?? (p.status === "finished" ? 100 : 0)}%` } })),
      pct === null ? null : h("span", { class: "muted", text: ` ${pct}%` }));
  }

  alertsNode() {
    const box = h("span", { class: "hdr-alerts", id: "hdr-alerts" });
    if (!this.alerts.length) box.append(h("span", { class: "muted", text: t("header.no_alerts") }));
    const shown = this.alerts.slice(0, HEADER_CHIPS);
    for (const a of shown) {
      box.append(h("a", { class: `chip sev-${a.severity}`, href: runHref(this.run.run_id, "alerts"),
        title: `${a.message} (${t("axis.step")} ${a.step})`, text: `${t(`sev.${a.severity}`)} · ${a.detector} @${a.step}` }));
    }
    if (this.alerts.length > shown.length) {
      box.append(h("a", { class: "chip more", href: runHref(this.run.run_id, "alerts"), title: t("header.more_alerts_help"),
        text: `+${this.alerts.length - shown.length}` }));
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
    if (this.unsub) this.unsub();
    if (this.unstate) this.unstate();
  }
}
