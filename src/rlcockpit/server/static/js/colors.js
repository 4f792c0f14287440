// One colour per run, the same on every page (dashboard panels, comparison, runs table, header):
// a run's colour is its index in the list of known runs sorted by start time (then id), so a new
// run (it starts later) never shifts the colours of the older ones. Past the palette, colours step
// round the hue circle by the golden angle, so no two known runs share one. A run the page has not
// been told about yet gets a colour hashed from its id (registerRuns() assigns it for good).
// runLabel(id): the run's name, plus a short id when another known run has the same name.
export const PALETTE = ["#3b82f6", "#f97316", "#10b981", "#a855f7", "#ef4444", "#0ea5e9", "#eab308", "#64748b",
  "#ec4899", "#14b8a6", "#84cc16", "#b45309"];

const known = new Map(); // run_id -> {name, started}
let order = new Map(); // run_id -> index

export function registerRuns(runs) {
  for (const r of runs || []) {
    if (!r || !r.run_id) continue;
    known.set(r.run_id, { name: r.name || r.run_id, started: r.started_at ?? Infinity });
  }
  const ids = [...known.keys()].sort((a, b) => (known.get(a).started - known.get(b).started) || (a < b ? -1 : a > b ? 1 : 0));
  order = new Map(ids.map((id, i) => [id, i]));
}

// the i-th colour (the palette, then golden-angle hues): runs by start order, groups by their first run
export function colourAt(i) {
  if (i < PALETTE.length) return PALETTE[i];
  const hue = Math.round((i * 137.508) % 360);
  return `hsl(${hue}, 62%, 46%)`;
}

function hash(text) {
  let x = 2166136261;
  for (let i = 0; i < text.length; i++) x = Math.imul(x ^ text.charCodeAt(i), 16777619);
  return x >>> 0;
}

export function runColor(runId) {
  const i = order.get(runId);
  return i === undefined ? colourAt(hash(String(runId)) % PALETTE.length) : colourAt(i);
}

// A short id that no other run of the same name shares: the id's last part (a run id is
// `<date>-<time>-<hex>`, and runs started the same day share the front), else its shortest
// distinguishing end of 6 characters or more, else the whole id.
function shortId(runId, others) {
  const last = (id) => id.split(/[-_.]/).pop();
  const tail = last(runId);
  if (tail.length >= 4 && !others.some((o) => last(o) === tail)) return tail;
  for (let n = 6; n < runId.length; n++) {
    const p = runId.slice(-n);
    if (!others.some((o) => o.endsWith(p))) return p;
  }
  return runId;
}

export function runName(runId) {
  return (known.get(runId) && known.get(runId).name) || runId;
}

export function runLabel(runId) {
  const name = runName(runId);
  const same = [...known.entries()].filter(([id, r]) => id !== runId && r.name === name).map(([id]) => id);
  return same.length ? `${name} · ${shortId(runId, same)}` : name;
}

export function runSwatch(h, runId, attrs = {}) {
  const color = runColor(runId);
  return h("span", { class: "run-swatch", title: runLabel(runId), dataset: { color, run: runId }, style: { background: color }, ...attrs });
}
