"""``rlcockpit demo``: the tiny-world PPO run with a live terminal view (what ``make demo`` starts).

:func:`run_demo` is a plain function so the CLI (and, later, a web cockpit launcher) can call it.
"""

from __future__ import annotations

import argparse
from collections import deque
from typing import Any

DEFAULT_STORE = "sqlite:///rlcockpit.db"
DEFAULT_STEPS = 200
COLUMNS = (("reward/mean", "reward"), ("kl/mean", "KL"), ("policy/entropy", "entropy"),
           ("eval/accuracy/math", "math acc (eval)"), ("eval/reward/mean", "eval reward"))


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "demo", help="train the tiny world with PPO on the CPU and watch reward, KL and accuracy live",
        description="Run PPO on the shipped tiny world (offline, CPU) with a live view of reward, KL, "
                    "entropy and validation accuracy. Everything is recorded in the store.")
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS, help=f"training steps (default {DEFAULT_STEPS})")
    p.add_argument("--store", default=DEFAULT_STORE, help=f"store URI (default {DEFAULT_STORE})")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    p.set_defaults(func=_command)


def _command(args: argparse.Namespace) -> int:
    result = run_demo(steps=args.steps, store=args.store, seed=args.seed)
    return 0 if result.status in ("finished", "stopped") else 1


def demo_config(steps: int, store: str, seed: int = 0, overrides: dict[str, Any] | None = None) -> Any:
    """The default TrainConfig (tuned for the tiny world) with the demo's name, length and store."""
    from rlcockpit.config import from_dict
    from rlcockpit.trainer.config import TrainConfig

    data: dict[str, Any] = {"name": "demo", "project": "demo", "seed": seed, "train": {"steps": steps},
                            "telemetry": {"store": store}, **(overrides or {})}
    return from_dict(TrainConfig, data)


def run_demo(steps: int = DEFAULT_STEPS, store: str = DEFAULT_STORE, seed: int = 0,
             overrides: dict[str, Any] | None = None, console: Any = None) -> Any:
    """Train, show a live table, print where the data went; returns the TrainResult."""
    from rich.console import Console
    from rich.live import Live

    from rlcockpit.trainer.trainer import Trainer

    console = console or Console()
    cfg = demo_config(steps, store, seed, overrides)
    trainer = Trainer(cfg)
    view = DemoView(steps)
    console.print(f"[bold]rlcockpit demo[/]: PPO on the tiny world, {steps} steps, store {store}")
    with Live(view.render(), console=console, refresh_per_second=4) as live:
        def on_step(step: int, metrics: dict[str, float]) -> None:
            view.add(step, metrics)
            live.update(view.render())

        trainer.add_observer(on_step)
        result = trainer.run()
    console.print()
    print_where(console, result, cfg)
    return result


class DemoView:
    """The live table: the latest steps plus the most recent evaluation."""

    def __init__(self, total: int, rows: int = 12) -> None:
        self.total = total
        self.rows: deque[tuple[int, dict[str, float]]] = deque(maxlen=rows)
        self.last_eval: dict[str, float] = {}
        self.step = 0

    def add(self, step: int, metrics: dict[str, float]) -> None:
        self.step = step
        evals = {k: v for k, v in metrics.items() if k.startswith("eval/")}
        self.last_eval.update(evals)
        self.rows.append((step, metrics))

    def render(self) -> Any:
        from rich.console import Group, NewLine
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        table = Table(expand=False)
        table.add_column("step", justify="right")
        for _, label in COLUMNS:
            table.add_column(label, justify="right")
        for step, m in self.rows:
            table.add_row(str(step), *(_fmt(m.get(key)) for key, _ in COLUMNS))
        header = Text(f"tiny world PPO  step {self.step}/{self.total}  latest math accuracy (eval on fixed "
                      f"validation prompts and seed): {_fmt(self.last_eval.get('eval/accuracy/math'))}")
        return Group(header, ProgressBar(total=self.total, completed=self.step, width=60), NewLine(), table)


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def print_where(console: Any, result: Any, cfg: Any) -> None:
    console.print(f"[bold]{result.status}[/] at step {result.step}. Run id [cyan]{result.run_id}[/].")
    # soft_wrap: never break a path or a command line, so it can be copied as printed
    console.print(f"Data (metrics, samples with token arrays, phases, events): {cfg.telemetry.store}",
                  soft_wrap=True)
    console.print(f"  list runs:  rlcockpit runs --store {cfg.telemetry.store}", soft_wrap=True)
    if result.checkpoint:
        console.print(f"Checkpoint: {result.checkpoint}", soft_wrap=True)
        console.print(f"  continue:   rlcockpit train --resume {result.checkpoint} train.steps={result.step + 100}",
                      soft_wrap=True)
