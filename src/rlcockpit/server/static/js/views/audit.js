// The audit log (docs/control.md): every request, decision, application, evaluation, refusal and
// failed attempt, hash-chained; "Verify chain" asks the server to walk the whole chain.
import { t } from "../i18n.js";
import { registerView } from "../router.js";
import { clear, errorState, fmtTime, h, loading } from "../ui.js";
import { control, controlAvailable } from "./control_common.js";

const PAGE = 200;

class AuditPage {
  constructor(root, ctx) {
    this.root = root;
    this.ctx = ctx;
    this.after = 0;
  }

  mount() {
    const run = h("input", { id: "ctl-audit-run", type: "text", value: this.ctx.query.get("run") || this.ctx.runId || "" });
    this.verifyResult = h("span", { id: "ctl-verify-result", class: "muted" });
    const filter = () => this.ctx.navigate(`#/audit${run.value ? `?run=${encodeURIComponent(run.value)}` : ""}`);
    this.table = h("tbody");
    this.more = h("button", { class: "btn", id: "ctl-audit-more", onclick: () => this.load(), text: t("ctl.more") });
    this.body = h("div");
    this.run = this.ctx.query.get("run") || "";
    this.root.append(h("div", { class: "toolbar" },
      h("label", { class: "tb-label" }, t("ctl.audit_run"), " ", run),
      h("button", { class: "btn", id: "ctl-audit-filter", onclick: filter, text: t("ctl.audit_filter") }),
      h("button", { class: "btn", id: "ctl-verify", onclick: () => this.verify(), text: t("ctl.verify") }), this.verifyResult),
    this.body);
    loading(this.body, 3);
    this.load();
  }

  async load() {
    let res;
    try {
      res = await control.audit({ run: this.run, after: this.after, limit: PAGE });
    } catch (err) {
      return errorState(this.body, err, () => this.load());
    }
    if (this.after === 0) this.renderTable(res.items.length);
    for (const e of res.items) this.table.append(row(e));
    if (res.items.length) this.after = res.items[res.items.length - 1].seq;
    this.more.hidden = res.items.length < PAGE;
  }

  renderTable(n) {
    clear(this.body);
    if (!n) return this.body.append(h("div", { class: "state state-empty", text: t("ctl.audit_empty") }));
    const cols = ["seq", "time", "actor", "action", "outcome", "run", "ticket", "details"];
    this.body.append(h("table", { class: "list", id: "ctl-audit" },
      h("thead", {}, h("tr", {}, cols.map((c) => h("th", { text: t(`ctl.col_${c}`) })))), this.table), this.more);
  }

  async verify() {
    this.verifyResult.textContent = "…";
    try {
      const res = await control.audit({ limit: 1, check: true });
      const v = res.verify;
      this.verifyResult.textContent = v.ok ? t("ctl.verify_ok", { n: v.entries })
        : t("ctl.verify_broken", { n: v.entries, seq: v.broken_seq ?? "?" });
      this.verifyResult.title = v.message;
      this.verifyResult.className = res.verify.ok ? "ok" : "error-message";
      this.verifyResult.dataset.ok = String(res.verify.ok);
    } catch (err) {
      this.verifyResult.textContent = err.message;
      this.verifyResult.className = "error-message";
    }
  }
}

function row(e) {
  const details = JSON.stringify(e.details);
  return h("tr", { dataset: { seq: String(e.seq), outcome: e.outcome } },
    h("td", { text: String(e.seq) }), h("td", { text: fmtTime(e.at) }), h("td", { text: e.actor }),
    h("td", { text: e.action }), h("td", {}, h("span", { class: `chip ctl-outcome-${e.outcome}`, text: e.outcome })),
    h("td", { text: e.run_id || "" }), h("td", { text: e.ticket_id ? `#${e.ticket_id}` : "" }),
    h("td", { class: "preview", title: details, text: details }));
}

if (await controlAvailable()) {
  registerView("audit", { scope: "global", labelKey: "ctl.tab_audit", order: 90, mount: (root, ctx) => new AuditPage(root, ctx).mount() });
}
