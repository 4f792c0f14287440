"""How fast the cockpit's dashboard gets its data (part 1: the API side).

The fixture (built once, cached under ``benchmarks/.cache/`` keyed by its size and the store's
source; ``--rebuild`` to force): one run of 100k steps x 90 metrics (the catalog's names, then
per-category eval accuracies, per-layer gradient norms and per-rank norms), 1M samples (10 a
step, ~256 B prompt, ~768 B response), reward and length histograms every 10 steps, findings and
the phases of the last steps; and a second run of the same 100k steps x 90 metrics (metrics
only), so a panel "of all runs" overlays two long runs — written through the store writer
(``write_batch``) in big batches.

Timed: the calls the dashboard makes when it opens a run (static/js: app.js, header.js,
views/dashboard.js) against a real ``rlcockpit serve`` (uvicorn on loopback, its own
process): runs, run summary, one series call for the 3 chart rows (max_points=1000), latest,
the two histograms over time (max_points=200), the latest-samples page, findings, current phase.
``total_ms`` is the sum of one sequential round (median of ``--runs`` rounds after a warm-up);
``parallel_ms`` is the same calls sent 6 at a time, as a browser does; ``first_round_ms`` is the
warm-up round (cold caches, the run's sample count not yet known). Target: total <= 300 ms.

Part 2 (the UI helper's, ``_ui_browser.py``): from ``run.log(step)`` on a live run to that step
drawn on the dashboard's reward chart in Chromium; target <= 2 s (``--live-trials``, 0 skips).

Part 3 (``_ui_panels.py``, issue 16): the dashboard in Chromium over this fixture — the first
chart drawn after a page load (target <= 1 s) and a panel of one metric over all runs (target
<= 300 ms each); ``--browser-loads 0`` skips it. Those loads reuse one browser context, so the
scripts come from its cache.

Part 4 (``_ui_browser.py``, issue 29): **cold** loads, each in a fresh browser context (no cache,
nothing stored), from the navigation start to the reward chart's first points (target <= 1 s), with
the bytes on the wire, the requests, the waves of scripts (how many import hops deep the last
module was found) and which responses came gzip-encoded. ``--baseline REF`` also serves the same
store from the code of commit REF (``git archive`` of its ``src/``, its own process) and takes the
loads of both servers in turn, so "before" and "after" see the same machine load.

Run: ``python benchmarks/ui.py [--quick] [--rebuild]``; the last stdout line is JSON.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import hashlib
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from _common import CATEGORIES, fmt, free_port, machine_info, print_json_last_line
from _ui_browser import cold_first_chart, live_step_to_chart
from _ui_panels import time_dashboard
from store_queries import TextPool, cached, store_salt

TARGET_MS = 300.0
RUN_ID = "bench-ui"
RUN_B = "bench-ui-b"  # the second run: metrics only
N_METRICS = 90
CACHE = Path(__file__).resolve().parent / ".cache"
HIST_EVERY = 10
HIST_BINS = 64
DASHBOARD_NAMES = (
    "reward/mean", "kl/mean", "kl/target", "policy/entropy", "policy/loss", "value/loss",
    "response/length_mean", "response/length_max", "policy/clip_frac", "value/clip_frac",
    "response/truncated_frac", "response/eos_frac", "grad/norm/actor", "grad/norm/critic")
SERIES_QUERY = ",".join(DASHBOARD_NAMES) + ",reward/category/*"


def metric_names(n: int = N_METRICS) -> list[str]:
    """The dashboard's names, the per-category rewards, the other catalog names, then templated
    catalog names (eval accuracy per category, gradient norm per layer and per rank) up to ``n``."""
    from rlcockpit.metrics.catalog import CATALOG

    names = list(DASHBOARD_NAMES) + [f"reward/category/{c}/mean" for c in CATEGORIES]
    names += [n for n in CATALOG if "<" not in n and "hist" not in n and n not in names]
    names += [f"eval/accuracy/{c}" for c in CATEGORIES]
    names += [f"grad/norm/layer/block_{i}" for i in range(24)] + [f"dist/grad_norm/rank/{r}" for r in range(8)]
    return names[:n]


# --- fixture ------------------------------------------------------------------------------------


def metric_batches(steps: int, chunk: int = 2000, seed: int = 11) -> Iterator[tuple[int, Any]]:
    """The second run's batches: the same names as random walks, nothing else."""
    from rlcockpit.records import Batch, MetricPoint

    rng = np.random.default_rng(seed)
    names = metric_names()
    level = np.zeros(len(names))
    for start in range(0, steps, chunk):
        block = np.arange(start, min(start + chunk, steps))
        walk = np.cumsum(rng.normal(0, 0.01, (len(block), len(names))), axis=0) + level
        level = walk[-1]
        metrics = [MetricPoint(int(s), n, float(v), 1.7e9 + float(s))
                   for s, row in zip(block.tolist(), walk.tolist(), strict=True)
                   for n, v in zip(names, row, strict=True)]
        yield len(block), Batch(metrics=metrics)


def batches(steps: int, per_step: int, chunk: int = 500) -> Iterator[tuple[int, Any]]:
    """(steps in chunk, Batch) pairs: metrics as random walks with rare spikes, histograms every
    HIST_EVERY steps, samples, a finding every 5000 steps, phases for the last 1000 steps."""
    from rlcockpit.records import (
        Batch,
        FindingRecord,
        HistogramRecord,
        MetricPoint,
        PhaseRecord,
        SampleRecord,
    )

    rng = np.random.default_rng(7)
    names = metric_names()
    prompts, responses = TextPool(256, seed=2), TextPool(768, seed=3)
    level = np.zeros(len(names))
    edges = tuple(np.linspace(-1, 1, HIST_BINS + 1).tolist())
    for start in range(0, steps, chunk):
        block = np.arange(start, min(start + chunk, steps))
        walk = np.cumsum(rng.normal(0, 0.01, (len(block), len(names))), axis=0) + level
        level = walk[-1]
        wall = 1.7e9 + block.astype(float)
        metrics = [MetricPoint(int(s), n, float(v), float(w))
                   for s, row, w in zip(block.tolist(), walk.tolist(), wall.tolist(), strict=True)
                   for n, v in zip(names, row, strict=True)]
        hists = [HistogramRecord(int(s), n, edges, tuple(rng.integers(0, 50, HIST_BINS).tolist()),
                                 float(s) + 1.7e9)
                 for s in block if s % HIST_EVERY == 0 for n in ("reward/hist",
                                                                 "response/length/hist")]
        rewards = rng.uniform(-1, 1, len(block) * per_step)
        samples = [SampleRecord(step=int(s), sample_id=i, prompt=prompts[k], response=responses[k * 7],
                                reward=float(rewards[k]), category=CATEGORIES[k % len(CATEGORIES)],
                                prompt_id=f"p{k % 5000}", length=200)
                   for j, s in enumerate(block) for i in range(per_step)
                   for k in (j * per_step + i,)]
        findings = [FindingRecord(int(s), "kl_tiers", "yellow", "KL above 1.5x target",
                                  incident=f"inc-{s}") for s in block if s % 5000 == 4999]
        phases = [PhaseRecord(int(s), p, st, wall_time=float(s) + 1.7e9) for s in block
                  if s >= steps - 1000 for p in ("ROLLOUT", "SCORE", "UPDATE")
                  for st in ("started", "finished")]
        yield len(block), Batch(metrics=metrics, histograms=hists, samples=samples,
                                findings=findings, phases=phases)


def build_store(path: Path, steps: int = 100_000, per_step: int = 10,
                progress: Callable[[int], None] | None = None) -> None:
    """Write the fixture run into a new store file at ``path``."""
    from rlcockpit.records import RunInfo
    from rlcockpit.store import open_store

    writer = open_store(f"sqlite:///{path}").writer()
    writer.create_run(RunInfo(run_id=RUN_ID, project="bench", name="ui", started_at=1.7e9))
    for n, batch in batches(steps, per_step):
        writer.write_batch(RUN_ID, batch)
        if progress:
            progress(n)
    writer.set_run_status(RUN_ID, "finished", ended_at=1.7e9 + steps)
    writer.create_run(RunInfo(run_id=RUN_B, project="bench", name="ui-b", started_at=1.7e9 + 1))
    for _n, batch in metric_batches(steps):
        writer.write_batch(RUN_B, batch)
    writer.set_run_status(RUN_B, "finished", ended_at=1.7e9 + steps)
    writer.close()


# --- timing -------------------------------------------------------------------------------------


def initial_calls(run_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, path, params) of what the dashboard asks when it opens a run."""
    run = f"/api/runs/{run_id}"
    return [
        ("runs", "/api/runs", {}),
        ("run", run, {}),
        ("series", f"{run}/series", {"names": SERIES_QUERY, "max_points": 1000}),
        ("latest", f"{run}/latest", {}),
        ("reward_hist", f"{run}/histograms", {"name": "reward/hist", "max_points": 200}),
        ("length_hist", f"{run}/histograms", {"name": "response/length/hist", "max_points": 200}),
        ("samples", f"{run}/samples", {"order": "step_desc", "limit": 6}),
        ("findings", f"{run}/findings", {"severities": "orange,red,black"}),
        ("phases", f"{run}/phases", {"limit": 1}),
    ]


def time_initial_calls(base_url: str, run_id: str, runs: int = 7,
                       cpu_s: Callable[[], float | None] | None = None) -> dict[str, Any]:
    """Median ms per call, of one sequential round (``total_ms``) and of the calls sent 6 at a
    time (``parallel_ms``), after one warm-up round; bytes per call. With ``cpu_s`` (the
    server's CPU seconds so far), ``server_cpu_ms`` is the server's CPU time per sequential
    round — a number that, unlike wall time, hardly moves with the machine's load."""
    import httpx

    calls = initial_calls(run_id)
    per: dict[str, list[float]] = {label: [] for label, _, _ in calls}
    sizes: dict[str, int] = {}
    totals, parallel, cpu = [], [], []
    with httpx.Client(base_url=base_url, timeout=60) as client:
        def one(label: str, path: str, params: dict) -> float:
            t0 = time.perf_counter()
            r = client.get(path, params=params)
            r.raise_for_status()
            sizes[label] = len(r.content)
            return time.perf_counter() - t0

        for i in range(runs + 1):
            c0 = cpu_s() if cpu_s else None
            t0 = time.perf_counter()
            took = {label: one(label, p, q) for label, p, q in calls}
            total = time.perf_counter() - t0
            c1 = cpu_s() if cpu_s else None
            with concurrent.futures.ThreadPoolExecutor(6) as pool:
                t1 = time.perf_counter()
                list(pool.map(lambda c: one(*c), calls))
                par = time.perf_counter() - t1
            if i == 0:  # warm-up: page cache, connections, the run's sample count
                first = total
                continue
            totals.append(total)
            if c0 is not None and c1 is not None:
                cpu.append(c1 - c0)
            parallel.append(par)
            for label, s in took.items():
                per[label].append(s)
    return {"total_ms": statistics.median(totals) * 1e3, "first_round_ms": first * 1e3,
            "parallel_ms": statistics.median(parallel) * 1e3,
            "server_cpu_ms": statistics.median(cpu) * 1e3 if cpu else None,
            "calls": {k: {"median_ms": statistics.median(v) * 1e3, "bytes": sizes[k]}
                      for k, v in per.items()}}


class Server:
    """``rlcockpit serve`` on a free loopback port, in its own process (so the client does not
    share its interpreter lock); ``cpu_s()`` reads the server's CPU seconds from /proc."""

    def __init__(self, store_path: Path, src: Path | None = None) -> None:
        self.src = src  # another tree's src/ (a baseline commit), else the installed rlcockpit
        self.port = free_port()
        self.cmd = [sys.executable, "-m", "rlcockpit", "serve", "--store",
                    f"sqlite:///{store_path}", "--port", str(self.port)]
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> str:
        import httpx

        env = None if self.src is None else {**os.environ, "PYTHONPATH": str(self.src)}
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, env=env)
        url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{url}/api/health", timeout=2).raise_for_status()
                return url
            except httpx.HTTPError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the server did not start: {' '.join(self.cmd)}") from None
                time.sleep(0.1)

    def cpu_s(self) -> float | None:
        """User + system CPU seconds the server process used so far (Linux), else None."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, AttributeError):
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def __exit__(self, *exc: Any) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)


# --- main ---------------------------------------------------------------------------------------


def fixture_path(steps: int, per_step: int, cache: Path) -> Path:
    key = hashlib.sha1(f"{steps}-{per_step}-{store_salt()}-{metric_names()}-{RUN_B}".encode()).hexdigest()
    return cache / f"ui_{key[:12]}.db"


def build_cached(steps: int, per_step: int, cache: Path, rebuild: bool) -> tuple[Path, dict]:
    cache.mkdir(parents=True, exist_ok=True)
    info: dict[str, Any] = {}

    def build(p: Path) -> None:
        t0 = time.perf_counter()
        done = [0]

        def progress(n: int) -> None:
            done[0] += n
            if done[0] % 10_000 < n:
                print(f"  built {done[0]}/{steps} steps", file=sys.stderr, flush=True)

        build_store(p, steps, per_step, progress)
        info["build_s"] = round(time.perf_counter() - t0, 1)

    path, reused = cached(fixture_path(steps, per_step, cache), rebuild, build)
    info.update(reused_cache=reused, size_mb=round(path.stat().st_size / 2**20, 1))
    return path, info


@contextlib.contextmanager
def baseline_src(ref: str) -> Iterator[Path]:
    """``src/`` of commit ``ref`` of this repository, unpacked into a temporary directory."""
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(root), "archive", ref, "src"], check=True,
                                 capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        yield Path(tmp) / "src"


def cold_loads(path: Path, base: str, loads: int, baseline: str | None) -> dict[str, Any]:
    """Part 4: cold loads of this tree's server at ``base`` and, with ``baseline``, of that commit's."""
    if not baseline or loads <= 0:
        return cold_first_chart({"this tree": base}, RUN_ID, loads)
    with baseline_src(baseline) as src, Server(path, src) as old:
        out = cold_first_chart({"this tree": base, f"baseline {baseline}": old}, RUN_ID, loads)
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--samples-per-step", type=int, default=10)
    p.add_argument("--runs", type=int, default=7, help="timed rounds (median)")
    p.add_argument("--quick", action="store_true", help="2000 steps, 2 rounds")
    p.add_argument("--cache-dir", default=str(CACHE))
    p.add_argument("--rebuild", action="store_true")
    p.add_argument("--live-trials", type=int, default=15,
                   help="part 2: steps timed from run.log to the dashboard chart (0 skips)")
    p.add_argument("--browser-loads", type=int, default=5,
                   help="part 3: dashboard page loads timed to the first chart (0 skips part 3)")
    p.add_argument("--panels", type=int, default=15, help="part 3: one-metric panels of all runs timed")
    p.add_argument("--cold-loads", type=int, default=7,
                   help="part 4: cold loads (fresh browser context) timed to the first chart (0 skips)")
    p.add_argument("--baseline", metavar="REF", default=None,
                   help="part 4: also time the code of this commit on the same store, loads taken in turn")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.runs, args.live_trials = 2000, 2, min(args.live_trials, 3)
        args.browser_loads, args.panels = min(args.browser_loads, 2), min(args.panels, 4)
        args.cold_loads = min(args.cold_loads, 2)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    path, info = build_cached(args.steps, args.samples_per_step, Path(args.cache_dir),
                              args.rebuild)
    server = Server(path)
    with server as base:
        result = time_initial_calls(base, RUN_ID, args.runs, server.cpu_s)
        dashboard = (time_dashboard(base, RUN_ID, args.browser_loads, args.panels) if args.browser_loads
                     else {"skipped": "--browser-loads 0"})
        cold = cold_loads(path, base, args.cold_loads, args.baseline)
    print(f"dashboard initial API calls, {args.steps} steps x {len(metric_names())} metrics, "
          f"{args.steps * args.samples_per_step} samples ({info['size_mb']} MB)")
    for label, c in result["calls"].items():
        print(f"  {label:12s} {fmt(c['median_ms'], 1):>8s} ms  {c['bytes']:>9d} B")
    print(f"  {'total':12s} {fmt(result['total_ms'], 1):>8s} ms  (target <= {TARGET_MS:.0f} ms); "
          f"6 in parallel: {fmt(result['parallel_ms'], 1)} ms; first (cold) round: "
          f"{fmt(result['first_round_ms'], 1)} ms; server CPU per round: "
          f"{fmt(result['server_cpu_ms'], 1)} ms")
    if "skipped" not in dashboard:
        print(f"dashboard in Chromium: first chart {fmt(dashboard['first_chart_ms'], 1)} ms (target <= "
              f"{dashboard['first_chart_target_ms']:.0f} ms); panel of one metric over {dashboard['panel_runs']} runs: "
              f"p50 {fmt(dashboard['panel_p50_ms'], 1)} ms, max {fmt(dashboard['panel_max_ms'], 1)} ms (target <= "
              f"{dashboard['panel_target_ms']:.0f} ms); section '{dashboard['section']}' ({dashboard['section_charts']} "
              f"charts) {fmt(dashboard['section_ms'], 1)} ms")
    live = live_step_to_chart(args.live_trials)  # part 2 (_ui_browser.py)
    print_json_last_line({
        "benchmark": "ui_api", "steps": args.steps, "metrics": len(metric_names()),
        "samples": args.steps * args.samples_per_step, "total_ms": round(result["total_ms"], 1),
        "parallel_ms": round(result["parallel_ms"], 1),
        "first_round_ms": round(result["first_round_ms"], 1),
        "server_cpu_ms": None if result["server_cpu_ms"] is None
        else round(result["server_cpu_ms"], 1), "target_ms": TARGET_MS,
        "meets_target": result["total_ms"] <= TARGET_MS,
        "calls_ms": {k: round(c["median_ms"], 1) for k, c in result["calls"].items()},
        "live_step_to_chart": live, "dashboard": dashboard, "cold_first_chart": cold, **info, **machine_info()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
