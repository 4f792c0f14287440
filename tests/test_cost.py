"""The cost ledger (seed 004, docs/cost.md): its formulas against naive arithmetic and the seed's
own numbers, and a real GRPO run whose ledger token counts equal the trainer's samples."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from rlcockpit.metrics.cost import (
    SEED_SCHEDULE,
    Pricing,
    build_ledger,
    project,
    schedule_n,
    step_flops,
)

ROOT = Path(__file__).resolve().parents[1]


def test_seed_004s_example_step() -> None:
    """512 prompts x 8 samples x 512 tokens = 2.1 M tokens; 131 s of sampling at 16 k tokens/s."""
    p = project(30, accelerators=8, accelerator="H100", prompts=512, n_samples=8, tokens_per_sample=512,
                tokens_per_s_per_accelerator=2000, mfu=0.35, price_per_hour=2.0, steps=1000)
    assert p.tokens_per_step == 512 * 8 * 512 == 2_097_152
    assert p.sampling_tokens_per_s == 16_000
    assert p.sampling_s == pytest.approx(131.07, abs=0.01)
    assert p.update_flops == pytest.approx(6 * 30e9 * 2_097_152)
    assert p.update_s == pytest.approx(6 * 30e9 * 2_097_152 / (8 * 989e12 * 0.35))
    assert p.usd_per_step == pytest.approx(p.step_s / 3600 * 8 * 2.0)
    assert p.run_usd == pytest.approx(p.usd_per_step * 1000)
    assert project(7).update_s < p.update_s and project(7).sampling_s == p.sampling_s


def test_flops_and_money_against_naive_arithmetic() -> None:
    params = {"actor_params": 1_000_000, "critic_params": 500_000}
    assert step_flops(100, 200, params) == 2 * 1_000_000 * 100 + 6 * 1_500_000 * 200
    steps = {s: {"cost/tokens_generated": 100.0, "cost/tokens_trained": 200.0, "cost/prompt_tokens": 50.0,
                 "time/rollout_s": 1.0, "time/update_s": 2.0, "time/init_s": 99.0} for s in range(1, 11)}
    ledger = build_ledger("r", steps, params, Pricing(price_per_hour=3.6, accelerators=2, peak_tflops=1e-6),
                          total_steps=40)
    t = ledger.totals
    assert (t["tokens_generated"], t["tokens_trained"], t["steps"]) == (1000, 2000, 10)
    assert t["wall_s"] == 30  # INIT is set-up, not a step's work
    assert t["accelerator_hours"] == pytest.approx(30 * 2 / 3600)
    assert t["usd"] == pytest.approx(30 * 2 / 3600 * 3.6)
    assert t["mfu"] == pytest.approx(t["flops"] / (30 * 2 * 1e6))
    assert ledger.phase_share == pytest.approx({"update": 2 / 3, "rollout": 1 / 3})
    assert ledger.eta_s == pytest.approx(30 * 3.0)
    assert ledger.projected["usd"] == pytest.approx(t["usd"] * 4)


def test_the_seed_schedule_and_what_it_saves() -> None:
    assert [schedule_n(SEED_SCHEDULE, f) for f in (0.0, 0.34, 0.9)] == [(1.0, 0.95, 8), (0.8, 0.9, 4), (0.6, 0.85, 2)]
    steps = {s: {"cost/tokens_generated": 800.0, "cost/tokens_trained": 800.0, "time/rollout_s": 1.0}
             for s in range(1, 4)}
    ledger = build_ledger("r", steps, {}, Pricing(price_per_hour=1.0), total_steps=300,
                          schedule="seed004", n_samples=8)
    s = ledger.schedule
    assert s["mean_n_samples"] == pytest.approx((8 + 4 + 2) / 3)
    assert s["saved_fraction"] == pytest.approx(1 - 14 / 24)
    assert s["tokens_generated_scheduled"] == pytest.approx(800 * 300 * 14 / 24)


@pytest.mark.slow
def test_a_real_run_s_ledger_counts_the_trainer_s_tokens(tmp_path) -> None:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    train = [sys.executable, "-m", "rlcockpit", "train", "--config", str(ROOT / "examples" / "grpo_tiny.yaml"),
             "--store", db, "--quiet", "train.steps=3", "rollout.batch_size=2", "rollout.n_samples=8",
             "ppo.minibatch_size=8", "ppo.epochs=2", "eval.every=0", "checkpoint.every=0",
             "checkpoint.at_end=false", f"checkpoint.dir={tmp_path / 'ckpt'}", "model.threads=1",
             "cost.price_per_hour=2.5", "cost.accelerator=cpu", "cost.sampling_schedule=seed004"]
    proc = subprocess.run(train, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    from rlcockpit.store import open_store
    from rlcockpit.store.base import SampleQuery

    reader = open_store(db).reader()
    try:
        (run,) = reader.list_runs()
        samples = reader.query_samples(run.run_id, SampleQuery(limit=1000)).items
        metrics = reader.step_metrics(run.run_id, 1, 3)
    finally:
        reader.close()
    cost = subprocess.run([sys.executable, "-m", "rlcockpit", "cost", "--store", db, "--run", run.run_id,
                           "--json", "--what-if", "7,30"], capture_output=True, text=True, timeout=120)
    assert cost.returncode == 0, cost.stderr
    out = json.loads(cost.stdout)
    ledger = out["ledger"]
    by_step = {c["step"]: c for c in ledger["steps"]}
    for step in (1, 2, 3):  # the ledger's counts are the trainer's own
        lengths = sum(s.length for s in samples if s.step == step)
        assert by_step[step]["tokens_generated"] == lengths > 0
        assert by_step[step]["tokens_trained"] == 2 * lengths
        wall = sum(v for k, v in metrics[step].items() if k.startswith("time/") and k != "time/init_s")
        assert by_step[step]["wall_s"] == pytest.approx(wall)
        assert by_step[step]["usd"] == pytest.approx(wall / 3600 * 2.5)
    n = ledger["params"]["actor_params"]
    assert n > 0 and "critic_params" not in ledger["params"]  # GRPO: no critic
    assert ledger["totals"]["flops"] == pytest.approx(2 * n * ledger["totals"]["tokens_generated"]
                                                      + 6 * n * ledger["totals"]["tokens_trained"])
    assert ledger["eta_s"] == 0 and ledger["schedule"]["constant_n_samples"] == 8
    assert math.isclose(ledger["schedule"]["saved_fraction"], 1 - (8 + 4 + 2) / 24, rel_tol=0.1)
    what_if = out["what_if"]
    assert [w["params_b"] for w in what_if] == [7, 30]
    assert what_if[0]["prompts"] == 2 and what_if[0]["n_samples"] == 8 and what_if[0]["ppo_epochs"] == 2
    human = subprocess.run([sys.executable, "-m", "rlcockpit", "cost", "--store", db, "--run", run.run_id],
                           capture_output=True, text=True, timeout=120)
    assert human.returncode == 0 and "cost ledger" in human.stdout and "sampling schedule" in human.stdout


def test_the_cost_route_serves_the_ledger(tmp_path) -> None:
    from fastapi.testclient import TestClient

    import rlcockpit
    from rlcockpit.server.app import create_app
    from rlcockpit.server.settings import ServerSettings

    uri = f"sqlite:///{tmp_path / 'c.db'}"
    config = {"train": {"steps": 10}, "rollout": {"batch_size": 4, "n_samples": 8},
              "cost": {"price_per_hour": 3.6, "accelerators": 2, "sampling_schedule": "seed004"}}
    with rlcockpit.init(project="p", name="c", store=uri, run_id="c", config=config) as run:
        # the trainer also records where the models went (text): the ledger reads the counts only
        run.event(0, "model_size", {"actor_params": 1000, "device": "cpu", "dtype": "fp32"})
        for step in range(1, 6):
            run.log(step, {"cost/tokens_generated": 100.0, "cost/tokens_trained": 100.0, "time/rollout_s": 0.5,
                           "time/update_s": 0.5})
    with TestClient(create_app(ServerSettings(store=uri)), base_url="http://127.0.0.1") as c:
        body = c.get("/api/runs/c/cost?steps=2").json()
        assert [s["step"] for s in body["steps"]] == [4, 5]
        assert body["totals"]["tokens_generated"] == 500 and body["totals"]["usd"] == pytest.approx(5 * 2 / 3600 * 3.6)
        assert body["eta_s"] == pytest.approx(5.0) and body["projected"]["steps"] == 10
        assert body["schedule"]["constant_n_samples"] == 8
        assert c.get("/api/runs/nope/cost").status_code == 404


def test_the_schedule_in_the_trainer_config_is_the_seed_s() -> None:
    from rlcockpit.config import load_config
    from rlcockpit.errors import ConfigError
    from rlcockpit.trainer.config import SCHEDULE_N_SAMPLES, TrainConfig

    assert SCHEDULE_N_SAMPLES["seed004"] == tuple(n for *_, n in SEED_SCHEDULE)
    with pytest.raises(ConfigError, match="every stage"):
        load_config(TrainConfig, None, ["algo=grpo", "rollout.schedule=seed004", "rollout.batch_size=2",
                                        "ppo.minibatch_size=8"])  # 2 prompts x 2 samples in the last stage


@pytest.mark.slow
def test_a_run_that_samples_by_the_schedule_and_its_measured_savings(tmp_path) -> None:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    train = [sys.executable, "-m", "rlcockpit", "train", "--config", str(ROOT / "examples" / "grpo_tiny.yaml"),
             "--store", db, "--quiet", "train.steps=3", "rollout.batch_size=2", "rollout.schedule=seed004",
             "ppo.minibatch_size=4", "ppo.epochs=1", "eval.every=0", "checkpoint.every=0",
             "checkpoint.at_end=false", f"checkpoint.dir={tmp_path / 'ckpt'}", "model.threads=1"]
    proc = subprocess.run(train, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    from rlcockpit.metrics.cost import ledger_for_run
    from rlcockpit.store import open_store
    from rlcockpit.store.base import SampleQuery

    reader = open_store(db).reader()
    try:
        (run,) = reader.list_runs()
        samples = reader.query_samples(run.run_id, SampleQuery(limit=1000)).items
        events = [e for e in reader.read_events(run.run_id, kinds=["live_params_applied"])
                  if e.payload["requested_by"] == "sampling_schedule"]
        ledger = ledger_for_run(reader, run.run_id)
    finally:
        reader.close()
    per_step = {s: sum(1 for x in samples if x.step == s) for s in (1, 2, 3)}
    assert per_step == {1: 16, 2: 8, 3: 4}  # 2 prompts x 8, 4, 2 samples
    assert [(e.step, e.payload["after"]) for e in events] == [
        (0, {"temperature": 1.0, "top_p": 0.95}), (1, {"temperature": 0.8, "top_p": 0.9}),
        (2, {"temperature": 0.6, "top_p": 0.85})]
    s = ledger.schedule
    tokens = {c.step: c.tokens_generated for c in ledger.steps}
    assert s["applied"] and s["tokens_generated_scheduled"] == sum(tokens.values())
    assert s["tokens_generated_constant"] == pytest.approx(tokens[1] + tokens[2] * 2 + tokens[3] * 4)
    assert 0.3 < s["saved_fraction"] < 0.8
