// Live parameters on the dashboard (current values with their history) and applied tickets as
// vertical annotations on every step chart (charts.annotate, source "control"). It follows the open
// run through the hash and refreshes every few seconds.
import { TOKEN_KEY } from "../api.js";
import { annotate } from "../charts.js";
import { t } from "../i18n.js";
import { parseHash } from "../router.js";
import { clear, fmt, h } from "../ui.js";
import { control, controlAvailable, fmtValue } from "./control_common.js";

const REFRESH_MS = 2000;
const state = { runId: null, liveVersion: null, marks: "", busy: false, refusedWith: undefined };

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

function renderPanel(node, live) {
  node.append(h("h3", { class: "panel-title", text: t("ctl.live") }));
  if (!live.current) return node.append(h("div", { class: "muted", text: t("ctl.live_none") }));
  const { values, specs } = live.current;
  const changed = changedKeys(live.history);
  node.append(h("div", { class: "ctl-live-values" }, Object.keys(values).sort().map((k) => h("span", {
    class: `pill ctl-live-value${changed.has(k) ? " flag" : ""}`, dataset: { param: k },
    title: `${specs[k] ? specs[k].help : ""} [${specs[k] ? fmt(specs[k].lo) : ""}, ${specs[k] ? fmt(specs[k].hi) : ""}]`,
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
    if (state.runId !== route.runId) Object.assign(state, { runId: route.runId, liveVersion: null, marks: "" });
    await syncAnnotations(route.runId);
    if (route.name === "dashboard") await syncPanel(route.runId);
  } catch (err) {
    // no token yet, or the run is gone: the pages themselves show the error
    if (err.status === 401 || err.status === 403) state.refusedWith = localStorage.getItem(TOKEN_KEY);
  } finally {
    state.busy = false;
  }
}

if (await controlAvailable()) {
  window.addEventListener("hashchange", () => setTimeout(tick, 300));
  setInterval(tick, REFRESH_MS);
  setTimeout(tick, 300);
}
