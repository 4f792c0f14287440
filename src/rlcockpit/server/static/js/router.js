// Hash router and the view registry. Routes:
//   #/run/<runId>/<view>/<args...>?<query>   views with scope "run" (dashboard, samples, alerts, ...)
//   #/<view>/<args...>?<query>               views with scope "global" (runs, library, compare)
// Built-in views register themselves exactly like extensions do: registerView(name, module).

const views = new Map();
const listeners = new Set();

// module: {scope: "run" | "global", labelKey, order, tab, mount(root, ctx) -> cleanup?}
export function registerView(name, module) {
  if (!/^[a-z][a-z0-9_-]*$/.test(name)) throw new Error(`view name ${name} must be lowercase letters, digits, - or _`);
  if (typeof module.mount !== "function") throw new Error(`view ${name} needs a mount(root, ctx) function`);
  views.set(name, { scope: "run", tab: true, order: 100, ...module, name });
  listeners.forEach((fn) => fn());
}

export function view(name) {
  return views.get(name);
}

export function tabs(scope) {
  return [...views.values()].filter((v) => v.tab && v.scope === scope).sort((a, b) => a.order - b.order);
}

export function onViewsChange(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

export function parseHash(hash = location.hash) {
  const raw = hash.replace(/^#/, "");
  const [pathPart, queryPart = ""] = raw.split("?");
  const parts = pathPart.split("/").filter(Boolean).map(decodeURIComponent);
  const query = new URLSearchParams(queryPart);
  if (parts[0] === "run" && parts[1]) {
    return { scope: "run", runId: parts[1], name: parts[2] || "dashboard", args: parts.slice(3), query };
  }
  return { scope: "global", runId: null, name: parts[0] || "", args: parts.slice(1), query };
}

export function href(route) {
  const path = route.scope === "run"
    ? ["run", route.runId, route.name, ...(route.args || [])]
    : [route.name, ...(route.args || [])];
  const q = route.query ? new URLSearchParams(route.query).toString() : "";
  return `#/${path.map((p) => encodeURIComponent(String(p))).join("/")}${q ? `?${q}` : ""}`;
}

export const runHref = (runId, name, args = [], query = null) => href({ scope: "run", runId, name, args, query });
export const globalHref = (name, args = [], query = null) => href({ scope: "global", name, args, query });

export function navigate(target) {
  const next = typeof target === "string" ? target : href(target);
  if (location.hash === next) window.dispatchEvent(new HashChangeEvent("hashchange"));
  else location.hash = next;
}
