"""The TRL callback on TRL's PPOTrainer (issue 11): ``watch(trainer)`` on a real ``PPOTrainer`` run of the
tiny world, checked through the store. Runs INSIDE ``.benchvenv-trl-ppo`` (TRL 1.12.0): TRL 1.13 removed
``trl.experimental.ppo`` and no later TRL ships a PPO trainer, so the project's own venv (the latest TRL)
cannot run it.

The PPO run is benchmarks/_trl_runner.py's (the tiny world's SFT model as policy, reference and value
model; the world's rule reward as TRL's reward model), with the cockpit attached and, at the end of the
first update, a learning-rate ticket requested by one person and approved by another. Checked: the run is
recorded as a ``PPOTrainer`` run; which catalog metrics arrive (reward, KL, entropy, clip fraction, value
loss and its clip fraction, length) through the ``trl-ppo`` alias table; the ticket applied at the next
boundary (the learning rate logged before and after); the detectors' findings; samples (TRL's PPO loop
does not expose its completions to callbacks: none are expected).

    make bench-trl-ppo                     # builds .benchvenv-trl-ppo once
    .benchvenv-trl-ppo/bin/python benchmarks/trl_ppo_watch.py [--steps N]

Last stdout line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

CATALOG_INPUTS = ("reward/mean", "kl/mean", "policy/entropy", "policy/clip_frac", "policy/approx_kl",
                  "value/loss", "value/clip_frac", "response/length_mean", "optim/lr/actor")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=4, help="PPO updates (rollout cycles), >= 3")
    cli = p.parse_args()
    if cli.steps < 3:
        p.error("--steps must be >= 3 (the ticket is approved after the first update)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import _trl_runner
    import trl
    from transformers import TrainerCallback

    from rlcockpit.control import ControlPlane, Principal
    from rlcockpit.integrations.trl import watch
    from rlcockpit.store import open_store
    from rlcockpit.world import SFT_CHECKPOINT

    args = _trl_runner.parse_args(["--algo", "ppo", "--model", str(SFT_CHECKPOINT), "--steps", str(cli.steps),
                                   "--batch-size", "8", "--max-new-tokens", "16", "--kl-coef", "0.05",
                                   "--lr", "1e-5"])
    with tempfile.TemporaryDirectory(prefix="trl-ppo-watch-") as tmp:
        uri = f"sqlite:///{Path(tmp) / 'ppo.db'}"
        holder: dict = {}

        class Approve(TrainerCallback):  # another person approves a change while the first update ends
            def on_step_end(self, a, state, control, **kw):
                if state.global_step == 1 and "ticket" not in holder:
                    store = open_store(uri)
                    plane = ControlPlane.over(store.control(), store.reader())
                    ticket = plane.tickets.request(Principal("olga", "operator"), holder["cockpit"].run.run_id,
                                                   "learning_rate", 5e-6, "halve it")
                    plane.tickets.approve(Principal("alex", "approver"), ticket.ticket_id)
                    holder["ticket"] = ticket.ticket_id

        def attach(trainer):
            trainer.add_callback(Approve())
            holder["cockpit"] = watch(trainer, store=uri, project="trl-ppo")

        _trl_runner.run_ppo(args, attach=attach)
        store = open_store(uri)
        reader = store.reader()
        run_id = holder["cockpit"].run.run_id
        run, summary = reader.get_run(run_id), reader.summary(run_id)
        events = reader.read_events(run_id)
        ticket = store.control().get_ticket(holder["ticket"])
        lrs = reader.read_series(run_id, ["optim/lr/actor"]).get("optim/lr/actor")
        findings = reader.read_findings(run_id)
        names = set(summary.metric_names)
        result = {
            "benchmark": "trl_ppo_watch", "trl_version": trl.__version__, "steps": summary.steps,
            "status": run.status, "trainer": next((e.payload.get("trainer") for e in events
                                                   if e.kind == "trl_attached"), None),
            "catalog_inputs": {name: name in names for name in CATALOG_INPUTS},
            "metrics": len(names), "samples": summary.samples,
            "ticket": {"status": ticket.status, "applied_step": ticket.applied_step},
            "lr_logged": [float(v) for v in lrs.values] if lrs is not None else [],
            "findings": sorted({f"{f.detector}:{f.severity}" for f in findings}),
        }
    ok = (result["trainer"] == "PPOTrainer" and result["status"] == "finished"
          and result["ticket"]["status"] in ("applied", "evaluated") and 5e-6 in result["lr_logged"]
          and all(result["catalog_inputs"][k] for k in ("reward/mean", "kl/mean", "policy/entropy", "value/loss")))
    result["pass"] = ok
    print(f"TRL {result['trl_version']} PPOTrainer with watch(): {result['steps']} updates, status {result['status']}, "
          f"ticket {result['ticket']}, lr {result['lr_logged']}, {result['metrics']} metrics, "
          f"{result['samples']} samples, findings {result['findings'] or 'none'}")
    print(json.dumps(result))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
