// The ticket page of a run (docs/control.md): sign in with a token, request a live-parameter change
// or a command, and the queue with approve / reject / cancel. The queue refreshes itself.
import { t } from "../i18n.js";
import { registerView } from "../router.js";
import { clear, errorState, fmt, h, loading } from "../ui.js";
import { changeText, control, controlAvailable, fmtValue, signInPanel, statusChip } from "./control_common.js";

const REFRESH_MS = 2000;
export const NO_EFFECT_P = 0.05;
const COMMANDS = ["pause", "resume", "stop", "checkpoint", "rollback"];
const APPROVER_ROLES = ["approver", "admin"]; // the roles that may approve or reject (not their own tickets)

class TicketsPage {
  constructor(root, ctx) {
    this.root = root;
    this.ctx = ctx;
    this.signature = "";
  }

  mount() {
    this.render();
    return () => clearInterval(this.timer);
  }

  render() {
    clearInterval(this.timer);
    this.timer = setInterval(() => this.refreshQueue(), REFRESH_MS);
    clear(this.root);
    this.requestBox = h("section", { class: "panel ctl-request" });
    this.commandBox = this.commandPanel();
    this.queueBox = h("section", { class: "panel ctl-queue", id: "ctl-queue" });
    // the last decision's error: outside the queue, so the queue's refresh does not wipe it; it
    // stays until the next action
    this.queueMsg = h("div", { class: "error-message", id: "ctl-queue-msg", role: "alert" });
    this.showQueueError(this.queueError);
    this.root.append(signInPanel(() => this.render()),
      h("div", { class: "split" }, this.requestBox, this.commandBox), this.queueMsg, this.queueBox);
    this.signature = "";
    this.me = control.me().catch(() => null);
    loading(this.queueBox, 2);
    this.loadRequestForm();
    this.refreshQueue();
  }

  async loadRequestForm() {
    let live;
    try {
      live = await control.live(this.ctx.runId);
    } catch (err) {
      return errorState(this.requestBox, err, () => this.loadRequestForm());
    }
    const box = clear(this.requestBox);
    box.append(h("h3", { class: "panel-title", text: t("ctl.request") }));
    if (!live.current) return box.append(h("div", { class: "muted", text: t("ctl.live_none") }));
    const { specs, values } = live.current;
    const select = h("select", { id: "ctl-param", style: { width: "330px" } }, Object.keys(specs).sort().map((name) => h("option", { value: name,
      text: `${name} — ${t("ctl.current", { value: fmtValue(values[name]), lo: fmt(specs[name].lo), hi: fmt(specs[name].hi) })}` })));
    const value = h("input", { id: "ctl-value", type: "text", inputmode: "decimal" });
    const reason = h("input", { id: "ctl-reason", type: "text", style: { width: "260px" } });
    const msg = h("div", { id: "ctl-request-msg", class: "muted" });
    const submit = async () => {
      const raw = value.value.trim();
      const number = raw === "" ? raw : Number(raw);
      try {
        this.showQueueError(null);
        const res = await control.request(this.ctx.runId, { param: select.value, value: Number.isNaN(number) ? raw : number, reason: reason.value });
        msg.className = "muted ok";
        msg.textContent = t("ctl.requested", { id: res.ticket.ticket_id });
        value.value = "";
        reason.value = "";
        this.refreshQueue();
      } catch (err) {
        msg.className = "error-message";
        msg.textContent = err.message;
      }
    };
    box.append(h("div", { class: "filters" },
      h("label", { class: "field" }, t("ctl.param"), select), h("label", { class: "field" }, t("ctl.value"), value),
      h("label", { class: "field" }, t("ctl.reason"), reason),
      h("button", { class: "btn primary", id: "ctl-submit", onclick: submit, text: t("ctl.submit") })), msg);
    const pre = suggestion(this.ctx.query, live);
    if (!pre) return;
    if (pre.param) select.value = pre.param;
    if (pre.value !== null) value.value = fmtValue(pre.value);
    reason.value = pre.reason;
    const note = pre.revert ? t("ctl.prefill_revert", { param: pre.param, step: pre.revert.step, old: fmtValue(pre.revert.old), now: fmtValue(pre.revert.now) })
      : pre.param && t("ctl.prefill_param", { param: pre.param });
    if (note) box.insertBefore(h("div", { class: "banner", id: "ctl-prefill", dataset: { param: pre.param }, text: note }), box.children[1]);
  }

  // The form's "current value" of every parameter, re-read after the queue changed (what the user
  // typed and picked stays).
  async refreshCurrentValues() {
    const select = this.requestBox.querySelector("#ctl-param");
    if (!select) return;
    let live;
    try {
      live = await control.live(this.ctx.runId);
    } catch {
      return;
    }
    if (!live.current) return;
    const { specs, values } = live.current;
    for (const o of select.options) {
      if (specs[o.value]) o.textContent = `${o.value} — ${t("ctl.current", { value: fmtValue(values[o.value]), lo: fmt(specs[o.value].lo), hi: fmt(specs[o.value].hi) })}`;
    }
    select.dataset.version = String(live.current.version ?? "");
  }

  commandPanel() {
    const select = h("select", { id: "ctl-command", style: { width: "230px" } }, COMMANDS.map((c) => h("option", { value: c, text: t(`ctl.cmd_${c}`) })));
    const step = h("input", { id: "ctl-rollback-step", type: "number", min: "0", class: "num" });
    const reason = h("input", { id: "ctl-command-reason", type: "text", style: { width: "200px" } });
    const msg = h("div", { id: "ctl-command-msg", class: "muted" });
    const send = async () => {
      const body = { command: select.value, reason: reason.value };
      if (select.value === "rollback" && step.value !== "") body.args = { step: Number(step.value) };
      try {
        this.showQueueError(null);
        const res = await control.command(this.ctx.runId, body);
        msg.className = "muted ok";
        msg.textContent = `#${res.ticket.ticket_id} ${t(`ctl.st_${res.ticket.status}`)}`;
        this.refreshQueue();
      } catch (err) {
        msg.className = "error-message";
        msg.textContent = err.message;
      }
    };
    return h("section", { class: "panel ctl-commands" }, h("h3", { class: "panel-title", text: t("ctl.commands") }),
      h("div", { class: "filters" }, h("label", { class: "field" }, t("ctl.command"), select),
        h("label", { class: "field" }, t("ctl.rollback_step"), step), h("label", { class: "field" }, t("ctl.reason"), reason),
        h("button", { class: "btn", id: "ctl-command-submit", onclick: send, text: t("ctl.send") })), msg);
  }

  showQueueError(err) {
    this.queueError = err || null;
    if (!this.queueMsg) return;
    this.queueMsg.textContent = err ? `#${err.ticket}: ${err.message}` : "";
    this.queueMsg.hidden = !err;
  }

  async refreshQueue() {
    let items;
    let me;
    try {
      [items, me] = [(await control.tickets(this.ctx.runId)).items, await this.me];
    } catch (err) {
      this.signature = "";
      if (err.status === 401 || err.status === 403) clearInterval(this.timer);  // until the next sign-in
      return errorState(this.queueBox, err, () => this.refreshQueue());
    }
    const signature = JSON.stringify([me && me.name, items.map((x) => [x.ticket_id, x.status, x.updated_at])]);
    if (signature === this.signature) return;
    if (this.signature) this.refreshCurrentValues(); // a change may have been applied: new current values
    this.signature = signature;
    const box = clear(this.queueBox);
    box.append(h("h3", { class: "panel-title", text: t("ctl.queue") }));
    if (!items.length) return box.append(h("div", { class: "muted", text: t("ctl.empty_queue") }));
    const cols = ["id", "status", "change", "by", "reason", "decision", "applied", "effect", "actions"];
    box.append(h("table", { class: "list", id: "ctl-tickets" },
      h("thead", {}, h("tr", {}, cols.map((c) => h("th", { text: t(`ctl.col_${c}`) })))),
      h("tbody", {}, [...items].reverse().map((x) => this.row(x, me)))));
  }

  row(x, me) {
    const comment = h("input", { class: "ctl-comment", type: "text", placeholder: t("ctl.comment"), style: { width: "130px" } });
    const act = (action) => async (e) => {
      e.target.disabled = true;
      this.showQueueError(null);
      try {
        await control.decide(x.ticket_id, action, comment.value);
      } catch (err) {
        this.showQueueError({ ticket: x.ticket_id, action, message: err.message });
      }
      e.target.disabled = false;
      this.signature = "";
      this.refreshQueue();
    };
    const actions = [];
    // approve / reject: only for approvers and admins, and never on their own ticket (the server
    // refuses both; the buttons are not offered)
    const canDecide = me && APPROVER_ROLES.includes(me.role) && me.name !== x.requested_by;
    if (x.status === "requested" && canDecide) {
      actions.push(comment, h("button", { class: "btn small primary ctl-approve", onclick: act("approve"), text: t("ctl.approve") }),
        h("button", { class: "btn small ctl-reject", onclick: act("reject"), text: t("ctl.reject") }));
    }
    const canCancel = me && (me.name === x.requested_by || me.role === "admin");
    if ((x.status === "requested" || x.status === "approved") && canCancel) {
      actions.push(h("button", { class: "btn small ctl-cancel", onclick: act("cancel"), text: t("ctl.cancel") }));
    }
    const decision = x.decided_by ? `${x.decided_by}${x.comment ? `: ${x.comment}` : ""}` : "";
    const tr = h("tr", { dataset: { ticket: String(x.ticket_id), status: x.status } },
      h("td", { text: `#${x.ticket_id}` }), h("td", {}, statusChip(x.status)), h("td", { class: "ctl-change", text: changeText(x) }),
      h("td", { text: x.requested_by }), h("td", { class: "preview", title: x.reason, text: x.reason }),
      h("td", { text: decision }), h("td", { class: "ctl-applied", text: x.applied_step ?? "" }),
      h("td", { class: "ctl-effect", text: effectText(x) }),
      h("td", {}, actions, h("div", { class: "ctl-row-msg error-message" })));
    return tr;
  }
}

// The form's prefill from an incident's "Request a change" (alerts.js):
//   #/run/R/tickets?before=<incident's first step>&param=<suggested>&reason=<text>
// When a live parameter changed at most CAUSE_WINDOW steps before that step (a likely cause: the
// detectors see an lr or KL change within a few steps), the suggestion undoes the last such change
// (the parameter back to its value before it); otherwise the suggested parameter is only selected.
// The window keeps a later incident from proposing to undo an earlier fix.
const CAUSE_WINDOW = 20;
export function suggestion(query, live) {
  if (!query || !(query.has("before") || query.has("param"))) return null;
  const specs = live.current.specs;
  const wanted = specs[query.get("param")] ? query.get("param") : null;
  const before = Number(query.get("before"));
  const revert = query.has("before") && Number.isFinite(before) ? lastChange(live.history, before, wanted) : null;
  return { param: revert ? revert.param : wanted, value: revert ? revert.old : null, reason: query.get("reason") || "", revert };
}

function lastChange(history, before, preferred) {
  for (let i = history.length - 1; i >= 1; i--) {
    const [v, prev] = [history[i], history[i - 1]];
    if (v.step > before) continue;
    if (v.step < before - CAUSE_WINDOW) return null;
    const keys = Object.keys(v.values).filter((k) => v.values[k] !== prev.values[k]);
    if (!keys.length) continue;
    const param = keys.includes(preferred) ? preferred : keys[0];
    return { param, old: prev.values[param], now: v.values[param], step: v.step };
  }
  return null;
}

function effectText(x) {
  const e = x.effect || {};
  if (x.status === "applied" && x.kind === "param") return t("ctl.effect_wait");
  if (e.ks_pvalue === undefined || e.ks_pvalue === null) return x.error || "";
  const dv = e.reward_var_change === null || e.reward_var_change === undefined ? "—" : `${(100 * e.reward_var_change).toFixed(0)}%`;
  const parts = [t("ctl.effect", { p: fmt(e.ks_pvalue), dm: fmt(e.reward_mean_delta), dv })];
  // KS p >= 0.05: the validation rewards before and after are not distinguishable (seed 002 §5)
  if (e.ks_pvalue >= NO_EFFECT_P) parts.push(t("ctl.no_effect"));
  const kl = e.windows && e.windows["kl/mean"];
  if (kl && kl.after !== null && kl.after !== undefined) parts.push(t("ctl.kl_window", { before: fmt(kl.before), after: fmt(kl.after) }));
  return parts.join(" · ");
}

// only when the server runs the control plane (a read-only server gets no tab it cannot serve)
if (await controlAvailable()) registerView("tickets", { scope: "run", labelKey: "ctl.tab_tickets", order: 60, mount: (root, ctx) => new TicketsPage(root, ctx).mount() });
