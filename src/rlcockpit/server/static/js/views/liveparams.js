// Live parameters on the dashboard (current values with their history) and applied tickets as
// vertical annotations on every step chart (charts.annotate, source "control"). Live-parameter
// changes that came without a ticket (the fault injector, automatic actions, a Python
// trainer.live.request) are marked too, from the run's live_params_applied events, in their own
// colour (source "changes"); these need no control plane, so a read-only cockpit shows them as well.
// It follows the open run through the hash and refreshes every few seconds.
import { api, TOKEN_KEY } from "../api.js";
import { annotate } from "../charts.js";
import { t } from "../i18n.js";
import { parseHash } from "../router.js";
import { clear, fmt, h } from "../ui.js";
import { control, controlAvailable, fmtValue } from "./control_common.js";

const REFRESH_MS = 2000;
const CHANGE_COLOR = "#0d9488"; // teal: apart from tickets (purple) and commands (slate)
const CHANGE_EVENTS = 5000; // most recent live_params_applied events read (a ramp changes every step)
const state = { runId: null, liveVersion: null, marks: "", changeMarks: "", busy: false, refusedWith: undefined };

function marksOf(tickets) {
  return tickets.filter((x) => x.applied_step !== null && x.applied_step !== undefined && !x.rolled_back_by).map((x) => ({
    step: x.applied_step,
    label: x.kind === "param" ? `#${x.ticket_id} ${x.target}→${fmtValue(x.value)}` : `#${x.ticket_id} ${x.target}`,
    color: x.kind === "param" ? "#8b5cf6" : "#64748b",
  }));
}

async function syncAnnotations(runId) {
  const items = (await control.tickets(runId, "applied,evaluated")).items;
  const marks = marksOf(items);
  const key = JSON.stringify(marks);
  if (key !== state.marks || state.runId !== runId) annotate(runId, marks, "control");
  state.marks = key;
}

// "actor_lr → 0.005, kl_coef → 0.1": what a change set, in the order of the names.
export function changeLabel(after) {
  return Object.keys(after || {}).sort().map((k) => `${k} → ${fmtValue(after[k])}`).join(", ");
}

// Changes applied through a ticket already have the ticket's mark when the control plane is there.
function changeMarksOf(events, ticketsMarked) {
  return events.filter((e) => !(ticketsMarked && String(e.payload.requested_by || "").startsWith("ticket:")))
    .map((e) => ({ step: e.step, label: changeLabel(e.payload.after), color: CHANGE_COLOR }));
}

async function syncChangeMarks(runId, ticketsMarked) {
  const events = (await api.events(runId, { kinds: "live_params_applied", limit: CHANGE_EVENTS })).items;
  const marks = changeMarksOf(events, ticketsMarked);
  const key = JSON.stringify(marks);
  if (key !== state.changeMarks || state.runId !== runId) annotate(runId, marks, "changes");
  state.changeMarks = key;
}

function panelNode() {
  const rows = document.querySelector("#view .dash-row.row-1");
  if (!rows) return null;
  let node = document.getElementById("liveparams-panel");
  if (!node) {
    node = h("section", { class: "panel ctl-live", id: "liveparams-panel" });
    rows.parentNode.insertBefore(node, rows);
    state.liveVersion = null;
  }
  return node;
}

async function syncPanel(runId) {
  const node = panelNode();
  if (!node) return;
  const live = await control.live(runId);
  const version = live.current ? live.current.version : 0;
  if (version === state.liveVersion && node.firstChild) return;
  state.liveVersion = version;
  renderPanel(clear(node), live);
}

// A live parameter's description in the UI language: the dictionary's for the trainer's knobs
// (ctl.param_help.<name>), else the help text the run published.
export function paramHelp(name, spec) {
  const key = `ctl.param_help.${name}`;
  return t(key) !== key ? t(key) : (spec ? spec.help || "" : "");
}

function renderPanel(node, live) {
  node.append(h("h3", { class: "panel-title", text: t("ctl.live") }));
  if (!live.current) return node.append(h("div", { class: "muted", text: t("ctl.live_none") }));
  const { values, specs } = live.current;
  const changed = changedKeys(live.history);
  node.append(h("div", { class: "ctl-live-values" }, Object.keys(values).sort().map((k) => h("span", {
    class: `pill ctl-live-value${changed.has(k) ? " flag" : ""}`, dataset: { param: k },
    title: `${paramHelp(k, specs[k])} [${specs[k] ? fmt(specs[k].lo) : ""}, ${specs[k] ? fmt(specs[k].hi) : ""}]`,
    text: `${k} = ${fmtValue(values[k])}` }))));
  const history = [...live.history].reverse();
  node.append(h("details", { class: "ctl-live-history" }, h("summary", { text: t("ctl.live_history", { n: history.length }) }),
    h("ul", { class: "latest-list" }, history.map((v, i) => h("li", { dataset: { version: String(v.version) } },
      `${t("ctl.live_source", { step: v.step, source: v.source })} `, diffText(v, history[i + 1]))))));
}

function changedKeys(history) {
  const keys = new Set();
  for (let i = 1; i < history.length; i++) {
    for (const k of Object.keys(history[i].values)) if (history[i].values[k] !== history[i - 1].values[k]) keys.add(k);
  }
  return keys;
}

function diffText(v, prev) {
  if (!prev) return "";
  return Object.keys(v.values).filter((k) => v.values[k] !== prev.values[k])
    .map((k) => `${k}: ${fmtValue(prev.values[k])} → ${fmtValue(v.values[k])}`).join(", ");
}

async function tick() {
  const route = parseHash();
  if (route.scope !== "run" || !route.runId || state.busy || document.hidden) return;
  // refused (no or a bad token): ask again only once the token changed, so an idle page does not
  // fill the audit log with refusals
  if (state.refusedWith !== undefined && state.refusedWith === localStorage.getItem(TOKEN_KEY)) return;
  state.busy = true;
  try {
    if (state.runId !== route.runId) Object.assign(state, { runId: route.runId, liveVersion: null, marks: "", changeMarks: "" });
    await syncChangeMarks(route.runId, canControl);
    if (!canControl) return;
    await syncAnnotations(route.runId);
    if (route.name === "dashboard") await syncPanel(route.runId);
  } catch (err) {
    // no token yet, or the run is gone: the pages themselves show the error
    if (err.status === 401 || err.status === 403) state.refusedWith = localStorage.getItem(TOKEN_KEY);
  } finally {
    state.busy = false;
  }
}

const canControl = await controlAvailable();
window.addEventListener("hashchange", () => setTimeout(tick, 300));
setInterval(tick, REFRESH_MS);
setTimeout(tick, 300);
