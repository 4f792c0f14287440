"""Writes deploy/grafana/rlcockpit-dashboard.json (docs/ops.md): the seed's RL panels over the
metrics rlcockpit exports, and nothing else (tests/test_ops_grafana.py queries every expression
against a real Prometheus). Run: python deploy/grafana/build_dashboard.py"""

from __future__ import annotations

import json
from pathlib import Path

R = 'run=~"$run"'
DS = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}


def target(expr: str, legend: str, ref: str, **extra) -> dict:
    return {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": ref, **extra}


def panel(pid: int, title: str, kind: str, pos: tuple[int, int, int, int], targets: list[dict],
          description: str, **extra) -> dict:
    x, y, w, h = pos
    return {"id": pid, "type": kind, "title": title, "description": description, "datasource": DS,
            "gridPos": {"x": x, "y": y, "w": w, "h": h}, "targets": targets, **extra}


def lines(unit: str = "short", thresholds: list | None = None) -> dict:
    defaults: dict = {"unit": unit, "custom": {"lineWidth": 1, "showPoints": "never"}}
    if thresholds:
        defaults["thresholds"] = {"mode": "absolute", "steps": thresholds}
        defaults["custom"]["thresholdsStyle"] = {"mode": "line"}
    return {"fieldConfig": {"defaults": defaults, "overrides": []}}


PANELS = [
    panel(1, "Reward", "timeseries", (0, 0, 8, 8), [
        target(f"rlcockpit_reward_mean{{{R}}}", "{{run}} mean", "A"),
        target(f"rlcockpit_reward_std{{{R}}}", "{{run}} std", "B"),
    ], "reward/mean and reward/std per step (DESIGN.md §8 row 1).", **lines()),
    panel(2, "KL tiers", "timeseries", (8, 0, 8, 8), [
        target(f"rlcockpit_kl_mean{{{R}}} / rlcockpit_kl_target{{{R}}}", "{{run}} KL / target", "A"),
        target(f"sum by (run, severity) (rlcockpit_findings_total{{{R},detector=\"kl_tiers\"}})",
               "{{run}} kl_tiers {{severity}}", "B"),
    ], "kl/mean as a multiple of kl/target against the kl_tiers detector's tiers (yellow 1.5x, red "
       "2.5x, black 10x; docs/detectors.md), and the findings it raised.",
        **lines("short", [{"color": "green", "value": None}, {"color": "yellow", "value": 1.5},
                          {"color": "red", "value": 2.5}, {"color": "#000000", "value": 10}])),
    panel(3, "Findings by severity (10 min)", "timeseries", (16, 0, 8, 8), [
        target(f"sum by (run, severity) (increase(rlcockpit_run_findings_total{{{R}}}[10m]))",
               "{{run}} {{severity}}", "A"),
    ], "New findings per tier (the alerting rules' signal).", **lines()),
    panel(4, "Advantage distribution", "heatmap", (0, 8, 12, 9), [
        target(f"sum by (le) (rlcockpit_advantage_distribution_bucket{{{R}}})", "{{le}}", "A",
               format="heatmap"),
    ], "Latest step's advantages on fixed edges (std units), one column per scrape: a collapse to "
       "0 (no signal) or heavy tails show up as colour moving.",
        options={"calculate": False, "yAxis": {"unit": "short"}, "cellGap": 1}),
    panel(5, "Per-layer gradient norm", "timeseries", (12, 8, 12, 9), [
        target(f"rlcockpit_grad_norm_layer{{{R}}}", "{{run}} {{layer}}", "A"),
        target(f"rlcockpit_grad_norm_actor{{{R}}}", "{{run}} actor (global)", "B"),
    ], "grad/norm/layer/<name> per layer group (seed 000 §4.3: an embedding norm of 12.7 against "
       "< 2.0 located a KL blow-up).", **lines()),
    panel(6, "Reward uncertainty vs quality", "timeseries", (0, 17, 12, 8), [
        target(f"rlcockpit_reward_uncertainty_mean{{{R}}}", "{{run}} uncertainty", "A"),
        target(f"rlcockpit_reward_raw_mean{{{R}}}", "{{run}} raw RM score", "B"),
        target(f"rlcockpit_reward_gated_frac{{{R}}}", "{{run}} gated fraction", "C"),
    ], "Reward-model uncertainty against its score and the share of gated samples (seed 000 §3.1: "
       "uncertainty > 0.15 is gated).", **lines()),
    panel(7, "Phase time", "timeseries", (12, 17, 12, 8), [
        target(f"sum by (run, rl_phase) (rate(rlcockpit_phase_duration_seconds_sum{{{R}}}[$__rate_interval]))"
               f" / sum by (run, rl_phase) (rate(rlcockpit_phase_duration_seconds_count{{{R}}}[$__rate_interval]))",
               "{{run}} {{rl_phase}} mean", "A"),
        target(f"histogram_quantile(0.9, sum by (run, rl_phase, le) (rate(rlcockpit_phase_duration_seconds_bucket{{{R}}}[$__rate_interval])))",
               "{{run}} {{rl_phase}} p90", "B"),
    ], "Mean and p90 duration of each phase of the phase machine.", **lines("s")),
    panel(8, "Entropy, clip fraction, response length", "timeseries", (0, 25, 12, 8), [
        target(f"rlcockpit_policy_entropy{{{R}}}", "{{run}} entropy", "A"),
        target(f"rlcockpit_policy_clip_frac{{{R}}}", "{{run}} clip frac", "B"),
        target(f"rlcockpit_response_length_mean{{{R}}}", "{{run}} length", "C"),
    ], "DESIGN.md §8 rows 1-2.", **lines()),
    panel(9, "Throughput and cost", "timeseries", (12, 25, 12, 8), [
        target(f"rlcockpit_perf_tokens_per_second{{{R}}}", "{{run}} tokens/s", "A"),
        target(f"rlcockpit_cost_tokens_generated{{{R}}}", "{{run}} tokens generated / step", "B"),
        target(f"rlcockpit_cost_usd_per_step{{{R}}}", "{{run}} USD / step", "C"),
    ], "Seed 004: where the money goes (docs/cost.md).", **lines()),
    panel(10, "Runs", "table", (0, 33, 24, 6), [
        target(f"rlcockpit_run_last_step{{{R}}}", "", "A", format="table", instant=True),
    ], "Last step of each exported run."),
]

DASHBOARD = {
    "__inputs": [{"name": "DS_PROMETHEUS", "label": "Prometheus", "type": "datasource",
                  "pluginId": "prometheus", "pluginName": "Prometheus"}],
    "title": "rlcockpit: RL post-training", "uid": "rlcockpit-rl", "tags": ["rlcockpit", "rl"],
    "schemaVersion": 39, "version": 1, "editable": True, "refresh": "10s",
    "time": {"from": "now-1h", "to": "now"},
    "templating": {"list": [{
        "name": "run", "label": "run", "type": "query", "datasource": DS,
        "query": {"query": "label_values(rlcockpit_run_info, run)", "refId": "run"},
        "definition": "label_values(rlcockpit_run_info, run)",
        "multi": True, "includeAll": True, "allValue": ".*", "refresh": 2,
        "current": {"text": "All", "value": "$__all"}}]},
    "panels": PANELS,
}


if __name__ == "__main__":
    out = Path(__file__).with_name("rlcockpit-dashboard.json")
    out.write_text(json.dumps(DASHBOARD, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {out}")
