"""Detection benchmark: does each injected fault get caught, how fast, and do healthy runs stay quiet?

Every built-in fault (``rlcockpit faults list``) x N seeds, plus healthy runs (PPO and GRPO, different
seeds and configs), each a real tiny-world training run in its own process (up to the core count in
parallel) and its own SQLite store, diagnostics on. For each run:

- live: the findings the trainer's engine wrote during the run;
- offline: the stored metric and sample stream replayed through a fresh ``Engine.from_config`` with
  the run's diagnostics config (``rlcockpit.diagnostics.offline.diagnose_run``) -- the numbers must
  be the same;
- fault runs: did an expected detector (``Fault.expected``) fire at or after the onset; the steps from
  the onset to the first orange-or-worse finding of any detector; orange+ findings before the onset;
- healthy runs: red / black findings (target 0);
- peers (rlwatch, rlprobe, rldoctor, run in .benchvenv-peers by benchmarks/_peer_runner.py on the same
  streams exported to JSONL): the first alert at or after the onset, alerts before it, and alerts on
  healthy runs.

Prints markdown tables, writes them into docs/detection.md between markers (``--docs``), and as the
LAST stdout line one JSON object: {"faults_detected": "x/y", "median_latency_steps": ..., ...}.

    nice -n 10 .venv/bin/python benchmarks/detection.py --peers-python .benchvenv-peers/bin/python
    .venv/bin/python benchmarks/detection.py --quick     # 2 faults + 1 healthy run, 1 seed, short
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "detection.md"
BEGIN, END = "<!-- detection-table:begin -->", "<!-- detection-table:end -->"
ORANGE_PLUS = ("orange", "red", "black")
QUICK_FAULTS = ("lr_spike", "nan_reward")
PEERS = ("rlwatch", "rlprobe", "rldoctor")


@dataclass(frozen=True)
class Job:
    key: str  # unique: fault-seed or healthy-variant-seed
    fault: str  # "" = healthy
    seed: int
    onset: int | None
    steps: int
    config: str = ""  # YAML path ("" = trainer defaults = examples/ppo_tiny.yaml)
    overrides: tuple[str, ...] = ()
    label: str = ""


@dataclass
class Outcome:
    job: Job
    run_id: str = ""
    status: str = ""
    wall_s: float = 0.0
    error: str = ""
    live: list[dict[str, Any]] = field(default_factory=list)
    offline: list[dict[str, Any]] = field(default_factory=list)
    expected: tuple[str, ...] = ()
    rescored: bool = False  # reused run scored by its offline replay (the current detectors)

    @property
    def scored(self) -> list[dict[str, Any]]:
        """The findings scored: live, or the offline replay for a re-scored reused run."""
        return self.offline if self.rescored else self.live


# --------------------------------------------------------------------------- jobs


def make_jobs(args: argparse.Namespace) -> list[Job]:
    from rlcockpit import faults

    names = list(args.faults or (QUICK_FAULTS if args.quick else faults.available()))
    seeds = range(args.seeds if not args.quick else 1)
    steps = args.onset + args.after
    jobs = [Job(f"{n}-s{s}", n, s, args.onset, steps, overrides=tuple(args.set)) for n in names for s in seeds]
    grpo = str(ROOT / "examples" / "grpo_tiny.yaml")
    healthy = [Job("healthy-ppo-s0", "", 0, None, steps, label="PPO, examples/ppo_tiny.yaml"),
               Job("healthy-grpo-s1", "", 1, None, steps, config=grpo, label="GRPO, examples/grpo_tiny.yaml"),
               Job("healthy-ppo-adaptive-kl-s2", "", 2, None, steps, overrides=("kl.adaptive=true",),
                   label="PPO, adaptive KL controller")]
    return jobs + (healthy[:1] if args.quick else healthy)


def run_job(job: Job, out_dir: str, quick_overrides: Sequence[str]) -> dict[str, Any]:
    """In a worker process: one training run into its own store; returns its id and status."""
    import torch

    torch.set_num_threads(1)
    from rlcockpit import faults
    from rlcockpit.faults.runner import fault_config, run_fault

    store = f"sqlite:///{Path(out_dir) / (job.key + '.db')}"
    t0 = time.perf_counter()
    try:
        fault = faults.get(job.fault).with_onset(job.onset) if job.fault else None
        cfg = fault_config(seed=job.seed, store=store, steps=job.steps, name=job.key, config=job.config or None,
                           overrides=[*quick_overrides, *job.overrides])
        result = run_fault(fault, cfg)
        return {"run_id": result.run_id, "status": result.status, "wall_s": time.perf_counter() - t0, "store": store}
    except Exception as exc:  # one broken run is a row in the table, not the end of the benchmark
        return {"run_id": "", "status": "failed", "error": f"{type(exc).__name__}: {exc}",
                "wall_s": time.perf_counter() - t0, "store": store}


def finished_run(job: Job, out_dir: Path) -> dict[str, Any] | None:
    """A finished run of ``job`` already in its store (``--reuse``), or None."""
    from rlcockpit.store import open_store

    path = out_dir / f"{job.key}.db"
    if not path.exists():
        return None
    reader = open_store(f"sqlite:///{path}", create=False).reader()
    try:
        runs = [r for r in reader.list_runs() if r.name == job.key and r.status == "finished"]
    finally:
        reader.close()
    if not runs:
        return None
    run = runs[0]
    wall = (run.ended_at - run.started_at) if run.ended_at and run.started_at else 0.0
    return {"run_id": run.run_id, "status": "finished", "wall_s": wall, "store": f"sqlite:///{path}",
            "reused": True}


def run_all(jobs: list[Job], out_dir: Path, workers: int, quick_overrides: Sequence[str],
            reuse: bool = False) -> dict[str, dict]:
    done: dict[str, dict] = {}
    if reuse:
        done = {j.key: info for j in jobs if (info := finished_run(j, out_dir)) is not None}
    # the slowest runs first (16 PPO epochs), so the pool does not end on one long straggler
    order = sorted((j for j in jobs if j.key not in done), key=lambda j: j.fault != "too_many_ppo_epochs")
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        futures = {j.key: pool.submit(run_job, j, str(out_dir), tuple(quick_overrides)) for j in order}
        for key, fut in futures.items():
            done[key] = fut.result()
            print(f"  run {key}: {done[key]['status']} in {done[key]['wall_s']:.0f} s", file=sys.stderr, flush=True)
        return done


# --------------------------------------------------------------------------- evaluation


def _finding_row(f: Any) -> dict[str, Any]:
    return {"step": f.step, "detector": f.detector, "severity": f.severity, "status": f.status,
            "family": (f.evidence or {}).get("family", ""), "message": f.message}


def diagnose(job: Job, info: dict[str, Any], rescore: bool = False) -> Outcome:
    """Live findings from the store and an offline replay through a fresh engine; ``rescore``: a
    reused run is scored by the replay (its live findings came from the detectors of its day)."""
    from rlcockpit import faults
    from rlcockpit.config import from_dict
    from rlcockpit.diagnostics.config import DiagnosticsConfig
    from rlcockpit.diagnostics.offline import diagnose_run
    from rlcockpit.store import open_store

    out = Outcome(job, run_id=info["run_id"], status=info["status"], wall_s=info["wall_s"], error=info.get("error", ""))
    out.expected = faults.get(job.fault).expected if job.fault else ()
    out.rescored = bool(rescore and info.get("reused"))
    if not out.run_id:
        return out
    reader = open_store(info["store"], create=False).reader()
    try:
        run = reader.get_run(out.run_id)
        cfg = from_dict(DiagnosticsConfig, (run.config or {}).get("diagnostics", {}), prefix="diagnostics.")
        report = diagnose_run(reader, out.run_id, cfg)
        out.live = [_finding_row(f) for f in report.live_findings]
        out.offline = [_finding_row(f) for f in report.findings]
    finally:
        reader.close()
    return out


def _raised(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in findings if f["status"] in ("raised", "escalated")]


def score_fault(o: Outcome, findings: list[dict[str, Any]]) -> dict[str, Any]:
    onset = o.job.onset or 0
    raised = _raised(findings)
    after = [f for f in raised if f["step"] >= onset]
    hits = [f for f in after if f["detector"] in o.expected or f["family"] in o.expected]
    orange = [f for f in after if f["severity"] in ORANGE_PLUS]
    return {
        "detected": bool(hits),
        "expected_first": (hits[0]["step"] - onset, hits[0]["detector"], hits[0]["severity"]) if hits else None,
        "latency": orange[0]["step"] - onset if orange else None,
        "first_orange": (orange[0]["detector"], orange[0]["severity"]) if orange else None,
        "pre_onset_orange": sum(1 for f in raised if f["step"] < onset and f["severity"] in ORANGE_PLUS),
    }


def score_healthy(findings: list[dict[str, Any]]) -> dict[str, int]:
    raised = _raised(findings)
    return {s: sum(1 for f in raised if f["severity"] == s) for s in ("yellow", "orange", "red", "black")}


def same_findings(o: Outcome) -> bool:
    key = [(f["step"], f["detector"], f["severity"], f["status"]) for f in o.live]
    return key == [(f["step"], f["detector"], f["severity"], f["status"]) for f in o.offline]


# --------------------------------------------------------------------------- peers


def export_stream(o: Outcome, info: dict[str, Any], path: Path) -> None:
    """The run's metric stream (+ per-sample reward, length, text) as JSONL for the peer runner."""
    from rlcockpit.diagnostics.offline import iter_steps
    from rlcockpit.store import open_store

    reader = open_store(info["store"], create=False).reader()
    try:
        algo = (reader.get_run(o.run_id).config or {}).get("algo", "ppo")
        lines = [json.dumps({"run": o.job.key, "onset": o.job.onset, "algo": algo})]
        for step, metrics, samples, _ in iter_steps(reader, o.run_id):
            if step < 1:
                continue  # step 0 holds only the set-up time
            rows = [{"reward": _num(s.reward), "length": s.length, "response": s.response, "prompt_id": s.prompt_id,
                     "truncated": s.truncated, "components": {k: _num(v) for k, v in (s.components or {}).items()}}
                    for s in samples]
            lines.append(json.dumps({"step": step, "metrics": {k: _num(v) for k, v in metrics.items()},
                                     "samples": rows}))
        path.write_text("\n".join(lines) + "\n")
    finally:
        reader.close()


def _num(v: Any) -> float | None:
    return None if v is None else float(v)  # NaN / inf kept (Python's json writes them as NaN / Infinity)


def run_peers(python: str | None, streams: list[Path], out: Path) -> dict[str, Any]:
    if not python or not Path(python).exists():
        why = "not run: no peer venv (make .benchvenv-peers/.installed, then --peers-python)"
        return {p: {"error": why} for p in PEERS}
    cmd = [python, str(ROOT / "benchmarks" / "_peer_runner.py"), "--out", str(out), "--streams", *map(str, streams)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        return {p: {"error": f"peer runner exited {proc.returncode}: {proc.stderr[-400:]}"} for p in PEERS}
    return json.loads(out.read_text())


def score_peer(peer: dict[str, Any], o: Outcome, healthy_names: set[str] = frozenset()) -> dict[str, Any]:
    """First alert at or after the onset; ``specific``: ignoring alert types the peer also raises on
    the healthy runs (a generic alarm that fires on every short run says nothing about the fault)."""
    if "error" in peer:
        return {"error": peer["error"]}
    run = peer["runs"].get(o.job.key, {})
    if run.get("status") != "ok":
        return {"error": run.get("error", "no result")}
    alerts = run["alerts"]
    if not o.job.fault:
        return {"alerts": len(alerts), "critical": sum(1 for a in alerts if str(a[2]).lower().startswith("crit")),
                "names": sorted({a[1] for a in alerts})}
    onset = o.job.onset or 0
    after = [a for a in alerts if a[0] >= onset]
    specific = [a for a in after if a[1] not in healthy_names]
    return {"latency": after[0][0] - onset if after else None, "name": after[0][1] if after else "",
            "specific": specific[0][0] - onset if specific else None,
            "specific_name": specific[0][1] if specific else "",
            "pre_onset": sum(1 for a in alerts if a[0] < onset)}


def healthy_alert_names(peers: dict[str, Any], healthy_keys: list[str]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for p in PEERS:
        runs = peers.get(p, {}).get("runs", {})
        out[p] = {a[1] for k in healthy_keys for a in runs.get(k, {}).get("alerts", [])}
    return out


# --------------------------------------------------------------------------- tables


def _cell_ours(s: dict[str, Any]) -> str:
    exp = s["expected_first"]
    first = f"{exp[1]} {exp[2]} +{exp[0]}" if exp else "missed"
    lat = f"+{s['latency']} ({s['first_orange'][0]})" if s["latency"] is not None else "none"
    return f"{first} | {lat}"


def _cell_same(o: Outcome) -> str:
    if o.rescored:  # the live findings are from older detectors: no comparison to make
        return "re-scored offline"
    return "yes" if same_findings(o) else "NO"


def _cell_peer(p: dict[str, Any]) -> str:
    if "error" in p:
        return "n/a"
    before = f" ({p['pre_onset']} before onset)" if p["pre_onset"] else ""
    if p["latency"] is None:
        return "missed" + before
    cell = f"+{p['latency']} {p['name']}"
    if p["specific"] != p["latency"] or p["specific_name"] != p["name"]:
        cell += f"; specific: +{p['specific']} {p['specific_name']}" if p["specific"] is not None else "; specific: none"
    return cell + before


def fault_table(rows: list[tuple[Outcome, dict, dict[str, dict]]]) -> list[str]:
    head = ("| fault | seed | expected detector fired (first, steps after onset) | first orange+ (steps after onset) "
            "| orange+ before onset | offline = live | " + " | ".join(PEERS) + " |")
    lines = [head, "|" + " --- |" * (6 + len(PEERS))]
    for o, s, peers in rows:
        lines.append(f"| {o.job.fault} | {o.job.seed} | {_cell_ours(s)} | {s['pre_onset_orange']} | "
                     f"{_cell_same(o)} | " + " | ".join(_cell_peer(peers[p]) for p in PEERS) + " |")
    return lines


def summary_table(rows: list[tuple[Outcome, dict, dict[str, dict]]]) -> list[str]:
    by: dict[str, list] = {}
    for o, s, peers in rows:
        by.setdefault(o.job.fault, []).append((o, s, peers))
    lines = ["| fault | expected detectors | detected (runs) | median latency, orange+ (steps) | "
             + " | ".join(f"{p} detected" for p in PEERS) + " |", "|" + " --- |" * (4 + len(PEERS))]
    for name, items in by.items():
        det = sum(1 for _, s, _ in items if s["detected"])
        lats = [s["latency"] for _, s, _ in items if s["latency"] is not None]
        med = f"{statistics.median(lats):g}" if lats else "-"
        peer_cells = []
        for p in PEERS:
            scored = [pp[p] for _, _, pp in items]
            peer_cells.append("n/a" if any("error" in x for x in scored) else
                              f"{sum(1 for x in scored if x['latency'] is not None)}/{len(items)} "
                              f"({sum(1 for x in scored if x['specific'] is not None)}/{len(items)} specific)")
        lines.append(f"| {name} | {', '.join(items[0][0].expected[:3])}{'…' if len(items[0][0].expected) > 3 else ''}"
                     f" | {det}/{len(items)} | {med} | " + " | ".join(peer_cells) + " |")
    return lines


def healthy_table(rows: list[tuple[Outcome, dict, dict[str, dict]]]) -> list[str]:
    lines = ["| healthy run | config | yellow | orange | red | black | offline = live | "
             + " | ".join(f"{p} alerts (critical), types" for p in PEERS) + " |", "|" + " --- |" * (7 + len(PEERS))]
    for o, s, peers in rows:
        cells = ["n/a" if "error" in peers[p] else
                 f"{peers[p]['alerts']} ({peers[p]['critical']}) {', '.join(peers[p]['names'])}" for p in PEERS]
        lines.append(f"| {o.job.key} | {o.job.label} | {s['yellow']} | {s['orange']} | {s['red']} | {s['black']} | "
                     f"{_cell_same(o)} | " + " | ".join(cells) + " |")
    return lines


def write_docs(path: Path, text: str) -> None:
    doc = path.read_text() if path.exists() else f"# Fault detection\n\n{BEGIN}\n{END}\n"
    if BEGIN not in doc or END not in doc:
        doc = doc.rstrip() + f"\n\n{BEGIN}\n{END}\n"
    start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    path.write_text(doc[:start] + "\n" + text.rstrip() + "\n" + doc[end:])


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help=f"smoke test: {', '.join(QUICK_FAULTS)} + 1 healthy run, "
                   "1 seed, onset 4, 3 steps after, 8 prompts per step")
    p.add_argument("--seeds", type=int, default=3, help="seeds per fault (default 3)")
    p.add_argument("--onset", type=int, default=10, help="fault onset step (default 10)")
    p.add_argument("--after", type=int, default=15, help="steps trained after the onset (default 15)")
    p.add_argument("--faults", nargs="*", help="only these faults (default: all)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override for fault runs")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="parallel runs (default: core count)")
    p.add_argument("--out", type=Path, help="directory for the stores and streams (default: a temp dir)")
    p.add_argument("--reuse", action="store_true", help="keep the finished runs already in --out (resume)")
    p.add_argument("--rescore", action="store_true", help="with --reuse: score the reused runs by their offline "
                   "replay through the current detectors (their live findings are from the detectors they ran with)")
    p.add_argument("--peers-python", help="python of .benchvenv-peers (default: ./.benchvenv-peers/bin/python if any)")
    p.add_argument("--docs", type=Path, default=None, help=f"write the tables into this file between markers "
                   f"(default: {DOCS.relative_to(ROOT)} unless --quick)")
    args = p.parse_args(argv)
    if args.quick:
        args.onset, args.after = 4, 3
    if args.peers_python is None and (ROOT / ".benchvenv-peers" / "bin" / "python").exists():
        args.peers_python = str(ROOT / ".benchvenv-peers" / "bin" / "python")
    if args.docs is None and not args.quick:
        args.docs = DOCS
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    out_dir = args.out or Path(tempfile.mkdtemp(prefix="rlcockpit-detection-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs = make_jobs(args)
    quick = ("rollout.batch_size=8", "ppo.minibatch_size=8", "rollout.max_new_tokens=12") if args.quick else ()
    print(f"{len(jobs)} runs, {args.workers} in parallel, stores in {out_dir}", file=sys.stderr, flush=True)
    infos = run_all(jobs, out_dir, args.workers, quick, reuse=args.reuse)
    outcomes = [diagnose(j, infos[j.key], args.rescore) for j in jobs]
    streams = []
    for o in outcomes:
        if o.run_id:
            streams.append(out_dir / f"{o.job.key}.stream.jsonl")
            export_stream(o, infos[o.job.key], streams[-1])
    peers = run_peers(args.peers_python, streams, out_dir / "peers.json")
    report = build_report(outcomes, peers, args, time.perf_counter() - t0)
    print(report["text"])
    if args.docs:
        write_docs(args.docs, report["text"])
    print(json.dumps(report["headline"]))
    return 0


def build_report(outcomes: list[Outcome], peers: dict[str, Any], args: argparse.Namespace,
                 wall: float) -> dict[str, Any]:
    fault_rows, healthy_rows = [], []
    generic = healthy_alert_names(peers, [o.job.key for o in outcomes if not o.job.fault])
    for o in outcomes:
        peer_scores = {p: score_peer(peers.get(p, {"error": "missing"}), o, generic[p]) for p in PEERS}
        if o.job.fault:
            fault_rows.append((o, score_fault(o, o.scored), peer_scores))
        else:
            healthy_rows.append((o, score_healthy(o.scored), peer_scores))
    train = sum(o.wall_s for o in outcomes)
    live = [o for o in outcomes if o.run_id and not o.rescored]
    rescored = [o for o in outcomes if o.rescored]
    source = (f" {len(live)} runs trained by this invocation are scored by their live findings; {len(rescored)} runs "
              f"reused from an earlier --out are re-scored by replaying their stored streams through the current "
              f"detectors (offline)." if rescored else "")
    detected = sum(1 for _, s, _ in fault_rows if s["detected"])
    lats = [s["latency"] for _, s, _ in fault_rows if s["latency"] is not None]
    names = {o.job.fault for o, _, _ in fault_rows}
    names_hit = {o.job.fault for o, s, _ in fault_rows if s["detected"]}
    headline: dict[str, Any] = {
        "faults_detected": f"{detected}/{len(fault_rows)}",
        "fault_names_detected": f"{len(names_hit)}/{len(names)}",
        "missed": sorted(names - names_hit),
        "median_latency_steps": statistics.median(lats) if lats else None,
        "healthy_red_or_black": sum(s["red"] + s["black"] for _, s, _ in healthy_rows),
        "healthy_runs": len(healthy_rows),
        "offline_matches_live": f"{sum(1 for o in live if same_findings(o))}/{len(live)}",
        "rescored_offline": sorted(o.job.key for o in outcomes if o.rescored),
        "failed_runs": sorted(o.job.key for o in outcomes if o.status not in ("finished", "stopped")),
        "quick": bool(args.quick), "onset": args.onset, "steps": args.onset + args.after,
        "wall_time_s": round(wall, 1), "training_s_total": round(train, 1),
    }
    headline["peers_status"] = {p: peers.get(p, {}).get("error") or f"ok ({peers[p].get('version')})" for p in PEERS}
    for p in PEERS:
        scored = [ps[p] for _, _, ps in fault_rows]
        if any("error" in x for x in scored) or not scored:
            headline[f"{p}_detected"] = "n/a"
            continue
        plat = [x["latency"] for x in scored if x["latency"] is not None]
        headline[f"{p}_detected"] = f"{len(plat)}/{len(scored)}"
        headline[f"{p}_detected_specific"] = f"{sum(1 for x in scored if x['specific'] is not None)}/{len(scored)}"
        headline[f"{p}_median_latency_steps"] = statistics.median(plat) if plat else None
        headline[f"{p}_healthy_alerts"] = sum(ps[p].get("alerts", 0) for _, _, ps in healthy_rows)
    text = "\n".join([
        f"Measured {time.strftime('%Y-%m-%d')}: {len(fault_rows)} fault runs (onset step {args.onset}, "
        f"{args.onset + args.after} steps each) and {len(healthy_rows)} healthy runs; {train / 60:.0f} min of "
        f"training summed over the runs, {args.workers} runs in parallel on a shared 2-core machine.{source}", "",
        "### Per fault", "", *summary_table(fault_rows), "",
        "### Healthy runs", "", *healthy_table(healthy_rows), "",
        "### Every fault run", "", *fault_table(fault_rows), ""])
    return {"text": text, "headline": headline}


if __name__ == "__main__":
    sys.exit(main())
