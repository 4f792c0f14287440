// The sample explorer: filters (step range, category, reward range, flags, text) kept in the URL,
// a paginated list from /samples, and the selected sample with its token-level KL.
import { api } from "../api.js";
import { label, t } from "../i18n.js";
import { registerView, runHref } from "../router.js";
import { clear, fmt, h, withStates } from "../ui.js";
import { sampleView } from "./sample_view.js";

const PAGE = 20;
const FILTERS = ["step_min", "step_max", "category", "reward_min", "reward_max", "flags", "text", "order"];
const ORDERS = ["step_desc", "step_asc", "reward_desc", "reward_asc"];

function filtersFrom(query) {
  const out = {};
  for (const k of FILTERS) if (query.get(k)) out[k] = query.get(k);
  return out;
}

function field(name, labelKey, attrs = {}) {
  return h("label", { class: "field" }, h("span", { text: t(labelKey) }),
    h("input", { name, id: `f-${name}`, ...attrs }));
}

function filterForm(ctx, filters, categories) {
  const category = h("select", { name: "category", id: "f-category" }, h("option", { value: "", text: t("samples.any_category") }),
    categories.map((c) => h("option", { value: c, selected: c === filters.category, text: label("category", c) })));
  const form = h("form", { class: "filters", id: "sample-filters" },
    field("step_min", "samples.step_min", { type: "number", value: filters.step_min ?? "" }),
    field("step_max", "samples.step_max", { type: "number", value: filters.step_max ?? "" }),
    h("label", { class: "field" }, h("span", { text: t("samples.category") }), category),
    field("reward_min", "samples.reward_min", { type: "number", step: "any", value: filters.reward_min ?? "" }),
    field("reward_max", "samples.reward_max", { type: "number", step: "any", value: filters.reward_max ?? "" }),
    field("flags", "samples.flags", { type: "text", placeholder: t("samples.flags_hint"), value: filters.flags ?? "" }),
    field("text", "samples.text", { type: "search", placeholder: t("samples.text_hint"), value: filters.text ?? "" }),
    h("label", { class: "field" }, h("span", { text: t("samples.order") }), h("select", { name: "order", id: "f-order" },
      ORDERS.map((o) => h("option", { value: o, selected: o === (filters.order || "step_desc"), text: t(`order.${o}`) })))),
    h("button", { class: "btn primary", type: "submit", text: t("samples.apply") }),
    h("a", { class: "btn", href: runHref(ctx.runId, "samples"), text: t("samples.clear") }));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const q = {};
    for (const [k, v] of new FormData(form).entries()) if (String(v).trim()) q[k] = String(v).trim();
    ctx.navigate(runHref(ctx.runId, "samples", [], q));
  });
  return form;
}

function listTable(ctx, page, filters, selected) {
  const table = h("table", { class: "list", id: "sample-list" },
    h("thead", {}, h("tr", {}, ["axis.step", "samples.id", "samples.category", "sample.reward", "sample.advantage", "sample.length", "samples.flags", "sample.response"]
      .map((k) => h("th", { text: t(k) })), h("th", { class: "tok-marker", title: t("samples.tokens_col_help"), text: t("samples.tokens_col") }))));
  const body = h("tbody");
  for (const s of page.items) {
    const isSel = selected && String(s.step) === selected[0] && String(s.sample_id) === selected[1];
    body.append(h("tr", { class: `clickable${isSel ? " selected" : ""}`, dataset: { step: String(s.step), sampleId: String(s.sample_id) },
      onclick: () => ctx.navigate(runHref(ctx.runId, "samples", [s.step, s.sample_id], filters)) },
      h("td", { text: String(s.step) }), h("td", { text: String(s.sample_id) }), h("td", { text: s.category ? label("category", s.category) : "—" }),
      h("td", { text: fmt(s.reward, 3) }), h("td", { text: fmt(s.advantage, 3) }), h("td", { text: String(s.length) }),
      h("td", { text: (s.flags || []).map((f) => label("flag", f)).join(", ") || "—" }), h("td", { class: "preview", text: (s.response || "").slice(0, 80) }),
      // which samples carry per-token arrays (token KL view): the list's has_token_arrays
      h("td", { class: "tok-marker" }, s.has_token_arrays ? h("span", { class: "has-tokens", title: t("samples.has_tokens"), text: "▦" }) : null)));
  }
  table.append(body);
  return table;
}

function pager(ctx, page, filters, offset) {
  const go = (o) => ctx.navigate(runHref(ctx.runId, "samples", ctx.args, { ...filters, offset: o }));
  const last = Math.min(page.total, offset + page.items.length);
  return h("div", { class: "pager", id: "sample-pager" },
    h("button", { class: "btn", disabled: offset <= 0, onclick: () => go(Math.max(0, offset - PAGE)), text: t("samples.prev") }),
    h("span", { class: "muted", text: t("samples.range", { from: page.total ? offset + 1 : 0, to: last, total: page.total }) }),
    h("button", { class: "btn", disabled: last >= page.total, onclick: () => go(offset + PAGE), text: t("samples.next") }));
}

function mount(root, ctx) {
  const filters = filtersFrom(ctx.query);
  const offset = Number(ctx.query.get("offset") || 0);
  const selected = ctx.args.length >= 2 ? [ctx.args[0], ctx.args[1]] : null;
  const formSlot = h("div");
  const listSlot = h("div", { class: "sample-list-slot" });
  const detailSlot = h("div", { class: "sample-detail-slot" });
  root.append(h("div", { class: "samples-page" }, formSlot, h("div", { class: "split" }, listSlot, detailSlot)));
  api.categories(ctx.runId).then((r) => r.items, () => []).then((cats) => formSlot.append(filterForm(ctx, filters, cats)));
  withStates(listSlot, () => api.samples(ctx.runId, { order: "step_desc", ...filters, limit: PAGE, offset }), (page) => {
    if (!page.items.length) {
      // no filter set (the order is none): the run has no samples at all, widening would not help
      const filtered = Object.keys(filters).some((k) => k !== "order");
      listSlot.append(h("div", { class: "state state-empty", id: "samples-empty", dataset: { reason: filtered ? "filtered" : "none_stored" } },
        h("div", { class: "state-title", text: t(filtered ? "samples.none" : "samples.none_stored") }),
        h("div", { class: "muted", text: t(filtered ? "samples.none_help" : "samples.none_stored_help") })));
      return;
    }
    listSlot.append(listTable(ctx, page, filters, selected), pager(ctx, page, filters, offset));
  });
  if (selected) {
    withStates(detailSlot, () => api.sample(ctx.runId, selected[0], selected[1]), (s) => detailSlot.append(sampleView(s)));
  } else {
    detailSlot.append(h("div", { class: "state state-empty small", text: t("samples.pick") }));
  }
  return () => clear(root);
}

registerView("samples", { scope: "run", labelKey: "tab.samples", order: 20, mount });
