"""Telemetry cost of rlcockpit vs the usual trackers, interleaved in one run.

Every variant logs the same reference payload per step (benchmarks/_common.py): 30 scalars, one
4096-value histogram and 64 samples (~256 B prompt, ~768 B response, reward + 3 components);
``--token-arrays`` adds per-token logprob / KL arrays of 128 floats per sample.

Variants: rlcockpit (``rlcockpit.init`` on a fresh SQLite file), TensorBoard ``SummaryWriter``
(add_scalar x30 + add_histogram + add_text), MLflow on its sqlite backend (log_metrics batch +
log_dict for the histogram + log_text of the samples as JSON lines), W&B offline (one ``wandb.log`` with a
Histogram and a Table) and raw ``sqlite3`` executemany in WAL, one transaction per step (the
practical limit: the same rows, written synchronously, nothing else).

Each (round, variant) gets a fresh instance in a fresh directory, in round-robin order:
  1. setup (not timed as a step; reported as ``setup_s``);
  2. warm-up steps, discarded;
  3. foreground phase: steps separated by ``--gap-ms`` of idle time (a trainer computes between
     two logging calls; background writers get the CPU then, as they would in real training),
     each step timed from the first to the last logging call = time the training thread is
     blocked;
  4. throughput phase: steps back to back, then close()/finish() which drains and writes
     everything: steps / elapsed = sustained steps/s until everything is durably written. The
     process CPU time over this phase (all threads of this process; W&B's separate service
     process is not included) gives ``cpu_ms_per_step``.
Foreground figures are medians / p95 over all measured steps of all rounds; throughput is the
median over rounds.

Run: ``make bench-telemetry`` (creates .benchvenv-trackers with the trackers) or
``python benchmarks/telemetry.py [--quick] [--token-arrays] [--ppo-step-s S]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
    COMPONENTS,
    StepPayload,
    fmt,
    machine_info,
    make_payloads,
    module_available,
    package_version,
    print_json_last_line,
    round_robin,
    stdout_to_stderr,
    summarize_ms,
    target,
)

FG_TARGET_MS = 0.5
SPEEDUP_TARGET = 10.0
THROUGHPUT_VS_RAW_TARGET = 0.5
OVERHEAD_TARGET_PCT = 1.0
TRACKERS = ("tensorboard", "mlflow", "wandb")


# --- payload conversions the trackers need (done in the foreground, as a user would) -----------

def sample_columns(samples: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Samples as flat columns (components flattened) for table-shaped trackers."""
    cols: dict[str, list[Any]] = {}
    for s in samples:
        for key, value in s.items():
            if key == "components":
                for c in COMPONENTS:
                    cols.setdefault(f"reward_{c}", []).append(value[c])
            else:
                cols.setdefault(key, []).append(value)
    return cols


def samples_markdown(samples: list[dict[str, Any]]) -> str:
    """A markdown table of the samples (what TensorBoard's text plugin renders)."""
    keys = [k for k in samples[0] if k != "components"]
    lines = ["| " + " | ".join(keys + list(COMPONENTS)) + " |",
             "|" + "---|" * (len(keys) + len(COMPONENTS))]
    for s in samples:
        cells = [json.dumps(s[k]) if isinstance(s[k], list) else str(s[k]) for k in keys]
        cells += [f"{s['components'][c]:.4f}" for c in COMPONENTS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --- variants -----------------------------------------------------------------------------------

class Variant:
    """One way of logging a step. ``open`` is setup, ``close`` must leave everything durable."""

    name = ""
    requires: tuple[str, ...] = ()

    def open(self, workdir: Path, expected_steps: int) -> None: ...

    def log_step(self, step: int, p: StepPayload) -> None: ...

    def flush(self) -> None:
        """Wait until everything logged so far is written (before the throughput phase)."""

    def close(self) -> None: ...

    def dropped(self) -> int:
        return 0

    def version(self) -> str:
        return (package_version(self.requires[0]) or "?") if self.requires else "stdlib"


class RlcockpitVariant(Variant):
    name = "rlcockpit"
    requires = ("rlcockpit",)

    def open(self, workdir: Path, expected_steps: int) -> None:
        import rlcockpit

        # The throughput phase logs as fast as possible; a queue that holds every item of it keeps
        # the back-pressure policy (drop when full) out of the measurement. Drops are checked.
        self.run = rlcockpit.init(project="bench", name="telemetry-bench",
                                  store=f"sqlite:///{workdir / 'rlcockpit.db'}",
                                  queue_size=max(10_000, 8 * expected_steps),
                                  close_timeout_s=600.0)

    def log_step(self, step: int, p: StepPayload) -> None:
        run = self.run
        run.log(step, p.scalars)
        run.log_histogram(step, "reward/hist", p.hist_values, bins=64)
        run.log_samples(step, p.samples)
        run.commit(step)

    def flush(self) -> None:
        self.run.flush(timeout=120.0)

    def close(self) -> None:
        self.run.close()

    def dropped(self) -> int:
        return int(self.run.dropped_total)


class RlcockpitChdbVariant(RlcockpitVariant):
    """The same SDK into the ClickHouse store, in-process (chdb://): the foreground cost is the
    SDK's (the writer thread does the I/O), the throughput is ClickHouse's."""

    name = "rlcockpit_chdb"
    requires = ("chdb",)

    def open(self, workdir: Path, expected_steps: int) -> None:
        import rlcockpit

        self.run = rlcockpit.init(project="bench", name="telemetry-bench",
                                  store=f"chdb:///{workdir / 'rlcockpit-ch'}",
                                  queue_size=max(10_000, 8 * expected_steps),
                                  close_timeout_s=600.0)


class TensorBoardVariant(Variant):
    name = "tensorboard"
    requires = ("tensorboard",)

    def open(self, workdir: Path, expected_steps: int) -> None:
        if module_available("torch"):
            from torch.utils.tensorboard import SummaryWriter
        else:
            from tensorboardX import SummaryWriter
        self.writer = SummaryWriter(log_dir=str(workdir / "tb"))

    def log_step(self, step: int, p: StepPayload) -> None:
        w = self.writer
        for name, value in p.scalars.items():
            w.add_scalar(name, value, step)
        w.add_histogram("reward/hist", p.hist_values, step, bins=64)
        w.add_text("samples", samples_markdown(p.samples), step)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()

    def version(self) -> str:
        impl = "torch.utils.tensorboard" if module_available("torch") else "tensorboardX"
        return f"{package_version('tensorboard')} ({impl})"


class MlflowVariant(Variant):
    name = "mlflow"
    requires = ("mlflow",)

    def open(self, workdir: Path, expected_steps: int) -> None:
        import mlflow

        mlflow.set_tracking_uri(f"sqlite:///{workdir / 'mlflow.db'}")
        exp = mlflow.create_experiment("bench", artifact_location=(workdir / "art").as_uri())
        self.mlflow = mlflow
        self.run = mlflow.start_run(experiment_id=exp)

    def log_step(self, step: int, p: StepPayload) -> None:
        mlflow = self.mlflow
        mlflow.log_metrics(p.scalars, step=step)
        counts, edges = np.histogram(p.hist_values, bins=64)
        mlflow.log_dict({"edges": edges.tolist(), "counts": counts.tolist()},
                        f"histograms/reward_hist/{step:07d}.json")
        # log_text, not log_table: each log_table artifact is listed in the run tag
        # mlflow.loggedArtifacts, which overflows its 8000-character limit after ~150 per-step
        # tables (the run then fails with a JSONDecodeError); appending to ONE table instead
        # rewrites the whole file every step.
        mlflow.log_text("\n".join(json.dumps(s) for s in p.samples),
                        f"samples/{step:07d}.jsonl")

    def close(self) -> None:
        self.mlflow.end_run()


class WandbVariant(Variant):
    name = "wandb"
    requires = ("wandb",)

    def open(self, workdir: Path, expected_steps: int) -> None:
        import wandb

        os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DIR=str(workdir),
                          WANDB_CONSOLE="off", WANDB_DISABLE_GIT="true")
        settings = wandb.Settings(mode="offline", console="off", silent=True, disable_git=True,
                                  save_code=False, x_disable_stats=True)
        self.wandb = wandb
        self.run = wandb.init(project="rlcockpit-bench", dir=str(workdir), settings=settings)

    def log_step(self, step: int, p: StepPayload) -> None:
        wandb = self.wandb
        cols = sample_columns(p.samples)
        rows = [list(r) for r in zip(*cols.values(), strict=True)]
        self.run.log({**p.scalars,
                      "reward/hist": wandb.Histogram(p.hist_values, num_bins=64),
                      "samples": wandb.Table(columns=list(cols), data=rows)}, step=step)

    def close(self) -> None:
        self.run.finish()


RAW_SCHEMA = """
CREATE TABLE metrics (run_id TEXT, step INTEGER, name TEXT, value REAL, wall_time REAL,
                      PRIMARY KEY (run_id, name, step)) WITHOUT ROWID;
CREATE TABLE histograms (run_id TEXT, step INTEGER, name TEXT, edges BLOB, counts BLOB,
                         wall_time REAL);
CREATE TABLE samples (run_id TEXT, step INTEGER, sample_id INTEGER, prompt_id TEXT,
                      group_id INTEGER, category TEXT, prompt TEXT, response TEXT, reward REAL,
                      components TEXT, length INTEGER, logprobs BLOB, token_kl BLOB,
                      PRIMARY KEY (run_id, step, sample_id));
"""


def _f16(values: list[float] | None) -> bytes | None:
    return None if values is None else np.asarray(values, dtype=np.float16).tobytes()


class RawSqliteVariant(Variant):
    """The practical limit: the same rows, executemany, one transaction per step, WAL."""

    name = "raw_sqlite"

    def open(self, workdir: Path, expected_steps: int) -> None:
        self.db = sqlite3.connect(workdir / "raw.db", isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(RAW_SCHEMA)

    def log_step(self, step: int, p: StepPayload) -> None:
        now = time.time()
        counts, edges = np.histogram(p.hist_values, bins=64)
        db = self.db
        db.execute("BEGIN")
        db.executemany("INSERT INTO metrics VALUES ('r', ?, ?, ?, ?)",
                       [(step, k, v, now) for k, v in p.scalars.items()])
        db.execute("INSERT INTO histograms VALUES ('r', ?, 'reward/hist', ?, ?, ?)",
                   (step, edges.astype(np.float32).tobytes(), counts.astype(np.int32).tobytes(),
                    now))
        db.executemany(
            "INSERT INTO samples VALUES ('r', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(step, s["sample_id"], s["prompt_id"], s["group_id"], s["category"], s["prompt"],
              s["response"], s["reward"], json.dumps(s["components"]), s["length"],
              _f16(s.get("logprobs")), _f16(s.get("token_kl"))) for s in p.samples])
        db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()

    def version(self) -> str:
        return f"sqlite {sqlite3.sqlite_version}"


VARIANTS: dict[str, type[Variant]] = {
    v.name: v for v in (RlcockpitVariant, RlcockpitChdbVariant, TensorBoardVariant, MlflowVariant,
                        WandbVariant, RawSqliteVariant)
}


# rlcockpit_chdb on request (--variants ...,rlcockpit_chdb): the ClickHouse store's foreground cost
DEFAULT_VARIANTS = [v for v in VARIANTS if v != "rlcockpit_chdb"]


def availability(name: str) -> str | None:
    """None when the variant can run, else why not ("not installed: mlflow")."""
    cls = VARIANTS[name]
    if name == "rlcockpit":
        missing = [] if module_available("rlcockpit.telemetry") else ["rlcockpit.telemetry"]
    else:
        missing = [m for m in cls.requires if not module_available(m)]
    if name == "tensorboard" and not (module_available("torch") or module_available("tensorboardX")):
        missing.append("torch or tensorboardX")
    return f"not installed: {', '.join(missing)}" if missing else None


# --- one (round, variant) -----------------------------------------------------------------------

@dataclass
class RoundResult:
    fg_s: list[float] = field(default_factory=list)
    steps_per_s: float = math.nan
    cpu_ms_per_step: float = math.nan
    setup_s: float = math.nan
    dropped: int = 0


def run_round(cls: type[Variant], payloads: list[StepPayload], args: argparse.Namespace,
              workdir: Path) -> RoundResult:
    res = RoundResult()
    v = cls()
    n_total = args.warmup_steps + args.fg_steps + args.throughput_steps
    t0 = time.perf_counter()
    v.open(workdir, n_total)
    res.setup_s = time.perf_counter() - t0
    try:
        _measure(v, res, payloads, args)
    except BaseException:
        _abort(v)
        raise
    return res


def _abort(v: Variant) -> None:
    """Close a variant that failed mid-run, so its library's exit hooks do not write into a
    directory that is about to be deleted; a second failure is only reported."""
    try:
        v.close()
    except Exception as exc:  # the first error is the one raised; this one is logged
        print(f"{v.name}: close after error failed: {exc!r}", file=sys.stderr)


def _measure(v: Variant, res: RoundResult, payloads: list[StepPayload],
             args: argparse.Namespace) -> None:
    step, gap = 0, args.gap_ms / 1e3
    for i in range(args.warmup_steps + args.fg_steps):
        t0 = time.perf_counter()
        v.log_step(step, payloads[step % len(payloads)])
        dt = time.perf_counter() - t0
        if i >= args.warmup_steps:
            res.fg_s.append(dt)
        step += 1
        time.sleep(gap)
    v.flush()
    cpu0, t0 = time.process_time(), time.perf_counter()
    for _ in range(args.throughput_steps):
        v.log_step(step, payloads[step % len(payloads)])
        step += 1
    v.close()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    res.steps_per_s = args.throughput_steps / elapsed
    res.cpu_ms_per_step = cpu * 1e3 / args.throughput_steps
    res.dropped = v.dropped()


@dataclass
class VariantResult:
    name: str
    status: str = "ok"  # ok | not installed: ... | error: ...
    version: str = ""
    rounds: list[RoundResult] = field(default_factory=list)

    def fg(self) -> dict[str, float]:
        return summarize_ms([t for r in self.rounds for t in r.fg_s])

    def median_of(self, attr: str) -> float:
        vals = [getattr(r, attr) for r in self.rounds]
        return statistics.median(vals) if vals else math.nan

    def dropped(self) -> int:
        return sum(r.dropped for r in self.rounds)


def run_all(names: list[str], payloads: list[StepPayload], args: argparse.Namespace,
            base: Path) -> dict[str, VariantResult]:
    results = {n: VariantResult(n) for n in names}
    for n in names:
        why = availability(n)
        if why:
            results[n].status = why
    runnable = [n for n in names if results[n].status == "ok"]
    for rnd, name in round_robin(runnable, args.rounds):
        vr = results[name]
        if vr.status != "ok":
            continue
        workdir = Path(tempfile.mkdtemp(prefix=f"{name}-r{rnd}-", dir=base))
        print(f"round {rnd + 1}/{args.rounds}: {name}", file=sys.stderr, flush=True)
        try:
            with stdout_to_stderr():
                vr.rounds.append(run_round(VARIANTS[name], payloads, args, workdir))
                vr.version = vr.version or VARIANTS[name]().version()
        except Exception as exc:  # a broken tracker is reported, the others still run
            traceback.print_exc(file=sys.stderr)
            vr.status = f"error: {type(exc).__name__}: {exc}"[:200]
        finally:
            if not args.keep:
                shutil.rmtree(workdir, ignore_errors=True)
    return results


# --- PPO step time ------------------------------------------------------------------------------

def ppo_step_seconds(args: argparse.Namespace) -> tuple[float | None, str]:
    """The tiny-world PPO step time: ``--ppo-step-s`` if given, else measured (3 steps of
    rlcockpit.trainer, after one warm-up step) when the trainer can run here."""
    if args.ppo_step_s is not None:
        return args.ppo_step_s, "--ppo-step-s"
    if args.quick:
        return None, "not measured in --quick mode (pass --ppo-step-s)"
    if not module_available("rlcockpit.trainer.trainer"):
        return None, "rlcockpit.trainer is not available; pass --ppo-step-s"
    try:
        with stdout_to_stderr():
            return measure_ppo_step_s(steps=3)
    except Exception as exc:  # the benchmark still reports telemetry numbers without it
        traceback.print_exc(file=sys.stderr)
        return None, f"trainer failed: {type(exc).__name__}: {exc}"[:200] + "; pass --ppo-step-s"


def measure_ppo_step_s(steps: int) -> tuple[float, str]:
    """Median wall time of ``steps`` tiny-world PPO steps (examples/ppo_tiny.yaml, full sample
    logging as configured there) after one warm-up step, through the real ``rlcockpit train``
    CLI; step times come from the run's phase records (benchmarks/_trainer_runs.py)."""
    import _trainer_runs as tr

    with tempfile.TemporaryDirectory(prefix="rlcockpit-bench-ppo-") as tmp:
        overrides = [f"train.steps={steps + 1}", "eval.every=0", "checkpoint.every=0",
                     "checkpoint.at_end=false", f"checkpoint.dir={tmp}/checkpoints"]
        model, how = _ppo_model(Path(tmp))
        overrides += [f"model.path={model}"] if model else []
        run = tr.run_train(tr.example_config("ppo"), Path(tmp) / "ppo.db", overrides,
                           timeout_s=1800.0)
        if run.returncode != 0:
            raise RuntimeError(f"rlcockpit train exited with {run.returncode}: {run.stderr_tail}")
        times = tr.step_wall_times(run.store_uri, run.run_id)[1:]  # step 0 warms up
    if len(times) < steps:
        raise RuntimeError(f"expected {steps} timed steps, the run recorded {len(times)}")
    return statistics.median(times), f"measured: median of {steps} tiny-world PPO steps ({how})"


def _ppo_model(tmp: Path) -> tuple[str | None, str]:
    """The shipped SFT checkpoint when it is built; otherwise a 1-step SFT model made here. An
    untrained policy rarely stops before max_new_tokens, so its step time is an upper bound."""
    import subprocess

    from rlcockpit.world import SFT_CHECKPOINT

    if Path(SFT_CHECKPOINT).exists():
        return None, "shipped SFT checkpoint"
    out = tmp / "sft-1step"
    subprocess.run([sys.executable, "-m", "rlcockpit", "world", "sft", "--out", str(out),
                    "--steps", "1", "--no-eval"], check=True, capture_output=True, timeout=900)
    return str(out), ("shipped SFT checkpoint missing: a 1-step SFT model, responses run to "
                      "max_new_tokens, so the step time is an upper bound")


# --- report -------------------------------------------------------------------------------------

def _fg_of(results: dict[str, VariantResult], name: str) -> float | None:
    r = results.get(name)
    return r.fg()["median_ms"] if r is not None and r.status == "ok" and r.rounds else None


def _sps_of(results: dict[str, VariantResult], name: str) -> float | None:
    r = results.get(name)
    return r.median_of("steps_per_s") if r is not None and r.status == "ok" and r.rounds else None


def headline(results: dict[str, VariantResult], ppo_s: float | None, ppo_src: str,
             args: argparse.Namespace) -> dict[str, Any]:
    rlc, raw = results.get("rlcockpit"), results.get("raw_sqlite")
    rlc_ok = rlc is not None and rlc.status == "ok" and rlc.rounds
    rlc_fg = rlc.fg()["median_ms"] if rlc_ok else None
    rlc_sps = rlc.median_of("steps_per_s") if rlc_ok else None
    raw_sps = raw.median_of("steps_per_s") if raw and raw.status == "ok" and raw.rounds else None
    trackers = {n: r.fg()["median_ms"] for n, r in results.items()
                if n in TRACKERS and r.status == "ok" and r.rounds}
    best = min(trackers, key=trackers.get) if trackers else None
    best_fg = trackers[best] if best else None
    speedup = best_fg / rlc_fg if best_fg and rlc_fg else None
    vs_raw = rlc_sps / raw_sps if rlc_sps and raw_sps else None
    overhead = rlc_fg / (ppo_s * 1e3) * 100 if rlc_fg is not None and ppo_s else None
    cpu_ms = rlc.median_of("cpu_ms_per_step") if rlc_ok else None
    return {
        "rlcockpit_fg_ms": rlc_fg,
        "rlcockpit_chdb_fg_ms": _fg_of(results, "rlcockpit_chdb"),
        "rlcockpit_chdb_steps_per_s": _sps_of(results, "rlcockpit_chdb"),
        "rlcockpit_fg_p95_ms": rlc.fg()["p95_ms"] if rlc_ok else None,
        "best_tracker": best,
        "best_tracker_fg_ms": best_fg,
        "fg_speedup_vs_best_tracker": speedup,
        "rlcockpit_steps_per_s": rlc_sps,
        "raw_sqlite_steps_per_s": raw_sps,
        "throughput_vs_raw": vs_raw,
        "rlcockpit_cpu_ms_per_step": cpu_ms,
        "rlcockpit_dropped": rlc.dropped() if rlc_ok else None,
        "ppo_step_s": ppo_s,
        "ppo_step_source": ppo_src,
        "overhead_pct_of_ppo_step": overhead,
        "overhead_cpu_pct_of_ppo_step": cpu_ms / (ppo_s * 1e3) * 100 if cpu_ms and ppo_s else None,
        "targets": {
            "fg_le_0.5ms": target(rlc_fg, "<=", FG_TARGET_MS),
            "fg_ge_10x_best_tracker": target(speedup, ">=", SPEEDUP_TARGET),
            "throughput_ge_50pct_raw": target(vs_raw, ">=", THROUGHPUT_VS_RAW_TARGET),
            "overhead_le_1pct_ppo_step": target(overhead, "<=", OVERHEAD_TARGET_PCT),
            "no_drops": "pass" if rlc_ok and rlc.dropped() == 0 else ("n/a" if not rlc_ok else "fail"),
        },
        "variants": {n: {"status": r.status, "fg_ms": r.fg()["median_ms"] if r.rounds else None,
                         "steps_per_s": r.median_of("steps_per_s") if r.rounds else None}
                     for n, r in results.items()},
        "machine": machine_info(),
        "config": {"quick": args.quick, "token_arrays": args.token_arrays, "rounds": args.rounds,
                   "fg_steps": args.fg_steps, "throughput_steps": args.throughput_steps,
                   "gap_ms": args.gap_ms},
    }


def print_tables(results: dict[str, VariantResult], head: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=140)
    t = Table(title="Telemetry cost per step (30 scalars + 4096-value histogram + 64 samples"
                    + (" + token arrays" if head["config"]["token_arrays"] else "") + ")")
    for col in ("variant", "version", "status", "fg median ms", "fg p95 ms", "steps/s",
                "cpu ms/step", "setup s", "rounds"):
        t.add_column(col, justify="left" if col in ("variant", "version", "status") else "right")
    for name, r in results.items():
        fg = r.fg() if r.rounds else {}
        t.add_row(name, r.version, r.status, fmt(fg.get("median_ms"), 3), fmt(fg.get("p95_ms"), 3),
                  fmt(r.median_of("steps_per_s"), 0) if r.rounds else "-",
                  fmt(r.median_of("cpu_ms_per_step"), 2) if r.rounds else "-",
                  fmt(r.median_of("setup_s"), 2) if r.rounds else "-", str(len(r.rounds)))
    console.print(t)
    g = Table(title="Targets")
    for col in ("target", "measured", "result"):
        g.add_column(col)
    measured = {
        "fg_le_0.5ms": f"{fmt(head['rlcockpit_fg_ms'], 3)} ms",
        "fg_ge_10x_best_tracker": f"{fmt(head['fg_speedup_vs_best_tracker'], 1)}x "
                                  f"(best tracker: {head['best_tracker'] or '-'})",
        "throughput_ge_50pct_raw": f"{fmt(head['throughput_vs_raw'], 2)} of raw sqlite",
        "overhead_le_1pct_ppo_step": f"{fmt(head['overhead_pct_of_ppo_step'], 3)} % of "
                                     f"{fmt(head['ppo_step_s'], 3)} s ({head['ppo_step_source']})",
        "no_drops": f"{fmt(head['rlcockpit_dropped'], 0)} dropped",
    }
    for key, result in head["targets"].items():
        g.add_row(key, measured[key], result)
    console.print(g)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny run for the smoke test (seconds)")
    p.add_argument("--token-arrays", action="store_true",
                   help="add 128-float logprob and KL arrays to every sample")
    p.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                   help=f"comma list out of {', '.join(VARIANTS)}")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--fg-steps", type=int, default=60, help="timed steps per round (with gap)")
    p.add_argument("--throughput-steps", type=int, default=200, help="back-to-back steps per round")
    p.add_argument("--gap-ms", type=float, default=10.0,
                   help="idle time between foreground steps (the trainer's own work)")
    p.add_argument("--ppo-step-s", type=float, default=None,
                   help="tiny-world PPO step time in seconds (else measured with the trainer)")
    p.add_argument("--workdir", default=None, help="where the variants write (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep what the variants wrote")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.warmup_steps, args.fg_steps, args.throughput_steps = 1, 2, 5, 10
        args.gap_ms = min(args.gap_ms, 2.0)
    unknown = [v for v in args.variants.split(",") if v not in VARIANTS]
    if unknown:
        p.error(f"unknown variant(s) {unknown}; choose from {', '.join(VARIANTS)}")
    for name in ("rounds", "fg_steps", "throughput_steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    payloads = make_payloads(4 if args.quick else 16, token_arrays=args.token_arrays)
    base = Path(args.workdir or tempfile.mkdtemp(prefix="rlcockpit-bench-telemetry-"))
    base.mkdir(parents=True, exist_ok=True)
    try:
        results = run_all(args.variants.split(","), payloads, args, base)
        ppo_s, ppo_src = ppo_step_seconds(args)
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(base, ignore_errors=True)
    head = headline(results, ppo_s, ppo_src, args)
    print_tables(results, head)
    print_json_last_line(head)
    return 0


if __name__ == "__main__":
    sys.exit(main())
