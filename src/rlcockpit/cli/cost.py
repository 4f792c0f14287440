"""``rlcockpit cost``: the cost ledger of a run and what-if projections (seed 004, docs/cost.md)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

EPILOG = """examples:
  rlcockpit cost --store sqlite:///runs.db --run 20260101-120000-ab12
  rlcockpit cost --store runs.db --run RUN --price-per-hour 2.5 --accelerators 8 --peak-tflops 989
  rlcockpit cost --store runs.db --run RUN --what-if 7,30 --gpus 8 --gpu H100
  rlcockpit cost --what-if 7,30          # seed 004's example: 512 prompts x 8 samples x 512 tokens

FLOPs: 2N per generated token, 6N per trained token (N = parameters, from the run's model_size
event); money: accelerator-hours x price. docs/cost.md has the formulas and a worked example."""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "cost", help="the cost ledger of a run (tokens, FLOPs, time, money, ETA) and what-ifs",
        description="Per run: tokens generated and trained, time per phase, FLOPs, utilisation, "
                    "accelerator-hours and money, ETA and projected total, the sampling "
                    "schedule's savings; what-if projections at other model sizes.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", default="sqlite:///rlcockpit.db", help="store URI (default sqlite:///rlcockpit.db)")
    p.add_argument("--run", help="run id (see rlcockpit runs); without it only --what-if is shown")
    p.add_argument("--price-per-hour", type=float, help="USD per accelerator-hour (default: the run's cost.price_per_hour)")
    p.add_argument("--accelerators", type=int, help="accelerators the run occupied (default: the run's cost.accelerators)")
    p.add_argument("--accelerator", help="accelerator name (default: the run's cost.accelerator)")
    p.add_argument("--peak-tflops", type=float, help="peak TFLOP/s of one accelerator, for utilisation")
    p.add_argument("--schedule", choices=("seed004", "none"),
                   help="show what the seed's sampling schedule saves (default: the run's cost.sampling_schedule)")
    p.add_argument("--steps", type=int, default=5, metavar="N", help="show the last N steps (default 5)")
    p.add_argument("--what-if", metavar="SIZES", help="model sizes in billions, e.g. 7,30")
    p.add_argument("--gpus", type=int, default=8, help="what-if: accelerators (default 8)")
    p.add_argument("--gpu", default="H100", help="what-if: accelerator, H100 or A100 (default H100)")
    p.add_argument("--prompts", type=int, help="what-if: prompts per step (default: the run's, else 512)")
    p.add_argument("--samples", type=int, help="what-if: samples per prompt (default: the run's, else 8)")
    p.add_argument("--tokens", type=float, help="what-if: tokens per sample (default: the run's mean, else 512)")
    p.add_argument("--tokens-per-s", type=float, default=2000.0,
                   help="what-if: decode tokens/s of one accelerator (seed 004: 2000 for 30 B)")
    p.add_argument("--mfu", type=float, default=0.35, help="what-if: update utilisation (seed 004: RL 0.20-0.35)")
    p.add_argument("--what-if-steps", type=int, default=1000, help="what-if: steps of a run (default 1000)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(func=cmd_cost)


def cmd_cost(args: argparse.Namespace) -> int:
    from rlcockpit.errors import ConfigError

    if not args.run and not args.what_if:
        raise ConfigError("give --run RUN (see rlcockpit runs) and/or --what-if 7,30",
                          details={"key": "--run"})
    ledger = _ledger(args) if args.run else None
    projections = _projections(args, ledger) if args.what_if else []
    if args.json:
        out: dict[str, Any] = {}
        if ledger is not None:
            out["ledger"] = ledger.to_dict(with_steps=True)
        if projections:
            out["what_if"] = [dataclasses.asdict(p) for p in projections]
        print(json.dumps(out, indent=2, default=float))
        return 0
    from rich.console import Console

    console = Console(soft_wrap=True)
    if ledger is not None:
        _print_ledger(console, ledger, args.steps)
    if projections:
        _print_projections(console, projections)
    return 0


def _ledger(args: argparse.Namespace) -> Any:
    from rlcockpit.metrics.cost import ledger_for_run
    from rlcockpit.store import open_store

    reader = open_store(args.store, read_only=True).reader()
    try:
        schedule = None if args.schedule is None else ("" if args.schedule == "none" else args.schedule)
        return ledger_for_run(reader, args.run, schedule=schedule, price_per_hour=args.price_per_hour,
                              accelerators=args.accelerators, accelerator=args.accelerator,
                              peak_tflops=args.peak_tflops)
    finally:
        reader.close()


def _projections(args: argparse.Namespace, ledger: Any) -> list[Any]:
    from rlcockpit.errors import ConfigError
    from rlcockpit.metrics.cost import project

    try:
        sizes = [float(x) for x in args.what_if.split(",") if x.strip()]
    except ValueError as exc:
        raise ConfigError(f"--what-if {args.what_if!r}: give sizes in billions, e.g. 7,30",
                          details={"key": "--what-if", "value": args.what_if}) from exc
    prompts, samples, tokens, epochs = 512, 8, 512.0, 1
    if ledger is not None and ledger.steps:  # "this config": the run's prompts, samples, lengths
        last = ledger.steps[-1]
        prompts, samples = ledger.prompts_per_step or prompts, ledger.n_samples or samples
        mean = ledger.mean_tokens_per_sample()
        tokens = mean if mean == mean else tokens
        epochs = max(1, round(last.tokens_trained / last.tokens_generated)) if last.tokens_generated else 1
    prompts = args.prompts or prompts
    samples = args.samples or samples
    tokens = args.tokens or tokens
    price = args.price_per_hour if args.price_per_hour is not None else \
        (ledger.pricing.price_per_hour if ledger is not None else 0.0)
    return [project(size, accelerators=args.gpus, accelerator=args.gpu, prompts=prompts,
                    n_samples=samples, tokens_per_sample=tokens, ppo_epochs=epochs,
                    tokens_per_s_per_accelerator=args.tokens_per_s, mfu=args.mfu,
                    price_per_hour=price, steps=args.what_if_steps) for size in sizes]


def _print_ledger(console: Any, ledger: Any, last_n: int) -> None:
    from rich.table import Table

    t, p = ledger.totals, ledger.pricing
    console.print(f"[bold]cost ledger[/] run [cyan]{ledger.run_id}[/]: {int(t.get('steps', 0))} of "
                  f"{ledger.total_steps} steps on {p.accelerators} x {p.accelerator}"
                  + (f" at ${p.price_per_hour:g}/h" if p.price_per_hour else " (no price: cost.price_per_hour)"))
    if not ledger.steps:
        console.print("no token counts recorded (cost/tokens_generated): the ledger needs a run trained "
                      "by rlcockpit's trainer")
        return
    params = ", ".join(f"{k.split('_')[0]} {v / 1e6:.3g} M" for k, v in ledger.params.items()) or "unknown"
    table = Table(title="totals so far and projected to the configured steps")
    for col in ("", "so far", "projected"):
        table.add_column(col, justify="right")
    pr = ledger.projected
    rows = [("tokens generated", _n(t["tokens_generated"]), _n(pr.get("tokens_generated"))),
            ("tokens trained", _n(t["tokens_trained"]), ""),
            ("FLOPs (2N gen + 6N trained)", _n(t["flops"]), _n(pr.get("flops"))),
            ("wall time", _dur(t["wall_s"]), _dur(pr.get("wall_s"))),
            ("accelerator-hours", f"{t['accelerator_hours']:.4g}", f"{pr.get('accelerator_hours', 0):.4g}"),
            ("money (USD)", f"{t['usd']:.4g}", f"{pr.get('usd', 0):.4g}")]
    if "mfu" in t:
        rows.append(("utilisation (MFU)", f"{t['mfu']:.2%}", ""))
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print(f"parameters: {params};  ETA: {_dur(ledger.eta_s)};  time by phase: "
                  + ", ".join(f"{k} {v:.0%}" for k, v in ledger.phase_share.items()))
    _print_steps(console, ledger.steps[-last_n:])
    if ledger.schedule:
        s = ledger.schedule
        how = "applied (measured)" if s.get("applied") else "projected (not applied)"
        console.print(f"sampling schedule (seed 004 §3.1) {how}: n_samples {s['constant_n_samples']} -> "
                      f"mean {s['mean_n_samples']:.2f}; generated tokens {_n(s['tokens_generated_constant'])} "
                      f"-> {_n(s['tokens_generated_scheduled'])} (-{s['saved_fraction']:.0%}), USD "
                      f"{s['usd_constant']:.4g} -> {s['usd_scheduled']:.4g}")


def _print_steps(console: Any, steps: list[Any]) -> None:
    from rich.table import Table

    table = Table(title="last steps")
    for col in ("step", "generated", "trained", "wall", "FLOPs", "USD"):
        table.add_column(col, justify="right")
    for c in steps:
        table.add_row(str(c.step), _n(c.tokens_generated), _n(c.tokens_trained), _dur(c.wall_s),
                      _n(c.flops), f"{c.usd:.4g}")
    console.print(table)


def _print_projections(console: Any, projections: list[Any]) -> None:
    from rich.table import Table

    p0 = projections[0]
    table = Table(title=f"what if: {p0.prompts} prompts x {p0.n_samples} samples x "
                        f"{p0.tokens_per_sample:g} tokens = {_n(p0.tokens_per_step)} tokens a step on "
                        f"{p0.accelerators} x {p0.accelerator}")
    for col in ("model", "sampling", "update (6N, MFU)", "step", "USD/step", f"{p0.steps} steps"):
        table.add_column(col, justify="right")
    for p in projections:
        table.add_row(f"{p.params_b:g} B", f"{_dur(p.sampling_s)} at {_n(p.sampling_tokens_per_s)} tok/s",
                      _dur(p.update_s), _dur(p.step_s), f"{p.usd_per_step:.4g}",
                      f"{p.run_hours:.1f} h, USD {p.run_usd:.4g}")
    console.print(table)


def _n(x: float | None) -> str:
    if x is None:
        return ""
    for unit, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.4g}"


def _dur(s: float | None) -> str:
    if s is None or s != s:
        return "-"
    if s >= 3600:
        return f"{s / 3600:.2f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    return f"{s:.3g} s"
