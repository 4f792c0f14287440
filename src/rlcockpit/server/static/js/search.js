// Metric search by any name (issue 29, docs/ui.md "Search"): a query matches a metric by its
// catalog name or by the key the trainer logged it as (an imported run's `logged_keys`, sent by
// GET /api/runs/{run} and GET /api/metric_names), case-insensitive:
//   words      each word a substring (or a glob when it has a `*`) of the name or of the logged key
//   /regex/    a regular expression, e.g. /^kl\/.*/ or /entropy$/ (flags after the last slash)
// metricMatcher(query) -> test(name, loggedKey) plus .error (an invalid regex: nothing matches).

import { extend } from "./i18n.js";

extend({
  en: {
    "search.help": "Matches the catalog name or the key the trainer logged (imported runs); words, kl/* globs, or /regex/ e.g. /^kl\\//",
    "search.logged_as": "logged as {key}", "search.bad_regex": "not a regular expression: {error}",
    "search.runs_title": "Find a metric in every run", "search.runs_label": "Search the metrics of every run",
    "search.runs_hint": "a metric in any run, e.g. actor/entropy or /^kl\\//",
    "search.runs_count": "{n} of {all} runs logged a matching metric", "search.more": "and {n} more",
  },
  zh: {
    "search.help": "匹配目录名或训练器记录的原始键（导入的运行）；可用词、kl/* 通配符或 /正则/，如 /^kl\\//",
    "search.logged_as": "原始键 {key}", "search.bad_regex": "不是有效的正则表达式：{error}",
    "search.runs_title": "在所有运行中查找指标", "search.runs_label": "搜索所有运行的指标",
    "search.runs_hint": "任一运行中的指标，如 actor/entropy 或 /^kl\\//",
    "search.runs_count": "{n} / {all} 个运行记录了匹配的指标", "search.more": "另有 {n} 个",
  },
});

const GLOB_SPECIAL = /[.+?^${}()|[\]\\]/g;

export function parseRegex(query) {
  const m = /^\/(.+)\/([a-z]*)$/s.exec(String(query || "").trim());
  if (!m) return null;
  const flags = m[2].includes("i") ? m[2] : `${m[2]}i`;
  try {
    return { regex: new RegExp(m[1], flags.replace(/[gy]/g, "")) };
  } catch (err) {
    return { error: err.message };
  }
}

function wordTest(word) {
  if (!word.includes("*")) return (s) => s.includes(word);
  const re = new RegExp(`^${word.split("*").map((p) => p.replace(GLOB_SPECIAL, "\\$&")).join(".*")}$`);
  return (s) => re.test(s);
}

export function metricMatcher(query) {
  const parsed = parseRegex(query);
  if (parsed && parsed.error) {
    const none = () => false;
    none.error = parsed.error;
    return none;
  }
  if (parsed) return (name, key) => parsed.regex.test(name) || (!!key && parsed.regex.test(key));
  const tests = String(query || "").toLowerCase().split(/\s+/).filter(Boolean).map(wordTest);
  return (name, key) => {
    const n = name.toLowerCase();
    const k = key ? key.toLowerCase() : "";
    return tests.every((test) => test(n) || (!!k && test(k)));
  };
}

// [{run, names: [{name, key}]}] of the runs (items of GET /api/metric_names) with a match.
export function runsWithMatches(items, query) {
  const test = metricMatcher(query);
  const out = [];
  for (const item of items || []) {
    const keys = item.logged_keys || {};
    const names = (item.metric_names || []).filter((n) => test(n, keys[n])).map((n) => ({ name: n, key: keys[n] || null }));
    if (names.length) out.push({ run: item, names });
  }
  return { runs: out, error: test.error || null };
}
