// What the pages across runs know about each run beside its metrics: its config flattened to dotted
// keys (optim.lr), and its tags and group — from the run's config (`tags`, `group`) unless set in
// the runs table, which keeps them in the project's layout (`runs: {run_id: {tags, group}}`).
// Used by the runs table, the sweep view and the dashboard's overlay (grouping by tag or config).
import { api } from "../api.js";
import { registerRuns } from "../colors.js";
import { layoutApi } from "./metric_panels.js";

// {"optim": {"lr": 1e-5}} -> {"optim.lr": 1e-5}: config columns, the diff and grouping use dotted keys.
export function flatten(obj, prefix = "", out = {}) {
  for (const [k, v] of Object.entries(obj || {})) {
    const key = prefix ? `${prefix}.${k}` : k;
    if (v && typeof v === "object" && !Array.isArray(v)) flatten(v, key, out);
    else out[key] = v;
  }
  return out;
}

// A run of /api/runs?config=true with its tags, group and flat config (`flat`).
export function withMeta(r, meta) {
  const own = (meta[r.project] && meta[r.project][r.run_id]) || {};
  const cfg = r.config || {};
  const tags = own.tags ?? (Array.isArray(cfg.tags) ? cfg.tags : []);
  return { ...r, tags, group: own.group ?? (typeof cfg.group === "string" ? cfg.group : ""), flat: flatten(cfg) };
}

// Every run with its config, and each project's saved tags and groups: {items, meta}.
export async function loadRuns() {
  const res = await api.runs({ config: true });
  registerRuns(res.items);
  const projects = [...new Set(res.items.map((r) => r.project))];
  const meta = {};
  await Promise.all(projects.map(async (p) => {
    try {
      const l = await layoutApi.get(p);
      meta[p] = (l.layout && l.layout.runs) || {};
    } catch {
      meta[p] = {};
    }
  }));
  return { items: res.items, meta };
}

// The runs with their meta, loaded once per page (the overlay and the sweep share one answer).
export async function runsWithMeta() {
  const { items, meta } = await loadRuns();
  return items.map((r) => withMeta(r, meta));
}
