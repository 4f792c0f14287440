// The review queue of a run (docs/reward_model.md): samples the rule fallback flagged needs_review,
// each labelled good / bad by an operator; labels go to the audit log and export as reward-model
// training rows. Needs the control plane (rlcockpit serve has it).
import { get, post } from "../api.js";
import { extend, t } from "../i18n.js";
import { registerView } from "../router.js";
import { clear, empty, fmt, h, withStates } from "../ui.js";
import { controlAvailable, signInPanel } from "./control_common.js";

extend({
  en: { "review.none": "No samples need review", "review.good": "Good",
        "review.bad": "Bad", "review.export": "Export labels (JSON)", "review.status": "Show",
        "review.open": "open", "review.labelled": "labelled", "review.all": "all",
        "review.note": "note", "review.by": "labelled {label} by {who}",
        "review.unavailable": "The review queue needs the control plane (rlcockpit serve)." },
  zh: { "review.none": "没有需要人工复核的样本", "review.good": "合格",
        "review.bad": "不合格", "review.export": "导出标注（JSON）", "review.status": "显示",
        "review.open": "待复核", "review.labelled": "已标注", "review.all": "全部",
        "review.note": "备注", "review.by": "{who} 标注为 {label}",
        "review.unavailable": "复核队列需要控制面（rlcockpit serve）。" },
});

const enc = encodeURIComponent;

function item(runId, s, reload) {
  const note = h("input", { type: "text", class: "review-note", placeholder: t("review.note") });
  const send = (label) => post(`/runs/${enc(runId)}/review/${s.step}/${s.sample_id}`,
    { label, note: note.value }).then(reload).catch((err) => { note.value = err.message; });
  const rules = s.flags.filter((f) => f.startsWith("rule_")).join(", ");
  const done = s.review ? t("review.by", { label: s.review.label, who: s.review.reviewer }) : "";
  return h("section", { class: "panel review-item", dataset: { step: s.step, sample: s.sample_id } },
    h("div", { class: "muted", text: `step ${s.step} · #${s.sample_id} · ${s.category} · reward ${fmt(s.reward)}`
      + ` · uncertainty ${fmt(s.uncertainty)} · ${rules}` }),
    h("pre", { class: "review-text", text: `${s.prompt}${s.response}` }),
    h("div", { class: "filters" },
      h("button", { class: "btn primary review-good", onclick: () => send("good"), text: t("review.good") }),
      h("button", { class: "btn review-bad", onclick: () => send("bad"), text: t("review.bad") }), note,
      h("span", { class: "muted review-done", text: done })));
}

async function download(runId) {
  const res = await get(`/runs/${enc(runId)}/review/export`);
  const blob = new Blob([JSON.stringify(res.items, null, 1)], { type: "application/json" });
  const a = h("a", { href: URL.createObjectURL(blob), download: `review-${runId}.json` });
  a.click();
}

registerView("review", {
  scope: "run",
  labelKey: "tab.review",
  order: 45,
  tab: true,
  mount(root, ctx) {
    const status = ctx.query.get("status") || "open";
    const render = () => {
      clear(root);
      const list = h("div", { class: "review-list" });
      const pick = h("select", { class: "review-status", onchange: (e) => ctx.navigate(
        `#/run/${enc(ctx.runId)}/review?status=${e.target.value}`) },
        ...["open", "labelled", "all"].map((v) => h("option", { value: v, selected: v === status, text: t(`review.${v}`) })));
      root.append(signInPanel(render), h("div", { class: "filters" }, h("label", { class: "field" },
        t("review.status"), pick), h("button", { class: "btn", onclick: () => download(ctx.runId),
        text: t("review.export") })), list);
      withStates(list, () => get(`/runs/${enc(ctx.runId)}/review`, { status, limit: 50 }), (res) => {
        if (!res.items.length) return empty(list, t("review.none"));
        list.append(...res.items.map((s) => item(ctx.runId, s, render)));
      });
    };
    controlAvailable().then((ok) => (ok ? render() : empty(root, t("review.unavailable"))));
  },
});
