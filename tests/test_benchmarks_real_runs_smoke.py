"""benchmarks/real_runs.py end to end on a tiny synthetic corpus built here (the real corpus lives
outside the repository and is not available in CI): import through `rlcockpit import`'s code path,
offline replay, scoring, the per-run table, --docs between the markers, and the headline JSON on
the last line."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "real_runs.py"


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _healthy_trl(steps: int = 40) -> list[dict]:
    return [{"step": s, "reward": 0.5 + 0.002 * s + 0.01 * math.sin(s), "reward_std": 0.3,
             "kl": 0.01 + 0.0001 * s, "entropy": 0.4 - 0.001 * s, "completion_length": 100.0,
             "grad_norm": 1.0 + 0.05 * math.cos(s)} for s in range(1, steps + 1)]


def _nan_verl(steps: int = 40, nan_at: int = 30) -> list[dict]:
    rows = []
    for s in range(1, steps + 1):
        loss = math.nan if s >= nan_at else 0.02
        rows.append({"step": s, "actor/pg_loss": loss, "actor/entropy": 0.3,
                     "critic/score/mean": 0.4, "response_length/mean": 200.0})
    return rows


def _episode_ppo() -> list[dict]:  # no step key: ordered by `episode` (run 022's options)
    return [{"episode": 96 + 16 * i, "objective/kl": 7.0 + 0.1 * i, "objective/scores": 2.3,
             "policy/entropy_avg": 1.1} for i in range(6)]


def _corpus(root: Path) -> Path:
    corpus = root / "corpus"
    corpus.mkdir()
    _write_jsonl(corpus / "002_tiny_healthy.jsonl", _healthy_trl())
    _write_jsonl(corpus / "019_tiny_nan.jsonl", _nan_verl())
    _write_jsonl(corpus / "022_tiny_episodes.jsonl", _episode_ppo())
    index = [
        {"file": "002_tiny_healthy.jsonl", "label": "healthy as far as stated",
         "failure_type": None, "failure_step": None, "note": "synthetic"},
        {"file": "019_tiny_nan.jsonl", "label": "failure reported",
         "failure_type": "nan_divergence", "failure_step": 30, "note": "synthetic"},
        {"file": "022_tiny_episodes.jsonl", "label": "unknown", "failure_type": None,
         "failure_step": None, "note": "synthetic"},
    ]
    (corpus / "index.json").write_text(json.dumps(index), encoding="utf-8")
    return corpus


def test_real_runs_benchmark_on_a_mini_corpus(tmp_path):
    corpus = _corpus(tmp_path)
    docs = tmp_path / "detection.md"
    docs.write_text("# Detection\n\nsome text\n", encoding="utf-8")
    cmd = [sys.executable, str(SCRIPT), "--corpus", str(corpus), "--docs", "--docs-file", str(docs)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    *body, last = proc.stdout.strip().splitlines()
    head = json.loads(last)
    assert head["runs"] == 3 and head["errors"] == []
    assert head["failures_found"] == "1/1"  # the NaN loss at step 30 is found by nonfinite
    assert head["healthy_runs_passing"].endswith("/1") and head["anomalies_found"] == "0/0"
    text = "\n".join(body)
    assert "| 019_tiny_nan | failure reported | 40 |" in text
    assert "yes, nonfinite red @ 30 (+0)" in text
    assert "| 022_tiny_episodes | unknown | 81 |" in text  # episodes 96..176 via --step-key episode
    assert "detectors run / skipped" in text
    written = docs.read_text(encoding="utf-8")
    assert written.startswith("# Detection\n\nsome text\n")
    assert "## The real-run corpus" in written and "<!-- real-runs:begin -->" in written
    assert "| 019_tiny_nan |" in written.split("<!-- real-runs:begin -->")[1]
    # a second --docs run replaces the block between the markers, nothing else
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert docs.read_text(encoding="utf-8").count("<!-- real-runs:begin -->") == 1
    assert docs.read_text(encoding="utf-8").count("## The real-run corpus") == 1


def test_missing_corpus_says_how_to_point_at_it(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--corpus", str(tmp_path / "nope")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "pass --corpus DIR" in proc.stderr
