"""Drive the peer failure detectors over recorded metric streams, each as its own docs say.

Runs INSIDE .benchvenv-peers (benchmarks/requirements-peers.txt; ``make .benchvenv-peers/.installed``):

    .benchvenv-peers/bin/python benchmarks/_peer_runner.py --streams out/*.stream.jsonl --out peers.json
    .benchvenv-peers/bin/python benchmarks/_peer_runner.py --self-check   # a synthetic failure per peer

Input: stream files (JSONL) written by benchmarks/detection.py: a first line {"run": ..., "onset": N |
null, "algo": ...} (optional "config": {...} with rlcockpit config facts, see ``run_config``), then one
line per step {"step": s, "metrics": {catalog name: value}, "samples": [{"reward", "length",
"response", "prompt_id", "components", "truncated"}]}.

Output (JSON): {peer: {"version", "driven", "mapping", "cannot_fire", "runs": {run: {"status",
"alerts": [[step, name, severity, "live" | "post-hoc"], ...]}}}}, or {peer: {"error": why}} when the
peer is not installed or cannot be driven at all. The 4th element of an alert is new (detection.py
reads only the first three): "post-hoc" marks what the peer's end-of-run report found that its live
path had not announced, dated at the stream's last step. A peer failing on one stream is reported
with its error for that run, never hidden.

Every peer is fed ITS OWN metric names (the tables below; each name is checked against the peer's own
alias table / schema / name rules before a stream is fed, so a mapping that no longer resolves is an
error, not a silently skipped detector), with its documented defaults and its documented cadence:

| peer | version | driven as its README says | warm-up (defaults) |
| --- | --- | --- | --- |
| rlwatch | 0.5.1 (+ [monitoring]: real dip test) | ``rlwatch.attach(framework="manual", run_id=...)``, then ``monitor.log_step(step, entropy=, kl_divergence=, reward_mean=, reward_std=, rewards=, advantage_std=, loss=, learning_rate=, clip_fraction=, grad_norm=)`` every step; an alert returned at step s is a detection at s | 20 steps (entropy, KL, advantage, grad norm; KL/adv/grad baselines frozen after 100 more); 50 (reward hacking, reward drift); cooldown 100 steps per detector and severity |
| rlprobe | 0.1.0 | its manual API: ``Recorder(run_dir).log_step(step, **StepRecord fields)`` + ``log_samples`` (its default top/bottom/random sampling) every step; live diagnosis as its own TRL callback does it: every 25 steps ``recorder.flush()`` + ``rlprobe.doctor.diagnose(run_dir)``, a (signature, severity) pair not reported before is an alert; at the end ``diagnose`` once more (what ``rlprobe doctor`` prints) | 30 recorded steps for every detector; first live check with >= 30 steps at step 50 |
| rldoctor | 0.2.0 | ``rl_doctor.live.LiveMonitor(config=..., check_every=25)`` (the README's live example; ``min_steps`` 60) and ``monitor.log(metrics, step=step)`` every step: a finding at WARNING+ that is new or worse is an alert; at the end ``diagnose(run_from_records(...))`` (the post-hoc report) | 60 steps, then a check every 25 logged steps (at 75, 100, 125, ...) |
| trainpulse | 0.4.0 | ``Monitor(MonitorConfig())`` and ``monitor.log(name, step, value)`` for each of its names every step (its "Full training loop"); an alert returned at step s is a detection at s | loss spike: 50-step window; step time: 20; plateau: 100 steps; NaN, gradient and LR checks from the first step |
| stabilityguard | 0.3.0 | only ``stabilityguard.rlhf.RewardCollapseDetector().detect_collapse(rewards)`` on each step's per-sample rewards (its docstring's loop); True at step s is a detection at s | 10 consecutive collapsed steps (``collapse_patience``) |

Name mapping (rlcockpit catalog name -> the peer's name):

- rlwatch (``log_step`` keywords; KL is its TRL/verl/OpenRLHF ``kl``, a per-token mean):
  policy/entropy -> entropy, kl/token_mean -> kl_divergence, reward/mean -> reward_mean, reward/std ->
  reward_std, per-sample rewards -> rewards, advantage/std -> advantage_std, policy/loss -> loss,
  optim/lr/actor -> learning_rate, policy/clip_frac -> clip_fraction, grad/norm/actor -> grad_norm.
- rlprobe (``StepRecord`` fields; KL as its TRL callback maps TRL's per-token ``kl``): see
  ``RLPROBE_FIELDS``; reward/<component>/mean -> reward_components; samples -> SampleRecord
  (completion_text, completion_len, truncated, reward_total, reward_components, prompt_id).
- rldoctor (TRL / verl keys of its alias table ``rl_doctor.aliases.ALIASES``; each checked to resolve
  to the canonical field named): see ``RLDOCTOR_KEYS``; reward/<component>/mean ->
  rewards/<component>/mean (its reward-component pattern).
- trainpulse (names its ``_infer_metric_type`` classifies): policy/loss -> loss, grad/norm/actor ->
  grad_norm, optim/lr/actor -> learning_rate, sum of time/*_s -> step_time, reward/mean -> reward
  (only NaN/Inf-checked: trainpulse has no reward detector).
- stabilityguard: per-sample rewards -> the ``rewards`` tensor.

What can fire on rlcockpit's streams, and what cannot (for want of what): ``CANNOT_FIRE`` (also in
the output and in docs/detection.md).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

Alert = list[Any]  # [step, name, severity, "live" | "post-hoc"]
Row = dict[str, Any]

LIVE, POST_HOC = "live", "post-hoc"

# --------------------------------------------------------------------------- name maps (pure)

#: rlwatch ``log_step`` keyword -> rlcockpit catalog name (``rewards`` comes from the samples).
RLWATCH_KWARGS: dict[str, str] = {
    "entropy": "policy/entropy",
    "kl_divergence": "kl/token_mean",  # its TRL/verl/OpenRLHF alias lists: kl, actor/kl_loss, ppo_kl (per token)
    "reward_mean": "reward/mean",
    "reward_std": "reward/std",
    "advantage_std": "advantage/std",
    "loss": "policy/loss",
    "learning_rate": "optim/lr/actor",
    "clip_fraction": "policy/clip_frac",
    "grad_norm": "grad/norm/actor",
}

#: rlprobe ``StepRecord`` field -> rlcockpit catalog name.
RLPROBE_FIELDS: dict[str, str] = {
    "reward_mean": "reward/mean", "reward_std": "reward/std", "reward_min": "reward/min",
    "reward_max": "reward/max",
    "kl_mean": "kl/token_mean",  # its TRL callback maps TRL's per-token "kl" here
    "kl_max": "kl/token_max",
    "entropy_mean": "policy/entropy", "ratio_mean": "policy/ratio_mean", "clip_fraction": "policy/clip_frac",
    "adv_mean": "advantage/mean", "adv_std": "advantage/std",
    "zero_variance_group_frac": "reward/frac_zero_std_groups",
    "value_loss": "value/loss", "value_explained_variance": "value/explained_var",
    "value_clip_fraction": "value/clip_frac",
    "loss": "policy/loss", "lr": "optim/lr/actor", "grad_norm": "grad/norm/actor",
    "weight_update_ratio": "update/ratio/actor",
    "completion_len_mean": "response/length_mean", "completion_len_max": "response/length_max",
    "truncation_rate": "response/truncated_frac", "max_len_hit_frac": "response/truncated_frac",
    "eos_rate": "response/eos_frac", "repetition_rate": "response/repetition_rate",
}

#: rldoctor log key (from its alias table) -> (rlcockpit catalog name, the canonical field it must
#: resolve to in ``rl_doctor.aliases.resolve``).
RLDOCTOR_KEYS: dict[str, tuple[str, str]] = {
    "reward": ("reward/mean", "reward_mean"),
    "reward_std": ("reward/std", "reward_std"),
    "reward_max": ("reward/max", "reward_max"),
    "reward_min": ("reward/min", "reward_min"),
    "eval_reward": ("eval/reward/mean", "eval_score"),
    "frac_reward_zero_std": ("reward/frac_zero_std_groups", "zero_var_group_frac"),
    "critic/advantages/mean": ("advantage/mean", "advantage_mean"),
    "critic/advantages/std": ("advantage/std", "advantage_std"),
    "entropy": ("policy/entropy", "entropy"),
    "kl": ("kl/token_mean", "kl"),  # TRL's kl / verl's actor/kl_loss: per-token mean KL to the reference
    "clip_ratio/region_mean": ("policy/clip_frac", "pg_clipfrac"),
    "grad_norm": ("grad/norm/actor", "grad_norm"),
    "learning_rate": ("optim/lr/actor", "lr"),
    "policy_loss": ("policy/loss", "policy_loss"),
    "completions/mean_length": ("response/length_mean", "response_len_mean"),
    "completions/max_length": ("response/length_max", "response_len_max"),
    "completions/clipped_ratio": ("response/truncated_frac", "response_len_clip_ratio"),
    "critic/vf_explained_var": ("value/explained_var", "value_explained_var"),
}

#: trainpulse metric name -> (rlcockpit catalog name, the MetricType value its name rule must give).
TRAINPULSE_NAMES: dict[str, tuple[str, str]] = {
    "loss": ("policy/loss", "loss"),
    "grad_norm": ("grad/norm/actor", "gradient_norm"),
    "learning_rate": ("optim/lr/actor", "learning_rate"),
    "step_time": ("time/*_s (sum, without time/init_s)", "step_time"),
    "reward": ("reward/mean", "custom"),
}

#: Reward series of rlcockpit that are not components of the reward (aggregates and categories).
_NOT_COMPONENTS = {"raw", "normalized", "uncertainty", "category", "mean", "std", "min", "max", "scale"}

#: What each peer cannot detect on rlcockpit's streams, and for want of what.
CANNOT_FIRE: dict[str, dict[str, str]] = {
    "rlwatch": {
        "loss_nan": "fires only on a non-finite policy/loss; rlcockpit drops NaN-reward samples before the "
                    "update, so the loss stays finite (the NaN rewards do reach `rewards`)",
    },
    "rlprobe": {
        "REWARD_HACK_LENGTH": "can fire (reward/mean, response/length_mean, samples)",
        "FORMAT_GAMING": "can fire (reward components)",
        "GRAD_PATHOLOGY (NaN part)": "needs nan_count/inf_count = NaN/Inf gradient events; rlcockpit logs "
                                     "none (its non-finite rewards are dropped samples, not gradients); "
                                     "the grad-norm spike part can fire",
        "REF_POLICY_DRIFT_ASYMMETRY": "needs kl_positional (KL per token-position bucket): not logged",
        "THROUGHPUT_ROT": "needs step_time_s: not fed (wall time on a shared machine is not a training signal "
                          "here)",
        "DEGENERATE_GROUPS": "needs zero_variance_group_frac: GRPO runs only",
        "VALUE_DIVERGENCE": "needs value_loss / value_explained_variance: PPO runs only",
    },
    "rldoctor": {
        "reward_hacking": "needs a held-out eval series (eval_score); fault runs train without periodic "
                          "evaluation, so only streams with eval/reward/mean can use it",
        "advantage_collapse": "GRPO-family algorithms only (applicable() skips PPO)",
        "reward_composition": "caps its verdict at INFO below 150 observations",
    },
    "trainpulse": {
        "(any RL failure)": "a generic training monitor: loss spike (x5 rolling mean of policy/loss), "
                            "gradient explosion (> 100) / vanishing (< 1e-7), LR jump (x10 in one step: "
                            "fires on the injected lr change itself), plateau, slow step, NaN/Inf in any "
                            "fed metric; it has no KL, entropy, reward or length detector",
    },
    "stabilityguard": {
        "GuardedOptimizer (gradient spikes, NaN, edge of stability)": "needs the live model and optimizer "
                                                                       "(backward hooks on every layer)",
        "KLDivergenceMonitor": "needs policy and reference logits/log-probs per token; with a scalar KL it "
                               "is only an adaptive beta controller, not a detector",
        "ValueDivergenceMonitor": "needs per-sample values, returns and advantages tensors",
        "PPORatioMonitor": "needs per-token new and old log-probs",
        "RewardCollapseDetector": "CAN run: per-sample rewards are in the stream (>= 2 of: variance < 0.01, "
                                  "histogram entropy < 0.1, bimodal; for 10 steps)",
    },
}


def _f(metrics: dict[str, Any], name: str) -> float | None:
    value = metrics.get(name)
    return None if value is None else float(value)  # NaN is passed on: a NaN detector must see it


def reward_components(metrics: dict[str, Any]) -> dict[str, float]:
    """reward/<component>/mean of rlcockpit's reward model heads (not categories or aggregates)."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        parts = key.split("/")
        is_component = len(parts) == 3 and parts[0] == "reward" and parts[2] == "mean" and parts[1] not in _NOT_COMPONENTS
        if is_component and value is not None and math.isfinite(float(value)):
            out[parts[1]] = float(value)
    return out


def sample_rewards(row: Row) -> list[float]:
    """Per-sample rewards of a step as the trainer computed them (NaN kept; missing dropped)."""
    return [float(s["reward"]) for s in row.get("samples") or [] if s.get("reward") is not None]


def rlwatch_kwargs(row: Row) -> dict[str, Any]:
    m = row["metrics"]
    kwargs: dict[str, Any] = {k: _f(m, ours) for k, ours in RLWATCH_KWARGS.items()}
    rewards = sample_rewards(row)
    kwargs["rewards"] = rewards or None  # a numpy array is made by the driver (numpy is a peer-venv dep)
    return kwargs


def rlprobe_step(row: Row) -> dict[str, Any]:
    m = row["metrics"]
    fields = {k: _f(m, ours) for k, ours in RLPROBE_FIELDS.items() if m.get(ours) is not None}
    comps = reward_components(m)
    if comps:
        fields["reward_components"] = comps
    return fields


def rlprobe_samples(row: Row) -> list[dict[str, Any]]:
    out = []
    for i, s in enumerate(row.get("samples") or []):
        reward = s.get("reward")
        out.append({
            "sample_id": f"{row['step']}-{i}", "prompt_id": s.get("prompt_id"), "completion_text": s.get("response"),
            "completion_len": s.get("length"), "truncated": s.get("truncated"),
            "reward_total": None if reward is None or not math.isfinite(reward) else float(reward),
            "reward_components": {k: float(v) for k, v in (s.get("components") or {}).items()
                                  if v is not None and math.isfinite(v)}})
    return out


def rldoctor_record(row: Row) -> dict[str, Any]:
    m = row["metrics"]
    rec: dict[str, Any] = {k: float(m[ours]) for k, (ours, _) in RLDOCTOR_KEYS.items() if m.get(ours) is not None}
    for name, value in reward_components(m).items():
        rec[f"rewards/{name}/mean"] = value  # its REWARD_COMPONENT_PATTERNS (TRL's per-function reward)
    return rec


def step_time(metrics: dict[str, Any]) -> float | None:
    parts = [float(v) for k, v in metrics.items()
             if k.startswith("time/") and k.endswith("_s") and k != "time/init_s" and v is not None]
    return sum(parts) if parts else None


def trainpulse_metrics(row: Row) -> dict[str, float]:
    m = row["metrics"]
    out = {name: _f(m, ours) for name, (ours, _) in TRAINPULSE_NAMES.items() if name != "step_time"}
    out["step_time"] = step_time(m)
    return {k: v for k, v in out.items() if v is not None}


def run_config(head: dict[str, Any], rows: list[Row]) -> dict[str, Any]:
    """Config facts a peer's documented config argument takes (rldoctor's RunConfig keys)."""
    cfg: dict[str, Any] = {"algorithm": head.get("algo")}
    first = rows[0]["metrics"] if rows else {}
    if first.get("kl/coef") is not None:
        cfg["kl_coef"] = float(first["kl/coef"])
    if first.get("rollout/max_new_tokens") is not None:
        cfg["max_new_tokens"] = int(first["rollout/max_new_tokens"])
    cfg.update(head.get("config") or {})
    return {k: v for k, v in cfg.items() if v is not None}


def load_stream(path: Path) -> tuple[dict[str, Any], list[Row]]:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not lines or "run" not in lines[0]:
        raise ValueError(f"{path}: not a peer stream (first line must be a head with 'run')")
    return lines[0], lines[1:]


# --------------------------------------------------------------------------- name checks (need the peers)


def check_rldoctor_names() -> None:
    from rl_doctor import aliases

    wrong = {k: (aliases.resolve(k), canon) for k, (_, canon) in RLDOCTOR_KEYS.items() if aliases.resolve(k) != canon}
    if aliases.resolve_reward_component("rewards/helpfulness/mean") != "helpfulness":
        wrong["rewards/<c>/mean"] = (None, "a reward component")
    if wrong:
        raise RuntimeError(f"rldoctor resolves these keys elsewhere ({{key: (resolved, wanted)}}): {wrong}")


def check_rlprobe_names() -> None:
    from rlprobe.schemas import StepRecord

    unknown = sorted(set(RLPROBE_FIELDS) - set(StepRecord.model_fields))
    if unknown:
        raise RuntimeError(f"not rlprobe StepRecord fields (they would land in `extra`, unread): {unknown}")


def check_trainpulse_names() -> None:
    from trainpulse.monitor import _infer_metric_type

    wrong = {n: (_infer_metric_type(n).value, t) for n, (_, t) in TRAINPULSE_NAMES.items()
             if _infer_metric_type(n).value != t}
    if wrong:
        raise RuntimeError(f"trainpulse classifies these names otherwise ({{name: (got, wanted)}}): {wrong}")


# --------------------------------------------------------------------------- drivers


def run_rlwatch(head: dict[str, Any], rows: list[Row]) -> list[Alert]:
    import numpy as np
    import rlwatch

    alerts: list[Alert] = []
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)  # attach() reads ./rlwatch.yaml if any and writes ./rlwatch_logs: keep both ours
        try:
            monitor = rlwatch.attach(framework="manual", run_id=head["run"])
            try:
                for row in rows:
                    kwargs = rlwatch_kwargs(row)
                    if kwargs["rewards"] is not None:
                        kwargs["rewards"] = np.asarray(kwargs["rewards"], dtype=float)
                    sent = monitor.log_step(row["step"], **kwargs)
                    alerts += [[a.step, a.detector, a.severity, LIVE] for a in sent]
            finally:
                monitor.stop()
        finally:
            os.chdir(cwd)
    return alerts


def run_rlprobe(head: dict[str, Any], rows: list[Row], every: int = 25) -> list[Alert]:
    from rlprobe.doctor import diagnose
    from rlprobe.recorder import Recorder

    check_rlprobe_names()
    alerts: list[Alert] = []
    reported: set[tuple[str, str]] = set()

    def doctor(run_dir: Path, step: int, how: str) -> None:
        for f in diagnose(run_dir):
            if f.severity in ("warn", "critical") and (f.signature_id, f.severity) not in reported:
                reported.add((f.signature_id, f.severity))
                alerts.append([step, f.signature_id, f.severity, how])

    with tempfile.TemporaryDirectory() as tmp:
        rec = Recorder(Path(tmp) / "run", algorithm=head.get("algo") or "unknown", run_id=head["run"],
                       trainer_config=run_config(head, rows), install_handlers=False)
        try:
            for row in rows:
                rec.log_step(row["step"], **rlprobe_step(row))
                rec.log_samples(row["step"], rlprobe_samples(row))
                if row["step"] and row["step"] % every == 0:  # its TRL callback's diagnose_every
                    if not rec.flush(timeout=60):
                        raise RuntimeError("rlprobe recorder did not flush within 60 s")
                    doctor(rec.run_dir, row["step"], LIVE)
            rec.log_event("train_end", step=rows[-1]["step"] if rows else 0)
        finally:
            rec.close()
        if rows:
            doctor(rec.run_dir, rows[-1]["step"], POST_HOC)  # `rlprobe doctor RUN_DIR` after the run
    return alerts


def run_rldoctor(head: dict[str, Any], rows: list[Row]) -> list[Alert]:
    from rl_doctor import Severity, diagnose, run_from_records
    from rl_doctor.live import LiveMonitor

    check_rldoctor_names()
    config = run_config(head, rows)
    if "max_new_tokens" in config:
        config["max_response_length"] = config.pop("max_new_tokens")
    monitor = LiveMonitor(config=config, check_every=25, name=head["run"], on_finding=lambda f: None)
    alerts: list[Alert] = []
    announced: dict[str, Any] = {}
    for row in rows:
        for f in monitor.log(rldoctor_record(row), step=row["step"]):
            announced[f.detector] = f.severity
            alerts.append([row["step"], f.detector, f.severity.label, LIVE])
    if rows:  # the post-hoc report: `rl-doctor diagnose` on the finished log
        final = diagnose(run_from_records(monitor.records, config=config, name=head["run"]))
        for f in final.problems:
            if f.severity >= Severity.WARNING and (f.detector not in announced or f.severity > announced[f.detector]):
                alerts.append([rows[-1]["step"], f.detector, f.severity.label, POST_HOC])
    return alerts


def rldoctor_coverage(rows: list[Row], config: dict[str, Any] | None = None) -> dict[str, str]:
    """Which rldoctor detectors run on a stream and which are skipped (its own SKIP reasons)."""
    from rl_doctor import diagnose, run_from_records

    d = diagnose(run_from_records([{"step": r["step"], **rldoctor_record(r)} for r in rows], config=config))
    return {f.detector: f.severity.label + ("" if f.severity.label != "SKIP" else f": {f.summary}") for f in d.findings}


def run_trainpulse(head: dict[str, Any], rows: list[Row]) -> list[Alert]:
    from trainpulse import Monitor, MonitorConfig

    check_trainpulse_names()
    monitor = Monitor(MonitorConfig())
    alerts: list[Alert] = []
    for row in rows:
        for name, value in trainpulse_metrics(row).items():
            for a in monitor.log(name, row["step"], value):
                alerts.append([a.step, a.detector, a.severity.value, LIVE])
    return alerts


def run_stabilityguard(head: dict[str, Any], rows: list[Row]) -> list[Alert]:
    import torch
    from stabilityguard.rlhf import RewardCollapseDetector

    detector = RewardCollapseDetector()
    alerts: list[Alert] = []
    collapsed = False
    for row in rows:
        # finite rewards only: its histogram entropy raises on NaN (the nan_reward fault's samples;
        # the trainer leaves them out of the update too)
        rewards = [r for r in sample_rewards(row) if math.isfinite(r)]
        if len(rewards) < 2:
            continue  # variance of fewer than 2 rewards is undefined
        now = detector.detect_collapse(torch.tensor(rewards, dtype=torch.float32))
        if now and not collapsed:
            alerts.append([row["step"], "reward_collapse", "warning", LIVE])
        collapsed = now
    return alerts


PEERS: dict[str, tuple[str, Callable[[dict[str, Any], list[Row]], list[Alert]], str, dict[str, str]]] = {
    "rlwatch": ("rlwatch", run_rlwatch, "rlwatch.attach(framework='manual') + log_step per step",
                {**RLWATCH_KWARGS, "rewards": "per-sample rewards"}),
    "rlprobe": ("rlprobe", run_rlprobe, "Recorder.log_step/log_samples per step; flush + doctor.diagnose every "
                "25 steps and at the end", {**RLPROBE_FIELDS, "reward_components": "reward/<component>/mean"}),
    "rldoctor": ("rldoctor", run_rldoctor, "LiveMonitor(check_every=25, min_steps=60).log per step; "
                 "diagnose(run_from_records) at the end",
                 {**{k: ours for k, (ours, _) in RLDOCTOR_KEYS.items()},
                  "rewards/<component>/mean": "reward/<component>/mean"}),
    "trainpulse": ("trainpulse", run_trainpulse, "Monitor(MonitorConfig()).log(name, step, value) per step",
                   {k: ours for k, (ours, _) in TRAINPULSE_NAMES.items()}),
    "stabilityguard": ("stabilityguard", run_stabilityguard,
                       "rlhf.RewardCollapseDetector().detect_collapse(per-sample rewards) per step",
                       {"rewards": "per-sample rewards"}),
}


@contextlib.contextmanager
def _quiet():
    """The peers print and log their alerts; our stdout is the result and stderr is for errors."""
    import logging

    logging.disable(logging.CRITICAL)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        logging.disable(logging.NOTSET)


def run_all(paths: list[Path], peers: list[str] | None = None) -> dict[str, Any]:
    streams = [load_stream(p) for p in paths]
    out: dict[str, Any] = {}
    for peer, (dist, fn, driven, mapping) in PEERS.items():
        if peers and peer not in peers:
            continue
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[peer] = {"error": f"{dist} is not installed in {sys.executable}"}
            continue
        runs: dict[str, Any] = {}
        for head, rows in streams:
            try:
                with _quiet():
                    alerts = fn(head, rows)
                runs[head["run"]] = {"status": "ok", "alerts": alerts}
            except Exception as exc:  # a peer failing on a stream is a result to report, not a crash
                runs[head["run"]] = {"status": "error", "error": f"{type(exc).__name__}: {exc}",
                                     "trace": traceback.format_exc(limit=3)}
        out[peer] = {"version": version, "driven": driven, "mapping": mapping,
                     "cannot_fire": CANNOT_FIRE.get(peer, {}), "runs": runs}
    return out


# --------------------------------------------------------------------------- self-check


def synthetic_stream(steps: int = 120, onset: int = 60, algo: str = "ppo") -> tuple[dict[str, Any], list[Row]]:
    """A run that is healthy, then fails hard at ``onset``: per-token KL explodes (0.01 -> ~5 nats),
    entropy collapses (2.0 -> 0.05), the gradient norm explodes (1 -> 200+), rewards collapse to one
    value and the reward mean plateaus, and the policy loss is NaN from ``onset + 30`` on.
    Deterministic (a fixed LCG, no numpy), so the test suite can check it without the peers."""
    state = 12345

    def noise() -> float:  # uniform in [-1, 1)
        nonlocal state
        state = (1103515245 * state + 12345) % 2**31
        return state / 2**30 - 1.0

    rows: list[Row] = []
    for step in range(1, steps + 1):
        k = step - onset  # steps since the onset (< 0 before)
        bad = k >= 0
        kl = 0.01 * (1 + 0.1 * noise()) if not bad else min(0.05 * 1.2 ** k, 5.0) * (1 + 0.05 * noise())
        entropy = 2.0 + 0.05 * noise() if not bad else max(0.05, 2.0 * 0.7 ** (k + 1)) * (1 + 0.05 * noise())
        grad = 1.0 + 0.1 * noise() if not bad else 200.0 * (1 + 0.1 * noise())
        rewards = [0.5 + 0.4 * noise() for _ in range(16)] if not bad else [1.0] * 16
        mean = sum(rewards) / len(rewards)
        std = (sum((r - mean) ** 2 for r in rewards) / len(rewards)) ** 0.5
        loss = -0.01 + 0.005 * noise() if k < 30 else float("nan")
        metrics = {
            "policy/entropy": entropy, "kl/token_mean": kl, "kl/mean": kl * 12, "kl/token_max": kl * 8,
            "reward/mean": mean, "reward/std": std, "reward/min": min(rewards), "reward/max": max(rewards),
            "reward/helpfulness/mean": mean / 2, "reward/correctness/mean": mean / 2,
            "advantage/mean": 0.0, "advantage/std": 0.7 + 0.05 * noise() if not bad else 0.05,
            "policy/loss": loss, "optim/lr/actor": 1e-5, "policy/clip_frac": 0.05 if not bad else 0.45,
            "policy/ratio_mean": 1.0, "grad/norm/actor": grad, "update/ratio/actor": 5e-4,
            "response/length_mean": 12.0 + noise(), "response/length_max": 24.0,
            "response/truncated_frac": 0.03, "response/eos_frac": 0.97, "response/repetition_rate": 0.0,
            "value/loss": 0.3, "value/explained_var": 0.2, "kl/coef": 0.05, "rollout/max_new_tokens": 24.0,
            "time/rollout_s": 0.5, "time/update_s": 1.5,
        }
        samples = [{"reward": r, "length": 12, "response": "the answer is 4" if bad else f"answer {i}",
                    "prompt_id": f"p{i // 4}", "components": {"helpfulness": r / 2, "correctness": r / 2},
                    "truncated": False} for i, r in enumerate(rewards)]
        rows.append({"step": step, "metrics": metrics, "samples": samples})
    return {"run": "self-check", "onset": onset, "algo": algo}, rows


#: Per peer: the detectors the synthetic failure must trip (the ones for KL and entropy where the peer
#: has them), with what they watch.
SELF_CHECK_EXPECTED: dict[str, dict[str, str]] = {
    "rlwatch": {"kl_explosion": "kl_divergence", "entropy_collapse": "entropy"},
    "rlprobe": {"KL_BLOWUP": "kl_mean", "ENTROPY_COLLAPSE": "entropy_mean"},
    "rldoctor": {"kl_drift": "kl", "entropy_collapse": "entropy"},
    "trainpulse": {"gradient": "grad_norm", "nan_detector": "loss (NaN)"},
    "stabilityguard": {"reward_collapse": "rewards"},
}


def self_check(peers: list[str] | None = None) -> dict[str, Any]:
    head, rows = synthetic_stream()
    onset = head["onset"]
    report: dict[str, Any] = {"stream": f"{len(rows)} steps, failure at step {onset}", "peers": {}}
    for peer, (dist, fn, _, _) in PEERS.items():
        if peers and peer not in peers:
            continue
        entry: dict[str, Any] = {}
        try:
            entry["version"] = metadata.version(dist)
            with _quiet():
                alerts = fn(head, rows)
                if peer == "rldoctor":
                    entry["coverage"] = rldoctor_coverage(rows, run_config(head, rows))
        except Exception as exc:
            entry.update(ok=False, error=f"{type(exc).__name__}: {exc}")
            report["peers"][peer] = entry
            continue
        first: dict[str, Any] = {}
        for step, name, severity, how in alerts:
            first.setdefault(name, [step, severity, how])
        entry["detectors"] = {name: ({"fired": True, "step": first[name][0], "severity": first[name][1],
                                      "how": first[name][2], "reads": reads}
                                     if name in first else {"fired": False, "reads": reads})
                              for name, reads in SELF_CHECK_EXPECTED[peer].items()}
        entry["other_alerts"] = {n: v for n, v in first.items() if n not in SELF_CHECK_EXPECTED[peer]}
        entry["early_alerts"] = sum(1 for a in alerts if a[0] < onset)
        entry["ok"] = all(d["fired"] and d["step"] >= onset for d in entry["detectors"].values())
        if peer == "rldoctor":  # the KL detector must run, not be skipped for want of `kl`
            entry["ok"] = entry["ok"] and not entry["coverage"].get("kl_drift", "").startswith("SKIP")
        report["peers"][peer] = entry
    report["ok"] = all(e.get("ok") for e in report["peers"].values())
    return report


def _print_self_check(report: dict[str, Any]) -> None:
    print(f"peer self-check on a synthetic stream ({report['stream']})")
    for peer, e in report["peers"].items():
        if "error" in e:
            print(f"  {peer}: ERROR {e['error']}")
            continue
        print(f"  {peer} {e['version']}: {'ok' if e['ok'] else 'FAILED'}")
        for name, d in e["detectors"].items():
            where = f"fired at step {d['step']} ({d['severity']}, {d['how']})" if d["fired"] else "did NOT fire"
            print(f"    {name:<18} reads {d['reads']:<16} {where}")
        if e["other_alerts"]:
            print("    also: " + ", ".join(f"{n} at {v[0]}" for n, v in e["other_alerts"].items()))
        if "coverage" in e:
            print("    rldoctor checks: " + ", ".join(f"{k}={v.split(':')[0]}" for k, v in e["coverage"].items()))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", nargs="+", type=Path)
    p.add_argument("--out", type=Path)
    p.add_argument("--peers", nargs="+", choices=list(PEERS), help="only these peers (default: all)")
    p.add_argument("--self-check", action="store_true",
                   help="feed each peer a synthetic failure and report whether its detectors fire (exit 1 if not)")
    args = p.parse_args(argv)
    if args.self_check:
        report = self_check(args.peers)
        _print_self_check(report)
        if args.out:
            args.out.write_text(json.dumps(report, indent=1, default=str))
        return 0 if report["ok"] else 1
    if not args.streams or not args.out:
        p.error("--streams and --out are required (or --self-check)")
    args.out.write_text(json.dumps(run_all(args.streams, args.peers), indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
