// The app shell: header, tabs, and the view of the current route. Views are registered modules
// (router.registerView); the shell mounts one at a time and gives it a context:
//   {runId, args, query, live, summary, navigate, api, t}
import { api, setToken } from "./api.js";
import { charts } from "./charts.js";
import * as colors from "./colors.js";
import { registerRuns } from "./colors.js";
import { EXTENSIONS } from "./extensions.js";
import { RunHeader, runPicker } from "./header.js";
import * as i18n from "./i18n.js";
import { installShortcuts } from "./keys.js";
import { LiveRun } from "./live.js";
import * as router from "./router.js";
import * as theme from "./theme.js";
import { consumeSigninLink, mountUser } from "./signin.js";
import { clear, errorState, h, loading } from "./ui.js";
import "./views/dashboard.js";
import "./views/samples.js";
import "./views/alerts.js";
import "./views/cost.js";
import "./views/snapshot.js";
import "./views/library.js";
import "./views/runs.js";

const { t } = i18n;
const state = { runId: null, live: null, summary: null, header: null, cleanup: null, runs: [], seq: 0 };

// The public extension API (also importable as ES modules).
window.rlcockpit = { registerView: router.registerView, navigate: router.navigate, charts, i18n, api, setToken, state, theme, colors };

function shell() {
  const root = document.getElementById("app");
  clear(root);
  root.append(
    h("header", { class: "topbar" },
      h("a", { class: "brand", href: "#/", text: "rlcockpit" }),
      h("span", { id: "picker-slot" }),
      h("span", { id: "run-header", class: "run-header" }),
      h("span", { class: "spacer" }),
      h("span", { id: "user-slot" }),
      h("button", { class: "btn theme-toggle", id: "theme-toggle", title: t("header.theme_help"), onclick: () => theme.toggleTheme(),
        text: theme.theme() === "dark" ? `☀ ${t("header.theme_light")}` : `☾ ${t("header.theme_dark")}` }),
      h("button", { class: "btn lang-toggle", id: "lang-toggle", title: t("header.lang_help"),
        onclick: () => i18n.setLang(i18n.lang() === "zh" ? "en" : "zh"), text: t("header.lang_switch") })),
    h("nav", { class: "tabs", id: "tabs" }),
    h("main", { id: "view", class: "view" }));
}

function renderTabs(route) {
  const nav = clear(document.getElementById("tabs"));
  const link = (v, hrefValue) => h("a", { class: `tab${v.name === route.name ? " active" : ""}`, href: hrefValue,
    dataset: { view: v.name }, text: t(v.labelKey) });
  if (state.runId) for (const v of router.tabs("run")) nav.append(link(v, router.runHref(state.runId, v.name)));
  nav.append(h("span", { class: "spacer" }));
  for (const v of router.tabs("global")) nav.append(link(v, router.globalHref(v.name)));
}

async function refreshRuns() {
  try {
    state.runs = (await api.runs()).items;
    registerRuns(state.runs);
  } catch {
    state.runs = state.runs || [];
  }
  return state.runs;
}

function renderPicker(route) {
  const slot = clear(document.getElementById("picker-slot"));
  const known = route.scope === "run" && router.view(route.name) && router.view(route.name).tab;
  if (state.runs.length) slot.append(runPicker(state.runs, state.runId, known ? route.name : "dashboard"));
}

async function openRun(runId) {
  if (state.runId === runId && state.summary) return;
  closeRun();
  state.runId = runId;
  const summary = await api.run(runId);
  if (state.runId !== runId) return;
  state.summary = summary;
  state.live = new LiveRun(runId, summary.last_step ?? -1);
}

function closeRun() {
  if (state.header) state.header.stop();
  if (state.live) state.live.close();
  Object.assign(state, { runId: null, live: null, summary: null, header: null });
}

function startHeader() {
  const node = clear(document.getElementById("run-header"));
  if (state.header) state.header.stop();
  state.header = null;
  if (!state.summary) return;
  state.header = new RunHeader(node, { run: state.summary.run, live: state.live, summary: state.summary });
  state.header.start();
}

async function home() {
  const runs = await refreshRuns();
  const latest = [...runs].sort((a, b) => (b.started_at || 0) - (a.started_at || 0))[0];
  router.navigate(latest ? router.runHref(latest.run_id, "dashboard") : router.globalHref("runs"));
}

function unmountView() {
  if (typeof state.cleanup === "function") state.cleanup();
  state.cleanup = null;
}

async function show() {
  const seq = ++state.seq;
  const route = router.parseHash();
  if (route.scope === "global" && !route.name) return home();
  const viewNode = document.getElementById("view");
  unmountView();
  loading(viewNode);
  const runs = refreshRuns(); // in parallel with the run's summary (never rejects)
  try {
    // global pages (runs, library, compare) keep the open run: its tabs and header stay in reach
    if (route.scope === "run") await openRun(route.runId);
  } catch (err) {
    if (seq !== state.seq) return;
    closeRun();
    renderFrame(route);
    return errorState(viewNode, err, () => show());
  }
  if (seq !== state.seq) return;
  await runs;
  if (seq !== state.seq) return;
  renderFrame(route);
  mount(route, viewNode);
}

function renderFrame(route) {
  renderPicker(route);
  renderTabs(route);
  startHeader();
}

function mount(route, viewNode) {
  const v = router.view(route.name);
  clear(viewNode);
  if (!v || v.scope !== route.scope) {
    return errorState(viewNode, { code: "not_found", message: t("state.unknown_view", { name: route.name }) });
  }
  const ctx = { runId: state.runId, args: route.args, query: route.query, live: state.live, summary: state.summary,
    navigate: router.navigate, api, t, route };
  try {
    state.cleanup = v.mount(viewNode, ctx) || null;
  } catch (err) {
    errorState(viewNode, err, () => show());
  }
}

async function main() {
  await consumeSigninLink();  // #/signin?code=rlo_… (a one-time sign-in link: `rlcockpit demo`, `users signin`)
  for (const path of EXTENSIONS) await import(path);
  shell();
  mountUser();
  const redraw = () => {
    shell();
    mountUser();
    show();
  };
  i18n.onLangChange(redraw);
  theme.onThemeChange(redraw); // charts take their colours from the theme when drawn
  router.onViewsChange(() => state.runId !== undefined && document.getElementById("tabs") && renderTabs(router.parseHash()));
  window.addEventListener("hashchange", show);
  installShortcuts(() => state.runId);
  await show();
}

main();
