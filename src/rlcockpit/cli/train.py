"""``rlcockpit train``: PPO / GRPO on a YAML config plus dotted overrides, recorded in a store.

    rlcockpit train --config examples/ppo_tiny.yaml --store sqlite:///runs.db train.steps=200 seed=3
    rlcockpit train --nproc 2 --config examples/ppo_tiny.yaml      # data parallel (docs/distributed.md)

Under torchrun (``torchrun --nproc_per_node=N -m rlcockpit train ...``, or ``--nproc N``, which starts
torchrun with a free rendezvous port) every process is one rank of the run: rank 0 writes the store,
runs the progress bar, the control plane and the ops stack; the other ranks train quietly.

The whole config is validated before torch is imported; model, prompts and the reward function are
checked before the first step. Every error names the key, the value and what is allowed (exit 2).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from rlcockpit.config import apply_overrides, from_dict, read_yaml
from rlcockpit.trainer.config import TrainConfig

MAIN_KEYS = {
    "algo": "ppo (actor + critic) or grpo (group advantages)",
    "seed": "seeds everything, incl. data order and sampling",
    "model.path": "'tiny' or a local Hugging Face causal-LM dir",
    "data.source": "'tiny' or a JSONL file of prompts",
    "rollout.batch_size": "prompts per step",
    "rollout.n_samples": "responses per prompt (GRPO: >= 2)",
    "rollout.temperature": "sampling temperature (live)",
    "rollout.max_new_tokens": "response length limit (live)",
    "reward.fn": "reward function 'module:function'",
    "reward.weights": "weight per reward component",
    "kl.coef": "KL coefficient beta (live)",
    "kl.adaptive": "adaptive KL controller towards kl.target",
    "ppo.epochs": "passes over each batch (live)",
    "ppo.minibatch_size": "samples per optimizer step",
    "ppo.clip_eps": "policy clip epsilon (live)",
    "optim.actor_lr": "actor learning rate (live)",
    "train.steps": "training steps",
    "eval.every": "validation every N steps (and step 0)",
    "checkpoint.dir": "where checkpoints go",
    "checkpoint.every": "checkpoint every N steps",
    "telemetry.store": "store URI (also --store)",
}


def main_keys_text() -> str:
    from rlcockpit.config import describe

    defaults = {key: default for key, _, default, _ in describe(TrainConfig)}
    lines = ["main config keys (KEY=VALUE overrides; every key is documented in docs/config.md):",
             f"  {'key':<23} {'default':<32} meaning"]
    for key, meaning in MAIN_KEYS.items():
        shown = repr(defaults[key])
        lines.append(f"  {key:<23} {shown:<32} {meaning}")
    lines.append("")
    lines.append("examples:")
    lines.append("  rlcockpit train --config examples/ppo_tiny.yaml train.steps=50 kl.coef=0.1")
    lines.append("  rlcockpit train --config examples/grpo_tiny.yaml --store sqlite:///runs.db")
    lines.append("  rlcockpit train --resume latest train.steps=400")
    lines.append("  rlcockpit train --nproc 2 --config examples/grpo_tiny.yaml   # 2 data-parallel ranks")
    return "\n".join(lines)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "train", help="train a policy with PPO or GRPO (tiny world or any local HF causal LM)",
        description="Train with PPO or GRPO. The run (metrics, samples, phases, events, checkpoints) is "
                    "recorded in the store. See docs/trainer.md and docs/config.md.",
        epilog=main_keys_text(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. kl.coef=0.05")
    p.add_argument("--config", type=Path, help="YAML config (e.g. examples/ppo_tiny.yaml); defaults otherwise")
    p.add_argument("--store", help="store URI (overrides telemetry.store), e.g. sqlite:///runs.db")
    p.add_argument("--resume", metavar="PATH|latest",
                   help="continue a run from a checkpoint directory (or 'latest' under checkpoint.dir); the "
                        "same run id continues in the store")
    p.add_argument("--name", help="run name (overrides name)")
    p.add_argument("--force", action="store_true",
                   help="with --resume: take over the run's lease even while another process holds it "
                        "(only for a holder you know is dead; the other process stops writing the run)")
    p.add_argument("--nproc", type=int, default=1, metavar="N",
                   help="data-parallel training on N processes of this machine: starts torchrun with a free "
                        "rendezvous port (several machines: run torchrun yourself, docs/distributed.md)")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no summary")
    p.add_argument("--log-format", choices=("console", "json"),
                   help="json: one JSON log line per phase, step and finding with rl_phase, "
                        "rl_component, rl_status, run, step (overrides ops.log_format; docs/ops.md)")
    p.set_defaults(func=run_command)


def build_config(args: argparse.Namespace, base: dict[str, Any] | None = None) -> TrainConfig:
    """``base`` (a checkpoint's config) < --config YAML < KEY=VALUE overrides < --store / --name."""
    data: dict[str, Any] = dict(base or {})
    if args.config is not None:
        data = _merge(data, read_yaml(args.config))
    data = apply_overrides(data, args.overrides)
    if args.store:
        data.setdefault("telemetry", {})["store"] = args.store
    if args.name:
        data["name"] = args.name
    if getattr(args, "log_format", None):
        data.setdefault("ops", {})["log_format"] = args.log_format
    return from_dict(TrainConfig, data)


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def run_command(args: argparse.Namespace) -> int:
    cfg = build_config(args)  # fail fast, before torch is imported
    resume_path, refill_note = None, None
    if args.resume:
        from rlcockpit.trainer.checkpoint import checkpoint_config, resolve_checkpoint

        resume_path = resolve_checkpoint(args.resume, cfg.checkpoint.dir)
        cfg = build_config(args, base=checkpoint_config(resume_path))
        if "WORLD_SIZE" not in os.environ:  # once, before torchrun's ranks start: they get the choice
            resume_path, refill_note = refill(resume_path, cfg)
            cfg = build_config(args, base=checkpoint_config(resume_path))
            args.resume = str(resume_path)
        if not getattr(args, "force", False) and "WORLD_SIZE" not in os.environ:  # fail fast, before the models load
            refuse_if_held_by_another(cfg, resume_path)
    if args.nproc > 1 and "WORLD_SIZE" not in os.environ:
        return launch(args, cfg)
    from rlcockpit.cli._support.ops import close_all, wire_trainer
    from rlcockpit.trainer.distributed import init_group
    from rlcockpit.trainer.trainer import Trainer

    group = init_group(cfg.distributed)  # one process, or this rank of torchrun's group
    main_rank = group.is_main
    trainer = Trainer(cfg, resume_from=resume_path, control_store=control_store(cfg) if main_rank else None,
                      group=group, take_over=getattr(args, "force", False))
    trainer.resume_note = refill_note
    closers = wire_trainer(trainer, cfg) if main_rank else []  # Prometheus, Alertmanager, logs, traces
    try:
        if args.quiet or cfg.ops.log_format == "json" or not main_rank:  # JSON lines: no progress bar
            result = trainer.run()
        else:
            result = run_with_progress(trainer, cfg)
            print_summary(result, cfg)
    finally:
        close_all(closers)
        group.close()
    return 0 if result.status in ("finished", "stopped") else 1


def refill(resume_path: Path, cfg: TrainConfig) -> tuple[Path, dict[str, Any] | None]:
    """``--resume``: go back to the newest checkpoint before the first step the store lost
    (trainer/refill.py); the checkpoint itself when nothing is missing."""
    from rlcockpit.trainer.refill import refill_point

    return refill_point(resume_path, cfg)


def launch(args: argparse.Namespace, cfg: TrainConfig) -> int:
    """``--nproc N``: this same command under torchrun, N ranks; returns torchrun's exit code."""
    argv = ["train", *args.overrides]
    for flag, value in (("--config", args.config), ("--store", args.store), ("--resume", args.resume),
                        ("--name", args.name), ("--log-format", getattr(args, "log_format", None))):
        if value is not None:
            argv += [flag, str(value)]
    argv += [flag for flag, on in (("--quiet", args.quiet), ("--force", getattr(args, "force", False))) if on]
    return under_torchrun(args.nproc, cfg, argv)


def under_torchrun(nproc: int, cfg: TrainConfig, argv: list[str]) -> int:
    """``rlcockpit <argv>`` under torchrun (``--standalone``: a free rendezvous port on this machine)
    on ``nproc`` ranks, after checking that the batch splits evenly; torchrun's exit code."""
    from rlcockpit.errors import ConfigError

    if cfg.rollout.batch_size % nproc or cfg.ppo.minibatch_size % nproc:
        raise ConfigError(f"--nproc {nproc}: rollout.batch_size={cfg.rollout.batch_size} and "
                          f"ppo.minibatch_size={cfg.ppo.minibatch_size} must be multiples of {nproc} "
                          "(each rank takes an equal share of the prompts and of every minibatch)",
                          details={"key": "nproc", "value": nproc})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           "-m", "rlcockpit", *argv]
    return subprocess.call(cmd)


def refuse_if_held_by_another(cfg: TrainConfig, resume_path: Path) -> None:
    """``--resume`` of a run another live process writes: its lease names the holder (exit 2)."""
    import json

    from rlcockpit.telemetry.lease import refuse_if_held

    try:
        run_id = json.loads((resume_path / "meta.json").read_text(encoding="utf-8"))["run_id"]
    except (OSError, ValueError, KeyError):  # an older checkpoint: the trainer's own init checks
        return
    refuse_if_held(cfg.telemetry.store, str(run_id))


def control_store(cfg: TrainConfig) -> Any:
    """The store's control plane for the trainer (tickets and commands, docs/control.md), or None.

    Returned as an opener the trainer calls once INIT's fail-fast checks passed."""
    if not cfg.control.enabled:
        return None

    def open_control() -> Any:
        from rlcockpit.store import open_store

        return open_store(cfg.telemetry.store).control()

    return open_control


def run_with_progress(trainer: Any, cfg: TrainConfig) -> Any:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeRemainingColumn(), TextColumn("{task.fields[stats]}"))
    with Progress(*columns, transient=False) as progress:
        task = progress.add_task(f"{cfg.algo.upper()}", total=cfg.train.steps, stats="loading…")

        def on_step(step: int, metrics: dict[str, float]) -> None:
            progress.update(task, completed=step, stats=step_stats(metrics))

        trainer.add_observer(on_step)
        return trainer.run()


def step_stats(m: dict[str, float]) -> str:
    parts = []
    for key, label in (("reward/mean", "reward"), ("kl/mean", "KL"), ("policy/entropy", "entropy"),
                       ("eval/accuracy/math", "math acc")):
        if key in m:
            parts.append(f"{label} {m[key]:.3f}")
    return "  ".join(parts)


def print_summary(result: Any, cfg: TrainConfig) -> None:
    from rich.console import Console

    console = Console(stderr=False)
    console.print(f"[bold]{result.status}[/] run [cyan]{result.run_id}[/] at step {result.step} "
                  f"({step_stats(result.metrics)})")
    # soft_wrap: never break a path or a command line, so it can be copied as printed
    console.print(f"store: {result.store}   (list runs: rlcockpit runs --store {result.store})",
                  soft_wrap=True)
    if result.checkpoint:
        console.print(f"checkpoint: {result.checkpoint}   (continue: rlcockpit train --resume {result.checkpoint})",
                      soft_wrap=True)


if __name__ == "__main__":  # pragma: no cover
    from rlcockpit.cli import main

    sys.exit(main(["train", *sys.argv[1:]]))
