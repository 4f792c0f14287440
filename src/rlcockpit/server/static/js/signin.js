// Sign-in links and the signed-in user in the header (docs/ui.md "Signing in", docs/control.md).
//   #/signin?code=rlo_…[&next=#/run/R/tickets]   replaces the address with `next` (default #/),
//   then exchanges the one-time code for an expiring session token (POST /api/session) and keeps
//   that. The code works once: the browser's history keeps the link, but nothing usable in it.
//   Pasted into a tab that already shows the cockpit, the link switches the user in place: the
//   address goes back to the page that was open (or `next`), and that page is drawn again.
// The code sits after "#": a browser never sends the fragment to the server.
import { signIn, signOut, TOKEN_KEY } from "./api.js";
import { t } from "./i18n.js";
import { clear, h } from "./ui.js";
import { control, controlAvailable } from "./views/control_common.js";

const DARK_BTN = { background: "#1e293b", color: "#e2e8f0", borderColor: "#334155" };

function isSigninLink(hash) {
  return hash.replace(/^#/, "").split("?")[0].replace(/\/+$/, "") === "/signin";
}

// Called (and awaited) once before the first route is shown; true when the link signed us in.
// It also watches the address: a sign-in link pasted into a tab already showing the cockpit
// (a hashchange) signs that person in without a reload (see onLinkPasted).
export async function consumeSigninLink(loc = window.location, fallback = "#/") {
  watchSigninLinks();
  if (!isSigninLink(loc.hash)) return false;
  const params = new URLSearchParams(loc.hash.split("?").slice(1).join("?"));
  const code = (params.get("code") || params.get("token") || "").trim();
  const next = params.get("next") || "";
  history.replaceState(null, "", `${loc.pathname}${loc.search}${next.startsWith("#/") ? next : fallback}`);
  if (!code) return false;
  try {
    await signIn(code);
    userState.linkError = null;
    return true;
  } catch (err) {
    userState.linkError = err.message;  // used, expired or unknown: said in the header
    return false;
  }
}

// Registered before the shell's own hashchange listener (app.js calls consumeSigninLink first), so
// the shell never sees the link: the address is cleaned at once (back to the page that was open,
// or the link's `next`), the code exchanged, then the page drawn again as the new user.
let watching = false;
function watchSigninLinks() {
  if (watching) return;
  watching = true;
  window.addEventListener("hashchange", (e) => {
    if (!isSigninLink(location.hash)) return;
    e.stopImmediatePropagation();
    onLinkPasted(e.oldURL ? new URL(e.oldURL).hash : "");
  });
}

async function onLinkPasted(previous) {
  const back = previous && previous.startsWith("#/") && !isSigninLink(previous) ? previous : "#/";
  await consumeSigninLink(window.location, back);
  userState.shown = undefined;  // the header's user slot asks /api/me again now
  refreshUser();
  window.dispatchEvent(new HashChangeEvent("hashchange"));  // the open page, with the new user's rights
}

// The header's user slot (#user-slot): "name (role)" with switch-user and sign-out, or a sign-in
// button. It asks /api/me again only when the stored token changes (the token form, the tickets
// page) or the header is drawn again (the language toggle).
const userState = { shown: undefined, timer: null, linkError: null };

export async function mountUser() {
  if (!(await controlAvailable())) return;
  userState.shown = undefined;
  refreshUser();
  if (!userState.timer) userState.timer = setInterval(refreshUser, 1000);
}

function refreshUser() {
  const slot = document.getElementById("user-slot");
  const token = localStorage.getItem(TOKEN_KEY);
  if (!slot || token === userState.shown) return;
  userState.shown = token;
  renderUser(slot);
}

async function renderUser(slot) {
  let me = null;
  try {
    me = await control.me();
  } catch {
    me = null;  // 401: no token, or a revoked / unknown one
  }
  clear(slot);
  const box = h("span", { class: "hdr-user run-header", id: "hdr-user", dataset: { user: me ? me.name : "" } });
  if (me && me.name !== "anonymous") {
    box.append(h("span", { class: "hdr-item", id: "hdr-user-name", title: t("user.signed_in_as") },
      h("b", { text: me.name }), h("span", { class: "hdr-role", text: ` (${t(`role.${me.role}`)})` })),
    button("hdr-switch", t("user.switch"), () => tokenForm(slot), "⇄"),
    button("hdr-signout", t("user.sign_out"), async () => { await signOut(); location.reload(); }, "⏻"));
  } else if (me && !me.users_exist) {
    box.append(h("span", { class: "hdr-item", id: "hdr-user-name", title: t("user.no_users_help"), text: t("user.no_users") }));
  } else {
    box.append(h("span", { class: "hdr-item", id: "hdr-user-name", text: t("user.not_signed_in") }),
      button("hdr-signin", t("user.sign_in"), () => tokenForm(slot)));
    if (userState.linkError) {
      box.append(h("span", { class: "hdr-item", id: "hdr-link-error", title: userState.linkError,
        text: t("user.link_failed") }));
    }
  }
  slot.append(box);
}

// With an icon, a narrow header (css: max-width 1280px) shows the icon alone, the text on hover.
function button(id, text, onclick, icon = null) {
  if (!icon) return h("button", { class: "btn small", id, onclick, text, style: DARK_BTN });
  return h("button", { class: "btn small", id, onclick, title: text, style: DARK_BTN },
    h("span", { class: "btn-icon", text: icon }), h("span", { class: "btn-label", text }));
}

// Paste a token (another person's, in the same browser): the page reloads so the live stream
// reconnects with it.
function tokenForm(slot) {
  const input = h("input", { type: "password", id: "hdr-token", placeholder: t("user.token_placeholder"), autocomplete: "off" });
  const form = h("form", { class: "hdr-user run-header", id: "hdr-token-form", title: t("user.token_help") }, input,
    h("button", { class: "btn small", type: "submit", id: "hdr-token-save", text: t("user.use_token"), style: DARK_BTN }),
    button("hdr-token-cancel", t("user.cancel"), (e) => { e.preventDefault(); renderUser(slot); }));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    if (!input.value.trim()) return;
    try {
      await signIn(input.value);  // a sign-in code is exchanged for a session, a token kept
      location.reload();
    } catch (err) {
      input.value = "";
      input.placeholder = err.message;
    }
  });
  clear(slot).append(form);
  input.focus();
}
