"""Does the tiny policy learn? Validation reward and accuracy per category, SFT start vs. end.

Runs the real CLI, ``python -m rlcockpit train``, in a fresh subprocess into a fresh SQLite store with
the ``rlcockpit demo`` budget: PPO with the default TrainConfig (what the demo trains) for the demo's
step count; ``--algo grpo`` trains examples/grpo_tiny.yaml for the same number of steps. It reads the
trainer's own evaluation back from the store: ``eval/accuracy/<category>``, ``eval/reward/mean``
and ``eval/reward/category/<category>/mean`` at the first evaluation (step 0, the SFT warm start)
and at the last one. Target: math accuracy +15 points within 10 minutes on 2 CPU cores.

Prints a rich table, then as the LAST line one JSON object, e.g.
{"math_accuracy_start": 0.31, "math_accuracy_end": 0.58, "math_gain_points": 27.0, ...,
 "wall_time_s": 540.2}.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _trainer_runs as tr  # noqa: E402

CATEGORIES = ("math", "knowledge", "safety", "chat")
TARGET_MATH_POINTS = 15.0
TARGET_WALL_S = 600.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algo", choices=("ppo", "grpo"), default="ppo")
    p.add_argument("--config", type=Path, default=None,
                   help="config YAML (default: none for ppo = the demo's config, examples/grpo_tiny.yaml "
                        "for grpo)")
    p.add_argument("--steps", type=int, default=None,
                   help="training steps (default: the demo's, rlcockpit.cli.demo.DEFAULT_STEPS)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="dotted config override, repeatable (e.g. --set optim.actor_lr=1e-4)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = the config's / torch default)")
    p.add_argument("--keep-store", type=Path, default=None,
                   help="write the run into this SQLite file instead of a temporary one")
    p.add_argument("--quick", action="store_true",
                   help="smoke mode: 2 steps, eval at 0 and 2 on the first 24 validation prompts (all 4 categories)")
    return p.parse_args(argv)


QUICK = ["train.steps=2", "eval.every=2", "eval.max_prompts=24", "eval.batch_size=24",
         "rollout.batch_size=4", "rollout.max_new_tokens=12", "ppo.epochs=1"]


def config_path(args: argparse.Namespace) -> Path | None:
    """The demo trains the default TrainConfig (no YAML); GRPO has its example file."""
    if args.config is not None:
        return args.config
    return tr.example_config("grpo") if args.algo == "grpo" else None


def overrides_for(args: argparse.Namespace, workdir: Path) -> list[str]:
    from rlcockpit.cli.demo import DEFAULT_STEPS

    out = [f"train.steps={args.steps or DEFAULT_STEPS}"]
    if args.config is None and args.algo == "ppo":
        out += ["name=demo", "project=demo"]  # exactly rlcockpit.cli.demo.demo_config
    if args.quick:
        out += QUICK
        # minibatch 1 always divides; it only serves to read samples_per_step of the quick batch
        cfg = tr.load_train_config(config_path(args), [*out, *args.overrides, "ppo.minibatch_size=1"])
        out.append(f"ppo.minibatch_size={cfg.samples_per_step}")
    return [*out, *args.overrides, f"checkpoint.dir={workdir / 'checkpoints'}"]


def eval_names() -> list[str]:
    names = ["eval/reward/mean"]
    for c in CATEGORIES:
        names += [f"eval/accuracy/{c}", f"eval/reward/category/{c}/mean"]
    return names


def start_end(series: dict) -> dict:
    """{name: (first_step, first_value, last_step, last_value)} for every series that has points."""
    out = {}
    for name, s in series.items():
        if s.steps:
            out[name] = (s.steps[0], s.values[0], s.steps[-1], s.values[-1])
    return out


def headline(points: dict, run: tr.TrainRun, cfg, args: argparse.Namespace) -> dict:
    out: dict = {"algo": cfg.algo}
    for c in CATEGORIES:
        acc = points.get(f"eval/accuracy/{c}")
        rew = points.get(f"eval/reward/category/{c}/mean")
        out[f"{c}_accuracy_start"] = round(acc[1], 4) if acc else None
        out[f"{c}_accuracy_end"] = round(acc[3], 4) if acc else None
        out[f"{c}_gain_points"] = round(100 * (acc[3] - acc[1]), 1) if acc else None
        out[f"{c}_reward_start"] = round(rew[1], 4) if rew else None
        out[f"{c}_reward_end"] = round(rew[3], 4) if rew else None
    mean = points.get("eval/reward/mean")
    out["reward_start"] = round(mean[1], 4) if mean else None
    out["reward_end"] = round(mean[3], 4) if mean else None
    out["eval_step_start"] = mean[0] if mean else None
    out["eval_step_end"] = mean[2] if mean else None
    out["steps"] = cfg.train.steps
    out["wall_time_s"] = round(run.wall_s, 1)
    gain = out["math_gain_points"]
    out["math_target_met"] = bool(gain is not None and gain >= TARGET_MATH_POINTS)
    out["within_10_min"] = run.wall_s <= TARGET_WALL_S
    out["overrides"] = list(args.overrides)
    out["quick"] = bool(args.quick)
    return out


def print_table(head: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Learning on the tiny world ({head['algo']}, {head['steps']} steps, "
                        f"{head['wall_time_s']:.0f} s)")
    for col in ("category", "accuracy start", "accuracy end", "gain (points)", "reward start", "reward end"):
        table.add_column(col, justify="left" if col == "category" else "right")
    for c in CATEGORIES:
        table.add_row(c, _f(head[f"{c}_accuracy_start"]), _f(head[f"{c}_accuracy_end"]),
                      _f(head[f"{c}_gain_points"], 1), _f(head[f"{c}_reward_start"]),
                      _f(head[f"{c}_reward_end"]))
    table.add_row("all", "", "", "", _f(head["reward_start"]), _f(head["reward_end"]))
    Console().print(table)
    verdict = "met" if head["math_target_met"] else "NOT met"
    print(f"math target (+{TARGET_MATH_POINTS:.0f} points): {verdict}; wall time "
          f"{head['wall_time_s']:.0f} s (target <= {TARGET_WALL_S:.0f} s)")


def _f(x: float | None, nd: int = 3) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = config_path(args)
    with tempfile.TemporaryDirectory(prefix="bench-learning-") as tmp:
        work = Path(tmp)
        db = args.keep_store.resolve() if args.keep_store else work / "learning.db"
        overrides = overrides_for(args, work)
        cfg = tr.load_train_config(config, overrides)
        run = tr.run_train(config, db, overrides, threads=args.threads)
        if run.returncode != 0:
            print(run.stderr_tail, file=sys.stderr)
            tr.print_json_last({"algo": cfg.algo, "error": f"rlcockpit train exited {run.returncode}",
                                "wall_time_s": round(run.wall_s, 1)})
            return 1
        points = start_end(tr.read_series(run.store_uri, run.run_id, eval_names()))
    head = headline(points, run, cfg, args)
    print_table(head)
    tr.print_json_last(head)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
