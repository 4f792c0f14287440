// Runs: the list (with the empty state that says how to start one) and the comparison view that
// overlays the same metrics of two or more runs (/api/compare).
import { api } from "../api.js";
import { t } from "../i18n.js";
import { simpleLines } from "../charts.js";
import { globalHref, registerView, runHref } from "../router.js";
import { clear, fmt, fmtTime, h, withStates } from "../ui.js";

const COMPARE_DEFAULT = ["reward/mean", "kl/mean", "policy/entropy", "response/length_mean"];
const COMPARE_CHOICES = [...COMPARE_DEFAULT, "policy/clip_frac", "policy/loss", "value/loss", "grad/norm/actor",
  "response/truncated_frac", "eval/reward/mean"];

function emptyRuns() {
  return h("div", { class: "state state-empty", id: "runs-empty" },
    h("div", { class: "state-title", text: t("runs.none") }),
    h("p", { text: t("runs.none_help") }),
    h("pre", { class: "code", text: "rlcockpit demo\n# or\nrlcockpit train --config examples/ppo_tiny.yaml --store sqlite:///rlcockpit.db" }),
    h("p", { text: t("runs.none_sdk") }),
    h("pre", { class: "code", text: 'import rlcockpit\nrun = rlcockpit.init(project="demo", store="sqlite:///rlcockpit.db")\nrun.log(step, {"reward/mean": 0.42})' }),
    h("p", { class: "muted", text: t("runs.none_serve") }));
}

function runsTable(items) {
  const selected = new Set();
  const compareBtn = h("button", { class: "btn primary", id: "compare-btn", disabled: true, text: t("runs.compare") });
  compareBtn.addEventListener("click", () => { location.hash = globalHref("compare", [], { runs: [...selected].join(",") }); });
  const tbody = h("tbody");
  for (const r of items) {
    const box = h("input", { type: "checkbox", "aria-label": r.run_id, onchange: (e) => {
      if (e.target.checked) selected.add(r.run_id); else selected.delete(r.run_id);
      compareBtn.disabled = selected.size < 2;
    } });
    tbody.append(h("tr", { dataset: { run: r.run_id } }, h("td", {}, box),
      h("td", {}, h("a", { href: runHref(r.run_id, "dashboard"), text: r.name || r.run_id }), h("div", { class: "muted small", text: r.run_id })),
      h("td", { text: r.project }), h("td", {}, h("span", { class: `status status-${r.status}`, text: t(`status.${r.status}`) })),
      h("td", { text: fmtTime(r.started_at) }), h("td", { text: fmt(r.last_step ?? null) }), h("td", { text: fmtTime(r.heartbeat_at) })));
  }
  return h("div", {},
    h("table", { class: "list", id: "runs-list" }, h("thead", {}, h("tr", {}, ["", "runs.name", "runs.project", "runs.status", "runs.started", "runs.last_step", "runs.heartbeat"]
      .map((k) => h("th", { text: k ? t(k) : "" })))), tbody),
    h("div", { class: "toolbar" }, compareBtn, h("span", { class: "muted", text: t("runs.compare_help") })));
}

function mountRuns(root) {
  const body = h("div", { class: "runs-page" });
  root.append(h("h2", { text: t("runs.title") }), body);
  withStates(body, () => api.runs(), (res) => body.append(res.items.length ? runsTable(res.items) : emptyRuns()));
  return () => clear(root);
}

function mountCompare(root, ctx) {
  const runs = (ctx.query.get("runs") || "").split(",").filter(Boolean);
  const names = (ctx.query.get("names") || COMPARE_DEFAULT.join(",")).split(",").filter(Boolean);
  const disposers = [];
  root.append(h("h2", { text: t("compare.title") }));
  if (runs.length < 2) {
    root.append(h("div", { class: "state state-empty", text: t("compare.need_two") }),
      h("a", { class: "btn", href: globalHref("runs"), text: t("tab.runs") }));
    return () => clear(root);
  }
  const chooser = h("form", { class: "filters", id: "compare-metrics" }, COMPARE_CHOICES.map((n) =>
    h("label", { class: "check" }, h("input", { type: "checkbox", name: n, checked: names.includes(n) }), ` ${n}`)),
  h("button", { class: "btn primary", type: "submit", text: t("compare.apply") }));
  chooser.addEventListener("submit", (e) => {
    e.preventDefault();
    const chosen = COMPARE_CHOICES.filter((n) => chooser.elements[n].checked);
    ctx.navigate(globalHref("compare", [], { runs: runs.join(","), names: chosen.join(",") }));
  });
  const grid = h("div", { class: "compare-grid", id: "compare-charts" });
  root.append(h("div", { class: "muted", text: `${t("compare.runs")}: ${runs.join(", ")}` }), chooser, grid);
  withStates(grid, () => api.compare(runs, names), (res) => {
    for (const name of names) {
      const lines = {};
      for (const [run, body] of Object.entries(res.runs || {})) {
        const s = body.series && body.series[name];
        if (s && s.steps.length) lines[run] = s;
      }
      const el = h("div", { class: "chart", dataset: { metric: name } });
      grid.append(h("section", { class: "chart-box" }, el));
      if (Object.keys(lines).length) disposers.push(simpleLines(el, { title: name, lines, group: "rlcockpit-compare" }).dispose);
      else el.replaceWith(h("div", { class: "state state-empty small", text: `${name}: ${t("state.no_data")}` }));
    }
    echarts.connect("rlcockpit-compare");
  });
  return () => { disposers.forEach((d) => d()); clear(root); };
}

registerView("runs", { scope: "global", labelKey: "tab.runs", order: 10, mount: mountRuns });
registerView("compare", { scope: "global", labelKey: "tab.compare", tab: false, mount: mountCompare });
