// The cost panel (seed 004, docs/cost.md): what the run has cost so far and will cost, where the
// time goes by phase, the last steps, and what the seed's sampling schedule would save. Reads
// GET /api/runs/{run}/cost; refreshes while the run is live. Labels in namespace "cost.".
import { get } from "../api.js";
import { extend, label, t } from "../i18n.js";
import { registerView } from "../router.js";
import { clear, fmt, h, panel, withStates } from "../ui.js";

extend({
  en: {
    "cost.tab": "Cost", "cost.title": "Cost ledger", "cost.so_far": "So far", "cost.projected": "Projected",
    "cost.tokens_generated": "Tokens generated", "cost.tokens_trained": "Tokens trained",
    "cost.flops": "FLOPs (2N·generated + 6N·trained)", "cost.wall": "Step time", "cost.acc_hours": "Accelerator-hours",
    "cost.usd": "Money (USD)", "cost.mfu": "Utilisation (MFU)", "cost.eta": "ETA", "cost.steps_done": "Steps",
    "cost.phases": "Time by phase", "cost.last_steps": "Last steps", "cost.step": "Step", "cost.no_price":
      "No price set: give cost.price_per_hour when training, or rlcockpit cost --price-per-hour.",
    "cost.none": "No token counts recorded", "cost.none_help":
      "The ledger reads cost/tokens_generated, which rlcockpit's trainer logs every step.",
    "cost.schedule": "Sampling schedule", "cost.schedule_text":
      "n_samples {n} → mean {mean}: {saved} fewer generated tokens over the run (USD {from} → {to}).",
    "cost.params": "Parameters", "cost.hardware": "Hardware", "cost.step_time": "Time per step (mean)",
    "cost.total_time": "Total time", "cost.eta_none": "—", "cost.eta_over": "none: the run is over ({status})",
  },
  zh: {
    "cost.tab": "成本", "cost.title": "成本账本", "cost.so_far": "已花费", "cost.projected": "预计总计",
    "cost.tokens_generated": "生成 token", "cost.tokens_trained": "训练 token",
    "cost.flops": "FLOPs（2N·生成 + 6N·训练）", "cost.wall": "步耗时", "cost.acc_hours": "加速卡时",
    "cost.usd": "费用（美元）", "cost.mfu": "算力利用率（MFU）", "cost.eta": "预计剩余", "cost.steps_done": "步数",
    "cost.phases": "各阶段耗时占比", "cost.last_steps": "最近几步", "cost.step": "步", "cost.no_price":
      "未设置价格：训练时设置 cost.price_per_hour，或使用 rlcockpit cost --price-per-hour。",
    "cost.none": "没有记录 token 数", "cost.none_help": "账本读取 cost/tokens_generated，rlcockpit 的训练器每步都会记录。",
    "cost.schedule": "采样调度", "cost.schedule_text":
      "每个 prompt 采样数 {n} → 平均 {mean}：整个运行少生成 {saved} 的 token（费用 {from} → {to} 美元）。",
    "cost.params": "参数量", "cost.hardware": "硬件", "cost.step_time": "每步耗时（平均）",
    "cost.total_time": "总耗时", "cost.eta_none": "—", "cost.eta_over": "无：运行已结束（{status}）",
  },
});

const REFRESH_MS = 5000;

function big(x) {
  if (x === null || x === undefined || !Number.isFinite(x)) return "—";
  for (const [u, s] of [["P", 1e15], ["T", 1e12], ["G", 1e9], ["M", 1e6], ["k", 1e3]]) {
    if (Math.abs(x) >= s) return `${(x / s).toPrecision(3)} ${u}`;
  }
  return fmt(x);
}

function dur(s) {
  if (s === null || s === undefined || !Number.isFinite(s)) return "—";
  if (s >= 3600) return `${(s / 3600).toFixed(2)} h`;
  if (s >= 60) return `${(s / 60).toFixed(1)} min`;
  return `${s.toPrecision(3)} s`;
}

// The ETA of a run that is over is none (its status says why), never "0.00 s".
function eta(d, status) {
  if (status && status !== "running") return t("cost.eta_over", { status: t(`status.${status}`) });
  return d.eta_s > 0 ? dur(d.eta_s) : t("cost.eta_none");
}

// Time by phase: a row per phase, the name in its own column so it never runs into the bar.
function phaseRows(share) {
  return Object.entries(share || {}).map(([ph, x]) => h("div", { class: "cost-phase", dataset: { phase: ph },
    style: { display: "grid", gridTemplateColumns: "9em 250px 5em", alignItems: "center", columnGap: "10px" } },
    h("span", { class: "cost-phase-name", title: ph, text: label("phase", String(ph).toLowerCase()),
      style: { overflow: "hidden", textOverflow: "ellipsis", whiteSpace: "nowrap" } }),
    h("span", { class: "cost-bar-track", style: { display: "block" } },
      h("span", { class: "cost-bar", style: { display: "block", height: "10px", background: "#5b8ff9", width: `${Math.max(1, Math.round(240 * x))}px` } })),
    h("span", { class: "muted cost-phase-share", text: `${(100 * x).toFixed(1)} %` })));
}

function render(body, d, status) {
  const tot = d.totals || {};
  const pr = d.projected || {};
  if (!d.steps.length && !tot.steps) {
    body.append(h("div", { class: "state state-empty", id: "cost-empty" },
      h("div", { class: "state-title", text: t("cost.none") }), h("div", { class: "muted", text: t("cost.none_help") })));
    return;
  }
  const rows = [
    ["cost.steps_done", fmt(tot.steps), fmt(pr.steps)],
    ["cost.tokens_generated", big(tot.tokens_generated), big(pr.tokens_generated)],
    ["cost.tokens_trained", big(tot.tokens_trained), ""],
    ["cost.flops", big(tot.flops), big(pr.flops)],
    ["cost.step_time", dur(tot.steps ? tot.wall_s / tot.steps : null), ""],
    ["cost.total_time", dur(tot.wall_s), dur(pr.wall_s)],
    ["cost.acc_hours", fmt(tot.accelerator_hours, 4), fmt(pr.accelerator_hours, 4)],
    ["cost.usd", fmt(tot.usd, 4), fmt(pr.usd, 4)],
  ];
  if (tot.mfu !== undefined) rows.push(["cost.mfu", `${(100 * tot.mfu).toFixed(1)} %`, ""]);
  rows.push(["cost.eta", "", eta(d, status)]);
  const table = h("table", { class: "list", id: "cost-totals" },
    h("thead", {}, h("tr", {}, h("th"), h("th", { text: t("cost.so_far") }), h("th", { text: t("cost.projected") }))),
    h("tbody", {}, rows.map(([k, a, b]) => h("tr", { dataset: { key: k } }, h("td", { text: t(k) }), h("td", { text: a }), h("td", { text: b })))));
  const p = d.pricing;
  const params = Object.entries(d.params || {}).map(([k, v]) => `${k.split("_")[0]} ${big(v)}`).join(", ") || "—";
  const meta = h("div", { class: "muted", id: "cost-meta" },
    `${t("cost.hardware")}: ${p.accelerators} × ${p.accelerator}${p.price_per_hour ? ` @ $${p.price_per_hour}/h` : ""} · ${t("cost.params")}: ${params}`);
  const noPrice = p.price_per_hour ? null : h("div", { class: "muted", text: t("cost.no_price") });
  const phases = h("div", { id: "cost-phases", style: { display: "grid", rowGap: "4px" } }, phaseRows(d.phase_share));
  const steps = h("table", { class: "list", id: "cost-steps" },
    h("thead", {}, h("tr", {}, [t("cost.step"), t("cost.tokens_generated"), t("cost.tokens_trained"), t("cost.wall"), "FLOPs", "USD"].map((c) => h("th", { text: c })))),
    h("tbody", {}, d.steps.slice(-10).reverse().map((s) => h("tr", {},
      [String(s.step), big(s.tokens_generated), big(s.tokens_trained), dur(s.wall_s), big(s.flops), fmt(s.usd, 5)].map((c) => h("td", { text: c }))))));
  body.append(panel(t("cost.title"), meta, noPrice, table), panel(t("cost.phases"), phases), panel(t("cost.last_steps"), steps));
  if (d.schedule) {
    const s = d.schedule;
    body.append(panel(t("cost.schedule"), h("div", { id: "cost-schedule", text: t("cost.schedule_text", {
      n: s.constant_n_samples, mean: s.mean_n_samples.toFixed(2), saved: `${(100 * s.saved_fraction).toFixed(0)} %`,
      from: fmt(s.usd_constant, 4), to: fmt(s.usd_scheduled, 4) }) })));
  }
}

function mount(root, ctx) {
  const body = h("div", { class: "cost-view", id: "cost-view" });
  root.append(body);
  const load = () => get(`/runs/${encodeURIComponent(ctx.runId)}/cost`, { steps: 50 });
  const status = () => (ctx.summary && ctx.summary.run ? ctx.summary.run.status : null);
  withStates(body, load, (d) => render(body, d, status()));
  const timer = ctx.live ? setInterval(async () => {
    try {
      const d = await load();
      clear(body);
      render(body, d, status());
    } catch {
      // keep the last ledger on a failed refresh; the next one retries
    }
  }, REFRESH_MS) : null;
  return () => { if (timer) clearInterval(timer); clear(root); };
}

registerView("cost", { scope: "run", labelKey: "cost.tab", order: 45, mount });
