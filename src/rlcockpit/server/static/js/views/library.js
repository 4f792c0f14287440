// The failure library: search in Chinese or English (/api/library/search) and one entry in the
// current language (the other language one click away).
import { api } from "../api.js";
import { lang, pick, t } from "../i18n.js";
import { globalHref, registerView } from "../router.js";
import { clear, fmt, h, withStates } from "../ui.js";

// Section numbers of the project's own source documents ("000 §4.3", "seed 002 §2.2", "001 Q4, Q7")
// mean nothing to a user: the text shown leaves them out (the API keeps them, `seed` included).
const REF = String.raw`(?:[Ss]eed\s*)?\b\d{3}\s*(?:§\s*\d+(?:\.\d+)*(?:\s*-\s*§?\s*\d+(?:\.\d+)*)?(?:\s*row\s*\d+)?|Q\d+(?:\s*-\s*Q\d+)?)`;
const MORE = String.raw`(?:\s*(?:[,;，；、]|and)\s*(?:${REF}|§\s*\d+(?:\.\d+)*|Q\d+))*`;
const REFS = `${REF}${MORE}`;
const SEED_REF_RULES = [
  [new RegExp(String.raw`\s*[（(]\s*(?:see\s*|见\s*)?${REFS}\s*[)）]`, "g"), ""],                  // "(000 §5)"
  [new RegExp(String.raw`\s*[,;，；、]?\s*(?:as in|see|见)?\s*${REFS}(?=\s*[)）]|\s*$)`, "g"), ""], // "…, 001 Q4)"
  [new RegExp(String.raw`(?:as in\s*|见\s*)?${REFS}\s*中?\s*`, "g"), ""],                         // "如 000 §4.3 中从…"
  [/[,，]\s*([;；])/g, "$1"], [/([（(])\s*[:：;；,，]\s*/g, "$1"], [/[（(]\s*[)）]/g, ""], [/ {2,}/g, " "],
];

export function withoutSeedRefs(text) {
  if (typeof text !== "string") return text;
  return SEED_REF_RULES.reduce((s, [re, to]) => s.replace(re, to), text).trim();
}

const EXAMPLES = { en: ["KL keeps growing", "entropy collapse", "reward hacking"], zh: ["KL 持续上升", "熵崩塌", "奖励黑客"] };

function searchBox(ctx, q) {
  const input = h("input", { type: "search", id: "library-q", name: "q", value: q || "", placeholder: t("library.placeholder"), autofocus: true });
  const form = h("form", { class: "search", id: "library-search" }, input,
    h("button", { class: "btn primary", type: "submit", text: t("library.search") }));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const value = input.value.trim();
    ctx.navigate(globalHref("library", [], value ? { q: value } : null));
  });
  return form;
}

function examples(ctx) {
  return h("div", { class: "examples muted" }, `${t("library.try")} `,
    EXAMPLES[lang() === "zh" ? "zh" : "en"].map((x) => [h("a", { class: "chip", href: globalHref("library", [], { q: x }), text: x }), " "]));
}

function results(ctx, items) {
  if (!items.length) return h("div", { class: "state state-empty", id: "library-empty", text: t("library.no_hits") });
  return h("ol", { class: "hits", id: "library-hits" }, items.map((it) => h("li", { class: "hit" },
    h("a", { href: globalHref("library", [it.id]), class: "hit-title", text: withoutSeedRefs(pick(it, "title")) || it.id }),
    h("span", { class: "muted", text: ` · ${it.id} · ${t("library.score")} ${fmt(it.score, 3)}` }),
    summaryLine(it) ? h("div", { class: "hit-body", text: summaryLine(it) }) : null)));
}

function summaryLine(it) {
  const s = pick(it, "symptoms") || pick(it, "symptom");
  return withoutSeedRefs(Array.isArray(s) ? s[0] || "" : String(s || "")).slice(0, 220);
}

// Fields come in pairs (<name>_en / <name>_zh); show each once, in the current language.
function entryFields(e) {
  const seen = new Set();
  const out = [];
  for (const key of Object.keys(e)) {
    const base = key.replace(/_(en|zh)$/, "");
    if (seen.has(base) || ["id", "title", "score", "public_sources", "seed"].includes(base)) continue;
    seen.add(base);
    const value = pick(e, base);
    if (value === "" || value === null || (Array.isArray(value) && !value.length)) continue;
    out.push([base, value]);
  }
  return out;
}

function fieldValue(v) {
  if (Array.isArray(v)) return h("ul", {}, v.map((x) => h("li", { text: typeof x === "object" ? JSON.stringify(x) : withoutSeedRefs(String(x)) })));
  if (typeof v === "object") return h("pre", { class: "text", text: JSON.stringify(v, null, 2) });
  return h("p", { text: withoutSeedRefs(String(v)) });
}

function otherTitle(e, other) {
  const v = e.title;
  return (v && typeof v === "object" ? v[other] : e[`title_${other}`]) || "";
}

function entryView(e) {
  const other = lang() === "zh" ? "en" : "zh";
  return h("article", { class: "library-entry", id: "library-entry", dataset: { pattern: e.id } },
    h("h2", { text: withoutSeedRefs(pick(e, "title")) || e.id }),
    h("div", { class: "muted", text: `${e.id} · ${withoutSeedRefs(otherTitle(e, other))}` }),
    entryFields(e).map(([k, v]) => h("section", {}, h("h4", { text: t(`library.field.${k}`) === `library.field.${k}` ? k : t(`library.field.${k}`) }), fieldValue(v))),
    sourcesSection(e));
}

// Public sources a user can open (papers, framework docs). The seed cases (sections of the
// project's own source documents) are not shown: a user cannot open them.
function sourcesSection(e) {
  const items = e.public_sources || [];
  return h("section", { id: "library-sources" },
    h("h4", { text: t("library.public_sources") }),
    items.length ? h("ul", { class: "sources" }, items.map((s) => h("li", {},
      h("a", { href: s.url, target: "_blank", rel: "noopener noreferrer", text: s.title }),
      h("span", { class: "muted small", text: ` · ${new URL(s.url).host}` }))))
      : h("p", { class: "muted", text: t("library.no_public_sources") }));
}

function mount(root, ctx) {
  const q = ctx.query.get("q") || "";
  const body = h("div", { class: "results" });
  root.append(h("div", { class: "library-page" }, h("h2", { text: t("library.title") }), searchBox(ctx, q), examples(ctx), body));
  if (ctx.args[0]) withStates(body, () => api.libraryEntry(ctx.args[0]), (e) => body.append(entryView(e)));
  else if (q) withStates(body, () => api.librarySearch(q), (res) => body.append(results(ctx, res.items)));
  else body.append(h("div", { class: "state state-empty small", text: t("library.intro") }));
  return () => clear(root);
}

registerView("library", { scope: "global", labelKey: "tab.library", order: 20, mount });
