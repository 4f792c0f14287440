"""The trainer's configuration: one frozen dataclass per component, composed into ``TrainConfig``.

Stdlib only, so ``rlcockpit train`` rejects a bad config (unknown key, wrong type, out of range,
inconsistent fields) before torch is imported. Defaults are tuned for the tiny world on 2 CPU cores
(``examples/ppo_tiny.yaml`` spells them out; ``examples/grpo_tiny.yaml`` shows the GRPO variant).
docs/config.md is generated from these classes with :func:`rlcockpit.config.describe`.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlcockpit.config import Config, check, option
from rlcockpit.control.config import ControlConfig
from rlcockpit.diagnostics.config import DiagnosticsConfig
from rlcockpit.rewards.rm_config import RMConfig
from rlcockpit.trainer.model_config import ModelConfig

# samples per prompt of each stage of a rollout.schedule (the schedule itself: metrics.cost)
SCHEDULE_N_SAMPLES = {"seed004": (8, 4, 2)}
PHASES = ("INIT", "ROLLOUT", "SCORE", "ADVANTAGE", "UPDATE", "EVAL", "DIAGNOSE", "HOTFIX", "CHECKPOINT")


@dataclass(frozen=True)
class DataConfig(Config):
    """Where the prompts come from."""

    source: str = option("tiny", help='"tiny" = the tiny world\'s prompt set (split data.split), or a path to a '
                         'JSONL file with one {"prompt": ..., "prompt_id"?, "category"?, "meta"?} per line; '
                         'instead of "prompt" a line may hold chat "messages" ([{"role", "content"}, ...]), '
                         "rendered with the tokenizer's chat template (generation prompt added).")
    split: str = option("train", help="Tiny-world split used for training.", choices=("train", "validation"))
    shuffle: bool = option(True, help="Reshuffle the prompts every pass (seeded by `seed`).")
    max_prompt_tokens: int = option(64, help="Prompts longer than this many tokens are skipped at set-up "
                                    "(an event lists how many).", range=(1, 8192))


@dataclass(frozen=True)
class RolloutConfig(Config):
    """Sampling responses from the actor."""

    batch_size: int = option(32, help="Prompts per step.", range=(1, 4096))
    n_samples: int = option(1, help="Responses sampled per prompt (GRPO needs >= 2).", range=(1, 256))
    temperature: float = option(1.0, help="Sampling temperature (live parameter). Logprobs are computed "
                                "from the same tempered distribution.", range=(0.05, 5.0))
    top_p: float = option(1.0, help="Nucleus sampling threshold (live parameter); 1.0 = off.",
                          range=(0.05, 1.0))
    max_new_tokens: int = option(24, help="Maximum response length in tokens (live parameter); a response "
                                 "without EOS by then is `truncated`.", range=(1, 4096))
    schedule: str = option("", help='"seed004": sample by training phase (seed 004 §3.1): temperature / top-p / '
                                    "samples per prompt 1.0 / 0.95 / 8 over the first third of train.steps, "
                                    "0.8 / 0.9 / 4 over the second, 0.6 / 0.85 / 2 over the last. Replaces "
                                    "n_samples; temperature and top-p are applied as audited live-parameter "
                                    "changes at each stage start (a ticket may still change them within a "
                                    'stage). The cost ledger shows the tokens saved (docs/cost.md). "" = off.',
                           choices=("", "seed004"))


@dataclass(frozen=True)
class RewardConfig(Config):
    """The reward function and how its output is shaped before the advantage."""

    fn: str = option("rlcockpit.world.rewards:score", help='Reward function as "module:function" with '
                     "signature fn(prompts, responses, meta, step) -> list[float] | list[dict[str, float]] "
                     "(docs/trainer.md, custom reward functions).")
    weights: dict[str, float] = option(default_factory=dict, help="Weight per named reward component "
                                       "(default 1.0 each); total reward = weighted sum. Unknown names are "
                                       "refused at set-up.")
    scale: float = option(1.0, help="Multiplier on the total reward (live parameter).", range=(0.0, 100.0))
    normalize: bool = option(True, help="Running reward normalisation (seed 000 §4.2): r -> (r - mu) / sigma "
                             "with running mean/std before the advantage.")
    clip: float = option(5.0, help="Clip the shaped reward to [-clip, clip] after normalisation; 0 = off.",
                         range=(0.0, 1000.0))
    rm: RMConfig = option(default_factory=RMConfig, help="The learned reward model, its gating, rule fallback "
                          "and fusion; used by reward.fn=rlcockpit.world.rm:score (and any reward function "
                          "with a configure(cfg) method). docs/reward_model.md.")


@dataclass(frozen=True)
class KLConfig(Config):
    """The KL to the frozen reference: a per-token reward penalty (PPO) or a loss term (GRPO)."""

    coef: float = option(0.05, help="KL coefficient beta (live parameter; seed 004 §3.3 starts at 0.04).",
                         range=(0.0, 10.0))
    estimator: str = option("k1", help="Token KL estimator (Schulman): k1 = logp - ref, k2 = (logp-ref)^2/2, "
                            "k3 = exp(ref-logp) - (ref-logp) - 1.", choices=("k1", "k2", "k3"))
    adaptive: bool = option(False, help="Adaptive KL controller (Ziegler et al. 2019) steering kl/mean "
                            "towards kl.target.")
    target: float = option(1.0, help="Target per-sequence KL for the adaptive controller (live parameter).",
                           range=(1e-6, 1000.0))
    horizon: int = option(2000, help="Adaptive controller horizon in samples.", range=(1, 10_000_000))


@dataclass(frozen=True)
class PPOConfig(Config):
    """The update: clipped surrogate, value loss, minibatches x epochs (also used by GRPO)."""

    epochs: int = option(2, help="Passes over each rollout batch (live parameter; seed 004 §4.3: 2-4).",
                         range=(1, 16))
    minibatch_size: int = option(16, help="Samples per optimizer step; must divide "
                                 "rollout.batch_size * rollout.n_samples.", range=(1, 65536))
    clip_eps: float = option(0.2, help="Clip epsilon of the policy ratio (live parameter; base value when "
                             "adaptive).", range=(0.01, 1.0))
    adaptive_clip: bool = option(False, help="Adaptive clip epsilon from the entropy slope (seed 000 §3.2).")
    clip_eps_min: float = option(0.05, help="Lower bound of the adaptive clip epsilon.", range=(0.001, 1.0))
    clip_eps_max: float = option(0.4, help="Upper bound of the adaptive clip epsilon.", range=(0.001, 1.0))
    value_clip: float = option(0.2, help="Clip range of the value loss around the old values (live "
                               "parameter); 0 = unclipped.", range=(0.0, 100.0))
    vf_coef: float = option(0.5, help="Weight of the value loss (scales the critic's gradient).",
                            range=(0.0, 100.0))
    gamma: float = option(1.0, help="Discount (seed 003 §3.3: 1.0 for text).", range=(0.0, 1.0))
    lam: float = option(0.95, help="GAE lambda (bias/variance trade-off).", range=(0.0, 1.0))
    whiten_advantages: bool = option(True, help="PPO: whiten advantages over the batch (masked).")
    entropy_coef: float = option(0.0, help="Entropy bonus weight (live parameter; seed 003 §4.3: <= 0.01).",
                                 range=(0.0, 1.0))


@dataclass(frozen=True)
class OptimConfig(Config):
    """AdamW for actor and critic, with warm-up and per-group gradient clipping."""

    actor_lr: float = option(5e-5, help="Actor learning rate (live parameter).", range=(0.0, 1.0))
    critic_lr: float = option(1e-4, help="Critic learning rate (live parameter).", range=(0.0, 1.0))
    warmup_steps: int = option(3, help="Linear learning-rate warm-up, in training steps.", range=(0, 1_000_000))
    schedule: str = option("constant", help="Learning-rate shape after warm-up.",
                           choices=("constant", "linear", "cosine"))
    min_lr_ratio: float = option(0.1, help="Final lr / peak lr for the linear and cosine schedules.",
                                 range=(0.0, 1.0))
    weight_decay: float = option(0.0, help="AdamW weight decay; never applied to embeddings, biases or norms "
                                 "(seed 000 §4.3).", range=(0.0, 1.0))
    betas: tuple[float, ...] = option(default_factory=lambda: (0.9, 0.95), help="AdamW betas.")
    grad_clip_actor: float = option(1.0, help="Gradient-norm limit of the actor's non-embedding parameters "
                                    "(live parameter; 0 = off).", range=(0.0, 1e6))
    grad_clip_embedding: float = option(3.0, help="Gradient-norm limit of the actor's embeddings (live "
                                        "parameter; seed 000 §4.3: 3.0 vs 1.0 elsewhere; 0 = off).",
                                        range=(0.0, 1e6))
    grad_clip_critic: float = option(1.0, help="Gradient-norm limit of the critic (live parameter; 0 = off).",
                                     range=(0.0, 1e6))

    def __post_init__(self) -> None:
        super().__post_init__()
        ok = len(self.betas) == 2 and all(0.0 <= b < 1.0 for b in self.betas)
        check(ok, "optim.betas", list(self.betas), "needs two numbers in [0, 1), e.g. [0.9, 0.95]")


@dataclass(frozen=True)
class LoopConfig(Config):
    """How long to train."""

    steps: int = option(200, help="Training steps (one step = rollout + update of one batch).",
                        range=(1, 10_000_000))


@dataclass(frozen=True)
class EvalConfig(Config):
    """Validation on fixed prompts with a fixed sampling seed."""

    every: int = option(10, help="Evaluate every N steps (and at step 0, before training); 0 = never.",
                        range=(0, 1_000_000))
    split: str = option("validation", help="Tiny-world split (or, with a JSONL data.source, the same file).",
                        choices=("train", "validation"))
    seed: int = option(1234, help="Sampling seed of every evaluation (the same prompts get the same noise).",
                       range=(0, None))
    temperature: float = option(1.0, help="Evaluation sampling temperature.", range=(0.05, 5.0))
    top_p: float = option(1.0, help="Evaluation nucleus threshold.", range=(0.05, 1.0))
    max_prompts: int = option(200, help="Validation prompts used (the first N of the split).",
                              range=(1, 1_000_000))
    batch_size: int = option(64, help="Prompts per generation batch during evaluation.", range=(1, 4096))


@dataclass(frozen=True)
class CheckpointConfig(Config):
    """Full-state checkpoints (actor, critic, optimizers, controllers, normalisers, RNGs, data cursor)."""

    dir: str = option("checkpoints", help="Root directory; checkpoints go to <dir>/<run_id>/step_<N>/ and "
                      "<dir>/latest names the newest one.")
    every: int = option(50, help="Save every N steps; 0 = only on demand and at the end.", range=(0, 10_000_000))
    keep: int = option(3, help="Keep the newest N periodic checkpoints of a run (older ones are deleted).",
                       range=(1, 10_000))
    at_end: bool = option(True, help="Save a checkpoint when training ends (finished or stopped).")
    on_error: str = option("continue", help='What a checkpoint that cannot be written (full disk, I/O '
                           'error) does: "continue" records a checkpoint_failed event, removes the '
                           'partial step_<N>.tmp/ directory, warns and trains on; "stop" also ends the run '
                           "failed (a run_failed event, a one-line error).", choices=("continue", "stop"))


@dataclass(frozen=True)
class TimeoutConfig(Config):
    """Per-phase time limits, in seconds (0 = no limit)."""

    rollout_s: float = option(600.0, help="ROLLOUT limit.", range=(0.0, 1e7))
    score_s: float = option(300.0, help="SCORE limit (reward function, reference, critic).", range=(0.0, 1e7))
    advantage_s: float = option(60.0, help="ADVANTAGE limit.", range=(0.0, 1e7))
    update_s: float = option(600.0, help="UPDATE limit.", range=(0.0, 1e7))
    eval_s: float = option(600.0, help="EVAL limit.", range=(0.0, 1e7))
    diagnose_s: float = option(60.0, help="DIAGNOSE limit (step observers).", range=(0.0, 1e7))
    hotfix_s: float = option(0.0, help="HOTFIX limit (excluding time spent paused).", range=(0.0, 1e7))
    checkpoint_s: float = option(300.0, help="CHECKPOINT limit.", range=(0.0, 1e7))
    on_timeout: str = option("warn", help='What an overrun does: "warn" logs a warning and records a '
                             'phase_timeout event; "abort" also stops the run with PhaseTimeoutError once '
                             "the phase returns.", choices=("warn", "abort"))

    def limit(self, phase: str) -> float:
        return float(getattr(self, f"{phase.lower()}_s", 0.0))


@dataclass(frozen=True)
class TelemetryConfig(Config):
    """Where the run is recorded and how much per-token detail is kept."""

    store: str = option("sqlite:///rlcockpit.db", help="Store URI (sqlite:///path.db or a bare path).")
    log_samples: bool = option(True, help="Store every rollout sample (text, reward, flags, ...).")
    token_arrays_recent_steps: int = option(20, help="Keep per-token arrays (tokens, logprobs, ref_logprobs, "
                                            "token_kl) for every sample of the most recent N steps.",
                                            range=(0, 1_000_000))
    token_arrays_subset_per_step: int = option(4, help="...and for this many seeded samples per older step.",
                                               range=(0, 1_000_000))
    token_arrays_seed: int = option(0, help="Seed of the kept subset.", range=(0, None))
    histogram_bins: int = option(32, help="Bins of the per-step histograms (reward, length, advantage, value).",
                                 range=(2, 4096))
    spool_dir: str = option("", help="Where whole steps wait while the store cannot be written (disk full, "
                            "outage); empty: beside the store (runs.db -> runs.db-spool/). docs/telemetry.md.")
    spool_max_mb: float = option(256.0, help="Largest spool file of the run in MiB (0 = no spool: a failed "
                                 "write is dropped and counted).", range=(0.0, 1_000_000.0))


@dataclass(frozen=True)
class OpsConfig(Config):
    """The ops stack (docs/ops.md): Prometheus, Alertmanager, JSON logs / Loki, OpenTelemetry.
    Everything is off by default; the cli wires what is set, and a failure at run time is
    counted, never raised into the training loop."""

    prometheus_port: int = option(0, help="Serve this process's RL metrics, findings and phase "
                                          "durations at http://prometheus_host:PORT/metrics; 0 = off.",
                                  range=(0, 65535))
    prometheus_host: str = option("127.0.0.1", help="Address of the training process's /metrics.")
    alertmanager_url: str = option("", help="Send findings to this Alertmanager (base URL, e.g. "
                                            "http://127.0.0.1:9093; API v2); empty = off.")
    alertmanager_min_severity: str = option("yellow", help="Lowest severity sent to Alertmanager.",
                                            choices=("info", "yellow", "orange", "red", "black"))
    alert_resolve_after_s: float = option(3600.0, help="A sent finding fires this long unless "
                                                       "sent again or resolved (Alertmanager endsAt).",
                                          range=(1.0, 1e7))
    cockpit_url: str = option("", help="The cockpit's URL, linked from each alert (generatorURL).")
    log_format: str = option("console", help='"json": one JSON object per log line with rl_phase, '
                                             "rl_component, rl_status, run and step (Loki-ready).",
                             choices=("console", "json"))
    loki_url: str = option("", help="Push the log lines to this Loki (base URL; /loki/api/v1/push); "
                                    "empty = off.")
    otlp_endpoint: str = option("", help="Export OpenTelemetry traces over OTLP/HTTP to this "
                                         "endpoint (e.g. http://127.0.0.1:4318/v1/traces); empty = off.")
    trace_prompt_every: int = option(10, help="Every N steps, one prompt's chain (rollout -> reward "
                                              "-> critic -> update) is traced as well; 0 = never.",
                                     range=(0, 1_000_000))


@dataclass(frozen=True)
class CostConfig(Config):
    """What the run costs (seed 004; docs/cost.md): the price and hardware the ledger uses."""

    price_per_hour: float = option(0.0, help="Price of one accelerator-hour (USD); 0 = money is "
                                             "not estimated. Logged as cost/usd_per_step.",
                                   range=(0.0, 1e6))
    accelerators: int = option(1, help="Accelerators the run occupies (GPUs, or 1 for a CPU box).",
                               range=(1, 1_000_000))
    accelerator: str = option("cpu", help='Name shown in the ledger (e.g. "H100").')
    peak_tflops: float = option(0.0, help="Peak dense TFLOP/s of one accelerator (H100 SXM bf16: "
                                          "989); with it the ledger shows utilisation (MFU). 0 = "
                                          "not measured.", range=(0.0, 1e6))
    sampling_schedule: str = option("", help='"seed004": the ledger shows what seed 004 §3.1\'s '
                                             "schedule (n_samples 8 -> 4 -> 2 over the run's thirds, "
                                             "temperature 1.0/0.8/0.6, top-p 0.95/0.9/0.85) would save "
                                             "against the constant rollout.n_samples; \"\" = off.",
                                    choices=("", "seed004"))


@dataclass(frozen=True)
class DistributedConfig(Config):
    """Data-parallel training (docs/distributed.md): torchrun or `train --nproc N` starts the ranks.

    A single process (no torchrun environment) ignores this section."""

    backend: str = option("auto", help='Collective backend: "auto" = NCCL when CUDA is available, else gloo; '
                          '"gloo" (CPU) or "nccl" (GPUs).', choices=("auto", "gloo", "nccl"))
    hash_every: int = option(10, help="Every N steps each rank hashes its parameters and rank 0 counts the "
                             "ranks that differ from its own (dist/param_hash_mismatch); 0 = never.",
                             range=(0, 1_000_000))
    timeout_s: float = option(1800.0, help="How long a collective waits for the other ranks before the run "
                              "fails (a rank killed or hung). Waiting at a step boundary while rank 0 is "
                              "paused does not count.", range=(1.0, 1e7))


@dataclass(frozen=True)
class TrainConfig(Config):
    """Everything ``rlcockpit train`` needs. Dotted overrides address the fields: ``kl.coef=0.05``."""

    algo: str = option("ppo", help="ppo (actor + critic, GAE) or grpo (group-normalised advantages, no critic).",
                       choices=("ppo", "grpo"))
    seed: int = option(0, help="Seeds python, numpy, torch, the data order and the rollout generator.",
                       range=(0, None))
    project: str = option("rlcockpit", help="Project name recorded with the run.")
    name: str = option("", help='Run name; "" = "<algo>-<run_id>".')
    model: ModelConfig = option(default_factory=ModelConfig, help="Policy, reference and critic.")
    data: DataConfig = option(default_factory=DataConfig, help="Prompt source.")
    rollout: RolloutConfig = option(default_factory=RolloutConfig, help="Sampling.")
    reward: RewardConfig = option(default_factory=RewardConfig, help="Reward function and shaping.")
    kl: KLConfig = option(default_factory=KLConfig, help="KL to the reference.")
    ppo: PPOConfig = option(default_factory=PPOConfig, help="The update.")
    optim: OptimConfig = option(default_factory=OptimConfig, help="Optimizers.")
    train: LoopConfig = option(default_factory=LoopConfig, help="Training length.")
    eval: EvalConfig = option(default_factory=EvalConfig, help="Validation.")
    checkpoint: CheckpointConfig = option(default_factory=CheckpointConfig, help="Checkpoints.")
    timeouts: TimeoutConfig = option(default_factory=TimeoutConfig, help="Phase time limits.")
    telemetry: TelemetryConfig = option(default_factory=TelemetryConfig, help="Recording.")
    diagnostics: DiagnosticsConfig = option(default_factory=DiagnosticsConfig,
                                            help="Detectors, severity policy and notifications.")
    control: ControlConfig = option(default_factory=ControlConfig, help="Tickets and commands (docs/control.md).")
    ops: OpsConfig = option(default_factory=OpsConfig, help="Prometheus, Alertmanager, logs, traces (docs/ops.md).")
    cost: CostConfig = option(default_factory=CostConfig, help="Price and hardware of the cost ledger (docs/cost.md).")
    distributed: DistributedConfig = option(default_factory=DistributedConfig,
                                            help="Data-parallel training (docs/distributed.md).")

    def __post_init__(self) -> None:
        super().__post_init__()
        mb = self.ppo.minibatch_size
        if self.rollout.schedule:  # the schedule's samples per prompt replace rollout.n_samples
            for stage_n in SCHEDULE_N_SAMPLES[self.rollout.schedule]:
                total = self.rollout.batch_size * stage_n
                check(mb <= total and total % mb == 0, "ppo.minibatch_size", mb,
                      f"rollout.schedule={self.rollout.schedule} samples {stage_n} per prompt in one stage, "
                      f"{total} samples a step; the minibatch must divide every stage's step: "
                      f"divisors: {_divisors(total)}")
        else:
            n = self.rollout.n_samples
            check(self.algo != "grpo" or n >= 2, "rollout.n_samples", n,
                  "GRPO normalises rewards within a group of samples of the same prompt, so it needs at least 2; "
                  "set rollout.n_samples=4 (or use algo=ppo)")
            total = self.samples_per_step
            check(mb <= total, "ppo.minibatch_size", mb,
                  f"larger than the {total} samples of a step (rollout.batch_size * rollout.n_samples); "
                  f"use a divisor of {total}")
            check(total % mb == 0, "ppo.minibatch_size", mb,
                  f"must divide the {total} samples of a step (rollout.batch_size * rollout.n_samples); "
                  f"divisors: {_divisors(total)}")
        lo, hi = self.ppo.clip_eps_min, self.ppo.clip_eps_max
        check(lo <= hi, "ppo.clip_eps_min", lo, f"must not exceed ppo.clip_eps_max={hi}")
        check(not self.ppo.adaptive_clip or lo <= self.ppo.clip_eps <= hi, "ppo.clip_eps", self.ppo.clip_eps,
              f"with ppo.adaptive_clip the base epsilon must lie in [ppo.clip_eps_min, ppo.clip_eps_max] = "
              f"[{lo}, {hi}]")
        check(":" in self.reward.fn, "reward.fn", self.reward.fn,
              'must look like "package.module:function", e.g. "rlcockpit.world.rewards:score"')
        for key, w in self.reward.weights.items():
            check(w == w and abs(w) != float("inf"), f"reward.weights.{key}", w, "must be a finite number")

    @property
    def samples_per_step(self) -> int:
        return self.rollout.batch_size * self.rollout.n_samples


def _divisors(n: int) -> str:
    divs = [d for d in range(1, n + 1) if n % d == 0]
    return ", ".join(map(str, divs[:12])) + (", ..." if len(divs) > 12 else "")


# --------------------------------------------------------------------------- docs/config.md


def config_markdown() -> str:
    """docs/config.md: every key of TrainConfig with type, default and meaning (tests keep it in sync)."""
    import dataclasses
    import typing

    from rlcockpit.config import describe

    lines = [
        "# Trainer configuration",
        "",
        "<!-- generated by `python -m rlcockpit.trainer.config > docs/config.md`; do not edit by hand -->",
        "",
        "`rlcockpit train --config FILE.yaml KEY=VALUE ...` builds a `TrainConfig` from the YAML file and the dotted",
        "overrides (`kl.coef=0.05`, `reward.weights={correctness: 2.0}`). Unknown keys, wrong types, out-of-range",
        "values and inconsistent combinations are refused before anything runs, with a message naming the key, the",
        "value and what is allowed (exit code 2). Live parameters (marked *live*) can also change while a run",
        "trains, through `trainer.live.request(...)` (see docs/trainer.md).",
        "",
    ]
    hints = typing.get_type_hints(TrainConfig)
    top = [f for f in dataclasses.fields(TrainConfig) if not dataclasses.is_dataclass(hints[f.name])]
    sections = [f for f in dataclasses.fields(TrainConfig) if dataclasses.is_dataclass(hints[f.name])]
    rows = {key: (tname, default, help_text) for key, tname, default, help_text in describe(TrainConfig)}
    lines += _section("Top level", "Algorithm, seed and names.", [f.name for f in top], rows)
    for f in sections:
        cls = hints[f.name]
        keys = [key for key in rows if key.startswith(f"{f.name}.")]  # nested sections flattened
        lines += _section(f"`{f.name}`", (cls.__doc__ or "").strip().splitlines()[0], keys, rows)
    return "\n".join(lines).rstrip() + "\n"


def _section(title: str, doc: str, keys: list[str], rows: dict) -> list[str]:
    out = [f"## {title}", "", doc, "", "| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for key in keys:
        tname, default, help_text = rows[key]
        meaning = help_text.replace("|", "\\|").replace("(live parameter", "(*live*")
        out.append(f"| `{key}` | {tname} | `{default!r}` | {meaning} |")
    out.append("")
    return out


if __name__ == "__main__":  # pragma: no cover
    print(config_markdown(), end="")
