// Fetch wrapper for the JSON API (docs: docs/server.md, docs/ui.md). Every failure becomes an
// ApiError carrying the canonical error shape {code, message, details}, so views can show it.

export const TOKEN_KEY = "rlcockpit.token";

export class ApiError extends Error {
  constructor(status, code, message, details = {}) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

// Who this tab is changed (a sign-in link, a pasted token, a sign-out): the open live stream hears
// TOKEN_EVENT and reconnects as the new user (js/live.js).
export const TOKEN_EVENT = "rlcockpit:token";

export function setToken(token) {
  if (token) localStorage.setItem(TOKEN_KEY, token);
  else localStorage.removeItem(TOKEN_KEY);
  window.dispatchEvent(new Event(TOKEN_EVENT));
}

// Sign in with what a person has: a one-time sign-in code (rlo_…, the end of a sign-in link) is
// exchanged for an expiring session token (POST /api/session; docs/control.md "Sign-in links and
// sessions"); anything else (an API token) is kept as given. Throws an ApiError when refused.
export async function signIn(secret) {
  const value = (secret || "").trim();
  if (!value.startsWith("rlo_")) {
    setToken(value || null);
    return null;
  }
  const session = await request("POST", "/session", null, { code: value }, { anonymous: true });
  setToken(session.token);
  return session;
}

// Sign out: the session token stops working on the server too (best effort), then is forgotten.
export async function signOut() {
  if (localStorage.getItem(TOKEN_KEY)) {
    try {
      await request("DELETE", "/session");
    } catch {
      // an expired or revoked session, or a server without sign-in: forgetting it is enough
    }
  }
  setToken(null);
}

function headers(extra) {
  const out = { Accept: "application/json", ...(extra || {}) };
  const token = localStorage.getItem(TOKEN_KEY);
  if (token) out.Authorization = `Bearer ${token}`;
  return out;
}

// Query string from an object; null, undefined and "" are left out, arrays are joined by commas.
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v === null || v === undefined || v === "") continue;
    q.set(k, Array.isArray(v) ? v.join(",") : String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : "";
}

async function errorFrom(resp) {
  let body = null;
  try {
    body = await resp.json();
  } catch {
    body = null;
  }
  const err = body && body.error;
  if (err && err.code) return new ApiError(resp.status, err.code, err.message || err.code, err.details || {});
  return new ApiError(resp.status, "http_error", `HTTP ${resp.status} ${resp.statusText}`, {});
}

export async function request(method, path, params, body, { anonymous = false } = {}) {
  let resp;
  const extra = body === undefined ? {} : { "Content-Type": "application/json" };
  try {
    // boot.js started this call while the modules loaded (index.html); take it once
    const booted = method === "GET" && !anonymous && !query(params) && window.__rlcockpitBoot?.take(path);
    resp = (booted && (await booted)) || await fetch(`/api${path}${query(params)}`, {
      method,
      headers: anonymous ? { Accept: "application/json", ...extra } : headers(extra),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    throw new ApiError(0, "network", `cannot reach the server (${e.message}); is 'rlcockpit serve' running?`);
  }
  if (!resp.ok) throw await errorFrom(resp);
  return resp.json();
}

export const get = (path, params) => request("GET", path, params);
export const post = (path, body, params) => request("POST", path, params, body ?? {});

const enc = encodeURIComponent;

// Thin helpers for the read API; names follow the routes.
export const api = {
  health: () => get("/health"),
  runs: (opts = {}) => get("/runs", opts),
  run: (run) => get(`/runs/${enc(run)}`),
  series: (run, names, opts = {}) => get(`/runs/${enc(run)}/series`, { names, max_points: 1000, ...opts }),
  latest: (run, names) => get(`/runs/${enc(run)}/latest`, { names }),
  histograms: (run, name, opts = {}) => get(`/runs/${enc(run)}/histograms`, { name, max_points: 200, ...opts }),
  samples: (run, opts = {}) => get(`/runs/${enc(run)}/samples`, opts),
  sample: (run, step, id) => get(`/runs/${enc(run)}/samples/${enc(step)}/${enc(id)}`),
  categories: (run) => get(`/runs/${enc(run)}/categories`),
  findings: (run, opts = {}) => get(`/runs/${enc(run)}/findings`, opts),
  incidents: (run) => get(`/runs/${enc(run)}/incidents`),
  snapshots: (run) => get(`/runs/${enc(run)}/snapshots`),
  snapshot: (run, id) => get(`/runs/${enc(run)}/snapshots/${enc(id)}`),
  phases: (run, opts = {}) => get(`/runs/${enc(run)}/phases`, opts),
  events: (run, opts = {}) => get(`/runs/${enc(run)}/events`, opts),
  librarySearch: (q, k = 8) => get("/library/search", { q, k }),
  libraryEntry: (id) => get(`/library/${enc(id)}`),
  compare: (runs, names, opts = {}) => get("/compare", { runs, names, max_points: 500, ...opts }),
};
