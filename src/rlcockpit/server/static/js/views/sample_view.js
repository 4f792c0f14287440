// One sample, opened from any chart, list or snapshot (seed 000 §2): prompt, response, the final
// reward and each reward component, how they became the advantage, and the response tokens coloured
// by their KL to the reference model (hover: logprob vs reference logprob).
import { label, t } from "../i18n.js";
import { clear, fmt, h } from "../ui.js";

// Colour of one token's KL: red when the policy puts more mass on it than the reference (KL > 0),
// blue when less; opacity grows with |KL| relative to the sample's largest |KL|.
export function klColor(kl, scale) {
  if (kl === null || kl === undefined || !Number.isFinite(kl) || !scale) return "transparent";
  const a = Math.min(1, Math.abs(kl) / scale) * 0.85;
  return kl >= 0 ? `rgba(220, 38, 38, ${a.toFixed(3)})` : `rgba(37, 99, 235, ${a.toFixed(3)})`;
}

function tokenKl(s) {
  if (s.token_kl) return s.token_kl;
  if (s.logprobs && s.ref_logprobs) return s.logprobs.map((lp, i) => (lp === null || s.ref_logprobs[i] === null ? null : lp - s.ref_logprobs[i]));
  return null;
}

let tip = null;
function tooltip() {
  if (!tip || !tip.isConnected) {
    tip = h("div", { class: "token-tip", id: "token-tip", role: "tooltip" });
    tip.hidden = true;
    document.body.append(tip);
    window.addEventListener("hashchange", () => { tip.hidden = true; }); // never outlives its page
  }
  return tip;
}

function showTip(e, span) {
  const el = tooltip();
  const d = span.dataset;
  clear(el).append(
    h("div", {}, h("b", { text: `${t("token.token")} #${d.index}: ` }), h("code", { text: JSON.stringify(d.token) })),
    h("div", { text: `${t("token.logprob")}: ${d.logprob}` }),
    h("div", { text: `${t("token.ref_logprob")}: ${d.refLogprob}` }),
    h("div", { text: `${t("token.kl")}: ${d.kl}` }));
  el.hidden = false;
  const r = span.getBoundingClientRect();
  el.style.left = `${Math.round(r.left + window.scrollX)}px`;
  el.style.top = `${Math.round(r.bottom + window.scrollY + 4)}px`;
}

export function tokenView(s) {
  const kl = tokenKl(s);
  const n = (s.tokens || s.logprobs || kl || []).length;
  if (!n) return h("div", { class: "state state-empty small", id: "token-kl", text: t("sample.no_tokens") });
  const scale = Math.max(1e-6, ...(kl || []).filter(Number.isFinite).map(Math.abs));
  const box = h("div", { class: "tokens", id: "token-kl" });
  for (let i = 0; i < n; i++) {
    const tok = s.tokens ? s.tokens[i] : `#${i}`;
    const span = h("span", { class: "tok", style: { background: klColor(kl ? kl[i] : null, scale) },
      dataset: { index: String(i), token: tok, kl: fmt(kl ? kl[i] : null, 4),
        logprob: fmt(s.logprobs ? s.logprobs[i] : null, 4), refLogprob: fmt(s.ref_logprobs ? s.ref_logprobs[i] : null, 4) },
      onmouseenter: (e) => showTip(e, e.currentTarget), onmouseleave: () => { tooltip().hidden = true; } });
    span.textContent = tok;
    box.append(span);
  }
  const legend = h("div", { class: "kl-legend muted" },
    h("span", { class: "swatch", style: { background: klColor(scale, scale) } }), ` ${t("token.kl_pos")} `,
    h("span", { class: "swatch", style: { background: klColor(-scale, scale) } }), ` ${t("token.kl_neg")} `,
    ` · ${t("token.kl_scale")} ${fmt(scale, 3)}`);
  return h("div", {}, box, legend);
}

// The token with the largest |KL| (its index and signed KL), or null without per-token KL.
export function maxAbsKl(s) {
  const kl = tokenKl(s);
  if (!kl) return null;
  let best = null;
  kl.forEach((v, i) => { if (Number.isFinite(v) && (best === null || Math.abs(v) > Math.abs(best.kl))) best = { index: i, kl: v }; });
  return best;
}

// "0.9000 (−0.9000, #1)": the size of the largest token KL, its sign and token; without token
// arrays the stored per-sample value, said so in the tooltip.
function klMaxRow(s) {
  const best = maxAbsKl(s);
  const signed = (v) => fmt(v, 4).replace(/^-/, "−");
  if (!best) {
    return h("tr", { class: "kl-max" }, h("th", { text: t("sample.kl_max") }),
      h("td", { title: t("sample.kl_max_stored"), text: fmt(s.kl_max, 4) }));
  }
  const tok = s.tokens ? s.tokens[best.index] : `#${best.index}`;
  const title = t("sample.kl_max_tip", { index: best.index, token: JSON.stringify(tok), kl: signed(best.kl),
    side: t(best.kl >= 0 ? "token.kl_pos" : "token.kl_neg") });
  return h("tr", { class: "kl-max" }, h("th", { text: t("sample.kl_max") }),
    h("td", { title, dataset: { kl: String(best.kl), index: String(best.index) } }, fmt(Math.abs(best.kl), 4),
      h("span", { class: "muted", text: ` (${signed(best.kl)}, #${best.index})` })));
}

function numbers(s) {
  const rows = [
    ["sample.final_reward", s.reward],
    ...Object.entries(s.components || {}).map(([k, v]) => [`${t("sample.component")}: ${label("component", k)}`, v, true]),
    ["sample.uncertainty", s.uncertainty],
    ["sample.value", s.value],
    ["sample.advantage", s.advantage],
    ["sample.kl_sum", s.kl_sum],
    ["kl_max"],
    ["sample.length", s.length],
    ["sample.truncated", s.truncated ? t("common.yes") : t("common.no")],
  ];
  const table = h("table", { class: "kv", id: "sample-numbers" });
  for (const [key, v, raw] of rows) {
    if (key === "kl_max") { table.append(klMaxRow(s)); continue; }
    table.append(h("tr", {}, h("th", { text: raw ? key : t(key) }), h("td", { text: fmt(v, 4) })));
  }
  return table;
}

function componentBars(s) {
  const entries = Object.entries(s.components || {});
  if (!entries.length) return null;
  const max = Math.max(1e-9, ...entries.map(([, v]) => Math.abs(v ?? 0)));
  return h("div", { class: "bars" }, entries.map(([k, v]) => h("div", { class: "bar-row" },
    h("span", { class: "bar-label", title: k, text: label("component", k) }),
    h("span", { class: "bar-track" }, h("span", { class: `bar ${v < 0 ? "neg" : ""}`, style: { width: `${(Math.abs(v ?? 0) / max) * 100}%` } })),
    h("span", { class: "bar-value", text: fmt(v, 3) }))));
}

export function sampleView(s) {
  return h("article", { class: "sample-view", id: "sample-view", dataset: { step: String(s.step), sampleId: String(s.sample_id) } },
    h("h3", { class: "panel-title", text: `${t("sample.title")} · ${t("axis.step")} ${s.step} · #${s.sample_id}` }),
    h("div", { class: "meta" },
      s.category ? h("span", { class: "pill cat", text: label("category", s.category) }) : null,
      s.prompt_id ? h("span", { class: "pill", text: `${t("sample.prompt_id")} ${s.prompt_id}` }) : null,
      h("span", { class: "pill", text: `${t("sample.group")} ${s.group_id}` }),
      (s.flags || []).map((f) => h("span", { class: "pill flag", title: f, text: label("flag", f) }))),
    h("h4", { text: t("sample.prompt") }), h("pre", { class: "text prompt", text: s.prompt }),
    h("h4", { text: t("sample.response") }), h("pre", { class: "text response", text: s.response }),
    h("h4", { text: t("sample.scores") }), componentBars(s), numbers(s),
    h("p", { class: "muted help", text: t("sample.adv_help") }),
    h("h4", { text: t("sample.tokens") }), tokenView(s));
}
