// Small DOM helpers and the three states every panel has: loading, empty, error (with retry).
import { signIn, TOKEN_KEY } from "./api.js";
import { t } from "./i18n.js";

// h("div", {class: "x", onclick: fn, dataset: {k: v}}, child, "text", [more children])
export function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    else if (k === "style" && typeof v === "object") Object.assign(node.style, v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v === true) node.setAttribute(k, "");
    else node.setAttribute(k, v);
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(node, c);
    else node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

export function fmt(v, digits = 3) {
  if (v === null || v === undefined) return "—";
  if (typeof v !== "number") return String(v);
  if (!Number.isFinite(v)) return String(v);
  if (Number.isInteger(v)) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(2);
  return v.toFixed(digits);
}

export function fmtTime(seconds) {
  if (!seconds) return "—";
  return new Date(seconds * 1000).toLocaleString();
}

export function loading(node, rows = 3) {
  clear(node);
  const box = h("div", { class: "state state-loading", role: "status", "aria-busy": "true" },
    h("div", { class: "spinner" }), h("span", { class: "muted", text: t("state.loading") }));
  for (let i = 0; i < rows; i++) box.append(h("div", { class: "skeleton" }));
  node.append(box);
  return box;
}

export function empty(node, title, ...body) {
  clear(node);
  node.append(h("div", { class: "state state-empty" }, h("div", { class: "state-title", text: title }), ...body));
}

export function errorState(node, err, retry) {
  clear(node);
  if (err && err.status === 401) return signInPage(node, err);
  const code = err && err.code ? err.code : "error";
  node.append(h("div", { class: "state state-error", role: "alert" },
    h("div", { class: "state-title", text: t("state.error") }),
    h("div", { class: "error-message", text: err && err.message ? err.message : String(err) }),
    h("div", { class: "muted error-code", text: code }),
    retry ? h("button", { class: "btn", onclick: retry, text: t("state.retry") }) : null));
}

// 401: the server has users (docs/control.md, docs/ui.md "Signing in"). The page explains what a
// sign-in link is and where to get one, and takes a pasted link, code or API token: a link's code
// (or a bare rlo_ code) is exchanged for a session (api.signIn, POST /api/session), a token kept;
// then the page reloads, so the header, the run list and the live stream start signed in. The
// server's message stays out of sight (in the title): it is written for the command line.
export function codeFromPasted(text) {
  const value = String(text || "").trim();
  const hash = value.includes("#") ? value.slice(value.indexOf("#") + 1) : "";
  const query = hash.includes("?") ? hash.slice(hash.indexOf("?") + 1) : value.includes("?") ? value.slice(value.indexOf("?") + 1) : "";
  if (query) {
    const params = new URLSearchParams(query);
    const code = params.get("code") || params.get("token");
    if (code) return code.trim();
  }
  return value;
}

function signInPage(node, err) {
  if (document.getElementById("signin-page")) {
    // another panel of the same page already shows the sign-in page
    node.append(h("div", { class: "state state-empty small", text: t("signin.see_above") }));
    return;
  }
  const input = h("input", { type: "password", id: "token-input", placeholder: t("signin.placeholder"), autocomplete: "off",
    "aria-label": t("signin.paste") });
  const msg = h("div", { class: "error-message", id: "signin-error", role: "alert" });
  msg.hidden = true;
  const form = h("form", { class: "token-form signin-form" },
    h("label", { class: "field", for: "token-input", text: t("signin.paste") }), input,
    h("button", { class: "btn primary", type: "submit", text: t("state.sign_in") }), msg);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const secret = codeFromPasted(input.value);
    if (!secret) return;
    try {
      await signIn(secret);  // a sign-in code (rlo_…) becomes a session; a token is kept
    } catch (error) {
      input.value = "";
      msg.textContent = t("signin.refused");
      msg.title = error.message;
      msg.hidden = false;
      return;
    }
    location.reload();
  });
  const hadToken = !!localStorage.getItem(TOKEN_KEY);
  node.append(h("section", { class: "panel signin-page", id: "signin-page", title: err && err.message ? err.message : "" },
    h("h2", { text: t("signin.title") }),
    h("p", { text: t(hadToken ? "signin.expired" : "signin.intro") }),
    h("h3", { text: t("signin.what_title") }),
    h("p", { text: t("signin.what") }),
    h("pre", { class: "code", text: `${location.origin}${location.pathname}#/signin?code=rlo_…` }),
    h("h3", { text: t("signin.where_title") }),
    h("p", { text: t("signin.where") }),
    h("pre", { class: "code", text: "rlcockpit users signin NAME" }),
    h("p", { class: "muted", text: t("signin.where_demo") }),
    form));
  input.focus();
}

// Show a loading state, run `load`, then `render(result)`; on failure an error state with retry.
export async function withStates(node, load, render) {
  loading(node);
  try {
    const result = await load();
    clear(node);
    render(result);
  } catch (err) {
    errorState(node, err, () => withStates(node, load, render));
  }
}

export function panel(title, ...children) {
  return h("section", { class: "panel" }, h("h3", { class: "panel-title", text: title }), ...children);
}

export function severityBadge(severity) {
  return h("span", { class: `sev sev-${severity}`, text: t(`sev.${severity}`) });
}
