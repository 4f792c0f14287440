"""Detection benchmark: is each injected fault caught by the right detector, how soon after it shows,
and do long healthy runs stay quiet? Measured on disjoint seed splits against no-fault twins.

- **Splits**: ``--split calibration`` (seeds 0-4), ``calibration-b`` (100-104), ``calibration-c``
  (200-204), ``calibration-d`` (300-304), ``calibration-e`` (400-404), ``calibration-f`` (500-504) and
  ``calibration-g`` (600-604) for tuning (b to g are the spent first to sixth evaluations), or
  ``evaluation`` (seeds 800-804). The
  evaluation split refuses to run while src/rlcockpit/diagnostics/ has uncommitted changes and
  records the commit of the detector code ("thresholds frozen at commit ...").
- **Runs**: per seed, one healthy run of each config (PPO / GRPO x fixed / adaptive KL, 200 steps,
  samples logged) -- the *twin* of every fault run of that config and seed -- and every built-in
  fault in one variant (config, onset 0 / early / late, step or ramp, mild or strong; deterministic
  per fault and seed, benchmarks/_detection_grid.py). A fault run with onset >= 4 continues its
  twin's checkpoint at step onset - 2 (resume is exact); its stream is the twin's prefix + its own
  steps.
- **Scoring**, every stream replayed offline through a fresh engine (what ``rlcockpit doctor`` does;
  for the runs trained from step 1 the replay is checked against the live findings): the first step
  where the fault run's metrics leave the twin's (hyper-parameter, time, perf and sys metrics
  ignored; relative tolerance 1e-6); a detection counts when an expected detector raised a finding
  (any tier) from the first faulted step on and the twin raised no finding of that detector and key
  within 5 steps of it (``TWIN_COINCIDENCE``; before 2026-12-07: anywhere in the scored steps); latency is counted from the first divergence. A ramp is caught "in time" when the
  detection comes no later than the step where the metric the fault drives (``Fault.drives``) has
  moved away from the twin's by 2x the twin's spread (its standard deviation over the same steps).
- **Peers** (benchmarks/_peer_runner.py inside .benchvenv-peers) on the same streams exported to
  JSONL: an alert from the first divergence on whose type the peer did not raise on the twin within
  5 steps of it (the same rule).

Prints markdown tables, writes them into docs/detection.md between markers (``--docs``), and as the
LAST stdout line one JSON object with the headline numbers.

    nice -n 10 .venv/bin/python benchmarks/detection.py --split calibration --workers 2 --out bench-cal
    .venv/bin/python benchmarks/detection.py --quick     # 3 short fault runs + 1 short twin, ~2 min
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlcockpit.diagnostics.base import NEWS  # the statuses that tell a person something new

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _detection_grid import (  # noqa: E402
    BASELINE_SEED,
    CONFIGS,
    HEALTHY_STEPS,
    QUICK_OVERRIDES,
    SPLITS,
    TUNING_SPLITS,
    Job,
    Scheduler,
    baseline_key,
    make_fault,
    make_jobs,
)

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "detection.md"
DETECTORS_DIR = "src/rlcockpit/diagnostics"
BEGIN, END = "<!-- detection-table:begin -->", "<!-- detection-table:end -->"
SEVERITIES = ("yellow", "orange", "red", "black")
ORANGE_PLUS = ("orange", "red", "black")
PEERS = ("rlwatch", "rlprobe", "rldoctor")  # the names to report when the peer runner gives none
IGNORED_PREFIXES = ("time/", "perf/", "sys/", "optim/lr/")
RTOL, ATOL = 1e-6, 1e-9
BASELINE = "baseline"  # the detector comparing a run with the baseline seed's healthy run
TARGETS = {"step_caught_pct": 90.0, "median_latency": 5.0, "orange_per_1000": 1.0}

StepRow = tuple[int, dict[str, float], list[Any], float]  # (step, metrics, samples, wall time)


@dataclass
class Outcome:
    job: Job
    info: dict[str, Any]
    findings: list[dict[str, Any]] = field(default_factory=list)  # offline replay of the (stitched) stream
    same_as_live: bool | None = None  # None: stitched stream, no whole live record to compare with
    metrics: dict[int, dict[str, float]] = field(default_factory=dict)
    steps: int = 0
    config: Any = None  # the run's DiagnosticsConfig

    @property
    def ok(self) -> bool:
        return bool(self.info.get("run_id")) and self.info.get("status") in ("finished", "stopped")


# --------------------------------------------------------------------------- the split rule


def detector_commit(split: str) -> tuple[str, bool]:
    """(commit of the detector code, dirty?); the evaluation split refuses a dirty tree."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()

    dirty = bool(git("status", "--porcelain", "--", DETECTORS_DIR))
    commit = git("log", "-1", "--format=%H", "--", DETECTORS_DIR) or "unknown"
    if split == "evaluation" and dirty:
        raise SystemExit(f"--split evaluation refuses to run: {DETECTORS_DIR}/ has uncommitted changes "
                         "(git status). Commit the detector thresholds first -- the evaluation seeds are never "
                         "used to tune -- then run again.")
    return commit, dirty


# --------------------------------------------------------------------------- streams and replay


def read_stream(info: dict[str, Any], with_samples: bool = True) -> list[StepRow]:
    from rlcockpit.diagnostics.offline import iter_steps
    from rlcockpit.store import open_store

    reader = open_store(info["store"], create=False).reader()
    try:
        return list(iter_steps(reader, info["run_id"], with_samples=with_samples))
    finally:
        reader.close()


def stitched(own: list[StepRow], twin: list[StepRow] | None, resumed_from: int | None) -> list[StepRow]:
    """A resumed run's stream: the twin's steps up to the checkpoint, then its own."""
    if resumed_from is None or twin is None:
        return own
    return [r for r in twin if r[0] <= resumed_from] + [r for r in own if r[0] > resumed_from]


def run_diagnostics_config(info: dict[str, Any]) -> Any:
    from rlcockpit.config import from_dict
    from rlcockpit.diagnostics.config import DiagnosticsConfig
    from rlcockpit.store import open_store

    reader = open_store(info["store"], create=False).reader()
    try:
        run = reader.get_run(info["run_id"])
    finally:
        reader.close()
    return from_dict(DiagnosticsConfig, (run.config or {}).get("diagnostics", {}), prefix="diagnostics.")


def replay(stream: Sequence[StepRow], config: Any, *, engine: Any = None, snapshot_at: Iterable[int] = (),
           baseline: Any = None) -> tuple[list[dict[str, Any]], dict[int, Any]]:
    """The stream through a fresh engine (or ``engine``) in step order, as ``diagnose_run`` does; a deep
    copy of the engine after each step of ``snapshot_at`` (a fault run resumed there continues it).
    ``baseline``: the healthy run of the config's baseline seed, for the `baseline` detector."""
    from rlcockpit.diagnostics.engine import Engine

    engine = engine if engine is not None else Engine.from_config(config, incident_prefix="bench",
                                                                   baseline=baseline)
    wanted, found, snapshots = set(snapshot_at), [], {}
    for step, metrics, samples, wall in stream:
        found.extend(engine.observe(step, metrics, samples, wall))
        if step in wanted:
            snapshots[step] = copy.deepcopy(engine)
    return [_finding_row(f) for f in found], snapshots


def live_findings(info: dict[str, Any]) -> list[dict[str, Any]]:
    from rlcockpit.store import open_store

    reader = open_store(info["store"], create=False).reader()
    try:
        return [_finding_row(f) for f in reader.read_findings(info["run_id"])]
    finally:
        reader.close()


def _finding_row(f: Any) -> dict[str, Any]:
    ev = f.evidence or {}
    return {"step": f.step, "detector": f.detector, "severity": f.severity, "status": f.status,
            "family": ev.get("family", ""), "key": str(ev.get("key", "")), "message": f.message}


def _sig(rows: Iterable[dict[str, Any]]) -> list[tuple]:
    return [(f["step"], f["detector"], f["severity"], f["status"]) for f in rows]


def build_outcomes(jobs: list[Job], infos: dict[str, dict[str, Any]]) -> list[Outcome]:
    """Replay each twin once, keeping a copy of its engine at every step a fault run was resumed from;
    a resumed fault run is the twin's findings up to there + its own steps through that copy (the same
    as replaying the stitched stream from step 1, without replaying the prefix again)."""
    outcomes: dict[str, Outcome] = {}
    baselines = load_baselines(jobs, infos)
    for twin in (j for j in jobs if not j.fault and j.role == "twin"):
        mine = [j for j in jobs if j.twin == twin.key]
        resumed = {infos.get(j.key, {}).get("resumed_from") for j in mine} - {None}
        tout, snapshots = score_twin(twin, infos.get(twin.key, {}), resumed, baselines.get(twin.config))
        outcomes[twin.key] = tout
        for job in mine:
            outcomes[job.key] = score_fault_run(job, infos.get(job.key, {}), tout, snapshots,
                                                baselines.get(job.config))
        print(f"  replayed {twin.key} and its {len(mine)} fault runs", file=sys.stderr, flush=True)
    return [outcomes[j.key] for j in jobs if j.key in outcomes]


def load_baselines(jobs: list[Job], infos: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per config, the baseline seed's full-length healthy run as a Baseline (none in --quick, whose short
    twin cannot be the baseline of anything, or when it failed)."""
    from rlcockpit.diagnostics.baseline import Baseline

    out = {}
    full = {j.key for j in jobs if not j.fault and j.steps >= HEALTHY_STEPS}
    for config in {j.config for j in jobs}:
        info = infos.get(baseline_key(config), {})
        if baseline_key(config) in full and info.get("status") == "finished" and info.get("run_id"):
            rows = ((step, m) for step, m, _, _ in read_stream(info, with_samples=False))
            out[config] = Baseline.from_steps(baseline_key(config), rows)
    return out


def score_twin(job: Job, info: dict[str, Any], snapshot_at: Iterable[int], baseline: Any = None
               ) -> tuple[Outcome, dict[int, Any]]:
    out = Outcome(job, info)
    if not out.ok:
        return out, {}
    stream = read_stream(info)
    out.config = run_diagnostics_config(info)
    out.findings, snapshots = replay(stream, out.config, snapshot_at=snapshot_at, baseline=baseline)
    _finish(out, stream)
    return out, snapshots


def score_fault_run(job: Job, info: dict[str, Any], twin: Outcome, snapshots: dict[int, Any],
                    baseline: Any = None) -> Outcome:
    out = Outcome(job, info)
    if not out.ok:
        return out
    own = read_stream(info)
    out.config = run_diagnostics_config(info)
    resumed = info.get("resumed_from")
    if resumed is None:
        out.findings, _ = replay(own, out.config, baseline=baseline)
        _finish(out, own)
        return out
    if not twin.ok:
        raise RuntimeError(f"{job.key} continues {job.twin}'s checkpoint but {job.twin} cannot be read")
    suffix = [r for r in own if r[0] > resumed]
    if resumed in snapshots and out.config == twin.config:
        new, _ = replay(suffix, out.config, engine=copy.deepcopy(snapshots[resumed]))
        out.findings = [f for f in twin.findings if f["step"] <= resumed] + new
    else:  # no copy of the twin's engine there: replay the stitched stream from step 1
        out.findings, _ = replay(stitched(own, read_stream(twin.info), resumed), out.config, baseline=baseline)
    out.metrics = {s: m for s, m in twin.metrics.items() if s <= resumed} | {s: m for s, m, _, _ in suffix}
    out.steps = max(out.metrics, default=0)
    return out


def _finish(out: Outcome, stream: Sequence[StepRow]) -> None:
    """Metrics by step, last step, and (a run trained from step 1) whether the replay = the live findings."""
    out.metrics = {step: m for step, m, _, _ in stream}
    out.steps = max(out.metrics, default=0)
    out.same_as_live = _sig(f for f in out.findings if f["status"] != "resolved" and f["detector"] != "baseline") \
        == _sig(f for f in live_findings(out.info) if f["status"] != "resolved")


# --------------------------------------------------------------------------- scoring


def ignored_metrics() -> set[str]:
    """Metrics that ARE the injected hyper-parameters (every live parameter's logged value)."""
    from rlcockpit.trainer.live import LIVE_SPECS

    return {s.metric for s in LIVE_SPECS.values()} | {"kl/target"}


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= ATOL + RTOL * max(abs(a), abs(b))


def first_divergence(fault: dict[int, dict[str, float]], twin: dict[int, dict[str, float]], last: int,
                     ignored: set[str]) -> tuple[int | None, list[str]]:
    """The first step (1..last) where any compared metric differs, and those metrics."""
    for step in range(1, last + 1):
        a, b = fault.get(step, {}), twin.get(step, {})
        names = sorted(n for n in set(a) | set(b) if n not in ignored and not n.startswith(IGNORED_PREFIXES))
        moved = [n for n in names if not _close(a.get(n), b.get(n))]
        if moved:
            return step, moved
    return None, []


def _raised(rows: Iterable[dict[str, Any]], lo: int, hi: int) -> list[dict[str, Any]]:
    return [f for f in rows if f["status"] in NEWS and lo <= f["step"] <= hi]


def score_fault(o: Outcome, twin: Outcome | None) -> dict[str, Any]:
    """Divergence, the expected detection (twin-filtered), first orange+, twin findings, ramp timing."""
    job, fault = o.job, make_fault(o.job.fault, o.job.variant)
    lo, hi = job.first_step, o.steps
    twin_rows = _raised(twin.findings, lo, hi) if twin else []
    twin_at: dict[tuple[str, str], list[int]] = {}
    for f in twin_rows:
        twin_at.setdefault((f["detector"], f["key"]), []).append(f["step"])
    raised = _raised(o.findings, lo, hi)
    own = [f for f in raised if not coincides(f["step"], twin_at.get((f["detector"], f["key"]), []))]
    own_any = [f for f in raised if (f["detector"], f["key"]) not in twin_at]  # the rule before 2026-12-07
    hits = [f for f in own if expected_hit(f, fault)]
    hits_nb = [f for f in hits if f["detector"] != BASELINE]
    hits_any = [f for f in own_any if expected_hit(f, fault)]
    orange = [f for f in own if f["severity"] in ORANGE_PLUS]
    div, moved = first_divergence(o.metrics, twin.metrics, hi, ignored_metrics()) if twin else (None, [])
    ref = div if div is not None else lo
    s: dict[str, Any] = {
        "shape": fault.shape, "expected": fault.expected, "divergence": div, "diverged": moved[:4],
        "early_divergence": div is not None and div < lo,  # before the fault struck: the twin is not exact
        "detected": bool(hits), "hit": _brief(hits[0], ref) if hits else None,
        "detected_any_twin_rule": bool(hits_any),
        "latency": hits[0]["step"] - ref if hits else None,
        "no_effect": div is None,  # the fault changed no metric of the run: nothing to detect (not scored)
        "detected_nb": bool(hits_nb), "hit_nb": _brief(hits_nb[0], ref) if hits_nb else None,
        "latency_nb": hits_nb[0]["step"] - ref if hits_nb else None,
        "orange": _brief(orange[0], ref) if orange else None,
        "twin": [f"{f['detector']} {f['severity']} @{f['step']}" for f in twin_rows],
        "scored": (lo, hi),
    }
    if fault.shape == "ramp" and twin is not None:
        s.update(ramp_timing(o, twin, fault.drives, lo, hi, hits))
        nb = ramp_timing(o, twin, fault.drives, lo, hi, hits_nb)
        s["in_time_nb"], s["in_time_3step_nb"] = nb["in_time"], nb["in_time_3step"]
        old_rule = ramp_timing(o, twin, fault.drives, lo, hi, hits_any)
        s["latency_from_2x_any_twin_rule"] = old_rule["latency_from_2x"]
    return s


TWIN_COINCIDENCE = 5  # steps: a twin finding this close to the fault run's is the same chance alarm


def coincides(step: int, twin_steps: Iterable[int]) -> bool:
    """Whether the twin raised the same finding (detector and key) within ``TWIN_COINCIDENCE`` steps of
    ``step``: then the fault run's finding is what a healthy run shows at that time, not the fault.
    (Until 2026-12-07 any twin finding of that detector and key in the scored steps cancelled the fault
    run's, even one 20 steps later: a KL tier the fault crossed at +3 was cancelled by the twin's chance
    crossing at +26. The headline keeps that rule's counts as ``*_any_twin_rule``.)"""
    return any(abs(step - t) <= TWIN_COINCIDENCE for t in twin_steps)


def expected_hit(f: dict[str, Any], fault: Any) -> bool:
    """An expected detector or family, or a `baseline` finding on a metric the fault moves."""
    if f["detector"] == BASELINE:
        return f["key"] in fault.baseline_keys
    return f["detector"] in fault.expected or f["family"] in fault.expected


def ramp_timing(o: Outcome, twin: Outcome, metric: str, lo: int, hi: int,
                hits: list[dict[str, Any]]) -> dict[str, Any]:
    """When ``metric`` left the twin's by 2x the twin's spread (std over the scored steps): on one step
    (``moved_2x``), and in the mean difference of 3 consecutive steps (``moved_2x_3step``; once two runs
    have diverged their sampling differs, so a single step differs by ~1.4 spreads by chance alone and
    passes 2 spreads on ~16% of steps: the 3-step mean moves only with the fault)."""
    values = [twin.metrics.get(s, {}).get(metric) for s in range(lo, hi + 1)]
    values = [v for v in values if v is not None and math.isfinite(v)]
    if len(values) < 2:
        return {"spread": None, "moved_2x": None, "latency_from_2x": None, "latency_from_2x_3step": None,
                "in_time": None,
                "moved_2x_3step": None, "in_time_3step": None}
    spread = statistics.pstdev(values)
    moved = moved3 = None
    diffs: list[float] = []
    for step in range(lo, hi + 1):
        a, b = o.metrics.get(step, {}).get(metric), twin.metrics.get(step, {}).get(metric)
        if a is None or b is None:
            diffs.clear()
            continue
        if not math.isfinite(a):
            moved = step if moved is None else moved
            moved3 = step if moved3 is None else moved3
            break
        if moved is None and abs(a - b) > 2 * spread + ATOL:
            moved = step
        diffs.append(a - b)
        if moved3 is None and len(diffs) >= 3 and abs(sum(diffs[-3:]) / 3) > 2 * spread + ATOL:
            moved3 = step
        if moved is not None and moved3 is not None:
            break
    first = hits[0]["step"] if hits else None
    # issue 26 point 5: a ramp's latency counts from the first step its driven metric left two
    # healthy spreads (one step), the earliest point any detector that keeps healthy runs quiet can
    # see it; negative: caught before that
    latency_2x = first - moved if first is not None and moved is not None else None
    latency_3 = first - moved3 if first is not None and moved3 is not None else None
    return {"spread": spread, "moved_2x": moved, "latency_from_2x": latency_2x, "latency_from_2x_3step": latency_3,
            "in_time": first is not None and (moved is None or first <= moved),
            "moved_2x_3step": moved3, "in_time_3step": first is not None and (moved3 is None or first <= moved3)}


def _brief(f: dict[str, Any], ref: int) -> str:
    return f"{f['detector']} {f['severity']} +{f['step'] - ref}"


def score_healthy(o: Outcome) -> dict[str, int]:
    raised = _raised(o.findings, 0, o.steps)
    out = {s: sum(1 for f in raised if f["severity"] == s) for s in SEVERITIES}
    out["baseline"] = sum(1 for f in raised if f["detector"] == BASELINE)
    out["baseline_orange"] = sum(1 for f in raised if f["detector"] == BASELINE and f["severity"] in ORANGE_PLUS)
    return out


# --------------------------------------------------------------------------- peers


def export_stream(o: Outcome, stream: Sequence[StepRow], path: Path) -> None:
    """The run's metric stream (+ per-sample reward, length, text) as JSONL for the peer runner
    (interface unchanged: a head line, then one line per step)."""
    algo = CONFIGS[o.job.config].algo
    lines = [json.dumps({"run": o.job.key, "onset": o.job.first_step if o.job.fault else None, "algo": algo})]
    for step, metrics, samples, _ in stream:
        if step < 1:
            continue  # step 0 holds only the set-up time
        rows = [{"reward": _num(s.reward), "length": s.length, "response": s.response, "prompt_id": s.prompt_id,
                 "truncated": s.truncated, "components": {k: _num(v) for k, v in (s.components or {}).items()}}
                for s in samples]
        lines.append(json.dumps({"step": step, "metrics": {k: _num(v) for k, v in metrics.items()}, "samples": rows}))
    path.write_text("\n".join(lines) + "\n")


def _num(v: Any) -> float | None:
    return None if v is None else float(v)  # NaN / inf kept (Python's json writes them as NaN / Infinity)


def run_peers(python: str | None, streams: list[Path], out: Path) -> dict[str, Any]:
    if not python or not Path(python).exists():
        why = "not run: no peer venv (make .benchvenv-peers/.installed, then --peers-python)"
        return {p: {"error": why} for p in PEERS}
    cmd = [python, str(ROOT / "benchmarks" / "_peer_runner.py"), "--out", str(out), "--streams", *map(str, streams)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=4 * 3600)
    if proc.returncode != 0:
        return {p: {"error": f"peer runner exited {proc.returncode}: {proc.stderr[-400:]}"} for p in PEERS}
    return json.loads(out.read_text())


def score_peer(peer: dict[str, Any], o: Outcome, twin: Outcome | None, ref: int | None) -> dict[str, Any]:
    """Healthy: alert counts. Fault: the first alert from ``ref`` on of a type the twin did not raise
    within ``TWIN_COINCIDENCE`` steps of it (an alarm that also fires on the healthy twin then says
    nothing) -- the rule our own findings are scored by."""
    if "error" in peer:
        return {"error": peer["error"]}
    run = peer.get("runs", {}).get(o.job.key, {})
    if run.get("status") != "ok":
        return {"error": run.get("error", "no result")}
    live = [a for a in run["alerts"] if len(a) < 4 or a[3] != "post-hoc"]  # end-of-run reports are not live
    alerts = live
    if not o.job.fault:
        return {"alerts": len(alerts), "critical": sum(1 for a in alerts if str(a[2]).lower().startswith("crit")),
                "names": sorted({a[1] for a in alerts})}
    start, end = o.job.first_step, o.steps
    twin_alerts = peer.get("runs", {}).get(twin.job.key, {}).get("alerts", []) if twin else []  # live and post-hoc
    twin_at: dict[str, list[int]] = {}
    for a in twin_alerts:
        if start <= a[0] <= end:
            twin_at.setdefault(a[1], []).append(a[0])
    ref = ref if ref is not None else start
    hits = [a for a in alerts if ref <= a[0] <= end and not coincides(a[0], twin_at.get(a[1], []))]
    return {"latency": hits[0][0] - ref if hits else None, "name": hits[0][1] if hits else ""}


# --------------------------------------------------------------------------- report


def _cell_peer(p: dict[str, Any]) -> str:
    if "error" in p:
        return "n/a"
    return f"+{p['latency']} {p['name']}" if p["latency"] is not None else "missed"


def _source(o: Outcome) -> str:
    resumed = o.info.get("resumed_from")
    if resumed is not None:
        return f"twin 1-{resumed} + own"
    return "whole run, offline = live" if o.same_as_live else "whole run, offline != LIVE"


def fault_table(rows: list[tuple[Outcome, dict, dict]], peers: Sequence[str]) -> list[str]:
    head = ["fault", "seed", "variant", "scored steps", "first divergence", "expected detector fired "
            "(first, steps after divergence)", "without the baseline run", "first orange+ (steps after divergence)", "twin's findings in the "
            "scored steps", "ramp: metric moved 2x spread at (one step / 3-step mean) / caught in time", "stream",
            *peers]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for o, s, ps in rows:
        div = "none (no effect: not scored)" if s["divergence"] is None else str(s["divergence"]) + (" (BEFORE the fault)"
                                                                             if s["early_divergence"] else "")
        ramp = "-"
        if s["shape"] == "ramp":
            moved = "never" if s.get("moved_2x") is None else f"step {s['moved_2x']}"
            moved3 = "never" if s.get("moved_2x_3step") is None else f"step {s['moved_2x_3step']}"
            ramp = (f"{moved} / {moved3} / {'yes' if s.get('in_time') else 'no'}, "
                    f"{'yes' if s.get('in_time_3step') else 'no'}")
        twin = ", ".join(s["twin"][:4]) + (f" (+{len(s['twin']) - 4})" if len(s["twin"]) > 4 else "") or "none"
        cells = [o.job.fault, str(o.job.seed), o.job.variant.label(), f"{s['scored'][0]}-{s['scored'][1]}", div,
                 s["hit"] or "missed", s["hit_nb"] or "missed", s["orange"] or "none", twin, ramp, _source(o),
                 *(_cell_peer(ps[p]) for p in peers)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def summary_table(rows: list[tuple[Outcome, dict, dict]], peers: Sequence[str]) -> list[str]:
    by: dict[str, list] = {}
    for o, s, ps in rows:
        by.setdefault(o.job.fault, []).append((o, s, ps))
    head = ["fault", "expected detectors", "step runs caught (without the baseline)",
            "ramp runs caught (in time: one step, 3-step mean)",
            "median latency from divergence (steps)", *(f"{p} caught" for p in peers)]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for name, items in by.items():
        steps = [s for _, s, _ in items if s["shape"] == "step" and not s["no_effect"]]
        ramps = [s for _, s, _ in items if s["shape"] == "ramp" and not s["no_effect"]]
        lats = [s["latency"] for _, s, _ in items if s["latency"] is not None]
        exp = items[0][1]["expected"]
        peer_cells = ["n/a" if any("error" in ps[p] for _, _, ps in items) else
                      f"{sum(1 for _, _, ps in items if ps[p]['latency'] is not None)}/{len(items)}" for p in peers]
        lines.append("| " + " | ".join([
            name, ", ".join(exp[:3]) + ("…" if len(exp) > 3 else ""),
            f"{sum(s['detected'] for s in steps)}/{len(steps)} ({sum(s['detected_nb'] for s in steps)})"
            if steps else "-",
            f"{sum(s['detected'] for s in ramps)}/{len(ramps)} ({sum(bool(s.get('in_time')) for s in ramps)}, "
            f"{sum(bool(s.get('in_time_3step')) for s in ramps)})"
            if ramps else "-",
            f"{statistics.median(lats):g}" if lats else "-", *peer_cells]) + " |")
    return lines


def healthy_table(rows: list[tuple[Outcome, dict, dict]], peers: Sequence[str]) -> list[str]:
    head = ["healthy run (twin)", "config", "steps", *SEVERITIES, "offline = live",
            *(f"{p} alerts (critical), types" for p in peers)]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for o, s, ps in rows:
        cells = ["n/a" if "error" in ps[p] else f"{ps[p]['alerts']} ({ps[p]['critical']}) {', '.join(ps[p]['names'])}"
                 for p in peers]
        same = "yes" if o.same_as_live else "NO"
        lines.append("| " + " | ".join([o.job.key, CONFIGS[o.job.config].label, str(o.steps),
                                        *(str(s[k]) for k in SEVERITIES), same, *cells]) + " |")
    return lines


def build_report(outcomes: list[Outcome], peers: dict[str, Any], args: argparse.Namespace, commit: str,
                 dirty: bool, wall: float) -> dict[str, Any]:
    peer_names = [p for p in peers if isinstance(peers[p], dict)] or list(PEERS)
    by_key = {o.job.key: o for o in outcomes}
    fault_rows, healthy_rows = [], []
    for o in outcomes:
        if not o.ok:
            continue
        twin = by_key.get(o.job.twin) if o.job.fault else None
        twin = twin if twin is not None and twin.ok else None
        s = score_fault(o, twin) if o.job.fault else score_healthy(o)
        ref = s.get("divergence") if o.job.fault else None
        ps = {p: score_peer(peers.get(p, {"error": "missing"}), o, twin, ref) for p in peer_names}
        (fault_rows if o.job.fault else healthy_rows).append((o, s, ps))
    headline = headline_numbers(outcomes, fault_rows, healthy_rows, peer_names, args, commit, dirty, wall)
    frozen = f"thresholds frozen at commit {commit}" + (" (detector code has UNCOMMITTED changes)" if dirty else "")
    train = sum(float(o.info.get("wall_s", 0.0)) for o in outcomes)
    text = "\n".join([
        f"Split **{args.split}** (seeds {', '.join(map(str, sorted({o.job.seed for o in outcomes})))}), "
        f"{frozen}. Measured {time.strftime('%Y-%m-%d')}: {len(fault_rows)} fault runs and {len(healthy_rows)} "
        f"healthy runs (the twins); {train / 60:.0f} min of training summed over the runs trained or reused, "
        f"{args.workers} in parallel; {len(headline['runs_failed'])} runs failed.", "",
        "Headline: " + _headline_sentence(headline), "",
        "### Per fault", "", *summary_table(fault_rows, peer_names), "",
        "### Healthy runs (the twins)", "", *healthy_table(healthy_rows, peer_names), "",
        "### Every fault run", "", *fault_table(fault_rows, peer_names), ""])
    return {"text": text, "headline": headline}


def headline_numbers(outcomes: list[Outcome], fault_rows: list, healthy_rows: list, peer_names: Sequence[str],
                     args: argparse.Namespace, commit: str, dirty: bool, wall: float) -> dict[str, Any]:
    scored = [s for _, s, _ in fault_rows if not s["no_effect"]]
    steps = [s for s in scored if s["shape"] == "step"]
    ramps = [s for s in scored if s["shape"] == "ramp"]
    caught = sum(s["detected"] for s in steps)
    caught_nb = sum(s["detected_nb"] for s in steps)
    lats_nb = [s["latency_nb"] for s in steps if s["latency_nb"] is not None]
    counts_nb = {k: sum(s[k] for _, s, _ in healthy_rows) for k in ("baseline", "baseline_orange")}
    lats = [s["latency"] for s in steps if s["latency"] is not None]
    counts = {k: sum(s[k] for _, s, _ in healthy_rows) for k in SEVERITIES}
    healthy_steps = sum(o.steps for o, _, _ in healthy_rows)
    per_k = 1000.0 * counts["orange"] / healthy_steps if healthy_steps else None
    whole = [o for o in outcomes if o.ok and o.same_as_live is not None]
    pct = round(100.0 * caught / len(steps), 1) if steps else None
    med = statistics.median(lats) if lats else None
    out: dict[str, Any] = {
        "split": args.split, "frozen_commit": commit, "detectors_dirty": dirty, "quick": bool(args.quick),
        "step_faults_caught": f"{caught}/{len(steps)}", "step_faults_caught_pct": pct,
        "median_latency_from_divergence": med,
        "ramps_caught": f"{sum(s['detected'] for s in ramps)}/{len(ramps)}",
        "ramps_caught_before_2x_spread": f"{sum(bool(s.get('in_time')) for s in ramps)}/{len(ramps)}",
        "ramps_caught_before_2x_spread_3step": f"{sum(bool(s.get('in_time_3step')) for s in ramps)}/{len(ramps)}",
        "ramps_in_time_3step_by_speed": ramps_by_speed(ramps),
        "ramp_latency_from_2x_spread": ramp_latency_target(ramps),
        "ramp_latency_from_2x_spread_3step": ramp_latency_target(ramps, "moved_2x_3step", "latency_from_2x_3step"),
        "any_twin_rule": {  # scored as before 2026-12-07: a twin finding anywhere in the scored steps cancels
            "step_faults_caught": f"{sum(s['detected_any_twin_rule'] for s in steps)}/{len(steps)}",
            "ramp_latency_from_2x_spread": ramp_latency_target(ramps, "moved_2x", "latency_from_2x_any_twin_rule")["all"]},
        "healthy": {"runs": len(healthy_rows), "steps": healthy_steps, **counts,
                    "orange_per_1000_steps": round(per_k, 2) if per_k is not None else None,
                    "of_which_baseline_detector": counts_nb["baseline"],
                    "of_which_baseline_detector_orange": counts_nb["baseline_orange"]},
        "without_baseline": {
            "step_faults_caught": f"{caught_nb}/{len(steps)}",
            "step_faults_caught_pct": round(100.0 * caught_nb / len(steps), 1) if steps else None,
            "median_latency_from_divergence": statistics.median(lats_nb) if lats_nb else None,
            "ramps_caught": f"{sum(s['detected_nb'] for s in ramps)}/{len(ramps)}",
            "ramps_caught_before_2x_spread": f"{sum(bool(s.get('in_time_nb')) for s in ramps)}/{len(ramps)}",
            "ramps_caught_before_2x_spread_3step":
                f"{sum(bool(s.get('in_time_3step_nb')) for s in ramps)}/{len(ramps)}"},
        "baseline_runs": "none (--quick)" if args.quick else f"healthy run of seed {BASELINE_SEED} per config",
        "no_effect_runs": sorted(o.job.key for o, s, _ in fault_rows if s["no_effect"]),
        "targets": {"step_caught_ge_90pct": _pass(pct is not None and pct >= TARGETS["step_caught_pct"], pct),
                    "median_latency_le_5": _pass(med is not None and med <= TARGETS["median_latency"], med),
                    "healthy_no_red_black": _pass(counts["red"] + counts["black"] == 0, healthy_steps or None),
                    "healthy_orange_le_1_per_1000": _pass(per_k is not None and per_k <= TARGETS["orange_per_1000"],
                                                         per_k)},
        "divergence_before_fault": sorted(o.job.key for o, s, _ in fault_rows if s["early_divergence"]),
        "offline_matches_live": f"{sum(1 for o in whole if o.same_as_live)}/{len(whole)}",
        "runs_failed": sorted(o.job.key for o in outcomes if not o.ok),
        "runs": len(outcomes), "wall_time_s": round(wall, 1),
        "training_s_total": round(sum(float(o.info.get("wall_s", 0.0)) for o in outcomes), 1),
    }
    for p in peer_names:
        scored = [ps[p] for _, _, ps in fault_rows]
        ok = scored and not any("error" in x for x in scored)
        out[f"{p}_caught"] = f"{sum(1 for x in scored if x['latency'] is not None)}/{len(scored)}" if ok else "n/a"
    out["peers_status"] = {p: peers_status(p, fault_rows, healthy_rows) for p in peer_names}
    return out


RAMP_SPEEDS = ((0, 3, "moved 2x within 3 steps"), (4, 7, "in 4-7 steps"), (8, 10**9, "in 8 or more steps"))


def ramps_by_speed(ramps: list[dict[str, Any]]) -> dict[str, str]:
    """Ramps in time (3-step mean) by how fast their metric moved 2x its healthy spread after the ramp
    began: a detector cannot tell a move of a few steps from noise before it is ~2 spreads big without
    raising the same alarm on healthy runs, so the fast ramps bound what any detector can do in time."""
    out = {}
    for lo, hi, label in RAMP_SPEEDS:
        group = [s for s in ramps if s.get("moved_2x_3step") is not None
                 and lo <= s["moved_2x_3step"] - s["scored"][0] <= hi]
        out[label] = f"{sum(bool(s.get('in_time_3step')) for s in group)}/{len(group)}"
    never = [s for s in ramps if s.get("moved_2x_3step") is None]
    out["never moved 2x (caught at all)"] = f"{sum(bool(s['detected']) for s in never)}/{len(never)}"
    return out


RAMP_TARGET_MEDIAN, RAMP_TARGET_WITHIN, RAMP_TARGET_SHARE = 3, 10, 0.9


def ramp_latency_target(ramps: list[dict[str, Any]], moved: str = "moved_2x",
                        latency: str = "latency_from_2x") -> dict[str, Any]:
    """Issue 26 point 5, per ramp speed and overall: the latency of each caught ramp from the first
    step its metric left two healthy spreads (``latency_from_2x``); target median <= 3 steps and
    >= 90 % within 10 steps. A ramp never caught counts as not within 10; one whose metric never
    left two spreads is not scored here (its detection is in ``ramps_caught``). ``moved`` /
    ``latency``: the same from the 3-step mean (``moved_2x_3step``: a single step of two diverged
    runs passes 2 spreads on ~16 % of steps by chance, so a run the fault hardly moved is scored from
    a chance step), or by the scoring rule before 2026-12-07 (``latency_from_2x_any_twin_rule``)."""
    def summary(group: list[dict[str, Any]]) -> dict[str, Any]:
        scored = [s for s in group if s.get(moved) is not None]
        lat = sorted(s[latency] for s in scored if s.get(latency) is not None)
        within = sum(1 for s in scored if s.get(latency) is not None and s[latency] <= RAMP_TARGET_WITHIN)
        med = statistics.median(lat) if lat else None
        return {"ramps": len(scored), "caught": len(lat), "median_latency": med,
                f"within_{RAMP_TARGET_WITHIN}": f"{within}/{len(scored)}",
                "target_met": bool(scored) and med is not None and med <= RAMP_TARGET_MEDIAN
                and within >= RAMP_TARGET_SHARE * len(scored)}
    out = {"all": summary(ramps)}
    for lo, hi, label in RAMP_SPEEDS:
        out[label] = summary([s for s in ramps if s.get(moved) is not None
                              and lo <= s[moved] - s["scored"][0] <= hi])
    return out


def peers_status(p: str, fault_rows: list, healthy_rows: list) -> str:
    errors = [ps[p]["error"] for _, _, ps in [*fault_rows, *healthy_rows] if "error" in ps[p]]
    return errors[0] if errors else "ok"


def _pass(ok: bool, value: Any) -> str:
    return "n/a" if value is None else ("pass" if ok else "fail")


def _speeds(h: dict[str, Any]) -> str:
    return "; ".join(f"{k} {v}" for k, v in h.get("ramps_in_time_3step_by_speed", {}).items())


def _headline_sentence(h: dict[str, Any]) -> str:
    hh, nb = h["healthy"], h["without_baseline"]
    return (f"step faults caught by an expected detector **{h['step_faults_caught']}** "
            f"({h['step_faults_caught_pct']}%), median latency from the first divergence "
            f"**{h['median_latency_from_divergence']}** steps; ramps caught {h['ramps_caught']}, before their "
            f"metric moved 2x its healthy spread **{h['ramps_caught_before_2x_spread']}** on one step, "
            f"**{h['ramps_caught_before_2x_spread_3step']}** in a 3-step mean (by how fast the metric moved 2x "
            f"after the ramp began: {_speeds(h)}); healthy runs "
            f"({hh['runs']} runs, {hh['steps']} steps): yellow {hh['yellow']}, orange {hh['orange']}, red "
            f"{hh['red']}, black {hh['black']} (**{hh['orange_per_1000_steps']}** orange per 1,000 steps; of "
            f"these findings {hh['of_which_baseline_detector']} from the baseline detector, "
            f"{hh['of_which_baseline_detector_orange']} of them orange+). Without the baseline run (the `baseline` "
            f"detector's findings set aside): step faults caught **{nb['step_faults_caught']}** "
            f"({nb['step_faults_caught_pct']}%), median latency {nb['median_latency_from_divergence']}; ramps "
            f"{nb['ramps_caught']}, in time {nb['ramps_caught_before_2x_spread']} (3-step mean: "
            f"{nb['ramps_caught_before_2x_spread_3step']}). Fault runs that changed no "
            f"metric (not scored): {', '.join(h['no_effect_runs']) or 'none'}.")


def write_docs(path: Path, text: str) -> None:
    doc = path.read_text() if path.exists() else f"# Fault detection\n\n{BEGIN}\n{END}\n"
    if BEGIN not in doc or END not in doc:
        doc = doc.rstrip() + f"\n\n{BEGIN}\n{END}\n"
    start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    path.write_text(doc[:start] + "\n" + text.rstrip() + "\n" + doc[end:])


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--split", choices=sorted(SPLITS), default="calibration",
                   help="calibration: seeds 0-4; calibration-b: 100-104, calibration-c: 200-204, calibration-d: "
                        "300-304, calibration-e: 400-404, calibration-f: 500-504, calibration-g: 600-604 "
                        "(the first six evaluation splits, spent: tuning allowed); evaluation: seeds 800-804 "
                        "(refuses to run with uncommitted detector changes)")
    p.add_argument("--quick", action="store_true", help="smoke test: lr_spike (late, resumed from the twin), "
                   "nan_reward (onset 0), ref_prompt_template, 1 short PPO twin; the split's first seed, 8 prompts")
    p.add_argument("--faults", nargs="*", help="only these faults (default: all)")
    p.add_argument("--seeds", type=int, default=None, help="calibration only: the split's first N seeds "
                   "(a quicker tuning round; the evaluation always runs all of its seeds)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override for every run (fault runs and twins alike)")
    p.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1), help="parallel runs (default 2)")
    p.add_argument("--out", type=Path, help="directory for the stores, checkpoints and streams (default: a temp dir)")
    p.add_argument("--reuse", action="store_true", help="keep the finished runs already in --out (every run is "
                   "scored by its offline replay through the current detectors, so reused runs are scored alike)")
    p.add_argument("--peers-python", help="python of .benchvenv-peers (default: ./.benchvenv-peers/bin/python if any; "
                   "'' = no peers)")
    p.add_argument("--docs", type=Path, default=None, help=f"write the tables into this file between markers "
                   f"(default: {DOCS.relative_to(ROOT)} unless --quick)")
    args = p.parse_args(argv)
    if args.seeds is not None and args.split not in TUNING_SPLITS:
        p.error("--seeds is for the calibration splits only: the evaluation runs every seed of its split")
    if args.peers_python is None and (ROOT / ".benchvenv-peers" / "bin" / "python").exists():
        args.peers_python = str(ROOT / ".benchvenv-peers" / "bin" / "python")
    if args.docs is None and not args.quick:
        args.docs = DOCS
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    commit, dirty = detector_commit(args.split)
    t0 = time.perf_counter()
    out_dir = (args.out or Path(tempfile.mkdtemp(prefix="rlcockpit-detection-"))).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs = make_jobs(args.split, args.faults, args.quick, args.seeds)
    extra = (*(QUICK_OVERRIDES if args.quick else ()), *args.set)
    n_fault = sum(1 for j in jobs if j.fault)
    print(f"split {args.split}: {n_fault} fault runs + {len(jobs) - n_fault} twins, "
          f"{sum(j.steps - (j.resume_step or 0) for j in jobs)} steps to train, {args.workers} in parallel; "
          f"stores in {out_dir}", file=sys.stderr, flush=True)
    infos = Scheduler(jobs, out_dir, args.workers, tuple(extra)).run(args.reuse)
    outcomes = build_outcomes(jobs, infos)
    with_peers = bool(args.peers_python) and Path(args.peers_python).exists()
    streams = export_streams(outcomes, infos, out_dir) if with_peers else []
    peers = run_peers(args.peers_python if with_peers else None, streams, out_dir / "peers.json")
    report = build_report(outcomes, peers, args, commit, dirty, time.perf_counter() - t0)
    print(report["text"])
    if args.docs:
        write_docs(args.docs, report["text"])
    print(json.dumps(report["headline"]))
    return 0


def export_streams(outcomes: list[Outcome], infos: dict[str, dict[str, Any]], out_dir: Path) -> list[Path]:
    """Each run's (stitched) stream as JSONL for the peers; twins re-read once per twin."""
    paths = []
    twin_streams: dict[str, list[StepRow]] = {}
    for o in outcomes:
        if not o.ok:
            continue
        own = read_stream(o.info)
        twin = None
        if o.info.get("resumed_from") is not None:
            if o.job.twin not in twin_streams:
                twin_streams.clear()  # outcomes come grouped by twin: keep one in memory
                twin_streams[o.job.twin] = read_stream(infos[o.job.twin])
            twin = twin_streams[o.job.twin]
        paths.append(out_dir / f"{o.job.key}.stream.jsonl")
        export_stream(o, stitched(own, twin, o.info.get("resumed_from")), paths[-1])
    return paths


if __name__ == "__main__":
    sys.exit(main())
