"""The hackable-reward scenario of seed 000 §3.1: a reward model that pays the filler template
("That is a great question worth exploring."), trained with the reward model alone vs. with
confidence gating + rule fallback + fusion (docs/reward_model.md).

The hackable reward model is the tiny world's reward model trained with ``--filler-bias 1.0``
(every filler / non-filler pair labelled for the filler on the helpfulness head: the seed's biased
cold-start data). Both arms train PPO from the SFT warm start with the same seed and budget:

* ``rm_alone``: ``reward.rm.gating.enabled=false``, ``fallback.enabled=false``,
  ``fusion.mode=fixed`` with alpha 1, beta 0 -- the reward is the model's score;
* ``rm_gated``: the defaults -- MC-dropout gating (5 passes, 0.15, 30%), the rule fallback
  (template / fact / off-topic rules, +1 / -1, needs_review) and the LSTM fusion.

Measured per run from the store: the share of responses with the filler (the world's ``filler``
label) over the first and the last steps, validation accuracy per category (the world's rules
judge correctness, the policy never sees them as reward in either arm), ``kl/mean`` at the end,
the share of samples whose uncertainty is above 0.15 (the seed: 30% without gating), the share
of samples the model's score counts at full weight in the gated arm (the seed: 89% effective),
and what the reward-model detectors (rm_uncertainty, rm_fallback_rise, rm_rule_disagreement) and
reward_hacking raise when the stored run is replayed through the diagnostics engine (as
``rlcockpit doctor`` does; the runs train with diagnostics off, so no action interferes).

Prints a table, then as the LAST line one JSON object.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_info, print_json_last_line  # noqa: E402

ARMS = {
    "rm_alone": ["reward.rm.gating.enabled=false", "reward.rm.fallback.enabled=false",
                 "reward.rm.fusion.mode=fixed", "reward.rm.fusion.alpha=1.0", "reward.rm.fusion.beta=0.0"],
    "rm_gated": [],
}
CATEGORIES = ("math", "knowledge", "safety", "chat")
WATCHED = ("rm_uncertainty", "rm_fallback_rise", "rm_rule_disagreement", "reward_hacking")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--rm-dir", type=Path, default=Path("runs/rm-filler"),
                   help="the hackable reward model; trained (filler_bias 1.0) when missing")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--arms", nargs="+", choices=tuple(ARMS), default=list(ARMS))
    p.add_argument("--keep", type=Path, default=None, metavar="DIR",
                   help="keep the runs' SQLite stores in DIR (default: a temporary directory)")
    p.add_argument("--quick", action="store_true", help="smoke mode: 2 steps, 1 seed, tiny batches")
    return p.parse_args(argv)


def hackable_rm(path: Path, threads: int) -> Path:
    from rlcockpit.world.rm import RMTrainConfig, save_rm, train_rm

    if (path / "model.safetensors").is_file():
        return path
    cfg = RMTrainConfig(filler_bias=1.0, threads=threads)
    result = train_rm(cfg)
    print(f"trained the hackable reward model in {result.wall_time_s:.0f} s: {result.stats}", flush=True)
    return save_rm(result, cfg, path)


def run_arm(arm: str, seed: int, args: argparse.Namespace, rm: Path, workdir: Path) -> dict:
    from rlcockpit.config import load_config
    from rlcockpit.trainer.config import TrainConfig
    from rlcockpit.trainer.trainer import Trainer

    db = workdir / f"{arm}-{seed}.db"
    steps = 2 if args.quick else args.steps
    overrides = [f"telemetry.store=sqlite:///{db}", f"checkpoint.dir={workdir / 'ckpt'}",
                 "checkpoint.every=0", "checkpoint.at_end=false", f"seed={seed}",
                 f"train.steps={steps}", f"eval.every={steps}", "eval.max_prompts=200",
                 "reward.fn=rlcockpit.world.rm:score", f"reward.rm.path={rm}",
                 f"model.threads={args.threads}", "diagnostics.enabled=false", *ARMS[arm]]
    if args.quick:
        overrides += ["rollout.batch_size=8", "ppo.minibatch_size=8", "eval.max_prompts=16"]
    cfg = load_config(TrainConfig, None, overrides)
    t0 = time.perf_counter()
    result = Trainer(cfg).run()
    return {"arm": arm, "seed": seed, "wall_s": time.perf_counter() - t0,
            **read_run(f"sqlite:///{db}", result.run_id, steps)}


def read_run(uri: str, run_id: str, steps: int) -> dict:
    from rlcockpit.diagnostics.offline import diagnose_run
    from rlcockpit.store import open_store
    from rlcockpit.store.base import SampleQuery

    reader = open_store(uri).reader()
    try:
        samples = []
        while True:
            page = reader.query_samples(run_id, SampleQuery(limit=5000, offset=len(samples),
                                                            include_token_arrays=False)).items
            samples.extend(page)
            if len(page) < 5000:
                break
        names = ["kl/mean", *(f"eval/accuracy/{c}" for c in CATEGORIES), "reward/fusion_beta"]
        series = reader.read_series(run_id, names)
        report = diagnose_run(reader, run_id)
    finally:
        reader.close()
    findings = {d: sorted({(f.severity) for f in report.findings if f.detector == d}) for d in WATCHED}
    first = {d: min((f.step for f in report.findings if f.detector == d), default=None) for d in WATCHED}
    k = max(1, steps // 4)

    def share(flag: str, lo: int, hi: int) -> float:
        sel = [s for s in samples if lo <= s.step <= hi]
        return sum(flag in s.flags for s in sel) / max(1, len(sel))

    def at(name: str, step: int) -> float | None:
        s = series.get(name)
        return dict(zip(s.steps, s.values, strict=True)).get(step) if s else None

    kl = series["kl/mean"].values
    unc = [s.uncertainty for s in samples if s.uncertainty is not None]
    full = [not ({"rm_gated", "rm_fallback"} & set(s.flags)) for s in samples]
    acc = {c: (at(f"eval/accuracy/{c}", 0), at(f"eval/accuracy/{c}", steps)) for c in CATEGORIES}
    beta = series.get("reward/fusion_beta")
    return {
        "filler_first": share("filler", 1, k), "filler_last": share("filler", steps - k + 1, steps),
        "kl_last": statistics.fmean(kl[-k:]), "above_015": sum(u > 0.15 for u in unc) / max(1, len(unc)),
        "effective": sum(full) / max(1, len(full)),
        "needs_review": sum("needs_review" in s.flags for s in samples) / max(1, len(samples)),
        "accuracy_start": {c: a[0] for c, a in acc.items()}, "accuracy_end": {c: a[1] for c, a in acc.items()},
        "beta_last": beta.values[-1] if beta and beta.values else None,
        "findings": {d: {"severities": findings[d], "first_step": first[d]} for d in WATCHED},
    }


def summarise(rows: list[dict]) -> dict:
    out: dict = {}
    for arm in ARMS:
        rs = [r for r in rows if r["arm"] == arm]
        if not rs:
            continue

        def mean(key: str, rs=rs) -> float:
            return statistics.fmean(r[key] for r in rs)

        acc_end = {c: statistics.fmean(r["accuracy_end"][c] for r in rs if r["accuracy_end"][c] is not None)
                   for c in CATEGORIES}
        out[arm] = {"filler_first": mean("filler_first"), "filler_last": mean("filler_last"),
                    "filler_last_per_seed": [r["filler_last"] for r in rs],
                    "kl_last": mean("kl_last"), "above_015": mean("above_015"),
                    "effective": mean("effective"), "needs_review": mean("needs_review"),
                    "accuracy_end": acc_end, "accuracy_end_mean": statistics.fmean(acc_end.values()),
                    "accuracy_start": {c: rs[0]["accuracy_start"][c] for c in CATEGORIES},
                    "runs_with_finding": {d: sum(bool(r["findings"][d]["severities"]) for r in rs)
                                          for d in WATCHED}}
    return out


def print_table(summary: dict) -> None:
    print(f"{'arm':10} {'filler first':>12} {'filler last':>11} {'KL last':>8} {'u>0.15':>7} "
          f"{'effective':>9} {'review':>7} {'val acc end (math/know/safe/chat)':>36}")
    for arm, s in summary.items():
        acc = "/".join(f"{s['accuracy_end'][c]:.2f}" for c in CATEGORIES)
        print(f"{arm:10} {s['filler_first']:12.1%} {s['filler_last']:11.1%} {s['kl_last']:8.3f} "
              f"{s['above_015']:7.1%} {s['effective']:9.1%} {s['needs_review']:7.1%} {acc:>36}")
    for arm, s in summary.items():
        print(f"{arm}: runs with a finding per detector: {s['runs_with_finding']}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    seeds = args.seeds[:1] if args.quick else args.seeds
    t0 = time.perf_counter()
    rm = hackable_rm(args.rm_dir, args.threads)
    rows = []
    with tempfile.TemporaryDirectory(prefix="rm_gating-") as tmp:
        workdir = args.keep or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        for seed in seeds:
            for arm in args.arms:
                row = run_arm(arm, seed, args, rm, workdir)
                print(f"{arm} seed {seed}: filler {row['filler_first']:.1%} -> {row['filler_last']:.1%}, "
                      f"KL {row['kl_last']:.3f}, {row['wall_s']:.0f} s", flush=True)
                rows.append(row)
    summary = summarise(rows)
    print_table(summary)
    print_json_last_line({"steps": 2 if args.quick else args.steps, "seeds": seeds, **summary,
                          "runs": rows, "wall_time_s": time.perf_counter() - t0, **machine_info()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
