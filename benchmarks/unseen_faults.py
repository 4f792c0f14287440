"""Faults made only through the public surface, as a user would break a run (issue 26).

The detection benchmark (benchmarks/detection.py) injects its faults through rlcockpit's own fault
catalog. These are made the way an outsider makes them — config overrides and ``reward.fn``
(benchmarks/_unseen_rewards.py) — one per failure class the issue found missed or late:

- ``all_truncated``: ``rollout.max_new_tokens=4`` — every answer cut at the cap from step 1;
- ``critic_frozen``: ``optim.critic_lr=0`` — the value loss is never optimised;
- ``reward_scale_drift``: rewards × 1.08^step with ``reward.normalize=false`` — the scale grows;
- ``two_modes``: half of the prompts paid +4 from step 10 — two separated reward modes;
- ``entropy_bonus``: ``ppo.entropy_coef=1.0`` — an entropy bonus far too large, damage that builds.

Each runs tiny-world PPO (examples/ppo_tiny.yaml) for ``--steps`` steps per seed next to a
healthy twin (same seed, no override), with the live diagnostics off (a red finding would pause
the run for a person), then ``rlcockpit doctor --json`` replays every run with the default
diagnostics, as the live engine would have seen it. A fault is *caught* when a finding at orange or worse, raised, escalated or worsened,
whose (detector, key) the twin does not raise, lies within 20 steps of its onset. The twins must
stay at 0 red or black and report their orange count. Thresholds are not tuned here: the script
only measures; seeds 700+ were never used to tune (the classes were: say so beside the number).

    python benchmarks/unseen_faults.py [--seeds 700,701] [--steps 40] [--only two_modes] [--out DIR]

The LAST stdout line is one JSON object with the headline numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlcockpit.diagnostics.base import NEWS  # the statuses that tell a person something new

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "examples" / "ppo_tiny.yaml"
WINDOW = 20
SEVERE = ("orange", "red", "black")


@dataclass(frozen=True)
class Fault:
    name: str
    overrides: tuple[str, ...]
    onset: int
    what: str


FAULTS: tuple[Fault, ...] = (
    Fault("all_truncated", ("rollout.max_new_tokens=4",), 1, "every answer cut at the cap"),
    Fault("critic_frozen", ("optim.critic_lr=0",), 1, "the critic never learns"),
    Fault("reward_scale_drift", ("reward.fn=_unseen_rewards:growing", "reward.normalize=false",
                                 "reward.clip=1000"), 1, "the reward scale grows 8 % a step"),
    Fault("two_modes", ("reward.fn=_unseen_rewards:two_modes",), 10,
          "two separated reward modes from step 10"),
    Fault("entropy_bonus", ("ppo.entropy_coef=1.0",), 1, "an entropy bonus far too large"),
)


def train(name: str, seed: int, steps: int, overrides: tuple[str, ...], out: Path) -> Path:
    """One tiny-world PPO run into its own SQLite store; returns the store path."""
    db = out / f"{name}_s{seed}.db"
    if db.exists():
        db.unlink()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH", "")]).strip(os.pathsep)}
    cmd = [sys.executable, "-m", "rlcockpit", "train", "--config", str(CONFIG),
           "--store", f"sqlite:///{db}", f"train.steps={steps}", f"seed={seed}",
           f"name={name}", "eval.every=0", "checkpoint.every=100000",
           # detection is scored offline (doctor replays the stored run, as live would): a red
           # finding must not pause the run waiting for a person
           "diagnostics.enabled=false",
           f"checkpoint.dir={out / 'checkpoints'}", *overrides]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if proc.returncode not in (0, 2):
        raise RuntimeError(f"{name} seed {seed} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return db


def doctor(db: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "rlcockpit", "doctor", "--store",
                           f"sqlite:///{db}", "--json"], capture_output=True, text=True,
                          timeout=1800)
    if proc.returncode not in (0, 2):
        raise RuntimeError(f"doctor on {db} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def raised(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["status"] in NEWS]


def score(fault: Fault, report: dict[str, Any], twin: dict[str, Any]) -> dict[str, Any]:
    twin_keys = {(f["detector"], f["evidence"].get("key", "")) for f in raised(twin)}
    own = [f for f in raised(report)
           if (f["detector"], f["evidence"].get("key", "")) not in twin_keys]
    severe = [f for f in own if f["severity"] in SEVERE and f["step"] <= fault.onset + WINDOW]
    first = min(severe, key=lambda f: f["step"]) if severe else None
    anything = min(own, key=lambda f: f["step"]) if own else None
    return {"fault": fault.name, "caught": first is not None,
            "latency": first["step"] - fault.onset if first else None,
            "first_orange_plus": _brief(first), "first_any": _brief(anything)}


def _brief(f: dict[str, Any] | None) -> str | None:
    if f is None:
        return None
    key = f["evidence"].get("key", "")
    return f"{f['detector']}{'/' + key if key else ''} {f['severity']} @{f['step']}"


def twin_counts(twin: dict[str, Any]) -> dict[str, int]:
    found = raised(twin)
    return {tier: sum(f["severity"] == tier for f in found) for tier in ("yellow", *SEVERE)}


def run_seed(seed: int, faults: list[Fault], steps: int, out: Path, workers: int
             ) -> tuple[dict[str, int], list[dict[str, Any]]]:
    jobs = [("healthy", ())] + [(f.name, f.overrides) for f in faults]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        dbs = dict(zip([n for n, _ in jobs], pool.map(
            lambda job: train(job[0], seed, steps, job[1], out), jobs), strict=True))
        reports = dict(zip(dbs, pool.map(doctor, dbs.values()), strict=True))
    twin = reports["healthy"]
    rows = [{**score(f, reports[f.name], twin), "seed": seed} for f in faults]
    return twin_counts(twin), rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="700", help="comma-separated seeds (default 700)")
    p.add_argument("--steps", type=int, default=40, help="steps per run (default 40)")
    p.add_argument("--only", default="", help="comma-separated fault names")
    p.add_argument("--workers", type=int, default=2, help="runs trained at once (default 2)")
    p.add_argument("--out", type=Path, default=None, help="keep the stores here (default: a "
                   "temporary folder)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = only - {f.name for f in FAULTS}
    if unknown:
        raise SystemExit(f"unknown fault(s) {sorted(unknown)}; choose from "
                         f"{', '.join(f.name for f in FAULTS)}")
    faults = [f for f in FAULTS if not only or f.name in only]
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rlcockpit-unseen-") as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        twins, rows = [], []
        for seed in seeds:
            print(f"seed {seed}: training {len(faults) + 1} runs of {args.steps} steps ...",
                  file=sys.stderr, flush=True)
            counts, found = run_seed(seed, faults, args.steps, out, args.workers)
            twins.append({"seed": seed, **counts})
            rows += found
    print("| fault | seed | caught at orange+ within 20 steps | latency | first orange+ | first finding |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['fault']} | {r['seed']} | {'yes' if r['caught'] else 'no'} | {r['latency']} | "
              f"{r['first_orange_plus'] or '-'} | {r['first_any'] or '-'} |")
    print("\n| healthy twin | yellow | orange | red | black |\n| --- | --- | --- | --- | --- |")
    for t in twins:
        print(f"| seed {t['seed']} | {t['yellow']} | {t['orange']} | {t['red']} | {t['black']} |")
    print(json.dumps({
        "benchmark": "unseen_faults", "seeds": seeds, "steps": args.steps,
        "caught": f"{sum(r['caught'] for r in rows)}/{len(rows)}",
        "missed": [f"{r['fault']} s{r['seed']}" for r in rows if not r["caught"]],
        "latencies": [r["latency"] for r in rows if r["caught"]],
        "healthy_red_or_black": sum(t["red"] + t["black"] for t in twins),
        "healthy_orange": sum(t["orange"] for t in twins),
        "wall_s": round(time.perf_counter() - t0, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
