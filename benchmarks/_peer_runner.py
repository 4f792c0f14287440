"""Drive rlwatch, rlprobe and rldoctor over recorded metric streams (runs INSIDE .benchvenv-peers).

    .benchvenv-peers/bin/python benchmarks/_peer_runner.py --streams out/*.stream.jsonl --out peers.json

Each stream file is JSONL written by benchmarks/detection.py: a first line
{"run": ..., "onset": N | null, "algo": ...}, then one line per step {"step": s, "metrics": {catalog
name: value}, "samples": [{"reward", "length", "response", "prompt_id", "components", "truncated"}]}.
Only the peers' public APIs are used, fed with our catalog names mapped to theirs:

- rlwatch: ``RLWatch(RLWatchConfig).log_step(step, entropy=..., kl_divergence=..., rewards=...)``,
  streaming, step by step: an alert at step s is a detection at s.
- rlprobe: ``rlprobe.doctor.diagnose_view(RunView(manifest, steps[:k], samples))`` -- a whole-run
  analysis, replayed on every prefix of the stream; a warn/critical signature that is new at prefix
  k is an alert at step k.
- rldoctor: ``rl_doctor.diagnose(run_from_records(rows[:k]))`` -- whole-run, replayed per prefix the
  same way (severity WARNING or CRITICAL).

Output (JSON): {peer: {run: {"status", "alerts": [[step, name, severity], ...], "version"}}}.
A peer that cannot be imported or fails on a stream is reported with its error, never hidden.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import sys
import tempfile
import traceback
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

Alert = list[Any]  # [step, name, severity]


def load_stream(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return lines[0], lines[1:]


def _f(metrics: dict[str, Any], name: str) -> float | None:
    value = metrics.get(name)
    if value is None:
        return None
    value = float(value)
    return value  # NaN is passed on: a NaN loss is what a NaN detector must see


# --------------------------------------------------------------------------- rlwatch


def run_rlwatch(head: dict[str, Any], rows: list[dict[str, Any]]) -> list[Alert]:
    import numpy as np
    from rlwatch import RLWatch, RLWatchConfig

    with tempfile.TemporaryDirectory() as tmp:
        cfg = RLWatchConfig()
        cfg.storage.log_dir = tmp
        cfg.run_id = head["run"]
        monitor = RLWatch(cfg)
        monitor.start()
        alerts: list[Alert] = []
        for row in rows:
            m = row["metrics"]
            rewards = [s["reward"] for s in row.get("samples", []) if s.get("reward") is not None]
            sent = monitor.log_step(
                row["step"], entropy=_f(m, "policy/entropy"), kl_divergence=_f(m, "kl/mean"),
                reward_mean=_f(m, "reward/mean"), reward_std=_f(m, "reward/std"),
                rewards=np.asarray(rewards, dtype=float) if rewards else None,
                advantage_std=_f(m, "advantage/std"), loss=_f(m, "policy/loss"),
                learning_rate=_f(m, "optim/lr/actor"), clip_fraction=_f(m, "policy/clip_frac"),
                grad_norm=_f(m, "grad/norm/actor"))
            alerts += [[row["step"], a.detector, a.severity] for a in sent]
        monitor.stop()
        return alerts


# --------------------------------------------------------------------------- rlprobe

_RLPROBE_FIELDS = {
    "reward_mean": "reward/mean", "reward_std": "reward/std", "reward_min": "reward/min", "reward_max": "reward/max",
    "kl_mean": "kl/mean", "kl_max": "kl/token_max", "entropy_mean": "policy/entropy", "ratio_mean": "policy/ratio_mean",
    "clip_fraction": "policy/clip_frac", "adv_mean": "advantage/mean", "adv_std": "advantage/std",
    "value_loss": "value/loss", "value_explained_variance": "value/explained_var",
    "value_clip_fraction": "value/clip_frac", "loss": "policy/loss", "lr": "optim/lr/actor",
    "grad_norm": "grad/norm/actor", "weight_update_ratio": "update/ratio/actor",
    "completion_len_mean": "response/length_mean", "completion_len_max": "response/length_max",
    "truncation_rate": "response/truncated_frac", "max_len_hit_frac": "response/truncated_frac",
    "eos_rate": "response/eos_frac", "repetition_rate": "response/repetition_rate",
    "zero_variance_group_frac": "reward/frac_zero_std_groups",
}


def _rlprobe_records(rows: list[dict[str, Any]]) -> tuple[list[Any], list[Any]]:
    from rlprobe.schemas import SampleRecord, StepRecord

    steps, samples, prev_nonfinite = [], [], 0.0
    for row in rows:
        m = row["metrics"]
        fields = {k: _f(m, v) for k, v in _RLPROBE_FIELDS.items() if m.get(v) is not None}
        comps = {k.split("/")[1]: float(v) for k, v in m.items()
                 if k.startswith("reward/") and k.endswith("/mean") and k.count("/") == 2
                 and k.split("/")[1] not in ("raw", "normalized", "uncertainty")}
        nonfinite = float(m.get("reward/nonfinite_total", 0.0) or 0.0)
        nan_count = int(max(nonfinite - prev_nonfinite, 0.0)) + sum(
            1 for v in m.values() if isinstance(v, float) and math.isnan(v))
        prev_nonfinite = nonfinite
        steps.append(StepRecord(step=row["step"], reward_components=comps, nan_count=nan_count, **fields))
        for i, s in enumerate(row.get("samples", [])):
            reward = s.get("reward")
            samples.append(SampleRecord(
                step=row["step"], sample_id=f"{row['step']}-{i}", prompt_id=s.get("prompt_id"),
                completion_text=s.get("response"), completion_len=s.get("length"), truncated=s.get("truncated"),
                reward_total=None if reward is None or not math.isfinite(reward) else reward,
                reward_components={k: float(v) for k, v in (s.get("components") or {}).items()
                                   if v is not None and math.isfinite(v)}, capture_reason="all"))
    return steps, samples


def run_rlprobe(head: dict[str, Any], rows: list[dict[str, Any]]) -> list[Alert]:
    from rlprobe.doctor import RunView, diagnose_view
    from rlprobe.schemas import RunManifest

    steps, samples = _rlprobe_records(rows)
    manifest = RunManifest(run_id=head["run"], created_at="2026-01-01T00:00:00+00:00", algorithm=head["algo"])

    def alarms(k: int) -> dict[str, str]:
        last = steps[k - 1].step
        view = RunView(manifest, steps[:k], samples_provider=lambda: [s for s in samples if s.step <= last])
        return {f.signature_id: f.severity for f in diagnose_view(view) if f.severity in ("warn", "critical")}

    return _prefix_alerts(rows, alarms)


# --------------------------------------------------------------------------- rldoctor


def run_rldoctor(head: dict[str, Any], rows: list[dict[str, Any]]) -> list[Alert]:
    from rl_doctor import Severity, diagnose, run_from_records

    records = [{"step": row["step"], **{k: v for k, v in row["metrics"].items() if v is not None}} for row in rows]

    def alarms(k: int) -> dict[str, str]:
        diagnosis = diagnose(run_from_records(records[:k], name=head["run"]))
        return {f.detector: f.severity.label for f in diagnosis.findings if f.severity >= Severity.WARNING}

    return _prefix_alerts(rows, alarms)


def _prefix_alerts(rows: list[dict[str, Any]], alarms: Callable[[int], dict[str, str]]) -> list[Alert]:
    """Whole-run tools replayed on every prefix: an alarm that is new at prefix k is an alert at k."""
    seen: dict[str, str] = {}
    out: list[Alert] = []
    for k in range(1, len(rows) + 1):
        now = alarms(k)
        for name, severity in now.items():
            if name not in seen:
                out.append([rows[k - 1]["step"], name, severity])
        seen = now
    return out


PEERS: dict[str, tuple[str, Callable[[dict[str, Any], list[dict[str, Any]]], list[Alert]]]] = {
    "rlwatch": ("rlwatch", run_rlwatch), "rlprobe": ("rlprobe", run_rlprobe), "rldoctor": ("rldoctor", run_rldoctor),
}


def run_all(paths: list[Path]) -> dict[str, Any]:
    streams = [load_stream(p) for p in paths]
    out: dict[str, Any] = {}
    for peer, (dist, fn) in PEERS.items():
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[peer] = {"error": f"{dist} is not installed in {sys.executable}"}
            continue
        runs: dict[str, Any] = {}
        for head, rows in streams:
            try:
                with contextlib.redirect_stdout(io.StringIO()):  # peers print alerts; our stdout is the result
                    alerts = fn(head, rows)
                runs[head["run"]] = {"status": "ok", "alerts": alerts}
            except Exception as exc:  # a peer failing on a stream is a result to report, not a crash
                runs[head["run"]] = {"status": "error", "error": f"{type(exc).__name__}: {exc}",
                                     "trace": traceback.format_exc(limit=3)}
        out[peer] = {"version": version, "runs": runs}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", nargs="+", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    args.out.write_text(json.dumps(run_all(args.streams), indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
