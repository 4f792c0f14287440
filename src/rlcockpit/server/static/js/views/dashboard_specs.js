// What each dashboard chart shows (metric names: docs/metrics.md). lines(data, opts, t) turns the
// fetched series into drawn lines; derived lines (EMA, moving average, P90) are computed here.
import { label } from "../i18n.js";
import { ema, movingAverage, rollingQuantile } from "../stats.js";

// KL warning line: the yellow tier starts at 1.5 x the target KL (DESIGN.md §6).
export const KL_WARNING_FACTOR = 1.5;

function line(data, name, label, extra = {}) {
  const d = data.get(name);
  if (!d || !d.steps.length) return null;
  return { name, label, steps: d.steps, values: d.values, walls: d.walls, ...extra };
}

function derived(data, name, label, fn, extra = {}) {
  const d = data.get(name);
  if (!d || !d.steps.length) return null;
  return { name, label, steps: d.steps, values: fn(d.values), walls: d.walls, derived: true, ...extra };
}

const simple = (pairs) => (data, opts, t) => pairs.map(([name, key, extra]) => line(data, name, t(key), extra)).filter(Boolean);

function latestValue(data, name) {
  const d = data.get(name);
  if (!d) return null;
  for (let i = d.values.length - 1; i >= 0; i--) if (Number.isFinite(d.values[i])) return d.values[i];
  return null;
}

function rewardLines(data, opts, t) {
  return [
    line(data, "reward/mean", t("line.raw"), { faint: true, color: "#3b82f6" }),
    derived(data, "reward/mean", t("line.ema"), (v) => ema(v, opts.smoothing ?? 0.6), { color: "#1d4ed8", width: 2.2 }),
  ].filter(Boolean);
}

// Seed 002 §2.2: the KL chart has three lines — current value, moving average and P90 over a window.
function klLines(data, opts, t) {
  const w = opts.klWindow ?? 10;
  return [
    line(data, "kl/mean", t("line.current"), { color: "#ef4444" }),
    derived(data, "kl/mean", t("line.moving_avg", { n: w }), (v) => movingAverage(v, w), { color: "#7c3aed", width: 2 }),
    derived(data, "kl/mean", t("line.p90", { n: w }), (v) => rollingQuantile(v, w, 0.9), { color: "#f59e0b", dashed: true }),
  ].filter(Boolean);
}

function klHlines(data, opts, t) {
  const target = latestValue(data, "kl/target");
  if (target === null) return [];
  return [
    { value: target, label: t("line.kl_target"), color: "#10b981" },
    { value: target * KL_WARNING_FACTOR, label: t("line.kl_warning"), color: "#dc2626" },
  ];
}

function categoryLines(data, opts, t) {
  const out = [];
  for (const [name, d] of [...data.entries()].sort()) {
    const m = name.match(/^reward\/category\/(.+)\/mean$/);
    if (m && d.steps.length) out.push({ name, label: label("category", m[1]), steps: d.steps, values: d.values, walls: d.walls });
  }
  return out;
}

export const CHARTS = [
  { id: "reward", row: 1, titleKey: "chart.reward", names: ["reward/mean"], primary: "reward/mean", lines: rewardLines, ownSmoothing: true },
  // the KL chart keeps its current value raw by default: its moving average and P90 are the smoothing
  { id: "kl", row: 1, titleKey: "chart.kl", names: ["kl/mean", "kl/target"], primary: "kl/mean", lines: klLines, hlines: klHlines, defaultSmoothing: 0 },
  { id: "entropy", row: 1, titleKey: "chart.entropy", names: ["policy/entropy"], primary: "policy/entropy",
    lines: simple([["policy/entropy", "line.entropy"]]) },
  { id: "loss", row: 1, titleKey: "chart.loss", names: ["policy/loss", "value/loss"], primary: "policy/loss",
    lines: simple([["policy/loss", "line.actor_loss"], ["value/loss", "line.critic_loss"]]) },
  { id: "length", row: 2, titleKey: "chart.length", names: ["response/length_mean", "response/length_max"], primary: "response/length_mean",
    lines: simple([["response/length_mean", "line.length_mean"], ["response/length_max", "line.length_max", { faint: true }]]) },
  { id: "clip", row: 2, titleKey: "chart.clip", names: ["policy/clip_frac", "value/clip_frac"], primary: "policy/clip_frac",
    lines: simple([["policy/clip_frac", "line.policy_clip"], ["value/clip_frac", "line.value_clip"]]) },
  { id: "truncation", row: 2, titleKey: "chart.truncation", names: ["response/truncated_frac", "response/eos_frac"], primary: "response/truncated_frac",
    lines: simple([["response/truncated_frac", "line.truncated"], ["response/eos_frac", "line.eos"]]) },
  { id: "grad", row: 2, titleKey: "chart.grad", names: ["grad/norm/actor", "grad/norm/critic"], primary: "grad/norm/actor",
    lines: simple([["grad/norm/actor", "line.grad_actor"], ["grad/norm/critic", "line.grad_critic"]]) },
  { id: "category", row: 3, titleKey: "chart.category", names: ["reward/category/*"], primary: null, lines: categoryLines },
];

// Data-parallel runs (docs/distributed.md): one line per rank of a dist/<metric>/rank/<r> family.
function rankLines(prefix) {
  return (data, opts, t) => {
    const out = [];
    for (const [name, d] of data.entries()) {
      if (!name.startsWith(prefix) || !d.steps.length) continue;
      const r = name.slice(prefix.length);
      if (!/^\d+$/.test(r)) continue;
      out.push({ name, label: t("line.rank", { r }), steps: d.steps, values: d.values, walls: d.walls, rank: Number(r) });
    }
    return out.sort((a, b) => a.rank - b.rank);
  };
}

const rankChart = (id, titleKey, prefix) => ({ id, row: 4, titleKey, names: [`${prefix}*`], primary: null, lines: rankLines(prefix) });

// The fourth row, shown only for a run that logged dist/ metrics (more than one rank).
export const RANK_CHARTS = [
  rankChart("rank-step", "chart.rank_step", "dist/step_s/rank/"),
  rankChart("rank-rollout", "chart.rank_rollout", "dist/time/rollout_s/rank/"),
  rankChart("rank-grad", "chart.rank_grad", "dist/grad_norm/rank/"),
  rankChart("rank-memory", "chart.rank_memory", "dist/rss_gb/rank/"),
];

export function isDistributed(metricNames) {
  return (metricNames || []).some((n) => n.startsWith("dist/"));
}

export const HEATMAPS = [
  { id: "reward-hist", titleKey: "chart.reward_hist", name: "reward/hist" },
  { id: "length-hist", titleKey: "chart.length_hist", name: "response/length/hist" },
];

export function chartSpecs(distributed) {
  return distributed ? [...CHARTS, ...RANK_CHARTS] : CHARTS;
}

export function seriesNames(distributed = false) {
  return [...new Set(chartSpecs(distributed).flatMap((c) => c.names))];
}
