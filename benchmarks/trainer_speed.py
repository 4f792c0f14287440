"""Seconds per step and generated tokens per second: our PPO / GRPO against TRL on the same work.

Contenders, each run in a fresh subprocess, interleaved round by round (the order flips every
round, a warm-up round is discarded, and the first step of every run is dropped as warm-up):

- ours-ppo / ours-grpo: the real CLI, ``python -m rlcockpit train --config examples/<algo>_tiny.yaml``
  with full telemetry (every sample stored) into a fresh SQLite file; step times are read back
  from the store's phase records, phase timings from ``time/<phase>_s``.
- trl-grpo: TRL's ``GRPOTrainer`` (latest TRL, venv ``.benchvenv-trl``).
- trl-ppo: TRL 1.12's ``trl.experimental.ppo.PPOTrainer`` (the last release that ships it; venv
  ``.benchvenv-trl-ppo``).

Same model (the shipped SFT checkpoint), same prompts (tiny-world train split), same reward
(``rlcockpit.world.rewards.score``, components summed), same prompts per step, samples per prompt,
completion length, temperature, KL coefficient, learning rate, epochs, minibatches and step count,
all taken from the example config (plus ``--set`` overrides). "One step" is one rollout cycle: a
batch of prompts generated, scored and used for all its optimizer steps.

Prints a rich table, then as the LAST line one JSON object with the headline numbers.
A missing TRL venv is reported as "not installed" (the TRL numbers are then null).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _trainer_runs as tr  # noqa: E402

TRL_RUNNER = Path(__file__).resolve().parent / "_trl_runner.py"
DEFAULT_TRL = tr.ROOT / ".benchvenv-trl" / "bin" / "python"
DEFAULT_TRL_PPO = tr.ROOT / ".benchvenv-trl-ppo" / "bin" / "python"
PHASES = ("rollout", "score", "advantage", "update", "diagnose", "hotfix")


@dataclass(frozen=True)
class Workload:
    """The work both trainers do per step, read from our config so it cannot drift."""

    algo: str
    steps: int
    batch_size: int
    n_samples: int
    max_new_tokens: int
    temperature: float
    top_p: float
    kl_coef: float
    lr: float
    epochs: int
    minibatches: int
    clip_eps: float
    seed: int
    model: str


@dataclass
class Measure:
    """One run: per-step seconds and generated tokens (first step already dropped)."""

    step_s: list[float] = field(default_factory=list)
    tokens: list[float] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)
    error: str = ""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algos", default="ppo,grpo", help="comma list of ppo, grpo")
    p.add_argument("--steps", type=int, default=8, help="steps per run (the first is warm-up)")
    p.add_argument("--rounds", type=int, default=3, help="counted rounds (after one warm-up round)")
    p.add_argument("--no-warmup-round", action="store_true", help="count the first round too")
    p.add_argument("--threads", type=int, default=2, help="torch/BLAS threads for every contender")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override of our config, applied to both sides (e.g. rollout.batch_size=16)")
    p.add_argument("--trl-python", type=Path, default=DEFAULT_TRL,
                   help="python of the venv with the latest TRL (GRPO)")
    p.add_argument("--trl-ppo-python", type=Path, default=DEFAULT_TRL_PPO,
                   help="python of the venv with TRL 1.12 (PPO)")
    p.add_argument("--runs-log", type=Path, default=None,
                   help="append every run's step times as one JSON line to this file as it finishes "
                        "(keeps partial results of a long benchmark)")
    p.add_argument("--quick", action="store_true",
                   help="smoke mode: tiny batch, 3 steps, one round, no warm-up round")
    return p.parse_args(argv)


def quick_overrides(algo: str, user: list[str]) -> list[str]:
    base = tr.load_train_config(tr.example_config(algo), user)
    n = base.rollout.n_samples
    return ["rollout.batch_size=2", f"ppo.minibatch_size={2 * n}", "ppo.epochs=1",
            "rollout.max_new_tokens=8", *user]


def workload(algo: str, steps: int, overrides: list[str]) -> Workload:
    cfg = tr.load_train_config(tr.example_config(algo), overrides)
    return Workload(
        algo=algo, steps=steps, batch_size=cfg.rollout.batch_size, n_samples=cfg.rollout.n_samples,
        max_new_tokens=cfg.rollout.max_new_tokens, temperature=cfg.rollout.temperature,
        top_p=cfg.rollout.top_p, kl_coef=cfg.kl.coef, lr=cfg.optim.actor_lr, epochs=cfg.ppo.epochs,
        minibatches=cfg.samples_per_step // cfg.ppo.minibatch_size, clip_eps=cfg.ppo.clip_eps,
        seed=cfg.seed, model=model_dir(cfg.model.path),
    )


# --------------------------------------------------------------------------------------------
# TRL side


def probe_trl(python: Path, algo: str) -> tuple[str | None, str]:
    """(TRL version, status) of a venv: "ok", "not installed" or why it cannot run ``algo``."""
    if not python.exists():
        return None, "not installed"
    module = "trl.experimental.ppo" if algo == "ppo" else "trl"
    code = f"import trl, {module}; print(trl.__version__)"
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=300)
    if proc.returncode == 0:
        return proc.stdout.strip().splitlines()[-1], "ok"
    if "No module named 'trl'" in proc.stderr:
        return None, "not installed"
    return None, "unusable: " + (proc.stderr.strip().splitlines() or ["?"])[-1][:200]


def trl_args(w: Workload) -> list[str]:
    return ["--algo", w.algo, "--model", w.model, "--steps", str(w.steps),
            "--batch-size", str(w.batch_size), "--n-samples", str(w.n_samples),
            "--max-new-tokens", str(w.max_new_tokens), "--temperature", str(w.temperature),
            "--top-p", str(w.top_p), "--kl-coef", str(w.kl_coef), "--lr", str(w.lr),
            "--epochs", str(w.epochs), "--minibatches", str(w.minibatches),
            "--clip-eps", str(w.clip_eps), "--seed", str(w.seed)]


def model_dir(path: str) -> str:
    """Our ``model.path`` as a directory TRL can load: "tiny" is the shipped SFT checkpoint."""
    if path == "tiny":
        from rlcockpit.world import SFT_CHECKPOINT

        return str(SFT_CHECKPOINT)
    return str(Path(path).resolve())


def run_trl_once(python: Path, w: Workload, threads: int) -> Measure:
    cmd = [str(python), str(TRL_RUNNER), *trl_args(w), "--threads", str(threads)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=tr.thread_env(threads),
                          cwd=tempfile.gettempdir(), timeout=3600)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return Measure(error="TRL run failed: " + "\n".join(proc.stderr.strip().splitlines()[-8:]))
    out = json.loads(lines[-1])
    return Measure(step_s=out["cycle_s"][1:], tokens=[float(t) for t in out["tokens"][1:]])


# --------------------------------------------------------------------------------------------
# our side


def ours_overrides(w: Workload, user: list[str], workdir: Path) -> list[str]:
    return [*user, f"train.steps={w.steps}", "eval.every=0", "checkpoint.every=0",
            "checkpoint.at_end=false", f"checkpoint.dir={workdir / 'ckpt'}"]


def run_ours_once(w: Workload, user: list[str], threads: int) -> Measure:
    with tempfile.TemporaryDirectory(prefix="bench-ours-") as tmp:
        work = Path(tmp)
        run = tr.run_train(tr.example_config(w.algo), work / "bench.db",
                           ours_overrides(w, user, work), threads=threads)
        if run.returncode != 0:
            return Measure(error=f"rlcockpit train exited {run.returncode}:\n{run.stderr_tail}")
        return read_ours(run.store_uri, run.run_id, w)


def read_ours(uri: str, run_id: str, w: Workload) -> Measure:
    step_s = tr.step_wall_times(uri, run_id)[1:]
    names = ["response/length_mean", *(f"time/{p}_s" for p in PHASES)]
    series = tr.read_series(uri, run_id, names)
    lengths = series["response/length_mean"].values[1:] if "response/length_mean" in series else ()
    samples = w.batch_size * w.n_samples
    phases = {p: tr.median(list(series[f"time/{p}_s"].values[1:]))
              for p in PHASES if f"time/{p}_s" in series}
    return Measure(step_s=step_s, tokens=[v * samples for v in lengths], phases=phases)


# --------------------------------------------------------------------------------------------
# interleaving and summary


def schedule(algos: list[str], rounds: int) -> list[list[tuple[str, str]]]:
    """Per round the (side, algo) runs; our run and TRL's alternate, and the order flips per round."""
    out = []
    for r in range(rounds):
        pair = ("ours", "trl") if r % 2 == 0 else ("trl", "ours")
        out.append([(side, algo) for algo in algos for side in pair])
    return out


def summarise(measures: list[Measure]) -> dict:
    ok = [m for m in measures if not m.error and m.step_s]
    if not ok:
        errors = [m.error for m in measures if m.error]
        return {"s_per_step": None, "tokens_per_s": None, "runs": 0, "error": errors[-1] if errors else ""}
    per_run = [tr.median(m.step_s) for m in ok]
    # Per-step rates, median over every counted step of every run: a load spike from another job
    # on the shared machine moves one step, not the figure (as for s / step).
    rates = [t / s for m in ok for t, s in zip(m.tokens, m.step_s, strict=False) if s > 0]
    phases = {}
    for p in PHASES:
        vals = [m.phases[p] for m in ok if m.phases.get(p) is not None]
        if vals:
            phases[p] = tr.median(vals)
    return {"s_per_step": tr.median(per_run), "tokens_per_s": tr.median(rates), "best_s": min(per_run),
            "runs": len(ok), "per_run_s": [round(x, 4) for x in per_run], "phases": phases, "error": ""}


def paired_ratio(ours: list[float], trl: list[float]) -> float | None:
    """Median over rounds of ours / TRL of the two runs of the same round (adjacent in time, so a
    load change on the shared machine hits both); needs both runs of a round to have succeeded."""
    pairs = [a / b for a, b in zip(ours, trl, strict=False) if b]
    return round(tr.median(pairs), 3) if pairs and len(ours) == len(trl) else None


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def machine() -> dict:
    """Cores and load: on a shared machine the absolute numbers move, the interleaved ratios less."""
    return {"cores": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2)}


def run_all(args: argparse.Namespace) -> dict:
    load_before = machine()
    algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    steps, rounds, warm = (3, 1, 0) if args.quick else (args.steps, args.rounds,
                                                          0 if args.no_warmup_round else 1)
    pythons = {"grpo": args.trl_python, "ppo": args.trl_ppo_python}
    user = {a: quick_overrides(a, args.overrides) if args.quick else list(args.overrides) for a in algos}
    loads = {a: workload(a, steps, user[a]) for a in algos}
    probes = {a: probe_trl(pythons[a], a) for a in algos}
    results: dict[tuple[str, str], list[Measure]] = {(s, a): [] for a in algos for s in ("ours", "trl")}
    for r, runs in enumerate(schedule(algos, warm + rounds)):
        for side, algo in runs:
            if side == "trl" and probes[algo][1] != "ok":
                continue
            t0 = time.perf_counter()
            m = (run_ours_once(loads[algo], user[algo], args.threads) if side == "ours"
                 else run_trl_once(pythons[algo], loads[algo], args.threads))
            tag = "warm-up" if r < warm else f"round {r - warm + 1}"
            print(f"[{tag}] {side}-{algo}: {time.perf_counter() - t0:.1f}s "
                  f"{'ERROR ' + m.error.splitlines()[0] if m.error else ''}", file=sys.stderr)
            if r >= warm:
                results[(side, algo)].append(m)
            if args.runs_log is not None:
                log_run(args.runs_log, tag, side, algo, m)
    return {"algos": algos, "loads": loads, "probes": probes, "steps": steps, "rounds": rounds,
            "summary": {k: summarise(v) for k, v in results.items()},
            "machine": {**load_before, "load_avg_1m_after": machine()["load_avg_1m"]}}


def log_run(path: Path, tag: str, side: str, algo: str, m: Measure) -> None:
    row = {"round": tag, "side": side, "algo": algo, **asdict(m), "load_avg_1m": os.getloadavg()[0]}
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")


def headline(res: dict, threads: int) -> dict:
    out: dict = {}
    for algo in res["algos"]:
        ours, trl = res["summary"][("ours", algo)], res["summary"][("trl", algo)]
        version, status = res["probes"][algo]
        out.update({
            f"ours_{algo}_s_per_step": _r(ours["s_per_step"]),
            f"trl_{algo}_s_per_step": _r(trl["s_per_step"]),
            f"{algo}_speed_ratio": ratio(ours["s_per_step"], trl["s_per_step"]),
            f"ours_{algo}_best_s_per_step": _r(ours.get("best_s")),
            f"trl_{algo}_best_s_per_step": _r(trl.get("best_s")),
            f"{algo}_best_speed_ratio": ratio(ours.get("best_s"), trl.get("best_s")),
            f"{algo}_paired_speed_ratio": paired_ratio(ours.get("per_run_s", []), trl.get("per_run_s", [])),
            f"ours_{algo}_tokens_per_s": _r(ours["tokens_per_s"], 1),
            f"trl_{algo}_tokens_per_s": _r(trl["tokens_per_s"], 1),
            f"{algo}_tokens_per_s_ratio": ratio(ours["tokens_per_s"], trl["tokens_per_s"]),
            f"trl_{algo}_version": version,
            f"trl_{algo}_status": status if status != "ok" or not trl["error"] else trl["error"][:300],
            f"ours_{algo}_phase_s": {k: _r(v) for k, v in ours.get("phases", {}).items()},
            f"{algo}_per_run_s": {"ours": ours.get("per_run_s", []), "trl": trl.get("per_run_s", [])},
        })
        if ours["error"]:
            out[f"ours_{algo}_error"] = ours["error"][:500]
    out.update(steps_per_run=res["steps"], rounds=res["rounds"], threads=threads, machine=res["machine"],
               workload={a: asdict(w) for a, w in res["loads"].items()})
    return out


def _r(x: float | None, nd: int = 4) -> float | None:
    return round(x, nd) if x is not None else None


def print_table(res: dict, head: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Trainer speed: ours vs TRL (same model, prompts, reward, batch, length, KL)")
    for col in ("algo", "trainer", "s / step", "best run s / step", "tokens / s", "runs",
                "ours/TRL s/step", "paired ratio", "note"):
        table.add_column(col, justify="right" if col not in ("algo", "trainer", "note") else "left")
    for algo in res["algos"]:
        for side in ("ours", "trl"):
            s = res["summary"][(side, algo)]
            name = "rlcockpit" if side == "ours" else f"TRL {head[f'trl_{algo}_version'] or ''}".strip()
            note = s["error"].splitlines()[0][:60] if s["error"] else ""
            if side == "trl" and res["probes"][algo][1] != "ok":
                note = res["probes"][algo][1]
            ours_row = side == "ours"
            table.add_row(algo, name, _fmt(s["s_per_step"], 3), _fmt(s.get("best_s"), 3),
                          _fmt(s["tokens_per_s"], 0), str(s["runs"]),
                          _fmt(head[f"{algo}_speed_ratio"], 2) if ours_row else "",
                          _fmt(head[f"{algo}_paired_speed_ratio"], 2) if ours_row else "", note)
    Console(stderr=False).print(table)
    for algo in res["algos"]:
        phases = head.get(f"ours_{algo}_phase_s") or {}
        if phases:
            parts = ", ".join(f"{k} {v:.3f}s" for k, v in phases.items() if v is not None)
            print(f"ours-{algo} median phase times per step: {parts}")


def _fmt(x: float | None, nd: int) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    res = run_all(args)
    head = headline(res, args.threads)
    print_table(res, head)
    tr.print_json_last(head)
    failed = any(head.get(f"ours_{a}_s_per_step") is None for a in res["algos"])
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
