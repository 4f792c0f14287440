"""The cost ledger (seed 004: what an RL run costs and where the money goes), docs/cost.md.

Pure arithmetic over what the trainer records per step (``cost/tokens_generated``,
``cost/tokens_trained``, ``cost/prompt_tokens``, ``time/<phase>_s``) and the model sizes of its
``model_size`` event; standard library only.

Formulas (Kaplan et al. 2020's rule of thumb, as seed 004 §1 uses it; N = parameter count):

- rollout FLOPs = 2 · N_actor · tokens_generated (one forward pass per sampled token);
- update FLOPs  = 6 · N_actor · tokens_trained (+ 6 · N_critic · tokens_trained with a critic):
  forward + backward per trained token, ``tokens_trained = tokens_generated × ppo.epochs``;
- accelerator-hours = wall seconds × accelerators / 3600; money = accelerator-hours × price;
- utilisation (MFU) = FLOPs / (wall seconds × accelerators × peak FLOP/s), when a peak is given;
- ETA = remaining steps × the mean seconds per step of the last ``window`` steps.

Not counted (documented, not hidden): prompt prefill, the reference model's and the critic's
forward passes in SCORE, evaluation and checkpoint I/O: the FLOPs are a lower bound.

:func:`project` answers "this config at 7 B / 30 B on 8 × H100" the way seed 004 §1 computes it
(512 prompts × 8 samples × 512 tokens ≈ 2.1 M tokens a step; 131 s of sampling at 16 k tokens/s).
:data:`SEED_SCHEDULE` is the seed's sampling schedule (§3.1) and :func:`schedule_savings` what it
saves against a constant ``n_samples``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

# seed 004 §3.1: temperature / top-p / samples per prompt by training phase (thirds of the run)
SEED_SCHEDULE: tuple[tuple[float, float, float, int], ...] = (
    # (from fraction of the run, temperature, top_p, n_samples)
    (0.0, 1.0, 0.95, 8),
    (1 / 3, 0.8, 0.90, 4),
    (2 / 3, 0.6, 0.85, 2),
)
SCHEDULES = {"seed004": SEED_SCHEDULE}
# peak dense bf16 TFLOP/s of one accelerator (vendor data sheets; H100 SXM, A100 SXM)
PEAK_TFLOPS = {"H100": 989.0, "A100": 312.0}


@dataclass(frozen=True)
class Pricing:
    """What an accelerator-hour costs and how many the run occupies."""

    price_per_hour: float = 0.0
    accelerators: int = 1
    accelerator: str = "cpu"
    peak_tflops: float = 0.0


@dataclass(frozen=True)
class StepCost:
    step: int
    tokens_generated: float
    tokens_trained: float
    prompt_tokens: float
    wall_s: float
    phase_s: dict[str, float]
    flops: float
    accelerator_hours: float
    usd: float
    mfu: float | None


@dataclass(frozen=True)
class Ledger:
    run_id: str
    pricing: Pricing
    params: dict[str, int]
    steps: list[StepCost]
    total_steps: int  # the configured train.steps
    totals: dict[str, float] = field(default_factory=dict)
    phase_share: dict[str, float] = field(default_factory=dict)
    eta_s: float | None = None
    projected: dict[str, float] = field(default_factory=dict)
    schedule: dict[str, Any] | None = None
    prompts_per_step: int = 0  # rollout.batch_size
    n_samples: int = 0  # rollout.n_samples

    def mean_tokens_per_sample(self) -> float:
        samples = self.prompts_per_step * self.n_samples * len(self.steps)
        return self.totals.get("tokens_generated", 0.0) / samples if samples else math.nan

    def to_dict(self, *, with_steps: bool = True) -> dict[str, Any]:
        out = asdict(self)
        if not with_steps:
            out.pop("steps")
        return out


def step_flops(tokens_generated: float, tokens_trained: float, params: Mapping[str, int]) -> float:
    """2·N per generated token + 6·N per trained token (actor; + 6·N_critic per trained token)."""
    actor = params.get("actor_params", 0)
    critic = params.get("critic_params", 0)
    return 2.0 * actor * tokens_generated + 6.0 * (actor + critic) * tokens_trained


def step_cost(step: int, metrics: Mapping[str, float], params: Mapping[str, int],
              pricing: Pricing) -> StepCost:
    phase_s = {k[len("time/"):-2]: float(v) for k, v in metrics.items()
               if k.startswith("time/") and k.endswith("_s") and math.isfinite(v)}
    phase_s.pop("init", None)  # set-up, not a step's work
    wall = sum(phase_s.values())
    gen = float(metrics.get("cost/tokens_generated", 0.0))
    trained = float(metrics.get("cost/tokens_trained", 0.0))
    flops = step_flops(gen, trained, params)
    hours = wall * pricing.accelerators / 3600.0
    peak = pricing.peak_tflops * 1e12 * pricing.accelerators
    mfu = flops / (wall * peak) if peak > 0 and wall > 0 else None
    return StepCost(step, gen, trained, float(metrics.get("cost/prompt_tokens", 0.0)), wall, phase_s,
                    flops, hours, hours * pricing.price_per_hour, mfu)


def build_ledger(run_id: str, step_metrics: Mapping[int, Mapping[str, float]],
                 params: Mapping[str, int], pricing: Pricing, *, total_steps: int,
                 window: int = 20, schedule: str = "", n_samples: int = 0,
                 prompts_per_step: int = 0, applied_schedule: str = "") -> Ledger:
    """The ledger of one run from its per-step metrics (``{step: {name: value}}``).
    ``applied_schedule``: the run sampled with this rollout.schedule (its savings are measured);
    otherwise ``schedule`` projects what it would save against the constant ``n_samples``."""
    steps = [step_cost(s, m, params, pricing) for s, m in sorted(step_metrics.items())
             if s > 0 and "cost/tokens_generated" in m]
    keys = ("tokens_generated", "tokens_trained", "prompt_tokens", "wall_s", "flops",
            "accelerator_hours", "usd")
    totals = {k: float(sum(getattr(c, k) for c in steps)) for k in keys}
    totals["steps"] = float(len(steps))
    phases: dict[str, float] = {}
    for c in steps:
        for p, s in c.phase_s.items():
            phases[p] = phases.get(p, 0.0) + s
    wall = totals["wall_s"]
    share = {p: s / wall for p, s in sorted(phases.items(), key=lambda kv: -kv[1])} if wall > 0 else {}
    if wall > 0 and pricing.peak_tflops > 0:
        totals["mfu"] = totals["flops"] / (wall * pricing.peak_tflops * 1e12 * pricing.accelerators)
    eta, projected = _eta(steps, total_steps, window, totals)
    if applied_schedule in SCHEDULES and steps:
        sched = schedule_measured(SCHEDULES[applied_schedule], steps, total_steps)
    elif schedule in SCHEDULES and n_samples > 0 and steps:
        sched = schedule_savings(SCHEDULES[schedule], n_samples, total_steps, totals, len(steps))
    else:
        sched = None
    return Ledger(run_id, pricing, dict(params), steps, total_steps, totals, share, eta, projected, sched,
                  prompts_per_step, n_samples)


def _eta(steps: Sequence[StepCost], total_steps: int, window: int,
         totals: Mapping[str, float]) -> tuple[float | None, dict[str, float]]:
    if not steps:
        return None, {}
    recent = steps[-window:]
    per_step = sum(c.wall_s for c in recent) / len(recent)
    remaining = max(0, total_steps - steps[-1].step)
    eta = remaining * per_step
    scale = (len(steps) + remaining) / len(steps)
    projected = {"steps": float(len(steps) + remaining), "wall_s": totals["wall_s"] + eta,
                 "usd": totals["usd"] * scale, "accelerator_hours": totals["accelerator_hours"] * scale,
                 "tokens_generated": totals["tokens_generated"] * scale, "flops": totals["flops"] * scale}
    return eta, projected


def schedule_n(schedule: Sequence[tuple[float, float, float, int]], fraction: float) -> tuple[float, float, int]:
    """(temperature, top_p, n_samples) of the stage that covers ``fraction`` of the run."""
    current = schedule[0]
    for stage in schedule:
        if fraction >= stage[0]:
            current = stage
    return current[1], current[2], current[3]


def schedule_savings(schedule: Sequence[tuple[float, float, float, int]], n_samples: int,
                     total_steps: int, totals: Mapping[str, float], steps_seen: int) -> dict[str, Any]:
    """What the schedule saves against a constant ``n_samples``: generated (and trained) tokens
    scale with the samples per prompt, so does the rollout's and the update's time (seed 004 §3.1:
    "采样数从 8 降到 4，采样成本直接减半")."""
    total_steps = max(total_steps, 1)
    ns = [schedule_n(schedule, (s - 1) / total_steps)[2] for s in range(1, total_steps + 1)]
    ratio = sum(ns) / (n_samples * total_steps)
    per_step_usd = totals["usd"] / steps_seen if steps_seen else 0.0
    per_step_tokens = totals["tokens_generated"] / steps_seen if steps_seen else 0.0
    return {"applied": False,
            "stages": [{"from_fraction": round(f, 4), "temperature": t, "top_p": p, "n_samples": n}
                       for f, t, p, n in schedule],
            "constant_n_samples": n_samples, "mean_n_samples": sum(ns) / len(ns),
            "token_ratio": ratio, "saved_fraction": 1.0 - ratio,
            "tokens_generated_constant": per_step_tokens * total_steps,
            "tokens_generated_scheduled": per_step_tokens * total_steps * ratio,
            "usd_constant": per_step_usd * total_steps,
            "usd_scheduled": per_step_usd * total_steps * ratio}


def schedule_measured(schedule: Sequence[tuple[float, float, float, int]], steps: Sequence[StepCost],
                      total_steps: int) -> dict[str, Any]:
    """A run that sampled with ``schedule``: its generated tokens and money against the same
    steps at the first stage's constant samples per prompt (each step scaled by n_first / n_step:
    a response's length does not depend on how many siblings it has)."""
    first = schedule[0][3]
    total_steps = max(total_steps, 1)
    ns = [schedule_n(schedule, (c.step - 1) / total_steps)[2] for c in steps]
    actual = sum(c.tokens_generated for c in steps)
    constant = sum(c.tokens_generated * first / n for c, n in zip(steps, ns, strict=True))
    usd = sum(c.usd for c in steps)
    usd_constant = sum(c.usd * first / n for c, n in zip(steps, ns, strict=True))
    return {"applied": True,
            "stages": [{"from_fraction": round(f, 4), "temperature": t, "top_p": p, "n_samples": n}
                       for f, t, p, n in schedule],
            "constant_n_samples": first, "mean_n_samples": sum(ns) / len(ns),
            "token_ratio": actual / constant if constant else math.nan,
            "saved_fraction": 1.0 - actual / constant if constant else math.nan,
            "tokens_generated_constant": constant, "tokens_generated_scheduled": actual,
            "usd_constant": usd_constant, "usd_scheduled": usd}


@dataclass(frozen=True)
class Projection:
    """One what-if: a model size on a cluster, the seed's arithmetic."""

    params_b: float
    accelerators: int
    accelerator: str
    prompts: int
    n_samples: int
    tokens_per_sample: float
    ppo_epochs: int
    tokens_per_step: float
    sampling_tokens_per_s: float
    sampling_s: float
    update_flops: float
    update_s: float
    step_s: float
    usd_per_step: float
    steps: int
    run_hours: float
    run_usd: float


def project(params_b: float, *, accelerators: int = 8, accelerator: str = "H100", prompts: int = 512,
            n_samples: int = 8, tokens_per_sample: float = 512, ppo_epochs: int = 1,
            tokens_per_s_per_accelerator: float = 2000.0, mfu: float = 0.35,
            price_per_hour: float = 0.0, steps: int = 1000) -> Projection:
    """Seed 004 §1: tokens a step = prompts × samples × tokens; sampling time = tokens / (per-
    accelerator decode throughput × accelerators) (2000 tokens/s a card there, for 30 B); the update
    = 6·N·tokens × epochs at ``mfu`` of the cluster's peak (seed 004 §2.1: RL reaches 20-35 %)."""
    tokens = prompts * n_samples * tokens_per_sample
    throughput = tokens_per_s_per_accelerator * accelerators
    sampling_s = tokens / throughput
    update_flops = 6.0 * params_b * 1e9 * tokens * ppo_epochs
    peak = PEAK_TFLOPS.get(accelerator, 0.0) * 1e12 * accelerators
    update_s = update_flops / (peak * mfu) if peak > 0 and mfu > 0 else math.nan
    step_s = sampling_s + (update_s if math.isfinite(update_s) else 0.0)
    usd_step = step_s / 3600.0 * accelerators * price_per_hour
    return Projection(params_b, accelerators, accelerator, prompts, n_samples, tokens_per_sample,
                      ppo_epochs, tokens, throughput, sampling_s, update_flops, update_s, step_s,
                      usd_step, steps, step_s * steps / 3600.0, usd_step * steps)


def pricing_from_config(config: Mapping[str, Any], **overrides: Any) -> Pricing:
    """The run's recorded ``cost`` section, with non-None ``overrides`` on top."""
    recorded = dict(config.get("cost") or {})
    values = {k: recorded[k] for k in ("price_per_hour", "accelerators", "accelerator", "peak_tflops")
              if k in recorded}
    values.update({k: v for k, v in overrides.items() if v is not None})
    return Pricing(**values)


def ledger_for_run(reader: Any, run_id: str, *, schedule: str | None = None,
                   **pricing: Any) -> Ledger:
    """The ledger of a stored run, read through the ``StoreReader`` protocol it is handed: the
    run's config (price, hardware, train.steps, rollout.n_samples), its ``model_size`` event and
    every step's metrics. ``pricing`` overrides the recorded ``cost`` section."""
    run = reader.get_run(run_id)
    config = dict(run.config or {})
    sizes = reader.read_events(run_id, kinds=["model_size"])
    # the event also says where the models went and in which precision (text): counts only
    params = {k: int(v) for k, v in (sizes[-1].payload if sizes else {}).items()
              if isinstance(v, (int, float)) and not isinstance(v, bool)}
    last = run.last_step or 0
    metrics = reader.step_metrics(run_id, 0, last) if last > 0 else {}
    total = int((config.get("train") or {}).get("steps") or last)
    rollout = config.get("rollout") or {}
    n = int(rollout.get("n_samples") or 0)
    prompts = int(rollout.get("batch_size") or 0)
    applied = str(rollout.get("schedule") or "")
    chosen = schedule if schedule is not None else str((config.get("cost") or {}).get("sampling_schedule", ""))
    return build_ledger(run_id, metrics, params, pricing_from_config(config, **pricing),
                        total_steps=total, schedule=chosen, n_samples=n, prompts_per_step=prompts,
                        applied_schedule=applied)
