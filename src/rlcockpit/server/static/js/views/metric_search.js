// The metric search across runs (issue 29, docs/ui.md "Search"), on the runs page: which runs
// logged a metric matching the query (js/search.js: words, globs, /regex/; the catalog name or
// the key the trainer logged), each run's matches listed with a link to its dashboard searched
// for the same query. The names come from GET /api/metric_names once, when a query is typed.
import { get } from "../api.js";
import { runLabel, runSwatch } from "../colors.js";
import { t } from "../i18n.js";
import { runHref } from "../router.js";
import { runsWithMatches } from "../search.js";
import { clear, h } from "../ui.js";

const SHOWN = 12; // matches listed per run (the rest counted)

function runRow(match, query) {
  const { run, names } = match;
  const list = names.slice(0, SHOWN).map(({ name, key }) => h("code", { class: "search-hit", dataset: { metric: name },
    text: key ? `${name} ← ${key}` : name, title: key ? t("search.logged_as", { key }) : name }));
  const more = names.length > SHOWN ? h("span", { class: "muted small", text: ` ${t("search.more", { n: names.length - SHOWN })}` }) : null;
  return h("div", { class: "search-run", dataset: { run: run.run_id } },
    runSwatch(h, run.run_id), " ",
    h("a", { href: runHref(run.run_id, "dashboard", [], { q: query }), text: runLabel(run.run_id) }),
    h("span", { class: "muted small", text: ` · ${names.length} ` }), list, more);
}

export function crossRunSearch() {
  const input = h("input", { type: "search", id: "runs-metric-search", class: "metric-search",
    placeholder: t("search.runs_hint"), "aria-label": t("search.runs_label"), title: t("search.help") });
  const out = h("div", { id: "runs-metric-results", class: "search-results" });
  let items = null;
  let timer = null;
  let seq = 0;
  const render = async () => {
    const q = input.value.trim();
    const mine = ++seq;
    clear(out);
    if (!q) return;
    try {
      items = items || (await get("/metric_names")).items;
    } catch (err) {
      out.append(h("div", { class: "state state-error small", text: `${t("state.error")}: ${err.message}` }));
      return;
    }
    if (mine !== seq) return;
    const { runs, error } = runsWithMatches(items, q);
    if (error) return out.append(h("div", { class: "state state-error small", id: "runs-metric-count", text: t("search.bad_regex", { error }) }));
    out.append(h("div", { class: "muted small", id: "runs-metric-count", text: t("search.runs_count", { n: runs.length, all: items.length }) }),
      ...runs.map((m) => runRow(m, q)));
  };
  input.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(render, 120);
  });
  return h("section", { class: "runs-metric-search", id: "runs-metric-search-box" },
    h("h3", { class: "section-title", text: t("search.runs_title") }), input, out);
}
