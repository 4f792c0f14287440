"""Full-state checkpoints: save, restore (a resumed run, an in-process rollback) and the rollback target.

A resumed run continues exactly where it stopped; a rollback loads a healthy checkpoint into the
running trainer. What a checkpoint holds of the trainer is :class:`Checkpointed`;
:func:`trainer_state` / :func:`restore_trainer_state` write and read it, :func:`restore` is the
in-process rollback and :func:`checkpoint_before` picks its target.

Layout of one checkpoint (``<checkpoint.dir>/<run_id>/step_<N>/``)::

    actor/              the policy as a normal Hugging Face directory (+ tokenizer); with LoRA
                        its adapters only (adapter_config.json, adapter_model.safetensors)
    critic.pt           critic state dict (PPO only)
    trainer_state.pt    optimizers, KL / clip controllers, normalisers, LiveParams, RNG states of
                        python / numpy / torch / the rollout and minibatch generators, data cursor,
                        counters, step, run id and the run's config
    meta.json           {"run_id", "step", "reason", "wall_time"}
    rank_<r>.pt         data parallel: rank r's RNG streams (r >= 1; rank 0's are in trainer_state.pt).
                        Rank 0 writes everything else — the weights, optimizers and controllers are
                        the same on every rank — and each other rank adds its file at the boundary.

``<checkpoint.dir>/latest`` holds the path of the newest checkpoint (``--resume latest``). Writes
go to a temporary directory that is renamed into place, so a crash never leaves half a checkpoint.
``trainer_state.pt`` is a pickle written by this trainer: only load checkpoints you trust.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from rlcockpit.config import to_dict
from rlcockpit.errors import ConfigError, RlcockpitError
from rlcockpit.trainer.live import LiveParams

if TYPE_CHECKING:
    from rlcockpit.rewards import RewardFunction
    from rlcockpit.trainer.advantage import Normalizers
    from rlcockpit.trainer.config import TrainConfig
    from rlcockpit.trainer.control_link import ControlLink
    from rlcockpit.trainer.controllers import Controllers
    from rlcockpit.trainer.live import LiveControl
    from rlcockpit.trainer.setup import Models, Prompts
    from rlcockpit.trainer.update import Updater

log = logging.getLogger("rlcockpit.trainer.checkpoint")
STATE_FILE = "trainer_state.pt"
FORMAT = 1


def checkpoint_dir(root: str | Path, run_id: str, step: int) -> Path:
    return Path(root) / run_id / f"step_{step:07d}"


class CheckpointError(RlcockpitError):
    """A checkpoint could not be written (``checkpoint.on_error=stop`` ends the run with it)."""

    code = "checkpoint_failed"
    http_status = 500


def save_checkpoint(path: Path, *, actor: Any, tokenizer: Any, critic: torch.nn.Module | None,
                    state: dict[str, Any], reason: str) -> Path:
    """Write the checkpoint into ``step_<N>.tmp/`` and rename it into place; what fails on the way
    (a full disk) removes the temporary directory and raises."""
    tmp = path.with_name(path.name + ".tmp")
    t0 = time.perf_counter()
    try:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        actor.save_pretrained(tmp / "actor", safe_serialization=True)
        tokenizer.save_pretrained(tmp / "actor")
        if critic is not None:
            torch.save(critic.state_dict(), tmp / "critic.pt")
        torch.save({"format": FORMAT, **state}, tmp / STATE_FILE)
        meta = {"run_id": state["run_id"], "step": state["step"], "reason": reason, "wall_time": time.time(),
                "duration_s": time.perf_counter() - t0}  # re-logged as time/checkpoint_s on resume
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
        if path.exists():
            shutil.rmtree(path)
        tmp.rename(path)
        point_latest(path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def failure_text(exc: BaseException) -> str:
    """One line for a failed checkpoint write: the exception's type and first line (torch's
    'PytorchStreamWriter failed writing file ...' and OSError's 'No space left on device')."""
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    cause = exc.__cause__ or exc.__context__
    if cause is not None and isinstance(cause, OSError) and cause.strerror:
        first = f"{first} ({cause.strerror})" if first else cause.strerror
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def checkpoint_duration(path: Path) -> float | None:
    """How long writing checkpoint ``path`` took (its meta.json), None if it does not say."""
    meta = read_meta(path) or {}
    value = meta.get("duration_s")
    return float(value) if isinstance(value, (int, float)) else None


def point_latest(path: Path) -> None:
    """``<checkpoint.dir>/latest`` names ``path`` (what ``--resume latest`` loads)."""
    (path.parent.parent / "latest").write_text(str(path.resolve()), encoding="utf-8")


def prune(run_dir: Path, keep: int, protect: Path | None = None) -> list[Path]:
    """Delete all but the newest ``keep`` periodic checkpoints of a run (others are kept, and so is
    ``protect``: the checkpoint a resume would refill the store's missing steps from)."""
    periodic = []
    for d in sorted(run_dir.glob("step_*")):
        meta = read_meta(d)
        if meta is not None and meta.get("reason") == "periodic":
            periodic.append(d)
    doomed = [d for d in (periodic[:-keep] if keep > 0 else periodic) if d != protect]
    for d in doomed:
        shutil.rmtree(d, ignore_errors=True)
    return doomed


def checkpoint_before(root: str | Path, run_id: str, first_step: int) -> Path | None:
    """The newest complete checkpoint of run ``run_id`` taken at a step < ``first_step`` (from disk, so
    checkpoints of an earlier process of a resumed run count too). Checkpoints written *because of*
    an incident (reason ``incident``) hold a state already judged unhealthy and are never chosen."""
    best: tuple[int, Path] | None = None
    for d in checkpoint_dir(root, run_id, 0).parent.glob("step_*"):
        meta = read_meta(d) or {}
        try:
            step = int(meta["step"])
        except (TypeError, ValueError, KeyError):
            continue  # a half-written or foreign directory is not a checkpoint
        healthy = meta.get("reason") != "incident" and (d / STATE_FILE).is_file()
        if healthy and step < first_step and (best is None or step > best[0]):
            best = (step, d)
    return best[1] if best else None


def read_meta(d: Path) -> dict[str, Any] | None:
    """A checkpoint's meta.json (run id, step, reason, wall time, duration), None if unreadable."""
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


# --------------------------------------------------------------------------- the trainer's state


class Checkpointed(Protocol):
    """What a checkpoint holds of a running trainer besides the actor's weights."""

    cfg: TrainConfig
    telemetry: Any  # the open run (its ``run_id``)
    step: int
    nonfinite_total: int
    prev_kl_mean: float
    last_checkpoint: str | None
    live: LiveControl
    models: Models
    prompts: Prompts
    reward_fn: RewardFunction
    controllers: Controllers
    normalizers: Normalizers
    updater: Updater
    control: ControlLink | None
    rollout_gen: torch.Generator


def trainer_state(t: Checkpointed) -> dict[str, Any]:
    """The trainer's state for a checkpoint: step, optimizers, controllers, live parameters, data
    cursor, control link, RNG streams and counters."""
    u, ctl, norm = t.updater, t.controllers, t.normalizers
    return {
        "run_id": t.telemetry.run_id, "step": t.step, "config": to_dict(t.cfg),
        "actor_optim": u.actor_opt.optimizer.state_dict(),
        "critic_optim": u.critic_opt.optimizer.state_dict() if u.critic_opt else None,
        "kl_controller": ctl.kl.state_dict(),
        "clip_controller": ctl.clip.state_dict() if ctl.clip else None,
        "reward_rms": norm.reward.state_dict() if norm.reward else None,
        "value_norm": norm.value.state_dict() if norm.value else None,
        "reward_fn": t.reward_fn.state_dict(),  # e.g. the reward model's fusion history
        "live": t.live.params.as_dict(), "data": t.prompts.source.state_dict(),
        "control": t.control.state_dict() if t.control is not None else None,
        "rng": rng_state(t),
        "counters": {"nonfinite_total": t.nonfinite_total, "prev_kl_mean": t.prev_kl_mean,
                     "skipped_actor": u.actor_opt.skipped_total,
                     "skipped_critic": u.critic_opt.skipped_total if u.critic_opt else 0},
    }


def restore_trainer_state(t: Checkpointed, state: dict[str, Any], path: Path) -> None:
    """Load :func:`trainer_state`'s output, and the critic saved beside it in checkpoint ``path``
    (exact resume, and the in-process rollback)."""
    u, ctl, norm = t.updater, t.controllers, t.normalizers
    t.step = int(state["step"])
    u.actor_opt.optimizer.load_state_dict(state["actor_optim"])
    if u.critic_opt is not None:
        u.critic_opt.optimizer.load_state_dict(state["critic_optim"])
        t.models.critic.load_state_dict(torch.load(path / "critic.pt", map_location="cpu"))  # type: ignore[union-attr]
    ctl.kl.load_state_dict(state["kl_controller"])
    for obj, key in ((ctl.clip, "clip_controller"), (norm.reward, "reward_rms"), (norm.value, "value_norm")):
        if obj is not None and state.get(key) is not None:
            obj.load_state_dict(state[key])
    t.reward_fn.load_state_dict(state.get("reward_fn"))
    t.live.set_params(LiveParams(**state["live"]))
    if t.control is not None:
        t.control.restored(state.get("control"))
    t.prompts.source.load_state_dict(state["data"])
    _restore_rng(t, state["rng"])
    counters = state["counters"]
    t.nonfinite_total = int(counters["nonfinite_total"])
    t.prev_kl_mean = float(counters["prev_kl_mean"])
    u.actor_opt.skipped_total = int(counters["skipped_actor"])
    if u.critic_opt is not None:
        u.critic_opt.skipped_total = int(counters["skipped_critic"])


def rng_state(t: Checkpointed) -> dict[str, Any]:
    """This process's RNG streams: python, numpy, torch, the rollout and minibatch generators."""
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "rollout": t.rollout_gen.get_state(), "update": t.updater.generator.get_state()}


def save_rank_rng(path: Path, rank: int, t: Checkpointed) -> None:
    """Data parallel: rank ``rank``'s RNG streams beside the checkpoint rank 0 wrote at ``path``."""
    if rank > 0:
        tmp = path / f"rank_{rank}.pt.tmp"
        torch.save(rng_state(t), tmp)
        tmp.rename(path / f"rank_{rank}.pt")


def restore_rank_rng(t: Checkpointed, path: Path, rank: int) -> None:
    """Data parallel: rank ``rank`` (>= 1) continues its own RNG streams from checkpoint ``path``.
    A checkpoint without them (written by fewer ranks, or after Ctrl-C) keeps the freshly seeded
    streams: the run goes on, but not exactly as it would have."""
    if rank == 0:
        return
    file = path / f"rank_{rank}.pt"
    if not file.is_file():
        log.warning("checkpoint %s holds no RNG states of rank %d: it samples from a fresh seed", path, rank)
        from rlcockpit.trainer.distributed import RANK_SEED_STRIDE

        fresh = t.cfg.seed + RANK_SEED_STRIDE * rank + t.step  # never rank 0's stream
        t.rollout_gen.manual_seed(fresh)
        t.updater.generator.manual_seed(fresh + 1)
        return
    _restore_rng(t, torch.load(file, map_location="cpu", weights_only=False))


def _restore_rng(t: Checkpointed, rng: dict[str, Any]) -> None:
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    t.rollout_gen.set_state(rng["rollout"])
    t.updater.generator.set_state(rng["update"])


def restore(t: Checkpointed, path: Path) -> int:
    """The in-process rollback: load checkpoint ``path``'s full state into the running trainer
    (weights, optimizers, controllers, normalisers, RNGs, data cursor); ``latest`` then names it,
    so ``--resume latest`` continues from the healthy state. Returns the step it goes back to."""
    from rlcockpit.trainer.adapters import load_actor_weights

    state = load_state(path)
    load_actor_weights(t.models.actor, path / "actor")  # LoRA: the adapters
    restore_trainer_state(t, state, path)
    t.last_checkpoint = str(path)
    point_latest(path)
    return int(state["step"])
