"""Faults made only through the public surface, as a user would break a run (issue 26).

The detection benchmark (benchmarks/detection.py) injects its faults through rlcockpit's own fault
catalog. These are made the way an outsider makes them — config overrides and ``reward.fn``
(benchmarks/_unseen_rewards.py) — one per failure class the issue found missed or late:

- ``all_truncated``: ``rollout.max_new_tokens=4`` — every answer cut at the cap from step 1;
- ``critic_frozen``: ``optim.critic_lr=0`` — the value loss is never optimised;
- ``reward_scale_drift``: rewards × 1.08^step with ``reward.normalize=false`` — the scale grows;
- ``two_modes``: half of the prompts paid +4 from step 10 — two separated reward modes;
- ``entropy_bonus``: ``ppo.entropy_coef=1.0`` — an entropy bonus far too large, damage that builds.

``--batch 2`` holds ten more classes, each present from step 1 the way a config mistake is (written
before any was run; seed 710 was their first run, so 710 is calibration data for them): an actor
learning rate 30× too high, 16 PPO epochs of tiny minibatches, a critic learning rate 500× too high
without clipping, sampling at temperature 0.2, a reward paid per word with β = 0, a constant reward,
a reward of pure noise, clip range 1.0 with a 10× learning rate, rewards ×100 not normalised, and no
gradient clipping at a 20× learning rate.

Each runs tiny-world PPO (examples/ppo_tiny.yaml) for ``--steps`` steps per seed next to a
healthy twin (same seed, no override), with the live diagnostics off (a red finding would pause
the run for a person), then ``rlcockpit doctor --json`` replays every run with the default
diagnostics, as the live engine would have seen it. A fault is *caught* when a finding at orange or worse, raised, escalated or worsened,
whose (detector, key) the twin does not raise, lies within 20 steps of its onset. The twins must
stay at 0 red or black and report their orange count. Thresholds are not tuned here: the script
only measures; seeds 700+ were never used to tune (the classes were: say so beside the number).
A fault that did not move the metric it drives within 20 steps of its onset (the detection
benchmark's rule: a non-finite value, or the 3-step mean difference to the twin beyond 2 of the
twin's spreads) has no failure to find and is reported "not scored".

    python benchmarks/unseen_faults.py [--batch 2] [--seeds 700,701] [--steps 40] [--only two_modes]
                                       [--out DIR]

The LAST stdout line is one JSON object with the headline numbers.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
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
    drives: str = ""  # the metric the fault moves; "" = not checked for an effect


FAULTS: tuple[Fault, ...] = (
    Fault("all_truncated", ("rollout.max_new_tokens=4",), 1, "every answer cut at the cap", "response/truncated_frac"),
    Fault("critic_frozen", ("optim.critic_lr=0",), 1, "the critic never learns", "update/ratio/critic"),
    Fault("reward_scale_drift", ("reward.fn=_unseen_rewards:growing", "reward.normalize=false",
                                 "reward.clip=1000"), 1, "the reward scale grows 8 % a step", "reward/std"),
    Fault("two_modes", ("reward.fn=_unseen_rewards:two_modes",), 10,
          "two separated reward modes from step 10", "reward/std"),
    Fault("entropy_bonus", ("ppo.entropy_coef=1.0",), 1, "an entropy bonus far too large",
          "policy/entropy"),
)

# The second batch: classes the first five did not cover, each present from step 1 (the way a config
# mistake is), written before any of them was run; seed 710 was their first run.
FAULTS_2: tuple[Fault, ...] = (
    Fault("actor_lr_30x", ("optim.actor_lr=1.5e-3",), 1, "an actor learning rate 30x too high",
          "policy/approx_kl"),
    # seed 710 ran it with ppo.minibatch_size=4 too (128 optimizer steps a batch: an hour of CPU);
    # from seed 711 on the default minibatches (32 steps a batch), the same class at a quarter cost
    Fault("epochs_16", ("ppo.epochs=16",), 1,
          "16 PPO epochs on each batch: updates far too large", "policy/approx_kl"),
    Fault("critic_lr_huge", ("optim.critic_lr=0.05", "optim.grad_clip_critic=0"), 1,
          "a critic learning rate 500x too high, unclipped", "value/loss"),
    Fault("cold_sampling", ("rollout.temperature=0.2",), 1, "sampling at temperature 0.2",
          "policy/entropy"),
    Fault("length_paid_no_kl", ("reward.fn=_unseen_rewards:length_paid", "kl.coef=0"), 1,
          "a reward that pays per word, no KL penalty", "response/length_mean"),
    Fault("constant_reward", ("reward.fn=_unseen_rewards:constant",), 1,
          "every answer paid the same", "reward/std"),
    Fault("noise_reward", ("reward.fn=_unseen_rewards:noise",), 1,
          "a reward uncorrelated with the answer", "reward/mean"),
    Fault("wide_clip_lr", ("ppo.clip_eps=1.0", "optim.actor_lr=5e-4"), 1,
          "clip range 1.0 with a 10x learning rate", "policy/approx_kl"),
    Fault("reward_x100_raw", ("reward.scale=100", "reward.normalize=false", "reward.clip=0"), 1,
          "rewards x100, not normalised", "value/loss"),
    Fault("grad_clip_off_lr", ("optim.grad_clip_actor=0", "optim.grad_clip_embedding=0",
                               "optim.actor_lr=1e-3"), 1,
          "no gradient clipping with a 20x learning rate", "policy/approx_kl"),
)
BATCHES = {1: FAULTS, 2: FAULTS_2}


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


def _series(db: Path, metric: str) -> dict[int, float]:
    from rlcockpit.store import open_store

    store = open_store(f"sqlite:///{db}", create=False)
    reader = store.reader()
    try:
        (run,) = [r.run_id for r in reader.list_runs()]
        got = reader.read_series(run, [metric]).get(metric)
        return dict(zip(got.steps, got.values, strict=True)) if got else {}
    finally:
        reader.close()
        store.close()


def effect(fault: Fault, db: Path, twin_db: Path) -> bool | None:
    """Whether the fault moved its driven metric within WINDOW steps of its onset, as the detection
    benchmark judges it: a non-finite value, or the mean difference to the twin over 3 consecutive
    steps beyond 2 of the twin's spreads (std over the same steps). None: not checked."""
    if not fault.drives:
        return None
    own, twin = _series(db, fault.drives), _series(twin_db, fault.drives)
    steps = [s for s in range(fault.onset, fault.onset + WINDOW + 1) if s in own and s in twin]
    base = [twin[s] for s in steps if math.isfinite(twin[s])]
    if len(base) < 3:
        return None
    spread = statistics.pstdev(base)
    diffs = []
    for s in steps:
        if not math.isfinite(own[s]):
            return True
        diffs.append(own[s] - twin[s])
        if len(diffs) >= 3 and abs(sum(diffs[-3:]) / 3) > 2 * spread + 1e-12:
            return True
    return False


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
    rows = [{**score(f, reports[f.name], twin), "seed": seed,
             "effect": effect(f, dbs[f.name], dbs["healthy"])} for f in faults]
    return twin_counts(twin), rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="700", help="comma-separated seeds (default 700)")
    p.add_argument("--steps", type=int, default=40, help="steps per run (default 40)")
    p.add_argument("--only", default="", help="comma-separated fault names")
    p.add_argument("--workers", type=int, default=2, help="runs trained at once (default 2)")
    p.add_argument("--batch", type=int, choices=sorted(BATCHES), default=1,
                   help="which batch of fault classes (default 1: the first five)")
    p.add_argument("--out", type=Path, default=None, help="keep the stores here (default: a "
                   "temporary folder)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    batch = BATCHES[args.batch]
    unknown = only - {f.name for f in batch}
    if unknown:
        raise SystemExit(f"unknown fault(s) {sorted(unknown)} in batch {args.batch}; choose from "
                         f"{', '.join(f.name for f in batch)}")
    faults = [f for f in batch if not only or f.name in only]
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
    print("| fault | seed | moved its metric | caught at orange+ within 20 steps | latency | "
          "first orange+ | first finding |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        moved = {True: "yes", False: "no (not scored)", None: "-"}[r["effect"]]
        print(f"| {r['fault']} | {r['seed']} | {moved} | {'yes' if r['caught'] else 'no'} | "
              f"{r['latency']} | {r['first_orange_plus'] or '-'} | {r['first_any'] or '-'} |")
    scored = [r for r in rows if r["effect"] is not False]
    print("\n| healthy twin | yellow | orange | red | black |\n| --- | --- | --- | --- | --- |")
    for t in twins:
        print(f"| seed {t['seed']} | {t['yellow']} | {t['orange']} | {t['red']} | {t['black']} |")
    print(json.dumps({
        "benchmark": "unseen_faults", "batch": args.batch, "seeds": seeds, "steps": args.steps,
        "caught": f"{sum(r['caught'] for r in scored)}/{len(scored)}",
        "missed": [f"{r['fault']} s{r['seed']}" for r in scored if not r["caught"]],
        "no_effect_not_scored": [f"{r['fault']} s{r['seed']}" for r in rows if r["effect"] is False],
        "latencies": [r["latency"] for r in scored if r["caught"]],
        "healthy_red_or_black": sum(t["red"] + t["black"] for t in twins),
        "healthy_orange": sum(t["orange"] for t in twins),
        "wall_s": round(time.perf_counter() - t0, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
