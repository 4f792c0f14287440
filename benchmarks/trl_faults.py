"""Do the detectors that catch a fault in our trainer catch it in a TRL GRPO run too? (issue 11 target)

The example's GRPOTrainer (examples/trl_grpo.py: tiny world SFT model, one reward function per
rule-reward component) watched by ``rlcockpit.integrations.trl.watch``; at ``--onset`` a fault of
the detection benchmark's catalog (src/rlcockpit/faults/catalog.py) is injected through the same
knobs a ticket changes (rlcockpit.integrations.trl_knobs):

- ``lr_spike``: learning rate x 100;
- ``entropy_collapse``: temperature = 0.3;
- ``kl_coef_zero_with_hackable_reward``: beta = 0, learning rate x 10, and the helpfulness reward
  function pays +3.0 for the filler template (the catalog's ``filler_bonus``).

A healthy run with the same seed is the twin: a detector that also fires there is not counted.
Per fault: the catalog's expected detectors (what fires on our trainer, docs/detection.md), the
ones that fired on TRL from the onset on, and which expected ones fired. The severity policy is
alert-only here (a red finding would otherwise pause the run for a person).

    python benchmarks/trl_faults.py [--quick] [--steps N] [--onset K] [--seed S]

Last stdout line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import load_example  # noqa: E402

FAULTS = ("lr_spike", "entropy_collapse", "kl_coef_zero_with_hackable_reward")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="10 steps, onset 4, lr_spike only (a smoke run)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--onset", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated, from {', '.join(FAULTS)}")
    args = p.parse_args()
    if args.quick:
        args.steps, args.onset, args.faults = min(args.steps, 10), min(args.onset, 4), "lr_spike"
    args.faults = [f for f in args.faults.split(",") if f]
    unknown = sorted(set(args.faults) - set(FAULTS))
    if unknown:
        p.error(f"unknown fault(s) {unknown}; choose from {', '.join(FAULTS)}")
    if not 1 <= args.onset < args.steps:
        p.error("--onset must be in [1, --steps)")
    return args


def hackable(reward_fn, onset: int, bonus: float = 3.0):
    """The helpfulness reward function with the catalog's filler bonus from ``onset`` on."""
    from rlcockpit.world.rewards import has_filler  # what the catalog's filler_bonus pays for

    def reward(prompts, completions, trainer_state=None, **kwargs):
        out = reward_fn(prompts, completions, trainer_state=trainer_state, **kwargs)
        step = int(getattr(trainer_state, "global_step", 0) or 0) + 1
        if step < onset:
            return out
        return [x + bonus if has_filler(c) else x for x, c in zip(out, completions, strict=True)]

    reward.__name__ = reward_fn.__name__
    return reward


def one_run(ex, args: argparse.Namespace, fault: str | None, tmp: Path) -> list[tuple[int, str, str]]:
    from transformers import TrainerCallback

    from rlcockpit.diagnostics import DiagnosticsConfig, PolicyConfig
    from rlcockpit.integrations.trl import watch
    from rlcockpit.integrations.trl_knobs import apply_change
    from rlcockpit.store import open_store

    run_args = ex.parse_args(["--steps", str(args.steps), "--seed", str(args.seed)])
    trainer = ex.build_trainer(run_args, str(tmp / "out"))
    if fault == "kl_coef_zero_with_hackable_reward":
        index = trainer.reward_func_names.index("helpfulness")
        trainer.reward_funcs[index] = hackable(trainer.reward_funcs[index], args.onset)

    class Inject(TrainerCallback):  # at the boundary before the onset step, as a ticket would land
        def on_step_end(self, a, state, control, **kwargs):
            if fault is None or state.global_step != args.onset - 1:
                return
            lr = float(trainer.args.learning_rate)
            if fault == "lr_spike":
                apply_change(trainer, "learning_rate", lr * 100)
            elif fault == "entropy_collapse":
                apply_change(trainer, "temperature", 0.3)
            else:
                apply_change(trainer, "beta", 0.0)
                apply_change(trainer, "learning_rate", lr * 10)

    trainer.add_callback(Inject())
    uri = f"sqlite:///{tmp / 'faults.db'}"
    alert_only = PolicyConfig(actions={tier: ("alert",) for tier in ("yellow", "orange", "red", "black")})
    cockpit = watch(trainer, store=uri, diagnostics=DiagnosticsConfig(policy=alert_only), control=False)
    trainer.train()
    reader = open_store(uri).reader()
    return [(f.step, f.detector, f.severity) for f in reader.read_findings(cockpit.run.run_id)
            if f.status != "resolved"]


def main() -> int:
    from rlcockpit import faults as catalog

    args = parse_args()
    ex = load_example("trl_grpo.py")
    with tempfile.TemporaryDirectory(prefix="trl-faults-") as tmp:
        healthy = one_run(ex, args, None, Path(tmp) / "healthy")
        results = {}
        for fault in args.faults:
            found = one_run(ex, args, fault, Path(tmp) / fault)
            expected = set(catalog.get(fault).expected)
            false_alarms = {d for s, d, _ in healthy if s >= args.onset}
            fired = {d for s, d, _ in found if s >= args.onset} - false_alarms
            results[fault] = {"expected": sorted(expected), "fired": sorted(fired),
                              "expected_fired": sorted(expected & fired),
                              "first_step": min((s for s, d, _ in found if d in expected & fired), default=None)}
    print(f"faults injected into TRL GRPO at step {args.onset} of {args.steps} (seed {args.seed}); "
          f"healthy twin fired: {sorted({d for s, d, _ in healthy if s >= args.onset}) or 'nothing'}")
    for fault, r in results.items():
        print(f"  {fault:<36} expected {', '.join(r['expected'])}")
        print(f"  {'':<36} fired    {', '.join(r['fired']) or '-'}  (first expected at step {r['first_step']})")
    print(json.dumps({"benchmark": "trl_faults", "steps": args.steps, "onset": args.onset, "seed": args.seed,
                      "healthy_fired": sorted({d for s, d, _ in healthy if s >= args.onset}),
                      "faults": results,
                      "caught": sum(bool(r["expected_fired"]) for r in results.values()),
                      "of": len(results)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
