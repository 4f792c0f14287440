"""Smoke tests of the REAL command on the tiny world: ``python -m rlcockpit train --config
examples/{ppo,grpo}_tiny.yaml ...`` for 3 steps in a subprocess, then everything a user would look
for is read back from the store: the metric list, samples with token arrays, phases, checkpoints —
and the policy's weights really changed."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlcockpit.metrics.catalog import spec_for
from rlcockpit.store.base import SampleQuery
from rlcockpit.trainer.step_metrics import LOGGED_METRICS
from rlcockpit.world import SFT_CHECKPOINT
from trainer_testkit import reader

ROOT = Path(__file__).resolve().parent.parent
STEPS = 3
EVAL_PROMPTS = 24
BASE = ["reward/mean", "reward/std", "reward/min", "reward/max", "reward/raw/mean", "reward/normalized/mean",
        "reward/nonfinite_total", "update/skipped_total", "reward/scale", "kl/mean", "kl/token_mean", "kl/token_max", "kl/token_p99",
        "kl/coef", "kl/cycle_delta", "policy/entropy", "policy/approx_kl", "policy/clip_frac",
        "policy/ratio_mean", "policy/ratio_max", "policy/loss", "policy/clip_eps", "policy/entropy_coef",
        "ppo/epochs", "advantage/mean", "advantage/std", "advantage/abs_median", "advantage/whitened_std",
        "response/length_mean", "response/length_std", "response/length_max", "response/truncated_frac",
        "response/eos_frac", "response/repetition_rate", "response/ppl", "rollout/temperature", "rollout/top_p",
        "rollout/max_new_tokens", "grad/norm/actor", "grad/clip/actor", "grad/clip/embedding",
        "update/ratio/actor", "optim/lr/actor", "perf/tokens_per_s", "perf/samples_per_s", "sys/rss_gb",
        "eval/reward/mean",
        *(f"reward/{c}/mean" for c in ("correctness", "format", "harmlessness", "helpfulness")),
        *(f"grad/norm/layer/{g}" for g in ("embedding", "block_0", "block_1", "block_2", "block_3", "block_4",
                                           "head")),
        *(f"time/{p}_s" for p in ("init", "rollout", "score", "advantage", "update", "eval", "diagnose",
                                  "hotfix", "checkpoint")),
        *(f"eval/{m}" for c in ("math", "knowledge", "safety", "chat")
          for m in (f"accuracy/{c}", f"reward/category/{c}/mean"))]
PPO_ONLY = ["value/loss", "value/mean", "value/std", "value/explained_var", "value/clip_frac", "value/clip_range",
            "returns/mean", "grad/norm/critic", "grad/clip/critic", "update/ratio/critic", "optim/lr/critic"]
GRPO_ONLY = ["reward/frac_zero_std_groups", "kl/pull_share"]


def run_cli(tmp_path: Path, algo: str, *extra: str) -> tuple[str, Path]:
    db = tmp_path / "runs.db"
    ckpt = tmp_path / "ckpt"
    cmd = [sys.executable, "-m", "rlcockpit", "train", "--config", str(ROOT / "examples" / f"{algo}_tiny.yaml"),
           "--store", f"sqlite:///{db}", f"train.steps={STEPS}", "rollout.batch_size=8", "eval.every=2",
           f"eval.max_prompts={EVAL_PROMPTS}", f"checkpoint.dir={ckpt}", "model.threads=1", *extra]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "finished" in proc.stdout and str(db) in proc.stdout
    return f"sqlite:///{db}", ckpt


@pytest.mark.slow
@pytest.mark.parametrize("algo, extra, per_step", [
    ("ppo", ["ppo.minibatch_size=8"], 8),
    ("grpo", ["rollout.batch_size=4", "ppo.minibatch_size=8"], 16),  # 4 prompts x 4 samples (grpo_tiny.yaml)
])
def test_three_steps_of_the_real_cli_record_everything(tmp_path, algo, extra, per_step):
    uri, ckpt = run_cli(tmp_path, algo, *extra)
    r = reader(uri)
    try:
        (run,) = r.list_runs()
        names = set(r.metric_names(run.run_id))
        samples = r.query_samples(run.run_id, SampleQuery(limit=1000))
        with_arrays = r.query_samples(run.run_id, SampleQuery(has_token_arrays=True, limit=1))
        phases = {(p.step, p.phase, p.status) for p in r.read_phases(run.run_id)}
        checkpoints = r.read_checkpoints(run.run_id)
        hists = r.read_histograms(run.run_id, "reward/hist")
    finally:
        r.close()
    assert run.status == "finished" and run.last_step == STEPS
    expected = set(BASE) | set(PPO_ONLY if algo == "ppo" else GRPO_ONLY)
    categories = {s.category for s in samples.items}
    expected |= {f"reward/category/{c}/mean" for c in categories}
    assert expected <= names, sorted(expected - names)
    templates = {spec_for(n).name for n in names}
    assert templates <= set(LOGGED_METRICS), sorted(templates - set(LOGGED_METRICS))  # nothing undocumented
    assert (algo == "ppo") == ("value/loss" in names) and (algo == "grpo") == ("reward/frac_zero_std_groups" in names)

    assert samples.total == STEPS * per_step and with_arrays.total == samples.total
    s = with_arrays.items[0]
    assert s.length > 0 and len(s.tokens) == len(s.logprobs) == len(s.ref_logprobs) == len(s.token_kl) == s.length
    assert s.prompt and s.category and set(s.components) == {"correctness", "format", "harmlessness", "helpfulness"}
    if algo == "grpo":
        groups = [x.group_id for x in samples.items if x.step == 1]
        assert sorted(groups) == [g for g in range(4) for _ in range(4)]
    assert [h.step for h in hists] == list(range(1, STEPS + 1))

    for step in range(1, STEPS + 1):
        for phase in ("ROLLOUT", "SCORE", "ADVANTAGE", "UPDATE", "DIAGNOSE", "HOTFIX"):
            assert (step, phase, "finished") in phases, (step, phase)
    assert {(0, "INIT", "finished"), (0, "EVAL", "finished"), (2, "EVAL", "finished"),
            (3, "EVAL", "finished"), (3, "CHECKPOINT", "finished")} <= phases

    assert [(c.step, c.reason) for c in checkpoints] == [(STEPS, "end")]
    actor_dir = Path(checkpoints[0].path) / "actor"
    assert (ckpt / "latest").read_text().strip() == str(Path(checkpoints[0].path).resolve())
    before = load_file(str(SFT_CHECKPOINT / "model.safetensors"))
    after = load_file(str(actor_dir / "model.safetensors"))
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert len(changed) > len(before) // 2, "the policy's parameters did not change"


@pytest.mark.slow
def test_demo_trains_and_says_where_the_data_went(tmp_path, monkeypatch):
    from rich.console import Console

    from rlcockpit.cli.demo import run_demo

    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    uri = f"sqlite:///{tmp_path / 'demo.db'}"
    result = run_demo(steps=2, store=uri, overrides={
        "rollout": {"batch_size": 8}, "ppo": {"minibatch_size": 8, "epochs": 1},
        "eval": {"every": 2, "max_prompts": 16}, "model": {"threads": 1}}, console=Console(file=out, width=120))
    text = out.getvalue()
    assert result.status == "finished" and result.step == 2
    assert result.run_id in text and uri in text and "rlcockpit runs --store" in text
    assert "math acc" in text and result.checkpoint and Path(result.checkpoint).is_dir()
    r = reader(uri)
    try:
        (run,) = r.list_runs()
    finally:
        r.close()
    assert (run.name, run.project, run.last_step) == ("demo", "demo", 2)
