"""Query speed of the rlcockpit stores (SQLite and ClickHouse in-process through chDB, side by
side) on a big run, and the same questions asked of MLflow's sqlite store and TensorBoard event
files.

The fixture (built once, cached under ``--cache-dir`` keyed by its parameters and the store's
source, ``--rebuild`` to force): one run of 100k steps x 60 metrics and 1M samples (10 per step,
~256 B prompt, ~768 B response, reward + 3 components, a category, ~10 % flagged), written through
the store writer API (``write_batch``) in big batches.

Timed, median of ``--runs`` runs after one warm-up run (which is reported as ``first_ms``):
  curve      read_series(one metric, max_points=1000)                        target <= 50 ms
  page       query_samples(category + reward range + step range, 50 + total)  target <= 100 ms
  histogram  sample_histogram(field="reward", bins=50) over all samples        target <= 200 ms
  dashboard  the dashboard's first API calls: list_runs, summary, read_series of 8 curves
             (max_points=1000), latest, read_findings, read_phases(limit=50)  target <= 300 ms

``--backends sqlite,chdb`` (default both) builds the same run into each rlcockpit store; the
table reports each one's build rate (steps/s and samples/s through ``write_batch`` from one
process) beside its queries. The ClickHouse targets of issue 12 (1M steps, 10M samples, histogram
<= 100 ms) are asked with ``--steps 1000000``; the output says at which size it was measured.

Bulk build (``--bulk``; the default from ``--steps 1000000``, ``--no-bulk`` forces the writer):
the writer path builds ~1,000 steps/s, so 1M steps would take most of an hour per backend. In bulk
mode (benchmarks/_store_bulk.py) the run is created, heartbeated and finished through the store's
writer, and the data tables are filled by SQL inside the engine, ~100k steps a statement: chDB
``INSERT ... SELECT FROM numbers(...)`` through the store's own transport, SQLite ``INSERT ...
SELECT`` over recursive CTEs (at 20k steps they wrote the data in ~5.5 s, ``executemany`` fed
from numpy arrays in ~6.7-8.1 s, so the CTEs stayed). Same tables, sizes and distributions as
the writer path (curves: random walks with rare spikes; chDB draws from a hash of (metric, step),
so its rebuilds are identical, SQLite from its unseeded ``random()``); the metric rollups come
from the store's own rollup code (chDB: migration 3's SQL per chunk; SQLite:
``rollups.recompute``); every sample row stores its own ~1 KB of text; 1 sample in 1,000 carries
token / logprob arrays in the writer's blob format; chDB's tables are then merged to one part each
(``OPTIMIZE ... FINAL``), as a server's background merges leave a finished run — this process
exits right after the build, before chDB would merge the chunks' parts. Measured at 20k steps on the shared 2-core
machine: SQLite ~2,500 steps/s (writer path 1,190), chDB ~5,800 steps/s (writer path 990). A
bulk fixture is cached like a writer-built one under a key salted "bulk" (the two never mix), and
the output says "bulk-built (SQL inside the engine)" beside its build rate.

Competitors, asked the natural way for each:
  MLflow (sqlite backend)  curve: MlflowClient.get_metric_history (all points, no downsampling);
                           samples logged with mlflow.log_table (one table artifact); page and
                           histogram: mlflow.load_table + pandas filter / numpy histogram.
  TensorBoard event files  curve: EventAccumulator(...).Reload() + Scalars(tag); samples are text
                           summaries, which TensorBoard cannot filter or aggregate (n/a).
A competitor build that would take longer than ``--competitor-budget-s`` is scaled down; the
output says so, and load-everything timings are also extrapolated linearly to the full size.

Run: ``make bench-store`` or ``python benchmarks/store_queries.py [--quick] [--rebuild]``.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
    CATEGORIES,
    COMPONENTS,
    fmt,
    machine_info,
    module_available,
    package_version,
    print_json_last_line,
    stdout_to_stderr,
    summarize_ms,
    target,
    time_call,
)

CURVE_TARGET_MS = 50.0
DASHBOARD_TARGET_MS = 300.0
DASHBOARD_CURVES = 8
BACKENDS = {"sqlite": "rlcockpit", "chdb": "rlcockpit-chdb"}  # --backends name -> table label
PAGE_TARGET_MS = 100.0
HIST_TARGET_MS = 200.0
CH_HIST_TARGET_MS = 100.0  # issue 12: the ClickHouse backend's histogram of 10M rewards
SLOW_QUERY_MS = 2000.0
RUN_ID = "bench-store"
CURVE_METRIC = "reward/mean"
FLAGS = ("truncated", "rule_violation", "low_confidence")
BULK_FROM_STEPS = 1_000_000  # --bulk is the default from this size (the writer: ~1k steps/s)


@dataclass(frozen=True)
class Fixture:
    """Size of the benchmark run."""

    steps: int
    metrics: int
    samples_per_step: int
    prompt_bytes: int = 256
    response_bytes: int = 768

    @property
    def samples(self) -> int:
        return self.steps * self.samples_per_step

    def key(self, salt: str) -> str:
        text = f"{self.steps}-{self.metrics}-{self.samples_per_step}-{self.prompt_bytes}-" \
               f"{self.response_bytes}-{salt}"
        return hashlib.sha1(text.encode()).hexdigest()[:12]


def metric_names(n: int) -> list[str]:
    """The curve metric first, then filler names; the first 60 read like catalog names."""
    base = [CURVE_METRIC] + [f"bench/metric_{i:02d}" for i in range(1, max(n, 1))]
    return base[:n]


def query_window(fx: Fixture) -> dict[str, Any]:
    """The filtered page asked of every backend: one category, a reward band, 60 % of the steps."""
    return {"category": "math", "reward_min": 0.0, "reward_max": 0.5,
            "step_min": fx.steps // 5, "step_max": fx.steps * 4 // 5}


# --- synthetic data -----------------------------------------------------------------------------

class TextPool:
    """Pre-made texts picked by index: realistic row sizes without generating 2M strings."""

    def __init__(self, n_bytes: int, size: int = 2048, seed: int = 0) -> None:
        from _common import _text

        rng = np.random.default_rng(seed)
        self.texts = [_text(rng, n_bytes) for _ in range(size)]

    def __getitem__(self, i: int) -> str:
        return self.texts[i % len(self.texts)]


def curves(rng: np.random.Generator, steps: np.ndarray, n_metrics: int) -> np.ndarray:
    """Random walks with rare spikes, shape (len(steps), n_metrics)."""
    walk = np.cumsum(rng.normal(0, 0.01, (len(steps), n_metrics)), axis=0)
    spikes = rng.random((len(steps), n_metrics)) < 1e-4
    return walk + spikes * rng.normal(0, 5, (len(steps), n_metrics))


@dataclass
class SampleColumns:
    step: np.ndarray
    sample_id: np.ndarray
    category: list[str]
    reward: np.ndarray
    components: np.ndarray
    flags: list[tuple[str, ...]]


def sample_columns(rng: np.random.Generator, steps: np.ndarray, per_step: int) -> SampleColumns:
    n = len(steps) * per_step
    comps = rng.uniform(-1, 1, (n, len(COMPONENTS)))
    flag_draw = rng.integers(0, 10 * len(FLAGS), n)
    return SampleColumns(
        step=np.repeat(steps, per_step), sample_id=np.tile(np.arange(per_step), len(steps)),
        category=[CATEGORIES[i] for i in rng.integers(0, len(CATEGORIES), n)],
        reward=comps.mean(axis=1), components=comps,
        flags=[(FLAGS[f],) if f < len(FLAGS) else () for f in flag_draw])


# --- rlcockpit fixture --------------------------------------------------------------------------

def store_salt(backend: str = "sqlite") -> str:
    """Hash of the backend's store source: a changed schema or writer rebuilds its cached
    fixture (the ClickHouse modules do not invalidate the SQLite fixture, nor the reverse)."""
    import rlcockpit.store as store_pkg

    h = hashlib.sha1()
    for path in sorted(Path(store_pkg.__file__).parent.glob("*.py")):
        clickhouse = path.name.startswith("ch_") or path.name == "clickhouse.py"
        if clickhouse == (backend == "chdb") or path.name in ("codec.py", "base.py"):
            h.update(path.read_bytes())
    return h.hexdigest()[:10]


def store_uri(backend: str, path: Path) -> str:
    return f"chdb:///{path}" if backend == "chdb" else f"sqlite:///{path}"


def rlcockpit_batches(fx: Fixture, chunk_steps: int) -> Iterator[tuple[int, Any]]:
    """(steps in chunk, Batch) pairs covering the whole fixture."""
    from rlcockpit.records import Batch, MetricPoint, SampleRecord

    rng = np.random.default_rng(1)
    names = metric_names(fx.metrics)
    prompts, responses = TextPool(fx.prompt_bytes, seed=2), TextPool(fx.response_bytes, seed=3)
    level = np.zeros(fx.metrics)
    for start in range(0, fx.steps, chunk_steps):
        steps = np.arange(start, min(start + chunk_steps, fx.steps))
        values = curves(rng, steps, fx.metrics) + level
        level = values[-1]
        wall = 1.7e9 + steps.astype(float)
        metrics = [MetricPoint(int(s), name, float(v), float(w))
                   for s, row, w in zip(steps.tolist(), values.tolist(), wall.tolist(), strict=True)
                   for name, v in zip(names, row, strict=True)]
        c = sample_columns(rng, steps, fx.samples_per_step)
        samples = [
            SampleRecord(step=int(c.step[i]), sample_id=int(c.sample_id[i]), prompt=prompts[i],
                         response=responses[i * 7], reward=float(c.reward[i]),
                         prompt_id=f"p{i % 5000:04d}", group_id=int(c.sample_id[i]) // 4,
                         category=c.category[i],
                         components=dict(zip(COMPONENTS, c.components[i].tolist(), strict=True)),
                         flags=c.flags[i], length=200)
            for i in range(len(c.step))]
        yield len(steps), Batch(metrics=metrics, samples=samples)


def bench_run(fx: Fixture) -> Any:
    """The benchmark's run, as both build paths create it."""
    from rlcockpit.records import RunInfo

    return RunInfo(run_id=RUN_ID, project="bench", name="store-queries", started_at=1.7e9,
                   config={"fixture": fx.__dict__})


def build_rlcockpit(path: Path, fx: Fixture, progress: Callable[[int], None],
                    backend: str = "sqlite") -> None:
    from rlcockpit.store import open_store

    store = open_store(store_uri(backend, path))
    writer = store.writer()
    writer.create_run(bench_run(fx))
    for n_steps, batch in rlcockpit_batches(fx, chunk_steps=500):
        writer.write_batch(RUN_ID, batch)
        progress(n_steps)
    writer.set_run_status(RUN_ID, "finished", ended_at=1.7e9 + fx.steps)
    writer.close()
    close = getattr(store, "close", None)
    if close:
        close()


def build_rlcockpit_bulk(path: Path, fx: Fixture, progress: Callable[[int], None],
                         backend: str = "sqlite") -> None:
    """The same run filled by SQL inside the engine (``--bulk``, benchmarks/_store_bulk.py)."""
    import _store_bulk

    spec = _store_bulk.BulkSpec(
        run=bench_run(fx), steps=fx.steps, samples_per_step=fx.samples_per_step,
        metric_names=tuple(metric_names(fx.metrics)),
        prompts=tuple(TextPool(fx.prompt_bytes, seed=2).texts),
        responses=tuple(TextPool(fx.response_bytes, seed=3).texts),
        categories=CATEGORIES, components=COMPONENTS, flags=FLAGS)
    _store_bulk.build(backend, store_uri(backend, path), spec, progress,
                      finished_at=1.7e9 + fx.steps)


def fixture_path(cache: Path, fx: Fixture, backend: str, bulk: bool) -> Path:
    """Where a backend's fixture is cached: the kind (backend, bulk or not) names the file, the
    key hashes the size and the store's source (bulk: salted "bulk" and the bulk builder's
    source), so a writer-built and a bulk-built fixture never stand in for each other."""
    kind = "rlcockpit-chdb" if backend == "chdb" else "rlcockpit"
    salt = store_salt(backend)
    if bulk:
        kind += "-bulk"
        bulk_source = (Path(__file__).parent / "_store_bulk.py").read_bytes()
        salt += f"-bulk-{hashlib.sha1(bulk_source).hexdigest()[:10]}"
    return cache / f"{kind}_{fx.key(salt)}{'' if backend == 'chdb' else '.db'}"


def cached(path: Path, rebuild: bool, build: Callable[[Path], None]) -> tuple[Path, bool]:
    """Build ``path`` unless a complete build is there; a marker file tells complete from
    interrupted builds. Returns (path, reused)."""
    marker = path.with_name(path.name + ".complete")
    if marker.exists() and path.exists() and not rebuild:
        return path, True
    remove_stale(path)
    build(path)
    marker.write_text(time.strftime("%Y-%m-%dT%H:%M:%S"))
    return path, False


def remove_stale(path: Path) -> None:
    """Delete this fixture and older ones of the same kind (other keys: an older store source or
    other sizes) — each full fixture is GBs; the cache keeps only the latest of each kind."""
    kind = path.name.split("_")[0] + "_"
    for stale in path.parent.glob(kind + "*"):
        shutil.rmtree(stale) if stale.is_dir() else stale.unlink()


def with_progress(total: int, label: str, build: Callable[[Callable[[int], None]], None]) -> float:
    """Run ``build(advance)`` under a rich progress bar on stderr; returns seconds."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    t0 = time.perf_counter()
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
               TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True)) as bar:
        task = bar.add_task(label, total=total)
        build(lambda n: bar.advance(task, n))
    return time.perf_counter() - t0


# --- query timing -------------------------------------------------------------------------------

@dataclass
class QueryResult:
    backend: str
    query: str
    how: str
    status: str = "ok"
    median_ms: float = math.nan
    first_ms: float = math.nan
    rows: int | None = None
    scale: float = 1.0  # built size / full size (1.0 = full size)
    extrapolated_ms: float | None = None  # linear extrapolation to the full size when scaled
    target_ms: float | None = None
    note: str = ""

    def result(self) -> str:
        if self.target_ms is None:
            return ""
        return target(self.median_ms if self.status == "ok" else None, "<=", self.target_ms)


def timed(backend: str, query: str, how: str, fn: Callable[[], Any], runs: int,
          count: Callable[[Any], int], **kw: Any) -> QueryResult:
    res = QueryResult(backend, query, how, **kw)
    t0 = time.perf_counter()
    first = fn()
    res.first_ms = (time.perf_counter() - t0) * 1e3
    if res.first_ms > SLOW_QUERY_MS:  # seconds per call: a couple of runs give a stable median
        runs = min(runs, 2)
    durations, out = time_call(fn, runs=runs, warmup=0)
    res.median_ms = summarize_ms(durations)["median_ms"]
    res.rows = count(out if out is not None else first)
    if res.scale < 1.0:
        res.extrapolated_ms = res.median_ms / res.scale
    return res


def rlcockpit_queries(path: Path, fx: Fixture, runs: int, backend: str = "sqlite"
                      ) -> list[QueryResult]:
    from rlcockpit.store import open_store
    from rlcockpit.store.base import SampleQuery

    label = BACKENDS[backend]
    store = open_store(store_uri(backend, path))
    reader = store.reader()
    q = SampleQuery(limit=50, offset=0, **query_window(fx))
    out = [
        timed(label, "curve", "read_series(max_points=1000)",
              lambda: reader.read_series(RUN_ID, [CURVE_METRIC], max_points=1000), runs,
              lambda r: len(r[CURVE_METRIC].steps), target_ms=CURVE_TARGET_MS),
        timed(label, "page", "query_samples(category, reward, steps; 50 + total)",
              lambda: reader.query_samples(RUN_ID, q), runs, lambda p: p.total,
              target_ms=PAGE_TARGET_MS),
        timed(label, "histogram", "sample_histogram(reward, bins=50)",
              lambda: reader.sample_histogram(RUN_ID, field="reward", bins=50), runs,
              _hist_total, target_ms=CH_HIST_TARGET_MS if backend == "chdb" else HIST_TARGET_MS),
        timed(label, "dashboard", f"runs+summary+{DASHBOARD_CURVES} curves+latest+findings+phases",
              lambda: dashboard_calls(reader, fx), runs, lambda n: n,
              target_ms=DASHBOARD_TARGET_MS),
    ]
    reader.close()
    getattr(store, "close", lambda: None)()
    return out


def dashboard_calls(reader: Any, fx: Fixture) -> int:
    """What the dashboard asks when a run is opened (server/static/js: run, series with
    max_points=1000, latest, findings, phases), through the reader; returns points read."""
    names = metric_names(fx.metrics)[:DASHBOARD_CURVES]
    reader.list_runs()
    reader.summary(RUN_ID)
    series = reader.read_series(RUN_ID, names, max_points=1000)
    reader.latest(RUN_ID)
    reader.read_findings(RUN_ID)
    reader.read_phases(RUN_ID, limit=50)
    return sum(len(s.steps) for s in series.values())


def _hist_total(h: Any) -> int:
    counts = getattr(h, "counts", None)
    if counts is None and isinstance(h, dict):
        counts = h.get("counts")
    if counts is None and isinstance(h, tuple) and len(h) == 2:
        counts = h[1] if len(h[1]) < len(h[0]) else h[0]
    return int(sum(counts)) if counts is not None else -1


# --- MLflow -------------------------------------------------------------------------------------

@dataclass
class CompetitorPlan:
    """How big a competitor's fixture is, relative to the full one."""

    steps: int
    metrics: int
    samples: int
    metric_scale: float = 1.0
    sample_scale: float = 1.0
    notes: list[str] = field(default_factory=list)


def plan_count(full: int, unit: str, rows_per_unit: int, rows_per_s: float, budget_s: float,
               what: str, notes: list[str]) -> int:
    """How many of ``full`` units (metrics, steps) build within ``budget_s`` at the measured rate;
    a cut is noted with the exact count built."""
    estimate = full * rows_per_unit / max(rows_per_s, 1e-9)
    if estimate <= budget_s:
        return full
    n = max(1, int(full * budget_s / estimate))
    notes.append(f"{what}: full size would take ~{estimate:,.0f} s to build "
                 f"({rows_per_s:,.0f} rows/s); SCALED to {n:,} of {full:,} {unit}")
    return n


def mlflow_build(path: Path, fx: Fixture, budget_s: float) -> CompetitorPlan:
    """Metrics through MlflowClient.log_batch (1000 per call, its limit); the curve metric keeps
    every step, the other metrics are cut to fit the budget. Samples: one log_table artifact."""
    import mlflow
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    mlflow.set_tracking_uri(f"sqlite:///{path / 'mlflow.db'}")
    client = MlflowClient()
    exp = client.create_experiment("bench", artifact_location=(path / "art").as_uri())
    run_id = client.create_run(exp).info.run_id
    (path / "run_id").write_text(run_id)
    rng = np.random.default_rng(1)
    steps = np.arange(fx.steps)
    names = metric_names(fx.metrics)

    def log_metric(name: str, values: np.ndarray) -> None:
        ms = [Metric(name, float(v), 1_700_000_000_000 + int(s), int(s))
              for s, v in zip(steps.tolist(), values.tolist(), strict=True)]
        for i in range(0, len(ms), 1000):
            client.log_batch(run_id, metrics=ms[i:i + 1000])

    notes: list[str] = []
    t0 = time.perf_counter()
    log_metric(names[0], curves(rng, steps, 1)[:, 0])
    rate = fx.steps / (time.perf_counter() - t0)
    n_metrics = plan_count(fx.metrics, "metrics", fx.steps, rate, budget_s * 0.6,
                           "MLflow metrics", notes)
    for name in names[1:n_metrics]:
        log_metric(name, curves(rng, steps, 1)[:, 0])
    n_samples = mlflow_samples(client, run_id, fx, budget_s * 0.4, notes)
    client.set_terminated(run_id)
    return CompetitorPlan(fx.steps, n_metrics, n_samples, n_metrics / fx.metrics,
                          n_samples / fx.samples, notes)


def mlflow_samples(client: Any, run_id: str, fx: Fixture, budget_s: float,
                   notes: list[str]) -> int:
    """All samples as ONE table artifact (log_table appends to one file: the natural layout)."""
    import pandas as pd

    probe_steps = max(1, min(fx.steps, 2000))
    t0 = time.perf_counter()
    client.log_table(run_id, _sample_frame(pd, fx, 0, probe_steps), artifact_file="samples.json")
    rate = probe_steps * fx.samples_per_step / (time.perf_counter() - t0)
    n_steps = max(probe_steps, plan_count(fx.steps, "steps of samples", fx.samples_per_step, rate,
                                          budget_s, "MLflow samples (log_table)", notes))
    if n_steps > probe_steps:  # log_table appends to an existing table file
        client.log_table(run_id, _sample_frame(pd, fx, probe_steps, n_steps),
                         artifact_file="samples.json")
    return n_steps * fx.samples_per_step


def _sample_frame(pd: Any, fx: Fixture, step_start: int, step_end: int) -> Any:
    rng = np.random.default_rng(4 + step_start)
    c = sample_columns(rng, np.arange(step_start, step_end), fx.samples_per_step)
    prompts, responses = TextPool(fx.prompt_bytes, seed=2), TextPool(fx.response_bytes, seed=3)
    n = len(c.step)
    frame = {"step": c.step, "sample_id": c.sample_id, "category": c.category,
             "reward": c.reward, "flags": [",".join(f) for f in c.flags],
             "prompt": [prompts[i] for i in range(n)],
             "response": [responses[i * 7] for i in range(n)]}
    for j, comp in enumerate(COMPONENTS):
        frame[f"reward_{comp}"] = c.components[:, j]
    return pd.DataFrame(frame)


def mlflow_queries(path: Path, fx: Fixture, plan: CompetitorPlan, runs: int) -> list[QueryResult]:
    import mlflow
    from mlflow.tracking import MlflowClient

    mlflow.set_tracking_uri(f"sqlite:///{path / 'mlflow.db'}")
    client = MlflowClient()
    run_id = (path / "run_id").read_text().strip()
    experiment_id = client.get_run(run_id).info.experiment_id
    w = query_window(fx)

    def load() -> Any:
        return client.load_table(experiment_id, "samples.json", run_ids=[run_id])

    def page() -> tuple[int, Any]:
        df = load()
        sel = df[(df.category == w["category"]) & df.reward.between(w["reward_min"], w["reward_max"])
                 & df.step.between(w["step_min"], w["step_max"])]
        return len(sel), sel.sort_values(["step", "sample_id"]).head(50)

    def hist() -> Any:
        return np.histogram(load().reward.to_numpy(), bins=50)

    kw = {"scale": plan.sample_scale}
    return [
        timed("mlflow", "curve", "get_metric_history (all points)",
              lambda: client.get_metric_history(run_id, CURVE_METRIC), runs, len,
              note=f"{plan.metrics} of {fx.metrics} metrics built, curve metric full length"),
        timed("mlflow", "page", "load_table + pandas filter/sort/head(50)", page, runs,
              lambda r: r[0], **kw),
        timed("mlflow", "histogram", "load_table + np.histogram", hist, runs,
              lambda h: int(h[0].sum()), **kw),
    ]


# --- TensorBoard --------------------------------------------------------------------------------

def tensorboard_build(path: Path, fx: Fixture, budget_s: float) -> CompetitorPlan:
    """Scalars through SummaryWriter.add_scalar, one event per value (what training scripts do)."""
    writer_cls = _summary_writer()
    rng = np.random.default_rng(1)
    names = metric_names(fx.metrics)
    notes: list[str] = []
    steps = np.arange(fx.steps)
    values = curves(rng, steps, 1)[:, 0].tolist()
    w = writer_cls(log_dir=str(path))
    t0 = time.perf_counter()
    for s, v in zip(steps.tolist(), values, strict=True):
        w.add_scalar(names[0], v, s)
    rate = fx.steps / (time.perf_counter() - t0)
    n_metrics = plan_count(fx.metrics, "metrics", fx.steps, rate, budget_s,
                           "TensorBoard scalars", notes)
    for s, v in zip(steps.tolist(), values, strict=True):
        for name in names[1:n_metrics]:
            w.add_scalar(name, v, s)
    w.close()
    return CompetitorPlan(fx.steps, n_metrics, 0, n_metrics / fx.metrics, 0.0, notes)


def _summary_writer() -> Any:
    if module_available("torch"):
        from torch.utils.tensorboard import SummaryWriter
    else:
        from tensorboardX import SummaryWriter
    return SummaryWriter


def tensorboard_queries(path: Path, fx: Fixture, plan: CompetitorPlan, runs: int) -> list[QueryResult]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def curve() -> Any:
        acc = EventAccumulator(str(path))  # default size guidance: a 10k-point reservoir per tag
        acc.Reload()
        return acc.Scalars(CURVE_METRIC)

    na = "TensorBoard cannot filter or aggregate logged samples (text summaries)"
    return [
        timed("tensorboard", "curve", "EventAccumulator.Reload + Scalars(tag)", curve, runs, len,
              scale=plan.metric_scale, note=f"{plan.metrics} of {fx.metrics} metrics built"),
        QueryResult("tensorboard", "page", "-", status="n/a", note=na),
        QueryResult("tensorboard", "histogram", "-", status="n/a", note=na),
    ]


# --- driver -------------------------------------------------------------------------------------

COMPETITORS: dict[str, tuple[tuple[str, ...], Callable[..., CompetitorPlan],
                             Callable[..., list[QueryResult]]]] = {
    "mlflow": (("mlflow", "pandas"), mlflow_build, mlflow_queries),
    "tensorboard": (("tensorboard",), tensorboard_build, tensorboard_queries),
}


def run_competitor(name: str, fx: Fixture, args: argparse.Namespace, cache: Path,
                   notes: list[str]) -> list[QueryResult]:
    needs, build, queries = COMPETITORS[name]
    missing = [m for m in needs if not module_available(m)]
    if name == "tensorboard" and not (module_available("torch") or module_available("tensorboardX")):
        missing.append("torch or tensorboardX")
    if missing:
        return [QueryResult(name, q, "-", status=f"not installed: {', '.join(missing)}")
                for q in ("curve", "page", "histogram")]
    key = fx.key(f"{name}-{package_version(needs[0])}-{args.competitor_budget_s}")
    path = cache / f"{name}_{key}"
    plan_file = path / "plan.json"
    try:
        with stdout_to_stderr():
            plan = _build_competitor(path, plan_file, args.rebuild, lambda p: build(p, fx, args.competitor_budget_s))
            notes.extend(f"{name}: {n}" for n in plan.notes)
            return queries(path, fx, plan, args.runs)
    except Exception as exc:  # report and go on: one broken competitor must not hide the rest
        traceback.print_exc(file=sys.stderr)
        return [QueryResult(name, q, "-", status=f"error: {type(exc).__name__}: {exc}"[:160])
                for q in ("curve", "page", "histogram")]


def _build_competitor(path: Path, plan_file: Path, rebuild: bool,
                      build: Callable[[Path], CompetitorPlan]) -> CompetitorPlan:
    import json

    if (path / ".complete").exists() and plan_file.exists() and not rebuild:
        return CompetitorPlan(**json.loads(plan_file.read_text()))
    remove_stale(path)
    path.mkdir(parents=True)
    print(f"building {path.name} ...", file=sys.stderr, flush=True)
    plan = build(path)
    plan_file.write_text(json.dumps(plan.__dict__))
    (path / ".complete").write_text("ok")
    return plan


def run_rlcockpit(fx: Fixture, args: argparse.Namespace, cache: Path, backend: str = "sqlite"
                  ) -> tuple[list[QueryResult], dict[str, Any]]:
    info: dict[str, Any] = {"backend": backend}
    label = BACKENDS[backend]
    needs = "chdb" if backend == "chdb" else "rlcockpit.store.sqlite"
    if not module_available(needs):
        return [QueryResult(label, q, "-", status=f"not installed: {needs}")
                for q in ("curve", "page", "histogram", "dashboard")], info
    path = fixture_path(cache, fx, backend, args.bulk)
    builder = build_rlcockpit_bulk if args.bulk else build_rlcockpit
    info["build_mode"] = "bulk" if args.bulk else "writer"

    def build(p: Path) -> None:
        info["build_s"] = with_progress(fx.steps, f"building {p.name}",
                                        lambda advance: builder(p, fx, advance, backend))
        info["build_steps_per_s"] = fx.steps / info["build_s"]
        info["build_samples_per_s"] = fx.samples / info["build_s"]

    path, reused = cached(path, args.rebuild, build)
    size = (sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir()
            else path.stat().st_size)
    info.update(reused_cache=reused, path=str(path), size_mb=size / 2**20)
    return rlcockpit_queries(path, fx, args.runs, backend), info


def print_tables(results: list[QueryResult], fx: Fixture, infos: list[dict[str, Any]],
                 notes: list[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=160)
    t = Table(title=f"Store queries: {fx.steps:,} steps x {fx.metrics} metrics, "
                    f"{fx.samples:,} samples (median of runs, warm)")
    for col in ("backend", "query", "how", "status", "median ms", "first ms", "rows", "built",
                "extrap. full ms", "target", "result"):
        t.add_column(col, justify="right" if "ms" in col or col in ("rows", "built") else "left")
    for r in results:
        t.add_row(r.backend, r.query, r.how, r.status, fmt(r.median_ms, 1), fmt(r.first_ms, 1),
                  "-" if r.rows is None else f"{r.rows:,}",
                  "-" if r.status != "ok" else "full" if r.scale >= 1.0 else f"{r.scale:.1%}",
                  fmt(r.extrapolated_ms, 0), f"<= {r.target_ms:g} ms" if r.target_ms else "",
                  r.result())
    console.print(t)
    for r in results:
        if r.note and r.status == "ok":
            console.print(f"{r.backend}/{r.query}: {r.note}")
    for info in infos:
        if "path" not in info:
            continue
        console.print(f"{BACKENDS[info['backend']]} fixture: {info.get('path')} "
                      f"({fmt(info.get('size_mb'), 0)} MB, "
                      + ("reused from cache" if info.get("reused_cache") else
                         f"built in {fmt(info.get('build_s'), 1)} s = "
                         f"{fmt(info.get('build_steps_per_s'), 0)} steps/s = "
                         f"{fmt(info.get('build_samples_per_s'), 0)} samples/s "
                         f"(+ {fx.metrics} metrics a step) from one process, "
                         + build_how(info)) + ")")
    for n in notes:
        console.print(f"[bold yellow]SCALED[/] {n}" if "SCALED" in n else n)


def build_how(info: dict[str, Any]) -> str:
    """How a fixture was built, printed beside its build rate."""
    if info.get("build_mode") == "bulk":
        return "bulk-built (SQL inside the engine)"
    return "through write_batch"


def headline(results: list[QueryResult], fx: Fixture, infos: list[dict[str, Any]],
             notes: list[str], args: argparse.Namespace) -> dict[str, Any]:
    by = {(r.backend, r.query): r for r in results}

    def ms(backend: str, query: str, extrapolated: bool = False) -> float | None:
        r = by.get((backend, query))
        if r is None or r.status != "ok":
            return None
        return r.extrapolated_ms if extrapolated and r.extrapolated_ms else r.median_ms

    def verdict(backend: str, query: str, limit_ms: float) -> str:
        return target(ms(backend, query), "<=", limit_ms) if (backend, query) in by else "n/a"

    out: dict[str, Any] = {
        "curve_ms": ms("rlcockpit", "curve"),
        "page_ms": ms("rlcockpit", "page"),
        "histogram_ms": ms("rlcockpit", "histogram"),
        "targets": {
            "curve_le_50ms": verdict("rlcockpit", "curve", CURVE_TARGET_MS),
            "page_le_100ms": verdict("rlcockpit", "page", PAGE_TARGET_MS),
            "histogram_le_200ms": verdict("rlcockpit", "histogram", HIST_TARGET_MS),
        },
        "dashboard_ms": ms("rlcockpit", "dashboard"),
        "chdb": {q: ms("rlcockpit-chdb", q) for q in ("curve", "page", "histogram", "dashboard")},
        # issue 12's ClickHouse targets (histogram of the rewards <= 100 ms there)
        "chdb_targets": {
            "curve_le_50ms": verdict("rlcockpit-chdb", "curve", CURVE_TARGET_MS),
            "page_le_100ms": verdict("rlcockpit-chdb", "page", PAGE_TARGET_MS),
            "histogram_le_100ms": verdict("rlcockpit-chdb", "histogram", CH_HIST_TARGET_MS),
            "dashboard_le_300ms": verdict("rlcockpit-chdb", "dashboard", DASHBOARD_TARGET_MS),
        },
        "mlflow_curve_ms": ms("mlflow", "curve"),
        "mlflow_page_ms": ms("mlflow", "page"),
        "mlflow_page_full_ms_extrapolated": ms("mlflow", "page", True),
        "mlflow_histogram_ms": ms("mlflow", "histogram"),
        "mlflow_histogram_full_ms_extrapolated": ms("mlflow", "histogram", True),
        "tensorboard_curve_ms": ms("tensorboard", "curve"),
        "tensorboard_curve_full_ms_extrapolated": ms("tensorboard", "curve", True),
        "status": {f"{r.backend}/{r.query}": r.status for r in results},
        "scaled": [n for n in notes if "SCALED" in n],
        "machine": machine_info(),
        "fixture": {"steps": fx.steps, "metrics": fx.metrics, "samples": fx.samples,
                    "quick": args.quick, "runs": args.runs},
    }
    for info in infos:
        prefix = "store" if info.get("backend") == "sqlite" else f"{info.get('backend')}_store"
        out.update({f"{prefix}_{k}": v for k, v in info.items()
                    if k in ("size_mb", "build_s", "build_samples_per_s", "reused_cache",
                             "build_mode")})
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small store, tiny competitor budget")
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--metrics", type=int, default=60)
    p.add_argument("--samples-per-step", type=int, default=10, help="10 x 100k steps = 1M samples")
    p.add_argument("--runs", type=int, default=7, help="timed runs per query (median)")
    p.add_argument("--competitors", default="mlflow,tensorboard", help="comma list, or 'none'")
    p.add_argument("--backends", default="sqlite,chdb",
                   help="rlcockpit stores to build and query: sqlite, chdb (comma list)")
    p.add_argument("--competitor-budget-s", type=float, default=150.0,
                   help="max build time per competitor; larger builds are scaled down")
    p.add_argument("--cache-dir", default=None,
                   help="where fixtures are cached (default: <tmp>/rlcockpit-bench)")
    p.add_argument("--rebuild", action="store_true", help="rebuild cached fixtures")
    p.add_argument("--bulk", action=argparse.BooleanOptionalAction, default=None,
                   help="fill the rlcockpit fixtures with SQL inside the engine instead of "
                        f"write_batch (default: on from --steps {BULK_FROM_STEPS:_})")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.samples_per_step, args.runs = 2000, 10, 2
        args.competitor_budget_s = min(args.competitor_budget_s, 1.0)
    if args.bulk is None:
        args.bulk = args.steps >= BULK_FROM_STEPS
    for name in ("steps", "metrics", "samples_per_step", "runs"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    bad = {b for b in args.backends.split(",") if b} - set(BACKENDS)
    if bad or not args.backends.split(",")[0]:
        p.error(f"unknown backend(s) {sorted(bad)}; choose from {', '.join(BACKENDS)}")
    unknown = {c for c in args.competitors.split(",") if c and c != "none"} - set(COMPETITORS)
    if unknown:
        p.error(f"unknown competitor(s) {sorted(unknown)}; choose from {', '.join(COMPETITORS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    fx = Fixture(args.steps, args.metrics, args.samples_per_step)
    # --quick builds into a throw-away directory; full runs cache (minutes to build).
    tmp = Path(tempfile.mkdtemp(prefix="rlcockpit-bench-quick-")) if args.quick else None
    cache = tmp or Path(args.cache_dir or Path(tempfile.gettempdir()) / "rlcockpit-bench")
    cache.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    results: list[QueryResult] = []
    infos: list[dict[str, Any]] = []
    try:
        for backend in [b for b in args.backends.split(",") if b]:
            found, info = run_rlcockpit(fx, args, cache, backend)
            results += found
            infos.append(info)
        for name in [c for c in args.competitors.split(",") if c and c != "none"]:
            results += run_competitor(name, fx, args, cache, notes)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    print_tables(results, fx, infos, notes)
    print_json_last_line(headline(results, fx, infos, notes, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
