"""The detection benchmark's runs: seed splits, configs, each fault's variant per seed, the jobs, and
how they train (in parallel processes, twins first, fault runs resumed from their twin's checkpoint).

Used by benchmarks/detection.py only.
"""

from __future__ import annotations

import random
import sys
import time
import zlib
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# calibration-b: the first evaluation split (thresholds frozen at 3c9c9a2, evaluated once, reported in
# docs/detection.md); its streams were then used for tuning, so they are calibration data now and the
# claim moved to fresh seeds. calibration-c: the second evaluation split (frozen at 557f6b9, evaluated once,
# reported in docs/detection.md), spent the same way. calibration-d: the third evaluation split (frozen at
# 6c27257, evaluated once, reported in docs/detection.md), spent the same way. calibration-e: the fourth
# evaluation split (frozen at 479b9b8, evaluated once, reported in docs/detection.md), spent the same way.
# calibration-f: the fifth evaluation split (frozen at 0078262, evaluated once, reported in
# docs/detection.md); the detectors changed after it (issue 26), so the sixth evaluation used fresh seeds
# 600-604. calibration-g: that sixth evaluation split (frozen at 10c0145, evaluated once, reported in
# docs/detection.md), declared calibration data on 2026-12-07 before any tuning on it; the seventh evaluation
# uses fresh seeds 800-804, never run before (700-799 are the unseen-fault benchmark's seeds).
SPLITS: dict[str, tuple[int, ...]] = {"calibration": (0, 1, 2, 3, 4), "calibration-b": (100, 101, 102, 103, 104),
                                      "calibration-c": (200, 201, 202, 203, 204),
                                      "calibration-d": (300, 301, 302, 303, 304),
                                      "calibration-e": (400, 401, 402, 403, 404),
                                      "calibration-f": (500, 501, 502, 503, 504),
                                      "calibration-g": (600, 601, 602, 603, 604),
                                      "evaluation": (800, 801, 802, 803, 804)}
TUNING_SPLITS = ("calibration", "calibration-b", "calibration-c", "calibration-d", "calibration-e", "calibration-f",
                 "calibration-g")
# The baseline run of each config (the `baseline` detector): the healthy run of calibration seed 0 — another
# seed of the same recipe, never the fault run's own twin (outside the calibration split, where seed 0's twin
# is its own baseline and so compares with itself).
BASELINE_SEED = 0
HEALTHY_STEPS = 200
EARLY, LATE = (10, 30), (105, 125)  # onset ranges: "early" and "late" (past step 100)
ONSET_CLASSES = ("zero", "early", "late")
RAMP = 15  # steps a ramp takes
AFTER_STEP, AFTER_RAMP = 20, 30  # steps trained from the first faulted step on (a ramp: its 15 + 15 more)
RESUME_MIN_ONSET = 4  # from this onset on a fault run continues its twin's checkpoint at step onset - 2
QUICK_FAULTS = ("lr_spike", "nan_reward", "ref_prompt_template", "rm_bias_drift")
QUICK_OVERRIDES = ("rollout.batch_size=8", "ppo.minibatch_size=8", "rollout.max_new_tokens=12")
QUICK_STEPS = 12


@dataclass(frozen=True)
class RunConfig:
    """One training config of the benchmark: a YAML example and overrides."""

    name: str
    algo: str
    path: str
    overrides: tuple[str, ...] = ()
    label: str = ""


CONFIGS: dict[str, RunConfig] = {c.name: c for c in (
    RunConfig("ppo", "ppo", "examples/ppo_tiny.yaml", label="PPO, fixed KL"),
    RunConfig("ppo-akl", "ppo", "examples/ppo_tiny.yaml", ("kl.adaptive=true",), "PPO, adaptive KL"),
    RunConfig("grpo", "grpo", "examples/grpo_tiny.yaml", label="GRPO, fixed KL"),
    RunConfig("grpo-akl", "grpo", "examples/grpo_tiny.yaml", ("kl.adaptive=true",), "GRPO, adaptive KL"),
)}


@dataclass(frozen=True)
class Variant:
    """How one fault is injected into one seed's run."""

    config: str
    onset: int
    onset_class: str
    shape: str
    magnitude: str
    ramp: int = 0

    def label(self) -> str:
        shape = f"ramp {self.ramp}" if self.shape == "ramp" else "step"
        return f"{self.config}, onset {self.onset} ({self.onset_class}), {shape}, {self.magnitude}"


@dataclass(frozen=True)
class Job:
    key: str  # unique: <fault>-s<seed> or healthy-<config>-s<seed>
    fault: str  # "" = healthy
    seed: int
    config: str  # a CONFIGS key
    steps: int  # the last step trained
    variant: Variant | None = None
    twin: str = ""  # key of the healthy twin (same config and seed)
    resume_step: int | None = None  # the twin's checkpoint this run continues (None: trains from step 1)
    checkpoints: tuple[int, ...] = ()  # a twin: steps at whose end it writes a checkpoint
    role: str = "twin"  # a healthy run: "twin" (scored), or "baseline" (only the baseline of other seeds)

    @property
    def first_step(self) -> int:
        return max(self.variant.onset, 1) if self.variant else 1


# --------------------------------------------------------------------------- variants


def choose_variant(fault: Any, fault_index: int, seed: int, seed_index: int) -> Variant:
    """Deterministic per (fault, seed): across a split's 5 seeds every onset class comes up, both
    magnitudes (where the fault has a mild one), both shapes (where it has them), and several configs."""
    rng = random.Random(zlib.crc32(f"{fault.name}:{seed}".encode()))
    onset_class = ONSET_CLASSES[(seed_index + fault_index) % len(ONSET_CLASSES)]
    shape = fault.shapes[(seed_index // 2 + fault_index) % len(fault.shapes)]
    if onset_class == "zero" and fault.live and shape == "ramp":
        shape = "step"  # a config-level mistake is a constant: it cannot ramp
    magnitudes = ("mild", "strong") if fault.mild else ("strong",)
    magnitude = magnitudes[(seed_index + fault_index) % len(magnitudes)]
    configs = [c.name for c in CONFIGS.values() if c.algo in fault.algos]
    config = configs[(seed_index + 2 * fault_index) % len(configs)]
    onset = {"zero": 0, "early": rng.randint(*EARLY), "late": rng.randint(*LATE)}[onset_class]
    return Variant(config, onset, onset_class, shape, magnitude, RAMP if shape == "ramp" else 0)


def quick_variant(name: str) -> Variant:
    """--quick: short runs that still cover a resumed run, a config-level onset 0, new faults and a ramp."""
    return {"lr_spike": Variant("ppo", 6, "quick", "step", "strong"),
            "nan_reward": Variant("ppo", 0, "zero", "step", "mild"),
            "ref_prompt_template": Variant("ppo", 4, "quick", "step", "strong"),
            "rm_bias_drift": Variant("ppo", 5, "quick", "ramp", "strong", ramp=4)}[name]


def make_fault(name: str, v: Variant) -> Any:
    from rlcockpit import faults

    return faults.get(name).with_onset(v.onset).with_variant(magnitude=v.magnitude, shape=v.shape,
                                                             ramp=v.ramp or None)


# --------------------------------------------------------------------------- jobs


def make_jobs(split: str, names: Sequence[str] | None, quick: bool, n_seeds: int | None = None) -> list[Job]:
    """Every fault x seed of the split (one variant each) and one healthy run per config x seed, which
    is the twin of every fault run of that config and seed."""
    from rlcockpit import faults

    catalog = [name for name, f in faults.available().items() if not f.distributed]  # one process: no rank faults
    names = list(names or (QUICK_FAULTS if quick else catalog))
    seeds = SPLITS[split][:1] if quick else SPLITS[split][:n_seeds]
    jobs: list[Job] = []
    for i, seed in enumerate(seeds):
        for name in names:
            fault = faults.get(name)
            v = quick_variant(name) if quick else choose_variant(fault, catalog.index(name), seed, i)
            first = max(v.onset, 1)
            after = (3 if v.shape == "step" else 6) if quick else (AFTER_STEP if v.shape == "step" else AFTER_RAMP)
            resume = v.onset - 2 if v.onset >= RESUME_MIN_ONSET else None
            jobs.append(Job(f"{name}-s{seed}", name, seed, v.config, first + after - 1, v,
                            twin=healthy_key(v.config, seed), resume_step=resume))
    return _with_twins(jobs, seeds, quick)


def healthy_key(config: str, seed: int) -> str:
    return f"healthy-{config}-s{seed}"


def baseline_key(config: str) -> str:
    return healthy_key(config, BASELINE_SEED)


def _with_twins(faults_jobs: list[Job], seeds: Sequence[int], quick: bool) -> list[Job]:
    configs = ["ppo"] if quick else list(CONFIGS)
    healthy = []
    for seed in seeds:
        for config in configs:
            key = healthy_key(config, seed)
            mine = [j for j in faults_jobs if j.twin == key]
            steps = max([QUICK_STEPS if quick else HEALTHY_STEPS, *(j.steps for j in mine)])
            ckpts = tuple(sorted({j.resume_step for j in mine if j.resume_step is not None}))
            healthy.append(Job(key, "", seed, config, steps, checkpoints=ckpts))
    if not quick:
        for config in configs:
            key = baseline_key(config)
            if not any(j.key == key for j in healthy):
                healthy.append(Job(key, "", BASELINE_SEED, config, HEALTHY_STEPS, role="baseline"))
    known = {j.key for j in healthy}
    missing = [j.twin for j in faults_jobs if j.twin not in known]
    if missing:
        raise ValueError(f"fault runs without a twin: {sorted(set(missing))}")
    return healthy + faults_jobs


# --------------------------------------------------------------------------- training


def run_job(job: Job, out_dir: str, extra: Sequence[str], resume_path: str | None) -> dict[str, Any]:
    """In a worker process: one training run into its own store; returns its id, status and time."""
    import torch

    torch.set_num_threads(1)
    from rlcockpit.faults.runner import fault_config, run_fault

    store = f"sqlite:///{Path(out_dir) / (job.key + '.db')}"
    t0 = time.perf_counter()
    try:
        fault = make_fault(job.fault, job.variant) if job.fault else None
        rc = CONFIGS[job.config]
        cfg = fault_config(seed=job.seed, store=store, steps=job.steps, name=job.key, config=ROOT / rc.path,
                           overrides=[*extra, *rc.overrides, f"checkpoint.dir={Path(out_dir) / 'checkpoints'}"])
        result = run_fault(fault, cfg, resume_from=resume_path, checkpoint_at=job.checkpoints)
        return {"run_id": result.run_id, "status": result.status, "wall_s": time.perf_counter() - t0,
                "store": store, "resumed_from": job.resume_step if resume_path else None}
    except Exception as exc:  # one broken run is a row in the report, not the end of the benchmark
        return {"run_id": "", "status": "failed", "error": f"{type(exc).__name__}: {exc}",
                "wall_s": time.perf_counter() - t0, "store": store, "resumed_from": None}


def finished_run(job: Job, out_dir: Path) -> dict[str, Any] | None:
    """A finished run of ``job`` already in its store (``--reuse``), or None."""
    from rlcockpit.store import open_store

    path = out_dir / f"{job.key}.db"
    if not path.exists():
        return None
    reader = open_store(f"sqlite:///{path}", create=False).reader()
    try:
        runs = [r for r in reader.list_runs() if r.name == job.key and r.status == "finished"]
        if not runs:
            return None
        run = runs[0]
        steps = reader.read_series(run.run_id, ["reward/mean"]).get("reward/mean")
        first = min(steps.steps) if steps is not None and len(steps.steps) else 1
    finally:
        reader.close()
    wall = (run.ended_at - run.started_at) if run.ended_at and run.started_at else 0.0
    return {"run_id": run.run_id, "status": "finished", "wall_s": wall, "store": f"sqlite:///{path}", "reused": True,
            "resumed_from": first - 1 if first > 1 else None}


@dataclass
class Scheduler:
    """Twins first (they unlock the fault runs that continue their checkpoints), then the runs from
    step 1, then each resumed run as soon as its twin is done. ``workers`` processes."""

    jobs: list[Job]
    out_dir: Path
    workers: int
    extra: tuple[str, ...] = ()
    done: dict[str, dict[str, Any]] = field(default_factory=dict)

    def run(self, reuse: bool) -> dict[str, dict[str, Any]]:
        if reuse:
            self.done = {j.key: info for j in self.jobs if (info := finished_run(j, self.out_dir)) is not None}
        pending = sorted((j for j in self.jobs if j.key not in self.done), key=_priority)
        total, t0 = len(pending), time.perf_counter()
        if reuse:
            print(f"  reusing {len(self.done)} finished runs from {self.out_dir}", file=sys.stderr, flush=True)
        with ProcessPoolExecutor(max_workers=max(1, self.workers), mp_context=get_context("spawn")) as pool:
            running: dict[Future, Job] = {}
            while pending or running:
                self._fill(pool, pending, running)
                finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
                for fut in finished:
                    job = running.pop(fut)
                    self.done[job.key] = fut.result()
                    n = total - len(pending) - len(running)
                    info = self.done[job.key]
                    print(f"  [{n}/{total}] {job.key}: {info['status']} in {info['wall_s']:.0f} s "
                          f"({(time.perf_counter() - t0) / 60:.1f} min elapsed)"
                          + (f" -- {info['error']}" if info.get("error") else ""), file=sys.stderr, flush=True)
        self._drop_used_checkpoints()
        return self.done

    def _drop_used_checkpoints(self) -> None:
        """Delete a twin checkpoint once every run that continues it has finished from it (~27 MB each);
        a run retrained later without it trains from step 1."""
        import shutil

        for job in self.jobs:
            if job.resume_step is None or not (path := self._resume_path(job)):
                continue
            users = [j for j in self.jobs if j.twin == job.twin and j.resume_step == job.resume_step]
            if all(self.done.get(j.key, {}).get("resumed_from") == job.resume_step for j in users):
                shutil.rmtree(path, ignore_errors=True)

    def _fill(self, pool: ProcessPoolExecutor, pending: list[Job], running: dict[Future, Job]) -> None:
        while pending and len(running) < max(1, self.workers):
            job = next((j for j in pending if self._ready(j)), None)
            if job is None:
                return
            pending.remove(job)
            running[pool.submit(run_job, job, str(self.out_dir), self.extra, self._resume_path(job))] = job

    def _ready(self, job: Job) -> bool:
        return job.resume_step is None or job.twin in self.done

    def _resume_path(self, job: Job) -> str | None:
        """The twin's checkpoint at ``resume_step``; None (train from step 1) when it is missing."""
        twin = self.done.get(job.twin, {})
        if job.resume_step is None or not twin.get("run_id"):
            return None
        path = self.out_dir / "checkpoints" / twin["run_id"] / f"step_{job.resume_step:07d}"
        return str(path) if (path / "trainer_state.pt").is_file() else None


def _priority(job: Job) -> tuple[int, int]:
    if not job.fault:
        return 0, -job.steps
    return (1 if job.resume_step is None else 2), -job.steps
