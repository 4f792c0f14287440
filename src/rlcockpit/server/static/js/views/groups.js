// Groups of runs (the seeds of a recipe) and their aggregate curve: runs are grouped by a config
// key (dotted, `optim.lr`), by tag, by the runs table's group, or by a name pattern, and a group is
// drawn as one line — the mean over its runs at each step — with a band (mean ± std, or min–max).
// Steps that not every run has are aggregated over the runs that have them; each point says n.
// Pure functions (no DOM): the dashboard's overlay (views/overlay.js) and the sweep view use them.
import { colourAt } from "../colors.js";

export const BANDS = ["std", "minmax"];
const AGG_POINTS = 500; // buckets of the common step grid when the curves were downsampled

// "config:optim.lr" | "tag" | "group" | "name:<regex>" | "" -> {by, key} (by: "" when not grouped).
export function parseGroupBy(text) {
  const s = String(text || "");
  if (s === "tag" || s === "group") return { by: s, key: "" };
  const i = s.indexOf(":");
  if (i > 0 && ["config", "name"].includes(s.slice(0, i)) && s.slice(i + 1)) return { by: s.slice(0, i), key: s.slice(i + 1) };
  return { by: "", key: "" };
}

export function groupByText({ by, key }) {
  if (!by) return "";
  return by === "tag" || by === "group" ? by : `${by}:${key}`;
}

// A run's name grouped by a pattern: with a capture group, the first capture (`^(.*)-seed\d+$`);
// without one, the name with every match removed (`-seed\d+` strips the seed). An invalid pattern
// or a name it does not match keeps the whole name.
export function nameKey(name, pattern) {
  let re;
  try {
    re = new RegExp(pattern);
  } catch {
    return name;
  }
  const m = name.match(re);
  if (!m) return name;
  if (m.length > 1 && m[1] !== undefined) return m[1];
  return name.replace(new RegExp(pattern, "g"), "") || name;
}

const show = (v) => (v === undefined || v === null ? "—" : Array.isArray(v) ? v.join(", ") : String(v));

// The group keys of one run (a run with several tags is in each tag's group).
export function groupKeys(run, spec) {
  switch (spec.by) {
    case "config": return [`${spec.key}=${show(run.flat ? run.flat[spec.key] : undefined)}`];
    case "tag": return run.tags && run.tags.length ? run.tags.map(String) : ["—"];
    case "group": return [run.group || "—"];
    case "name": return [nameKey(run.name || run.run_id, spec.key)];
    default: return [run.run_id];
  }
}

// [{key, runs: [run ids in start order], color}] in the order of their first run's start. The i-th
// group takes the i-th colour of colors.js (the same groups keep their colours on every chart and
// reload; two groups never share one; five seeds of two recipes are blue and orange).
export function makeGroups(runs, spec) {
  const ordered = [...runs].sort((a, b) => ((a.started_at ?? Infinity) - (b.started_at ?? Infinity)) || (a.run_id < b.run_id ? -1 : 1));
  const groups = new Map();
  for (const r of ordered) {
    for (const key of groupKeys(r, spec)) {
      if (!groups.has(key)) groups.set(key, { key, runs: [] });
      groups.get(key).runs.push(r.run_id);
    }
  }
  return [...groups.values()].map((g, i) => ({ ...g, color: colourAt(i) }));
}

function stats(values) {
  const n = values.length;
  const mean = values.reduce((a, b) => a + b, 0) / n;
  const variance = values.reduce((a, b) => a + (b - mean) ** 2, 0) / n; // over the runs: population std
  return { n, mean, std: Math.sqrt(variance), min: Math.min(...values), max: Math.max(...values) };
}

// The points of each member on a common step grid: exact steps when no curve was downsampled; else
// AGG_POINTS buckets of equal width (a downsampled curve keeps different steps in every run), each
// member's value in a bucket the mean of its points there and the bucket's step its middle.
function aligned(members) {
  const curves = members.filter((m) => m && m.steps && m.steps.length);
  if (!curves.some((m) => m.downsampled)) {
    return curves.map((m) => new Map(m.steps.map((s, j) => [s, { v: m.values[j], w: m.walls ? m.walls[j] : null }])));
  }
  const lo = Math.min(...curves.map((m) => m.steps[0]));
  const hi = Math.max(...curves.map((m) => m.steps[m.steps.length - 1]));
  const width = Math.max(1, Math.ceil((hi - lo + 1) / AGG_POINTS));
  return curves.map((m) => {
    const acc = new Map();
    m.steps.forEach((s, j) => {
      const v = m.values[j];
      if (v === null || !Number.isFinite(v)) return;
      const b = Math.floor((s - lo) / width);
      const cell = acc.get(b) || { sum: 0, n: 0, w: null };
      cell.sum += v;
      cell.n += 1;
      cell.w = cell.w ?? (m.walls ? m.walls[j] : null);
      acc.set(b, cell);
    });
    return new Map([...acc].map(([b, c]) => [lo + b * width + Math.floor((width - 1) / 2), { v: c.sum / c.n, w: c.w }]));
  });
}

// members: [{steps, values, walls?, downsampled?}] -> {steps, mean, lower, upper, n, walls}: at each
// step the runs that have a finite value there (n of them); band "std" is mean ± std, "minmax" the
// smallest and largest value.
export function aggregate(members, band = "std") {
  const maps = aligned(members);
  const steps = [...new Set(maps.flatMap((m) => [...m.keys()]))].sort((a, b) => a - b);
  const out = { steps: [], mean: [], lower: [], upper: [], n: [], walls: [] };
  for (const s of steps) {
    const here = maps.map((m) => m.get(s)).filter((p) => p && p.v !== null && Number.isFinite(p.v));
    if (!here.length) continue;
    const st = stats(here.map((p) => p.v));
    const walls = here.map((p) => p.w).filter((w) => w !== null && w !== undefined);
    out.steps.push(s);
    out.mean.push(st.mean);
    out.lower.push(band === "minmax" ? st.min : st.mean - st.std);
    out.upper.push(band === "minmax" ? st.max : st.mean + st.std);
    out.n.push(st.n);
    out.walls.push(walls.length ? walls.reduce((a, b) => a + b, 0) / walls.length : null);
  }
  return out;
}
