// Shared by the control-plane pages: the control API, whether the server has it, the sign-in panel.
import { get, post, signIn, signOut } from "../api.js";
import { t } from "../i18n.js";
import { h } from "../ui.js";
import "./control_i18n.js";

const enc = encodeURIComponent;

export const control = {
  me: () => get("/me"),
  live: (run) => get(`/runs/${enc(run)}/live`),
  tickets: (run, status) => get(`/runs/${enc(run)}/tickets`, { status }),
  request: (run, body) => post(`/runs/${enc(run)}/tickets`, body),
  command: (run, body) => post(`/runs/${enc(run)}/commands`, body),
  decide: (id, action, comment) => post(`/tickets/${enc(id)}/${action}`, { comment }),
  audit: (params) => get("/audit", params),
};

// The control routes exist only when the server runs with the control plane (`rlcockpit serve` does);
// asked once from the OpenAPI document, so a read-only server never sees requests it cannot answer.
let available = null;
export function controlAvailable() {
  if (!available) {
    available = fetch("/openapi.json").then((r) => (r.ok ? r.json() : { paths: {} }))
      .then((doc) => Boolean(doc.paths && doc.paths["/api/runs/{run}/live"])).catch(() => false);
  }
  return available;
}

export function statusChip(status) {
  return h("span", { class: `chip ctl-status ctl-${status}`, dataset: { status }, text: t(`ctl.st_${status}`) });
}

export function changeText(ticket) {
  if (ticket.kind === "param") return `${ticket.target}: ${fmtValue(ticket.previous)} → ${fmtValue(ticket.value)}`;
  const args = ticket.value && ticket.value.step !== undefined ? ` ${ticket.value.step}` : "";
  return `${ticket.target}${args}`;
}

export function fmtValue(v) {
  if (v === null || v === undefined) return "—";
  return typeof v === "number" ? String(Number(v.toPrecision(6))) : String(v);
}

// Sign-in: the token lives in localStorage (api.setToken); /api/me says who it belongs to.
export function signInPanel(onChange) {
  const status = h("div", { class: "muted", id: "ctl-me", text: "…" });
  const input = h("input", { type: "password", id: "ctl-token", placeholder: "rlc_…", autocomplete: "off" });
  const save = async () => {
    try {
      await signIn(input.value);  // a sign-in code (rlo_…) becomes a session; a token is kept
    } catch (err) {
      status.textContent = err.message;
    }
    input.value = "";
    onChange();
  };
  const box = h("section", { class: "panel ctl-signin" },
    h("h3", { class: "panel-title", text: t("ctl.signin") }), status,
    h("div", { class: "filters" },
      h("label", { class: "field" }, t("ctl.token"), input),
      h("button", { class: "btn primary", id: "ctl-token-save", onclick: save, text: t("ctl.save") }),
      h("button", { class: "btn", id: "ctl-signout", onclick: async () => { await signOut(); onChange(); }, text: t("ctl.signout") })),
    h("div", { class: "muted help", text: t("ctl.token_help") }));
  control.me().then((me) => {
    status.textContent = me.name === "anonymous" ? `${t("ctl.anonymous")}. ${me.users_exist ? "" : t("ctl.no_users")}`
      : t("ctl.signed_in", { name: me.name, role: me.role });
    status.dataset.user = me.name;
  }).catch((err) => { status.textContent = err.message; status.dataset.user = ""; });
  return box;
}
