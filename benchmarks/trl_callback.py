"""What the TRL callback costs a GRPO step (issue 11 target: <= 1 % on the tiny model with full
sample logging), side by side in one run.

The example's GRPOTrainer (examples/trl_grpo.py: the tiny world's SFT model, 4 reward functions)
trains ``--steps`` optimizer steps per round, once without the cockpit and once with
``watch(trainer, ...)`` (every completion logged with its rewards, advantage and per-token
reference logprobs; detectors and the control link on), alternating for ``--rounds`` rounds. Two
measures:

- ``callback_share``: the time the training thread spends inside the cockpit per step (the step
  hooks plus reading the completions after each generation, the detectors, or with ``--background``
  any wait for them; opening and closing the run are set-up),
  measured by wrapping those calls, over the step time of the same run — precise, immune to
  machine noise, but blind to the writer and detector threads (``detectors_share``: the detectors'
  own time, wherever they run; ``--background`` runs them in a background thread);
- ``ab_overhead``: median step time with the cockpit / without - 1 — the end-to-end view, noisy
  on a shared machine (the other CPU load changes between rounds).

    python benchmarks/trl_callback.py [--quick] [--steps N] [--rounds R] [--background]

Last stdout line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import load_example  # noqa: E402

TARGET = 0.01
STEP_HOOKS = ("on_step_end", "on_log", "on_save")  # per step; opening and closing the run are set-up


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2 rounds of 4 steps (a smoke run)")
    p.add_argument("--steps", type=int, default=12, help="optimizer steps per run (default 12)")
    p.add_argument("--rounds", type=int, default=3, help="runs per variant, interleaved (default 3)")
    p.add_argument("--background", action="store_true", help="the detectors in a background thread "
                   "(background_diagnostics=True: actions one or two logged steps later)")
    args = p.parse_args()
    if args.quick:
        args.steps, args.rounds = min(args.steps, 4), min(args.rounds, 2)
    if args.steps < 3 or args.rounds < 1:
        p.error("--steps must be >= 3 and --rounds >= 1")
    return args


class Clock:
    """Optimizer-step end times, the time spent inside the cockpit, and inside its detectors."""

    def __init__(self) -> None:
        self.ends: list[float] = []
        self.inside = 0.0
        self.detectors = 0.0

    def timed(self, fn, field: str = "inside"):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                setattr(self, field, getattr(self, field) + time.perf_counter() - start)
        return wrapper

    def step_times(self) -> list[float]:
        return [b - a for a, b in zip(self.ends, self.ends[1:], strict=False)]  # first step (warm-up) dropped


def one_run(ex, steps: int, cockpit: bool, tmp: Path, background: bool = False) -> tuple[list[float], float, float]:
    from transformers import TrainerCallback

    import rlcockpit.integrations.trl as trl_module
    from rlcockpit.integrations.trl import watch

    args = ex.parse_args(["--steps", str(steps)])
    trainer = ex.build_trainer(args, str(tmp / "out"))
    clock = Clock()

    class StepEnd(TrainerCallback):
        def on_step_end(self, *a, **k):
            clock.ends.append(time.perf_counter())

    trainer.add_callback(StepEnd())
    original = trl_module.samples_of
    if cockpit:
        callback = watch(trainer, store=f"sqlite:///{tmp / 'bench.db'}", background_diagnostics=background)
        for hook in STEP_HOOKS:
            setattr(callback, hook, clock.timed(getattr(callback, hook)))
        trl_module.samples_of = clock.timed(original)  # reading the completions after each generation
        begin = callback.on_train_begin

        def begin_and_time_the_engine(*a, **k):
            out = begin(*a, **k)
            if callback.engine is not None:
                callback.engine.observe = clock.timed(callback.engine.observe, "detectors")
            return out

        callback.on_train_begin = begin_and_time_the_engine
    try:
        trainer.train()
    finally:
        trl_module.samples_of = original
    return clock.step_times(), clock.inside, clock.detectors


def main() -> int:
    args = parse_args()
    ex = load_example("trl_grpo.py")
    off: list[float] = []
    on: list[float] = []
    inside = detectors = on_total = 0.0
    for _ in range(args.rounds):
        for cockpit in (False, True):
            with tempfile.TemporaryDirectory(prefix="trl-callback-bench-") as tmp:
                times, spent, engine = one_run(ex, args.steps, cockpit, Path(tmp), args.background)
            (on if cockpit else off).extend(times[1:])  # the first interval holds the run's set-up
            if cockpit:
                inside += spent
                detectors += engine
                on_total += sum(times)
    med_off, med_on = statistics.median(off), statistics.median(on)
    share = inside / on_total if on_total else None
    engine_share = detectors / on_total if on_total else None
    ab = med_on / med_off - 1
    mode = "background (actions one or two logged steps later)" if args.background else "same step (in the training thread)"
    print(f"TRL GRPO step on the tiny model, {args.rounds} rounds x {args.steps} steps per variant; detectors: {mode}")
    print(f"  without the cockpit  median {med_off * 1000:8.1f} ms/step")
    print(f"  with the cockpit     median {med_on * 1000:8.1f} ms/step  (A/B {ab:+.1%}, noisy)")
    print(f"  training thread inside the cockpit: {share:.2%} of the step time (hooks, reading the completions"
          + (", waiting for the background detectors)" if args.background else ", the detectors)"))
    print(f"  the detectors' own time: {engine_share:.2%} of the step time"
          + (" (in the background thread, overlapping the next generation)" if args.background else ""))
    print(json.dumps({"benchmark": "trl_callback", "rounds": args.rounds, "steps": args.steps,
                      "detectors": "background" if args.background else "same_step",
                      "step_ms_without": round(med_off * 1000, 2), "step_ms_with": round(med_on * 1000, 2),
                      "ab_overhead": round(ab, 4), "callback_share": round(share, 5),
                      "detectors_share": round(engine_share, 5),
                      "target": TARGET, "pass": share <= TARGET}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
