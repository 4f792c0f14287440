"""Catalog entries of how the run runs: time, throughput, memory, cost and telemetry (system),
the fixed validation prompts (evaluation) and the data-parallel ranks (distributed).

Data only; :mod:`rlcockpit.metrics.catalog` assembles the catalog from these lists. Standard
library only.
"""

from __future__ import annotations

from rlcockpit.metrics.catalog_spec import specs

SYSTEM = specs("system", [
    ("time/<phase>_s", "seconds", "down",
     "Wall time of one trainer phase (rollout, score, advantage, update, eval, diagnose, "
     "hotfix) in this step. Healthy: steady; a jump in rollout time is often memory pressure."),
    ("time/step_s", "seconds", "down",
     "Wall time of the whole step (all phases, waits included), as the trainer measured it. The "
     "rate and time axes of imported runs are built from it when the log carries no clock. "
     "Healthy: steady; a creeping rise is often longer responses or memory pressure."),
    ("time/<phase>_ms_per_token", "ms/token", "down",
     "Milliseconds per token of one phase: the phase's wall time over the tokens it processed "
     "(verl: response tokens for generation, prompt + response tokens for the others). Healthy: "
     "steady; a rise at constant lengths means the phase itself got slower."),
    ("perf/total_tokens", "tokens", "none",
     "Tokens (prompt + response, padding excluded) of all the step's samples: the work of the "
     "step. Divided by time/step_s it gives the step's token throughput."),
    ("perf/tokens_per_s_per_gpu", "tokens/s/GPU", "up",
     "perf/total_tokens over (time/step_s x number of GPUs): throughput normalised per "
     "accelerator (verl's perf/throughput). Healthy: steady across steps and runs of one setup."),
    ("perf/mfu/<role>", "fraction", "up",
     "Model FLOPs utilisation of one worker role (actor, critic...) in its update: estimated "
     "FLOPs per second over the accelerators' promised peak. Healthy: steady; low values mean "
     "the update waits on memory, communication or small batches."),
    ("perf/tokens_per_s", "tokens/s", "up",
     "Response tokens processed per second of the step's wall time: generated once plus "
     "trained once per PPO epoch. Healthy: steady; time/<phase>_s shows where a fall comes "
     "from."),
    ("perf/samples_per_s", "samples/s", "up",
     "Rollout samples of the step divided by the step's wall time. Healthy: steady."),
    ("sys/rss_gb", "GB", "flat",
     "Resident memory of the trainer process. Healthy: flat; steady growth is a leak."),
    ("sys/gpu_mem_gb", "GB", "flat",
     "GPU memory allocated by torch (0 on CPU). Healthy: flat below the device size."),
    ("sys/gpu_mem_reserved_gb", "GB", "flat",
     "Peak GPU memory reserved by the torch caching allocator (allocated plus cached blocks). "
     "Healthy: flat below the device size; growing far above sys/gpu_mem_gb is fragmentation."),
    ("sys/gpu_mem_peak_gb/<phase>", "GB", "flat",
     "Peak GPU memory allocated by torch within one trainer phase of the step (rollout, score, "
     "update, ...; CUDA only). Healthy: flat below the device size; the phase nearest the limit "
     "is where micro-batches, gradient checkpointing or LoRA save the most."),
    ("sys/gpu_util", "fraction", "up",
     "GPU utilisation averaged over the step (0 on CPU). Healthy: high during rollout and "
     "update; low values mean the GPU waits on data or the host."),
    ("cost/usd_per_step", "USD", "down",
     "Estimated cost of the step: wall time times accelerators times the configured hourly "
     "price (cost.price_per_hour; docs/cost.md). Healthy: flat or falling; a rise usually "
     "follows longer responses or slower phases."),
    ("cost/tokens_generated", "tokens", "none",
     "Response tokens sampled in the step (EOS included, padding excluded): the cost ledger's "
     "2N FLOPs per token (seed 004 §1). Falls when a sampling schedule lowers "
     "rollout.n_samples."),
    ("cost/tokens_trained", "tokens", "none",
     "Response tokens the update trained on: tokens_generated times ppo.epochs (6N FLOPs per "
     "token in the ledger)."),
    ("cost/prompt_tokens", "tokens", "none",
     "Prompt tokens of the step's samples (each prompt counted once per sample): prefill work "
     "the ledger reports next to the generated tokens."),
    ("telemetry/dropped_total", "records", "flat",
     "Running count of telemetry records dropped (full queue or store error). Telemetry never "
     "blocks training, so it counts what it lost. Healthy: stays 0."),
    ("telemetry/missing_steps", "steps", "flat",
     "Steps the run logged that are not in the store: kept in the telemetry spool while the store "
     "could not be written, or lost when the spool was full too (docs/telemetry.md). Healthy: 0; "
     "back to 0 once the spool is replayed or a resumed run logged the steps again."),
])

EVALUATION = specs("evaluation", [
    ("eval/reward/mean", "reward", "up",
     "Mean reward on the fixed validation prompts with a fixed sampling seed. Healthy: rises "
     "with reward/mean; a gap that opens is overfitting to the training prompts."),
    ("eval/reward/category/<category>/mean", "reward", "up",
     "Mean validation reward of the prompts in <category>. Healthy: rises with "
     "reward/category/<category>/mean; a falling category is a regression."),
    ("eval/accuracy/<category>", "fraction", "up",
     "Share of validation prompts in <category> answered correctly by its rule check (mean of "
     "the info/correct verdict, e.g. the exact math answer). Healthy: rises."),
])

DISTRIBUTED = specs("distributed", [
    # Data-parallel runs (docs/distributed.md): rank 0 gathers every rank's numbers each step and
    # writes them once, as ordinary metrics of the one run; a single-process run logs none.
    ("dist/world_size", "ranks", "none",
     "Number of data-parallel ranks (processes) of the run. Logged once at the start; 1 or absent "
     "for a single-process run."),
    ("dist/step_s/rank/<r>", "seconds", "flat",
     "Wall time of the whole step on rank <r>. Collectives make every rank wait for the slowest, so "
     "the ranks' step times agree even when one rank is slow: dist/time/<phase>_s/rank/<r> shows "
     "which rank and phase hold the others back. Healthy: steady and equal across ranks."),
    ("dist/time/<phase>_s/rank/<r>", "seconds", "flat",
     "Rank <r>'s own duration of one phase (rollout, score, advantage, update) in this step, "
     "waits at collectives included. Healthy: ranks within a few tens of percent of each other; one "
     "rank persistently slower in a phase is a straggler (the others' wait then shows in the next "
     "phase that holds a collective)."),
    ("dist/grad_norm/rank/<r>", "L2 norm", "flat",
     "Rank <r>'s local actor gradient norm before the all-reduce and before clipping (its own shard "
     "of the batch). Healthy: ranks of the same order (their shards differ, so not equal); one rank "
     "far above or below the others has bad data, diverged parameters or bad hardware (001 Q14)."),
    ("dist/rss_gb/rank/<r>", "GB", "flat",
     "Resident memory of rank <r>'s process. Healthy: flat and similar across ranks; one rank "
     "growing alone is a leak on that rank (its data shard, its own buffers)."),
    ("dist/heartbeat_age_s/rank/<r>", "seconds", "down",
     "Seconds since rank <r>'s last heartbeat as seen by rank 0's monitor when it logs the step. "
     "Healthy: below a few step times; a growing age means the rank is hung or dead."),
    ("dist/param_hash_mismatch", "ranks", "flat",
     "Number of ranks whose parameter hash differs from rank 0's, logged at the steps where the "
     "hashes are compared (every distributed.hash_every steps). Healthy: 0; any other value means "
     "the ranks no longer train the same model (001 Q13)."),
    ("dist/param_hash_checked", "flag", "none",
     "1 at the steps where the ranks' parameter hashes were compared (every "
     "distributed.hash_every steps), absent otherwise: tells a step without a check from a "
     "check that found no mismatch."),
])
