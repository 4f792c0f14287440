"""Data parallel: the process group of a run and everything the trainer asks of it (DESIGN.md §3).

The same phase machine runs on every rank of a ``torch.distributed`` group (torchrun; gloo on CPU,
NCCL on GPUs). This module is the only place that talks to ``torch.distributed``:

- :func:`init_group` / :meth:`Group.close`: join and leave the group (``env://``, as torchrun
  sets it); a process without ``WORLD_SIZE`` > 1 gets :meth:`Group.single`, whose every operation
  is the identity, so a single-process run takes exactly the code path it always took;
- rank and world (:attr:`Group.rank`, :attr:`Group.world_size`), the per-rank sampling seed
  (:meth:`Group.seed`) and the prompt shard (:meth:`Group.shard`);
- reductions over the global batch: sums and maxima of a few floats, masked moments for whitening
  (:meth:`Group.masked_moments`), and the gradient mean (:meth:`Group.mean_grads`);
- objects: broadcast from rank 0, gather to rank 0 (the step's states and per-rank timings);
- the TCPStore of the group: heartbeats (:meth:`Group.heartbeat`, :meth:`Group.heartbeat_ages`;
  every rank beats from a daemon thread, :meth:`Group.start_heartbeat`, so a rank that waits in a
  collective or runs a long phase stays alive and only a dead or frozen process goes silent) and
  the step-boundary record rank 0 publishes and the other ranks wait for (:meth:`Group.publish`,
  :meth:`Group.receive`) — waiting there never times out, so a paused run keeps its group.

Gradients are averaged with one ``all_reduce`` of a flat buffer after ``backward`` rather than by
DDP: the NaN guard must be a decision of the whole group (DDP would deadlock when one rank skips
its backward), the rank's own gradient norm before the reduction falls out of the same buffer for
free (``dist/grad_norm/rank/<r>``), and the actor stays a plain Hugging Face module. What it costs:
no overlap of communication with the backward pass (DDP's buckets) — negligible at this size.

:func:`merge_states` concatenates the ranks' step states on rank 0, which logs the global metrics
and every sample, as one store writer.
"""

from __future__ import annotations

import datetime
import hashlib
import logging
import math
import os
import pickle
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from rlcockpit.errors import ConfigError
from rlcockpit.rewards import ScoredBatch
from rlcockpit.trainer.config import DistributedConfig
from rlcockpit.trainer.rollout import RolloutBatch
from rlcockpit.trainer.step import StepState

log = logging.getLogger("rlcockpit.trainer.distributed")
RANK_SEED_STRIDE = 1_000_003  # rank r samples with seed + r * stride (a prime: no overlap with seed + 1 etc.)
KEY = "rlcockpit/"
WAIT_POLL_S = 2.0  # a waiting rank refreshes its heartbeat this often


class Group:
    """Rank ``rank`` of ``world_size`` processes; ``Group.single()`` is the one-process group."""

    def __init__(self, rank: int = 0, world_size: int = 1, *, local_rank: int = 0, backend: str = "",
                 device: torch.device | None = None, store: Any = None) -> None:
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self.backend = backend
        self.device = device or torch.device("cpu")
        self.store = store
        self._boundary = 0
        self._store_lock = threading.Lock()  # the heartbeat thread shares the store client with the trainer
        self._stop_beat = threading.Event()
        self._beat: threading.Thread | None = None

    @classmethod
    def single(cls) -> Group:
        return cls()

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def seed(self, seed: int) -> int:
        """This rank's sampling seed: ``seed`` on rank 0 (a single process is unchanged)."""
        return seed + RANK_SEED_STRIDE * self.rank

    # ------------------------------------------------------------------ sharding

    def check_divides(self, n: int, what: str, key: str) -> None:
        if n % self.world_size:
            raise ConfigError(f"{key}={n}: {what} must split evenly over the {self.world_size} ranks; use a "
                              f"multiple of {self.world_size}", details={"key": key, "value": n})

    def shard(self, items: Sequence[Any]) -> list[Any]:
        """This rank's contiguous share of ``items`` (every rank draws the same global batch)."""
        k = len(items) // self.world_size
        return list(items[self.rank * k:(self.rank + 1) * k])

    # ------------------------------------------------------------------ reductions

    def _all_reduce(self, t: torch.Tensor, op: Any = None) -> torch.Tensor:
        import torch.distributed as dist

        on = t.to(self.device)
        dist.all_reduce(on, op=op or dist.ReduceOp.SUM)
        return on.to(t.device)

    def sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise sum over the ranks (float64)."""
        if not self.distributed:
            return [float(v) for v in values]
        return self._all_reduce(torch.tensor(list(values), dtype=torch.float64)).tolist()

    def max(self, values: Sequence[float]) -> list[float]:
        if not self.distributed:
            return [float(v) for v in values]
        import torch.distributed as dist

        return self._all_reduce(torch.tensor(list(values), dtype=torch.float64), dist.ReduceOp.MAX).tolist()

    def masked_moments(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[float, float, float]:
        """(mean, population variance, count) of the valid values of ``x`` over the global batch
        (two passes, so the variance is as exact as a single process's)."""
        valid = mask != 0
        values = x.detach().to(torch.float64)[valid]
        values = values[torch.isfinite(values)]
        total, count = self.sum([float(values.sum()), float(values.numel())])
        mean = total / count if count > 0 else 0.0
        (sq,) = self.sum([float(((values - mean) ** 2).sum())])
        return mean, (sq / count if count > 0 else 0.0), count

    def masked_whiten(self, x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
        """:func:`rlcockpit.metrics.rl.masked_whiten` with the mean and the unbiased variance of the
        global batch."""
        from rlcockpit.metrics.rl import masked_whiten

        if not self.distributed:
            return masked_whiten(x, mask)
        mean, var, count = self.masked_moments(x, mask)
        var = var * count / (count - 1) if count > 1 else 0.0
        whitened = (x - mean) * torch.rsqrt(torch.tensor(var + eps, dtype=x.dtype))
        return torch.where(mask != 0, whitened, torch.zeros_like(whitened))

    def mean_grads(self, params: Sequence[torch.nn.Parameter], ok: bool) -> tuple[float, bool]:
        """Average the gradients of ``params`` over the group in place (one all-reduce of a flat
        buffer). ``ok`` False (a non-finite loss here: no backward ran) contributes zeros and a flag;
        returns (this rank's gradient norm before the reduction, whether every rank was ok)."""
        grads = [p.grad if (ok and p.grad is not None) else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.detach().reshape(-1).float() for g in grads] + [torch.zeros(1)])
        local = float(torch.linalg.vector_norm(flat[:-1])) if ok else math.nan
        flat[-1] = 0.0 if ok else 1.0
        flat = self._all_reduce(flat)
        if flat[-1] > 0:
            return local, False
        flat /= self.world_size
        offset = 0
        for p in params:
            n = p.numel()
            if p.grad is not None:
                p.grad.copy_(flat[offset:offset + n].view_as(p.grad))
            offset += n
        return local, True

    # ------------------------------------------------------------------ objects

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if not self.distributed:
            return obj
        import torch.distributed as dist

        box = [obj if self.is_main else None]
        dist.broadcast_object_list(box, src=0, device=self.device if self.backend == "nccl" else None)
        return box[0]

    def gather(self, obj: Any) -> list[Any] | None:
        """Every rank's ``obj`` on rank 0 (in rank order); None on the other ranks."""
        if not self.distributed:
            return [obj]
        import torch.distributed as dist

        out: list[Any] | None = [None] * self.world_size if self.is_main else None
        dist.gather_object(obj, out, dst=0)
        return out

    def barrier(self) -> None:
        if self.distributed:
            import torch.distributed as dist

            dist.barrier()

    # ------------------------------------------------------------------ the group's key-value store

    def heartbeat(self) -> None:
        """This rank is alive now (rank 0 reads the time, ``dist/heartbeat_age_s/rank/<r>``)."""
        if self.store is not None:
            with self._store_lock:
                self.store.set(f"{KEY}heartbeat/{self.rank}", repr(time.time()))

    def start_heartbeat(self, period_s: float = WAIT_POLL_S) -> None:
        """Beat every ``period_s`` from a daemon thread until :meth:`close` (a process that is killed
        or stopped goes silent; one that waits or computes does not)."""
        if self.store is None or self._beat is not None:
            return

        def beat() -> None:
            while not self._stop_beat.wait(period_s):
                try:
                    self.heartbeat()
                except Exception as exc:  # the store went away (the group is closing): stop beating
                    log.debug("heartbeat thread stops: %s", exc)
                    return

        self.heartbeat()
        self._beat = threading.Thread(target=beat, name=f"rlcockpit-rank{self.rank}-heartbeat", daemon=True)
        self._beat.start()

    def heartbeat_ages(self) -> dict[int, float]:
        """Seconds since each rank's last heartbeat, by rank 0's clock (NaN: none yet)."""
        if self.store is None:
            return {}
        now, out = time.time(), {}
        with self._store_lock:
            for r in range(self.world_size):
                key = f"{KEY}heartbeat/{r}"
                out[r] = now - float(self.store.get(key).decode()) if self.store.check([key]) else math.nan
        return out

    def publish(self, record: dict[str, Any]) -> None:
        """Rank 0: the record of this step boundary (what the other ranks apply in their HOTFIX)."""
        self._boundary += 1
        if self.store is None:
            return
        with self._store_lock:
            self.store.set(f"{KEY}boundary/{self._boundary}", pickle.dumps(record))
            if self._boundary > 2:  # every rank read it before it passed the last step's collectives
                self.store.delete_key(f"{KEY}boundary/{self._boundary - 2}")

    def receive(self) -> dict[str, Any]:
        """The other ranks: wait (without a time limit, heartbeating) for rank 0's boundary record.
        Polls the key with a backoff up to 0.5 s (a blocking wait would log every time it expires)."""
        self._boundary += 1
        key = f"{KEY}boundary/{self._boundary}"
        delay, beat = 0.001, 0.0
        while not self._has(key):
            if self._beat is None and time.monotonic() - beat >= WAIT_POLL_S:
                self.heartbeat()
                beat = time.monotonic()
            time.sleep(delay)
            delay = min(2 * delay, 0.5)
        with self._store_lock:
            data = self.store.get(key)
        return pickle.loads(data)  # noqa: S301 - written by rank 0 of this run

    def _has(self, key: str) -> bool:
        with self._store_lock:
            return bool(self.store.check([key]))

    def close(self) -> None:
        self._stop_beat.set()
        if self._beat is not None:
            self._beat.join(timeout=5)
        if self.distributed:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()


def init_group(cfg: DistributedConfig, environ: dict[str, str] | None = None) -> Group:
    """Join the group torchrun describes in the environment (``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``); without it (or with one process) the
    single-process group."""
    env = os.environ if environ is None else environ
    world = int(env.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Group.single()
    import torch.distributed as dist

    rank, local_rank = int(env["RANK"]), int(env.get("LOCAL_RANK", "0"))
    backend = cfg.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    device = torch.device("cpu")
    if backend == "nccl":  # the collectives run on this rank's GPU; the trainer's tensors are copied there
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=cfg.timeout_s))
    store = dist.distributed_c10d._get_default_store()  # the rendezvous' TCPStore: heartbeats, boundaries
    group = Group(rank, world, local_rank=local_rank, backend=backend, device=device, store=store)
    group.start_heartbeat()
    return group


def param_hash(*models: torch.nn.Module | None) -> str:
    """A digest of every parameter's bytes (the rank-divergence check, ``dist/param_hash_mismatch``)."""
    h = hashlib.blake2b(digest_size=16)
    for model in models:
        if model is None:
            continue
        for name, p in model.named_parameters():
            h.update(name.encode())
            h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


class FollowerRun:
    """The telemetry of ranks other than 0: rank 0 is the run's only store writer, so every record
    here is dropped. It knows the run id (checkpoint directories are named after it)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    def log(self, *args: Any, **kwargs: Any) -> None:
        pass

    log_histogram = log_samples = event = phase = checkpoint = commit = log

    def flush(self, timeout: float | None = None) -> bool:
        return True

    def close(self, status: str = "finished") -> None:
        pass


# --------------------------------------------------------------------------- the step on rank 0


def _right_pad(tensors: list[torch.Tensor | None], value: float = 0) -> torch.Tensor | None:
    if any(t is None for t in tensors):
        return None
    width = max(t.shape[1] for t in tensors)  # type: ignore[union-attr]
    return torch.cat([torch.nn.functional.pad(t, (0, width - t.shape[1]), value=value) for t in tensors])  # type: ignore[union-attr]


def _left_pad(tensors: list[torch.Tensor]) -> torch.Tensor:
    width = max(t.shape[1] for t in tensors)
    return torch.cat([torch.nn.functional.pad(t, (width - t.shape[1], 0)) for t in tensors])


def _merge_scored(parts: list[ScoredBatch]) -> ScoredBatch:
    return ScoredBatch(
        totals=np.concatenate([p.totals for p in parts]),
        components={k: np.concatenate([p.components[k] for p in parts]) for k in parts[0].components},
        flags=tuple(f for p in parts for f in (p.flags or ((),) * len(p))) if any(p.flags for p in parts) else (),
        info={k: np.concatenate([p.info[k] for p in parts]) for k in parts[0].info if all(k in p.info for p in parts)},
    )


def merge_states(states: list[StepState]) -> StepState:
    """The ranks' step states as one global step (rank order; per-token tensors right-padded to the
    longest response, so every mask stays right). Group ids are offset per rank, so a GRPO group
    keeps its own id; ``update_stats`` are already global (the same on every rank)."""
    if len(states) == 1:
        return states[0]
    first = states[0]
    group_ids, offset = [], 0
    for s in states:
        group_ids += [g + offset for g in s.group_ids]
        offset += max(s.group_ids, default=-1) + 1
    b = [s.batch for s in states]
    batch = RolloutBatch(_left_pad([x.prompt_ids for x in b]), _left_pad([x.prompt_mask for x in b]),
                         _right_pad([x.response_ids for x in b]), _right_pad([x.response_mask for x in b]),
                         torch.cat([x.truncated for x in b]), _right_pad([x.logprobs for x in b]))

    def cat(name: str) -> Any:
        return _right_pad([getattr(s, name) for s in states])

    return replace(
        first, items=[it for s in states for it in s.items], group_ids=group_ids, batch=batch,
        responses=[r for s in states for r in s.responses],
        old_logprobs=cat("old_logprobs"), ref_logprobs=cat("ref_logprobs"), token_kl=cat("token_kl"),
        values=cat("values"), values_real=cat("values_real"), scored=_merge_scored([s.scored for s in states]),
        rewards=np.concatenate([s.rewards for s in states]), shaped=torch.cat([s.shaped for s in states]),
        update_mask=cat("update_mask"), advantages=cat("advantages"), raw_advantages=cat("raw_advantages"),
        returns=cat("returns"), value_targets=cat("value_targets"),
        zero_std_groups=sum(s.zero_std_groups for s in states), update_stats=dict(first.update_stats),
    )


__all__ = ["FollowerRun", "Group", "RANK_SEED_STRIDE", "init_group", "merge_states", "param_hash"]
