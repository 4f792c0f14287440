"""Full-state checkpoints: a resumed run continues exactly where it stopped.

Layout of one checkpoint (``<checkpoint.dir>/<run_id>/step_<N>/``)::

    actor/              the policy as a normal Hugging Face directory (+ tokenizer)
    critic.pt           critic state dict (PPO only)
    trainer_state.pt    optimizers, KL / clip controllers, normalisers, LiveParams, RNG states of
                        python / numpy / torch / the rollout and minibatch generators, data cursor,
                        counters, step, run id and the run's config
    meta.json           {"run_id", "step", "reason", "wall_time"}

``<checkpoint.dir>/latest`` holds the path of the newest checkpoint (``--resume latest``). Writes
go to a temporary directory that is renamed into place, so a crash never leaves half a checkpoint.
``trainer_state.pt`` is a pickle written by this trainer: only load checkpoints you trust.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from rlcockpit.errors import ConfigError

STATE_FILE = "trainer_state.pt"
FORMAT = 1


def checkpoint_dir(root: str | Path, run_id: str, step: int) -> Path:
    return Path(root) / run_id / f"step_{step:07d}"


def save_checkpoint(path: Path, *, actor: Any, tokenizer: Any, critic: torch.nn.Module | None,
                    state: dict[str, Any], reason: str) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    actor.save_pretrained(tmp / "actor", safe_serialization=True)
    tokenizer.save_pretrained(tmp / "actor")
    if critic is not None:
        torch.save(critic.state_dict(), tmp / "critic.pt")
    torch.save({"format": FORMAT, **state}, tmp / STATE_FILE)
    meta = {"run_id": state["run_id"], "step": state["step"], "reason": reason, "wall_time": time.time()}
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
    if path.exists():
        shutil.rmtree(path)
    tmp.rename(path)
    latest = path.parent.parent / "latest"
    latest.write_text(str(path.resolve()), encoding="utf-8")
    return path


def prune(run_dir: Path, keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` periodic checkpoints of a run (others are kept)."""
    periodic = []
    for d in sorted(run_dir.glob("step_*")):
        meta = _read_meta(d)
        if meta is not None and meta.get("reason") == "periodic":
            periodic.append(d)
    doomed = periodic[:-keep] if keep > 0 else periodic
    for d in doomed:
        shutil.rmtree(d, ignore_errors=True)
    return doomed


def _read_meta(d: Path) -> dict[str, Any] | None:
    try:
        return json.loads((d / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def resolve_checkpoint(spec: str, root: str | Path) -> Path:
    """``latest`` -> the newest checkpoint under ``root``; a run directory -> its newest step; or a
    checkpoint directory itself."""
    if spec == "latest":
        pointer = Path(root) / "latest"
        if not pointer.is_file():
            raise ConfigError(f"--resume latest: no checkpoint recorded under {root!s} (no {pointer.name} file); "
                              "pass a checkpoint directory or set checkpoint.dir=...",
                              details={"key": "resume", "value": spec})
        spec = pointer.read_text(encoding="utf-8").strip()
    path = Path(spec).expanduser()
    if (path / STATE_FILE).is_file():
        return path
    # step_N.tmp is a checkpoint a crash interrupted while it was written: never resume from it
    steps = sorted(d for d in path.glob("step_*") if (d / STATE_FILE).is_file() and d.suffix != ".tmp") \
        if path.is_dir() else []
    if steps:
        return steps[-1]
    raise ConfigError(f"--resume {spec}: not a checkpoint (no {STATE_FILE}) and no step_* checkpoints inside",
                      details={"key": "resume", "value": spec})


def load_state(path: Path) -> dict[str, Any]:
    # our own pickle (RNG states, optimizer states): weights_only would refuse the numpy RNG tuple
    state = torch.load(path / STATE_FILE, map_location="cpu", weights_only=False)
    if state.get("format") != FORMAT:
        raise ConfigError(f"checkpoint {path} has format {state.get('format')!r}; this trainer reads {FORMAT}",
                          details={"key": "resume", "value": str(path)})
    return state


def checkpoint_config(path: str | Path) -> dict[str, Any]:
    """The run config stored in a checkpoint (the base of a resumed run's config)."""
    return dict(load_state(Path(path))["config"])
