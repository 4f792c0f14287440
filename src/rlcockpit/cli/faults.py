"""``rlcockpit faults``: list the built-in faults, or train the tiny world with one injected.

    rlcockpit faults list
    rlcockpit faults run lr_spike --seed 0 --store sqlite:///faults.db --onset 10 --steps 30
    rlcockpit faults run lr_spike --onset 0 --magnitude mild          # x3, present from the first step
    rlcockpit faults run rm_component_bias --shape ramp --ramp 15     # reached over 15 steps
    rlcockpit faults run rank_straggler --nproc 2                     # rank 1 of 2 slowed (torchrun)

A fault run is a real, short tiny-world training run (trainer defaults = examples/ppo_tiny.yaml, or
--config) with the diagnostics on; the onset is recorded as an event of kind "fault". See
docs/detection.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

EPILOG = """examples:
  rlcockpit faults list
  rlcockpit faults run lr_spike --seed 0 --store sqlite:///faults.db
  rlcockpit faults run nan_reward --store faults.db --onset 15 --steps 40 rollout.batch_size=16
  rlcockpit faults run entropy_collapse --config examples/grpo_tiny.yaml --store faults.db
  rlcockpit faults run lr_spike --onset 0 --magnitude mild --store faults.db
  rlcockpit faults run hedge_reward --shape ramp --ramp 15 --store faults.db
  rlcockpit faults run rank_straggler --nproc 2 --store faults.db rollout.batch_size=8

Then: rlcockpit doctor --store faults.db --run RUN_ID (the run id is printed at the end)."""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "faults", help="inject a known failure into a tiny-world run (list / run)",
        description="Fault injection: list the built-in faults, or run a short tiny-world training with one "
                    "of them injected at a known step, diagnostics on. docs/detection.md describes each fault.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="faults_command", metavar="SUBCOMMAND", parser_class=_OverridesAnywhere)
    lp = sub.add_parser("list", help="table of the faults: name, description, variants, expected detectors")
    lp.add_argument("--json", action="store_true", help="print JSON instead of a table")
    lp.set_defaults(func=cmd_list)
    rp = sub.add_parser("run", help="train the tiny world with one fault injected",
                        description="Train the tiny world (PPO defaults or --config) for --steps steps with the "
                                    "fault injected at --onset; diagnostics on (alert only); recorded in --store.",
                        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    rp.add_argument("name", metavar="NAME", help="fault name (see `rlcockpit faults list`)")
    rp.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. rollout.batch_size=16")
    rp.add_argument("--seed", type=int, default=0, help="run seed (default 0)")
    rp.add_argument("--store", default="sqlite:///rlcockpit.db", help="store URI (default sqlite:///rlcockpit.db)")
    rp.add_argument("--onset", type=int, help="first faulted step, or 0 = present from the first step (a config-level "
                    "change); default: the fault's own, see `faults list`")
    rp.add_argument("--magnitude", choices=("mild", "strong"), help="mild or strong (default: strong, the catalog's)")
    rp.add_argument("--shape", choices=("step", "ramp"), help="the whole change at once, or a ramp (default: the "
                    "fault's own)")
    rp.add_argument("--ramp", type=int, help="steps a ramp takes (default 15)")
    rp.add_argument("--steps", type=int, help="training steps (default: first faulted step + 20, + the ramp)")
    rp.add_argument("--config", type=Path, help="YAML config instead of the trainer defaults")
    rp.add_argument("--json", action="store_true", help="print the result as one JSON object")
    rp.add_argument("--nproc", type=int, default=1, metavar="N",
                    help="data-parallel run on N processes of this machine (torchrun); the rank_* faults need 2+")
    rp.set_defaults(func=cmd_run)
    p.set_defaults(func=lambda args: _usage(p))


class _OverridesAnywhere(argparse.ArgumentParser):
    """KEY=VALUE overrides may follow the options too (argparse matches positionals only once)."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        ns, extra = super().parse_known_args(args, namespace)
        if hasattr(ns, "overrides"):
            moved = [a for a in extra if "=" in a and not a.startswith("-")]
            ns.overrides = [*(ns.overrides or []), *moved]
            extra = [a for a in extra if a not in moved]
        return ns, extra


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 1


def fault_rows() -> list[dict[str, Any]]:
    from rlcockpit import faults

    return [{"name": f.name, "description": f.description, "onset": f.onset, "expected": list(f.expected),
             "how": f.how, "magnitudes": ["mild", "strong"] if f.mild else ["strong"], "shapes": list(f.shapes),
             "algos": list(f.algos), "drives": f.drives} for f in faults.available().values()]


def cmd_list(args: argparse.Namespace) -> int:
    rows = fault_rows()
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="built-in faults (rlcockpit faults run NAME)")
    for column in ("name", "description", "onset", "variants", "expected detectors"):
        table.add_column(column, no_wrap=column == "name", justify="right" if column == "onset" else "left")
    for r in rows:
        variants = f"{'/'.join(r['magnitudes'])}; {'/'.join(r['shapes'])}; {'/'.join(r['algos'])}"
        table.add_row(r["name"], r["description"], str(r["onset"]), variants, ", ".join(r["expected"]))
    Console().print(table)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from rlcockpit import faults
    from rlcockpit.faults.runner import DEFAULT_AFTER, fault_config, run_fault

    fault = faults.get(args.name).with_onset(args.onset)
    fault = fault.with_variant(magnitude=args.magnitude, shape=args.shape or ("ramp" if args.ramp else None),
                               ramp=args.ramp)
    ramp = fault.ramp_steps if fault.shape == "ramp" else 0
    steps = args.steps if args.steps is not None else fault.first_step + DEFAULT_AFTER + ramp - 1
    if steps < fault.first_step:
        from rlcockpit.errors import ConfigError

        raise ConfigError(f"--steps {steps} ends before the first faulted step {fault.first_step}; use --steps >= "
                          f"{fault.first_step}", details={"steps": steps, "onset": fault.onset})
    cfg = fault_config(seed=args.seed, store=args.store, steps=steps, name=f"fault-{fault.name}-s{args.seed}",
                       config=args.config, overrides=args.overrides)
    under_torchrun = "WORLD_SIZE" in os.environ
    fault.check_world(int(os.environ["WORLD_SIZE"]) if under_torchrun else args.nproc)  # before torchrun starts
    if args.nproc > 1 and not under_torchrun:
        return _launch(args, cfg)
    from rlcockpit.trainer.distributed import init_group

    # a rank fault may set the group's own settings (rank_frozen: a short collective timeout)
    group = init_group(fault.configure(cfg).distributed if fault.distributed else cfg.distributed)
    try:
        result = run_fault(fault, cfg, group=group)
    finally:
        group.close()
    if not group.is_main:
        return 0 if result.status in ("finished", "stopped") else 1
    summary = {**dataclasses.asdict(result), "variant": fault.variant(), "first_step": fault.first_step,
               "findings": _findings(result)}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print_summary(summary)
    return 0 if result.status in ("finished", "stopped") else 1


def _launch(args: argparse.Namespace, cfg: Any) -> int:
    """``--nproc N``: this command under torchrun, N ranks."""
    from rlcockpit.cli.train import under_torchrun

    argv = ["faults", "run", args.name, *args.overrides, "--seed", str(args.seed), "--store", args.store]
    for flag, value in (("--onset", args.onset), ("--magnitude", args.magnitude), ("--shape", args.shape),
                        ("--ramp", args.ramp), ("--steps", args.steps), ("--config", args.config)):
        if value is not None:
            argv += [flag, str(value)]
    if args.json:
        argv.append("--json")
    return under_torchrun(args.nproc, cfg, argv)


def _findings(result: Any) -> list[dict[str, Any]]:
    from rlcockpit.store import open_store

    reader = open_store(result.store, create=False).reader()
    try:
        return [{"step": f.step, "detector": f.detector, "severity": f.severity, "status": f.status,
                 "message": f.message} for f in reader.read_findings(result.run_id) if f.status != "resolved"]
    finally:
        reader.close()


def _print_summary(s: dict[str, Any]) -> None:
    from rich.console import Console

    console = Console()
    console.print(f"[bold]{s['status']}[/] fault run [cyan]{s['run_id']}[/]: {s['fault']} ({s['variant']}), first "
                  f"faulted step {s['first_step']}, {s['steps']} steps")
    for f in s["findings"]:
        delay = f["step"] - s["first_step"]
        when = f"{delay:+d} steps after onset" if delay >= 0 else f"{-delay} steps BEFORE the onset"
        console.print(f"  step {f['step']:>4} ({when}): {f['severity']:<6} {f['detector']}: {f['message']}",
                      soft_wrap=True)
    if not s["findings"]:
        console.print("  no findings")
    console.print(f"store: {s['store']}   (diagnose again: rlcockpit doctor --store {s['store']} --run "
                  f"{s['run_id']})", soft_wrap=True)
