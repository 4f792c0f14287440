"""The real-run corpus benchmark: do the detectors hold on real RL post-training runs?

The corpus (``../shared/real_runs/``, README.md there) holds per-step logs of 37 public runs —
TRL, verl, ms-swift, DeepSpeed-Chat and custom trainers, models from ~30 M to 9 B parameters —
with labels in ``index.json``. It is data, not code: it is read from ``--corpus`` (default
``../shared/real_runs`` next to the repository) and never copied into the repository.

Each run is imported through the code path of ``rlcockpit import`` (``read_paths`` +
``write_import`` into a temporary SQLite store; custom trainers get the ``--map`` a user would
pass, declared in :data:`USER_IMPORT` below) and replayed offline through the diagnostics engine
with its default config (``rlcockpit.diagnostics.offline.diagnose_run``, as ``rlcockpit doctor``).
Thresholds are not tuned here: this script only measures.

Scoring (issue 10, point 5):

- **healthy** runs: no red or black finding, and at most 1 orange per 1,000 logged steps (the
  logged step span, last - first + 1);
- **failures** with a ``failure_step`` and the **anomalies** the corpus README lists: found when a
  raised, escalated or worsened finding of a relevant detector family (the detector's ``family``) lies within
  :data:`WINDOW` steps of the onset, in the run's own step units. Each anomaly's onset is computed
  from the raw log by a rule declared in :data:`ANOMALIES`; the latency is signed (negative: found
  before the declared onset);
- **unknown** runs: their findings are listed, with no target.

Prints a Markdown table per run, then the scored targets and the findings of the unknown runs;
``--docs`` writes them into docs/detection.md between the real-runs markers. The LAST stdout line is
one JSON object with the headline numbers.

    python benchmarks/real_runs.py [--corpus DIR] [--docs] [--only 011,014]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlcockpit.diagnostics.base import NEWS  # the statuses that tell a person something new

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = ROOT.parent / "shared" / "real_runs"
DOCS = ROOT / "docs" / "detection.md"
DOC_BEGIN, DOC_END = "<!-- real-runs:begin -->", "<!-- real-runs:end -->"
WINDOW = 20  # steps either side of an onset, in the run's own step units
ORANGE_PER_1K = 1.0
TIERS = ("yellow", "orange", "red", "black")
HEALTHY, FAILURE, UNKNOWN = "healthy as far as stated", "failure reported", "unknown"


# The split of the corpus, declared by source repository before any tuning on the 37-run corpus
# (issue 26, point 6). Runs 001-025 were read while earlier detector versions were tuned, so their
# repositories can only be calibration data; the evaluation half is every repository that appears
# ONLY among the 12 issue logs added later (102-119), which no detector change has been tuned on.
# Runs of a calibration repository added later (102 DeepSpeedExamples, 103 verl) stay calibration.
# Thresholds are tuned on the calibration half only; both halves are reported, separately.
EVALUATION_REPOS = frozenset({
    "huggingface/open-r1", "huggingface/trl", "unslothai/unsloth", "rllm-org/rllm",
    "FareedKhan-dev/train-deepseek-r1", "hiyouga/ChatGLM-Efficient-Tuning",
    "Limpidjunewind/tinyzero-experiments", "nvidia-cosmos/cosmos-reason1",
})
CALIBRATION, EVALUATION = "calibration", "evaluation"


def split_of(entry: dict[str, Any]) -> str:
    """Which half of the corpus a run belongs to, by its source repository."""
    return EVALUATION if entry.get("source_repo") in EVALUATION_REPOS else CALIBRATION


@dataclass(frozen=True)
class UserImport:
    """What a user of a custom trainer would pass to ``rlcockpit import`` for this run."""

    key_map: dict[str, str] = field(default_factory=dict)  # --map FOREIGN_KEY=catalog/name
    step_key: str | None = None  # --step-key
    why: str = ""


# The maps a user would write for what no alias table knows (run id -> options). DeepSpeed-Chat
# (018, 102) and the MiniMind GRPO keys (006) are read by the alias tables now; MiniMind's KL_ref
# is log pi_ref - log pi (the negative of a KL estimate), so nobody should map it to a KL.
_ROOKWORLD = {"mean_reward": "reward/mean", "kl_div": "kl/token_mean", "loss": "policy/loss"}
USER_IMPORT: dict[str, UserImport] = {
    "007": UserImport({"Fmt": "reward/format/mean", "Correct": "reward/correct/mean",
                       "Avg Len": "response/length_mean", "LR": "optim/lr/actor"},
                      why="MiniMind GRPO v2 console keys the alias table does not know; Fmt / "
                          "Correct are reward components"),
    "013": UserImport(_ROOKWORLD, why="rookworld src/mini GRPO: kl_div is a sampled per-token "
                                      "estimate; loss is the total GRPO loss"),
    "014": UserImport(_ROOKWORLD, why="as 013"),
    "022": UserImport(step_key="episode", why="pasted TRL PPO fragments carry no step: the episode "
                                             "counter orders them"),
    "025": UserImport({"reward": "reward/mean", "retrieval_reward": "reward/retrieval/mean",
                       "update_reward": "reward/update/mean", "attack_reward": "reward/attack/mean"},
                      why="the training script's own reward decomposition"),
}


@dataclass(frozen=True)
class Target:
    """Something the detectors should find: a labelled failure or a README anomaly."""

    run: str
    name: str
    families: tuple[str, ...]
    onset_rule: str  # how the onset step is read off the data
    onset: Callable[[list[dict[str, Any]]], int | None] | None = None  # None: failure_step


def _series(rows: list[dict[str, Any]], key: str) -> list[tuple[int, float]]:
    return [(int(r["step"]), float(r[key])) for r in rows
            if isinstance(r.get(key), (int, float)) and "step" in r]


def first_step(key: str, test: Callable[[float, float], bool]) -> Callable[[list[dict]], int | None]:
    """The first logged step where ``test(value, first logged value)`` holds."""
    def rule(rows: list[dict[str, Any]]) -> int | None:
        points = [(s, v) for s, v in _series(rows, key) if math.isfinite(v)]
        return next((s for s, v in points if test(v, points[0][1])), None) if points else None
    return rule


_LENGTH = ("length_hacking", "levels", "degeneration")
ANOMALIES: tuple[Target, ...] = (
    Target("011", "response length 1,759 -> 1 token", _LENGTH,
           "first logged step with response_length/mean < 10% of its first value",
           first_step("response_length/mean", lambda v, v0: v < 0.1 * v0)),
    Target("011", "entropy -> 2e-4", ("entropy", "levels"),
           "first logged step with actor/entropy < 10% of its first value",
           first_step("actor/entropy", lambda v, v0: v < 0.1 * v0)),
    Target("014", "loss up to 1.3e8", ("nonfinite", "gradients", "levels"),
           "first logged step with |loss| >= 1e4 (the note: explodes from ~410, values 1e4-1.3e8)",
           first_step("loss", lambda v, v0: abs(v) >= 1e4)),
    Target("014", "KL to 40", ("kl", "levels"),
           "first logged step with kl_div > 10 (the note: 10-40 in the last ~10 steps)",
           first_step("kl_div", lambda v, v0: v > 10)),
    Target("017", "length 53 -> ~3 tokens", _LENGTH,
           "first logged step with completions/mean_length < 10% of its first value",
           first_step("completions/mean_length", lambda v, v0: v < 0.1 * v0)),
    Target("023", "length ~1,000 -> 5,000 tokens", ("length_hacking", "levels"),
           "first logged step with response_length/mean > 2x its first value",
           first_step("response_length/mean", lambda v, v0: v > 2 * v0)),
    Target("016", "no learning signal on 84/100 steps", ("levels", "stall", "reward_shape"),
           "first logged step with frac_reward_zero_std = 1 (every group has equal rewards)",
           first_step("frac_reward_zero_std", lambda v, v0: v >= 1.0)),
)

# Relevant families per reported failure type (matched by a word of ``failure_type``).
_COLLAPSE = ("entropy", "levels", "reward_shape", "reward_oscillation", "stall")
FAILURE_FAMILIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("nan", ("nonfinite", "levels")),
    ("inf_", ("nonfinite", "levels")),
    ("entropy_explosion", _COLLAPSE),
    ("no_update", ("gradients", "kl", "levels", "stall")),
    ("no_learning", ("stall", "kl", "levels", "reward_shape")),
    ("reward_hacking", ("reward_hacking", "length_hacking", "degeneration")),
    # a reward (or one of its components) that collapses or plateaus: the run-level checks, and from
    # 2026-12-07 on the component checks (one component earned instead of another)
    ("collapse", ("stall", "levels", "reward_shape", "rm_component_bias")),
    ("plateau", ("stall", "levels", "reward_shape", "rm_component_bias")),
)


def failure_families(failure_type: str | None) -> tuple[str, ...]:
    text = (failure_type or "").lower()
    return next((fams for word, fams in FAILURE_FAMILIES if word in text), ())


@dataclass
class RunResult:
    """One corpus run after import and offline replay."""

    entry: dict[str, Any]
    rows: list[dict[str, Any]]
    steps: int = 0  # logged step span
    first: int | None = None
    findings: list[dict[str, Any]] = field(default_factory=list)
    coverage: list[Any] = field(default_factory=list)
    derived: dict[str, int] = field(default_factory=dict)
    logged: Any = None  # LoggedCoverage: detectors whose inputs the log carries, and which ran
    error: str = ""

    @property
    def run(self) -> str:
        return self.entry["file"][:3]

    def tiers(self) -> Counter[str]:
        return Counter(f["severity"] for f in self.findings)


# ---------------------------------------------------------------------------- import and replay

def read_rows(path: Path) -> list[dict[str, Any]]:
    """The raw log (JSON Lines; Python's json reads the corpus' bare NaN tokens)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def import_run(path: Path, options: UserImport, store_uri: str, run_id: str) -> Any:
    """Import ``path`` as ``rlcockpit import`` does (read and check every file, then write)."""
    from rlcockpit.integrations.importers import read_paths, write_import
    from rlcockpit.store import open_store

    parsed = read_paths([path], key_map=options.key_map, step_key=options.step_key)
    store = open_store(store_uri)
    writer = store.writer()
    try:
        write_import(writer, parsed, project="real-runs", name=path.stem, run_id=run_id)
    finally:
        writer.close()
        store.close()
    return parsed


def diagnose(store_uri: str, run_id: str) -> tuple[Any, Any]:
    """Replay a stored run as ``rlcockpit doctor`` does, with the default diagnostics config; also
    measure its coverage against what the log carries (issue 26, point 4), as doctor prints it."""
    from rlcockpit.diagnostics import DiagnosticsConfig
    from rlcockpit.diagnostics.coverage import logged_coverage
    from rlcockpit.diagnostics.offline import diagnose_run
    from rlcockpit.integrations.aliases import catalog_meanings
    from rlcockpit.store import open_store

    store = open_store(store_uri, create=False)
    reader = store.reader()
    try:
        report = diagnose_run(reader, run_id, DiagnosticsConfig())
        return report, logged_coverage(report.coverage, reader.metric_names(run_id),
                                       catalog_meanings)
    finally:
        reader.close()
        store.close()


def check_default_engine() -> None:
    """Fail at setup, not 25 times: the default diagnostics config must build an engine."""
    from rlcockpit.diagnostics import DiagnosticsConfig
    from rlcockpit.diagnostics.engine import Engine

    try:
        Engine.from_config(DiagnosticsConfig())
    except Exception as exc:  # any error here makes every run's score meaningless
        raise SystemExit(f"the default diagnostics config does not build an engine "
                         f"({type(exc).__name__}: {exc}); nothing was scored") from exc


def evaluate(entry: dict[str, Any], corpus: Path, store_uri: str) -> RunResult:
    path = corpus / entry["file"]
    result = RunResult(entry=entry, rows=read_rows(path))
    options = USER_IMPORT.get(entry["file"][:3], UserImport())
    run_id = f"rr-{entry['file'][:3]}"
    stage = "import"
    try:  # one unreadable run must not hide the other 24; the table says which stage failed
        parsed = import_run(path, options, store_uri, run_id)
        stage = "diagnosis"
        report, logged = diagnose(store_uri, run_id)
    except Exception as exc:
        result.error = f"{stage} failed: {type(exc).__name__}: {exc}"
        return result
    result.first = report.first_step
    result.steps = (report.last_step - report.first_step + 1) if report.steps else 0
    family_of = {c.detector: c.family for c in report.coverage}  # the detector class's family
    result.findings = [{"step": f.step, "detector": f.detector, "severity": f.severity,
                        "family": family_of.get(f.detector, ""), "message": f.message}
                       for f in report.findings if f.status in NEWS]
    result.coverage = list(report.coverage)
    result.logged = logged
    result.derived = dict(parsed.derived)
    return result


# ---------------------------------------------------------------------------- scoring

def targets_of(result: RunResult) -> list[tuple[Target, int | None]]:
    """(target, onset step) of the labelled failure with a failure_step and of the anomalies."""
    out: list[tuple[Target, int | None]] = []
    entry = result.entry
    if entry.get("label") == FAILURE and entry.get("failure_step") is not None:
        target = Target(result.run, f"reported: {entry.get('failure_type')}",
                        failure_families(entry.get("failure_type")), "failure_step of index.json")
        out.append((target, int(entry["failure_step"])))
    for target in ANOMALIES:
        if target.run == result.run and target.onset is not None:
            out.append((target, target.onset(result.rows)))
    return out


def first_match(result: RunResult, families: Sequence[str], onset: int | None) -> dict | None:
    """The earliest raised, escalated or worsened finding of a relevant family within WINDOW of ``onset``."""
    if onset is None:
        return None
    hits = [f for f in result.findings
            if f["family"] in families and abs(f["step"] - onset) <= WINDOW]
    return min(hits, key=lambda f: f["step"]) if hits else None


def healthy_verdict(result: RunResult) -> tuple[bool, int, int]:
    """(passes, red+black count, orange count) of a run labelled healthy."""
    tiers = result.tiers()
    severe, orange = tiers["red"] + tiers["black"], tiers["orange"]
    allowed = ORANGE_PER_1K * result.steps / 1000
    return (not result.error and severe == 0 and orange <= allowed), severe, orange


def coverage_cell(result: RunResult) -> str:
    """Detectors run / skipped, then run of those whose inputs the log carries."""
    ran = sum(c.state == "ran" for c in result.coverage)
    if not result.coverage:
        return "-"
    logged = result.logged
    carried = f"; {logged.ran} of {logged.carried} carried" if logged is not None else ""
    return f"{ran} / {len(result.coverage) - ran}{carried}"


def tiers_cell(result: RunResult) -> str:
    tiers = result.tiers()
    return " / ".join(str(tiers[t]) for t in TIERS)


# ---------------------------------------------------------------------------- report

def run_row(result: RunResult, scored: dict[str, list[tuple[Target, int | None, dict | None]]]) -> str:
    entry = result.entry
    label = entry.get("label", UNKNOWN)
    if result.error:
        expect, verdict = "-", result.error
    elif label == HEALTHY:
        ok, severe, orange = healthy_verdict(result)
        expect = f"no red/black, <= {ORANGE_PER_1K * result.steps / 1000:.2f} orange"
        verdict = f"{'pass' if ok else 'FAIL'} ({severe} red/black, {orange} orange)"
    elif scored.get(result.run):
        expect = "; ".join(f"{t.name} @ {onset}" for t, onset, _ in scored[result.run])
        verdict = "; ".join(_found_text(onset, hit) for _, onset, hit in scored[result.run])
    elif label == FAILURE:
        fams = failure_families(entry.get("failure_type"))
        expect = f"reported: {entry.get('failure_type')} (no onset step)"
        hit = any(f["family"] in fams for f in result.findings)
        verdict = f"not scored; a {'/'.join(fams) or '-'} finding: {'yes' if hit else 'no'}"
    else:
        expect, verdict = "none (unknown)", "listed below"
    cells = [f"{entry['file'][:-6]}", label, str(result.steps), expect, tiers_cell(result),
             verdict, coverage_cell(result)]
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _found_text(onset: int | None, hit: dict | None) -> str:
    if onset is None:
        return "onset not in data"
    if hit is None:
        return "missed"
    return f"yes, {hit['detector']} {hit['severity']} @ {hit['step']} ({hit['step'] - onset:+d})"


def score_targets(results: list[RunResult]) -> dict[str, list[tuple[Target, int | None, dict | None]]]:
    scored: dict[str, list[tuple[Target, int | None, dict | None]]] = {}
    for result in results:
        for target, onset in targets_of(result):
            hit = first_match(result, target.families, onset)
            scored.setdefault(result.run, []).append((target, onset, hit))
    return scored


def provenance() -> str:
    """Which code was measured: the commit, and whether src/ had uncommitted changes."""
    def git(*args: str) -> str:
        try:
            out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
        except OSError:
            return ""
        return out.stdout if out.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD").strip() or "unknown"
    dirty = [line[3:] for line in git("status", "--porcelain", "--", "src").splitlines()]
    changed = f"; uncommitted in src/: {', '.join(sorted(dirty))}" if dirty else ""
    return f"Measured {time.strftime('%Y-%m-%d')} at commit {commit}{changed}."


def report_text(results: list[RunResult], scored: dict, present_families: set[str]) -> str:
    lines = [provenance(), "",
             "| run | label | steps | expectation | findings y / o / r / b | detected? latency | "
             "detectors run / skipped; run of those whose inputs the log carries |", "| --- | --- | --- | --- | --- | --- | --- |"]
    lines += [run_row(r, scored) for r in results]
    lines += ["", "Scored targets (found: a raised, escalated or worsened finding of a relevant family within "
              f"{WINDOW} steps of the onset):", "",
              "| run | target | onset rule | onset | relevant families | found |",
              "| --- | --- | --- | --- | --- | --- |"]
    for run, items in scored.items():
        for target, onset, hit in items:
            fams = ", ".join(f if f in present_families else f"{f} (no such detector)"
                             for f in target.families) or "none declared"
            cells = [run, target.name, target.onset_rule, str(onset), fams, _found_text(onset, hit)]
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    lines += ["", "Custom trainers, imported with what a user would pass:", ""]
    for run, opts in USER_IMPORT.items():
        flags = [f"--map '{k}={v}'" for k, v in opts.key_map.items()]
        flags += [f"--step-key {opts.step_key}"] if opts.step_key else []
        lines.append(f"- {run}: `{' '.join(flags)}` ({opts.why})")
    lines += ["", "Every red or black finding on the corpus, with the data it states (issue 26: a "
              "red must state a consequence that is bad in its own units, or an effect that "
              "persists):", "", "| run | half | label | step | detector | severity | what it says |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        for f in r.findings:
            if f["severity"] in ("red", "black"):
                cells = [r.run, split_of(r.entry), r.entry.get("label", UNKNOWN), str(f["step"]),
                         f["detector"], f["severity"], f["message"][:220]]
                lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    lines += ["", "Findings of the runs labelled unknown (raised, escalated or worsened; first 8):", ""]
    for r in results:
        if r.entry.get("label") == UNKNOWN:
            lines.append(f"- {r.entry['file'][:-6]}: {_findings_list(r)}")
    return "\n".join(lines)


def _findings_list(result: RunResult) -> str:
    if result.error:
        return result.error
    if not result.findings:
        return "none"
    items = [f"{f['detector']} {f['severity']} @ {f['step']}" for f in result.findings[:8]]
    more = len(result.findings) - 8
    return ", ".join(items) + (f", +{more} more" if more > 0 else "")


def headline(results: list[RunResult], scored: dict, wall: float, missing_families: list[str]
             ) -> dict[str, Any]:
    healthy = [r for r in results if r.entry.get("label") == HEALTHY]
    verdicts = [healthy_verdict(r) for r in healthy]
    healthy_steps = sum(r.steps for r in healthy)
    oranges = sum(v[2] for v in verdicts)
    fail_items = [i for items in scored.values() for i in items if i[0].onset is None]
    anomaly_items = [i for items in scored.values() for i in items if i[0].onset is not None]
    latencies = [hit["step"] - onset for _, onset, hit in fail_items + anomaly_items if hit]
    return {
        "benchmark": "real_runs", "runs": len(results),
        "errors": [r.run for r in results if r.error],
        "healthy_runs_passing": f"{sum(v[0] for v in verdicts)}/{len(healthy)}",
        "healthy_red_or_black": sum(v[1] for v in verdicts),
        "healthy_orange_per_1k_steps": round(1000 * oranges / healthy_steps, 2) if healthy_steps else None,
        "failures_found": f"{sum(1 for i in fail_items if i[2])}/{len(fail_items)}",
        "anomalies_found": f"{sum(1 for i in anomaly_items if i[2])}/{len(anomaly_items)}",
        "failures_without_onset_flagged": _flagged_without_onset(results),
        "missed": [f"{t.run}: {t.name}" for items in scored.values() for t, _, hit in items if not hit],
        "latencies": latencies,
        "unknown_runs_findings": dict(sum((r.tiers() for r in results
                                            if r.entry.get("label") == UNKNOWN), Counter())),
        "unknown_orange_or_worse_per_1k_steps": _severe_rate(
            [r for r in results if r.entry.get("label") == UNKNOWN]),
        "per_split": {half: _split_headline([r for r in results if split_of(r.entry) == half],
                                            scored)
                      for half in (CALIBRATION, EVALUATION)
                      if any(split_of(r.entry) == half for r in results)},
        "detectors_carried_ran": f"{sum(r.logged.ran for r in results if r.logged)}/"
                                 f"{sum(r.logged.carried for r in results if r.logged)}",
        "mean_detectors_run": round(sum(sum(c.state == "ran" for c in r.coverage) for r in results)
                                    / max(len(results), 1), 1),
        "families_without_detector": missing_families,
        "window_steps": WINDOW, "wall_s": round(wall, 1),
    }


def _severe_rate(results: list[RunResult]) -> float | None:
    """Orange, red and black findings per 1,000 logged steps (issue 26: target <= 5 on the
    unlabelled runs)."""
    steps = sum(r.steps for r in results)
    severe = sum(r.tiers()[t] for r in results for t in ("orange", "red", "black"))
    return round(1000 * severe / steps, 2) if steps else None


def _split_headline(results: list[RunResult], scored: dict) -> dict[str, Any]:
    """The headline numbers of one half of the corpus."""
    runs = {r.run for r in results}
    items = [i for run, its in scored.items() if run in runs for i in its]
    healthy = [r for r in results if r.entry.get("label") == HEALTHY]
    verdicts = [healthy_verdict(r) for r in healthy]
    return {
        "runs": len(results),
        "healthy_runs_passing": f"{sum(v[0] for v in verdicts)}/{len(healthy)}",
        "targets_found": f"{sum(1 for i in items if i[2])}/{len(items)}",
        "failures_without_onset_flagged": _flagged_without_onset(results),
        "unknown_orange_or_worse_per_1k_steps": _severe_rate(
            [r for r in results if r.entry.get("label") == UNKNOWN]),
        "red_or_black": sum(r.tiers()["red"] + r.tiers()["black"] for r in results),
        "detectors_carried_ran": f"{sum(r.logged.ran for r in results if r.logged)}/"
                                 f"{sum(r.logged.carried for r in results if r.logged)}",
    }


def _flagged_without_onset(results: list[RunResult]) -> str:
    """Reported failures without an onset step (not scored): how many got a relevant finding."""
    runs = [r for r in results if r.entry.get("label") == FAILURE
            and r.entry.get("failure_step") is None]
    flagged = sum(any(f["family"] in failure_families(r.entry.get("failure_type"))
                      for f in r.findings) for r in runs)
    return f"{flagged}/{len(runs)}"


def write_docs(path: Path, table: str) -> None:
    """Replace the text between the real-runs markers (adding the section when it is missing)."""
    text = path.read_text(encoding="utf-8")
    block = f"{DOC_BEGIN}\n{table}\n{DOC_END}"
    start, end = text.find(DOC_BEGIN), text.find(DOC_END)
    if start >= 0 and end > start:
        text = text[:start] + block + text[end + len(DOC_END):]
    else:
        text = text.rstrip("\n") + "\n\n" + SECTION + "\n" + block + "\n"
    path.write_text(text, encoding="utf-8")


SECTION = """## The real-run corpus

`benchmarks/real_runs.py` (`make bench-real-runs`) imports each of the 37 real runs of
`../shared/real_runs/` through the code path of `rlcockpit import` (what no alias table knows with
the `--map` a user would pass, listed below), replays it through the diagnostics engine with the
default config, as `rlcockpit doctor` does, and scores it: runs labelled healthy must have no red
or black finding and at most 1 orange per 1,000 logged steps; the labelled failures with a failure
step and the anomalies the corpus README lists must be found by a detector of a relevant family
within 20 steps (the run's own units) of their onset, whose rule is stated per target; runs
labelled unknown list their findings, and their orange-or-worse findings per 1,000 logged steps
are counted (target <= 5). Findings count raised, escalated and worsened ones (a finding reported
again after growing 100×). The last column also says how many of the detectors whose inputs the
log carries (under any name a trainer uses) ran: a detector counts when the log carries what it
cannot run without, by its own `Detector.able` test (a KL detector needs a KL, not the response
length it reads to convert one per token).

The corpus is split by source repository, declared before any tuning on the 37-run corpus
(`EVALUATION_REPOS` in the script): runs 001-025 were read while earlier detector versions were
tuned, so their repositories are calibration data; the evaluation half is the 8 repositories that
appear only among the issue logs added later (104-111, 118, 119), on which nothing was tuned.
"""


def load_index(corpus: Path, only: set[str], split: str = "all") -> list[dict[str, Any]]:
    index = corpus / "index.json"
    if not index.is_file():
        raise SystemExit(f"no index.json in {corpus}: pass --corpus DIR (the real-run corpus, "
                         "default ../shared/real_runs next to the repository)")
    entries = json.loads(index.read_text(encoding="utf-8"))
    return [e for e in entries if (not only or e["file"][:3] in only)
            and split in ("all", split_of(e))]


def detector_families() -> set[str]:
    from rlcockpit.diagnostics import registry

    return {cls.family for cls in registry.available().values()}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS,
                   help="folder with index.json and the runs (default: ../shared/real_runs)")
    p.add_argument("--docs", action="store_true",
                   help="write the tables into docs/detection.md between the real-runs markers")
    p.add_argument("--docs-file", type=Path, default=DOCS, help=argparse.SUPPRESS)  # for tests
    p.add_argument("--only", default="", help="comma-separated run ids, e.g. 011,014")
    p.add_argument("--split", choices=("all", CALIBRATION, EVALUATION), default="all",
                   help="score one half of the corpus only (split_of: by source repository)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    entries = load_index(args.corpus, {s.strip() for s in args.only.split(",") if s.strip()},
                         args.split)
    check_default_engine()
    with tempfile.TemporaryDirectory(prefix="rlcockpit-real-runs-") as tmp:
        uri = f"sqlite:///{tmp}/real_runs.db"
        results = []
        for entry in entries:
            print(f"{entry['file']} ...", file=sys.stderr, flush=True)
            results.append(evaluate(entry, args.corpus, uri))
    present = detector_families()
    declared = {f for t in ANOMALIES for f in t.families} | {f for _, fs in FAILURE_FAMILIES for f in fs}
    scored = score_targets(results)
    table = report_text(results, scored, present)
    print(table)
    if args.docs:
        write_docs(args.docs_file, table)
    print(json.dumps(headline(results, scored, time.perf_counter() - t0, sorted(declared - present))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
