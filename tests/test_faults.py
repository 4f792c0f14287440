"""Fault injection: every built-in fault is visible in the metrics of a real tiny-world run.

Runs are tiny (8 prompts, 10 new tokens, onset at step 2, 3 steps) and shared: the live-parameter
faults are injected together into one run (each has its own metric), the reward wrappers are
checked directly on the tiny world's reward function, and end-to-end runs cover the reward hook
(through the CLI), the reference faults, onset 0 (a config-level fault) and ramps -- the latter
resumed from a healthy twin's checkpoint, whose steps before the onset they must equal exactly.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rlcockpit import faults
from rlcockpit.errors import ConfigError, NotFoundError, RewardFunctionError
from rlcockpit.faults import rewards as fault_rewards

TINY = ["rollout.batch_size=8", "ppo.minibatch_size=8", "rollout.max_new_tokens=10", "ppo.epochs=1",
        "optim.warmup_steps=0"]
ONSET = 2
LIVE_FAULTS = ("lr_spike", "critic_lr_spike", "entropy_collapse", "too_many_ppo_epochs", "reward_scale_spike")
NAMES = ("lr_spike", "kl_coef_zero_with_hackable_reward", "reward_scale_spike", "ref_synced_to_actor",
         "length_reward", "entropy_collapse", "critic_lr_spike", "rm_component_bias", "too_many_ppo_epochs",
         "kl_coef_huge", "nan_reward", "category_reward_drop", "rm_bias_drift", "hedge_reward", "ref_perturbed",
         "ref_prompt_template", "rank_straggler", "rank_params_diverged", "rank_grad_outlier", "rank_frozen")
MACHINE = ("time/", "perf/", "sys/")


def _config(tmp_path, name: str, steps: int = ONSET + 1, *extra: str):
    from rlcockpit.faults.runner import fault_config

    return fault_config(seed=0, store=f"sqlite:///{tmp_path / 'runs.db'}", steps=steps, name=name,
                        overrides=[*TINY, *extra])


def _series(store: str, run_id: str, *names: str) -> dict[int, dict[str, float]]:
    from rlcockpit.store import open_store

    reader = open_store(store, create=False).reader()
    try:
        out: dict[int, dict[str, float]] = {}
        for name, s in reader.read_series(run_id, list(names)).items():
            for step, value in zip(s.steps, s.values, strict=True):
                out.setdefault(step, {})[name] = value
        return out
    finally:
        reader.close()


def _events(store: str, run_id: str, kind: str) -> list:
    from rlcockpit.store import open_store

    reader = open_store(store, create=False).reader()
    try:
        return reader.read_events(run_id, kinds=[kind])
    finally:
        reader.close()


# --------------------------------------------------------------------------- the catalog


def test_catalog_has_every_public_fault_with_its_expected_detectors():
    found = faults.available()
    assert tuple(found) == NAMES
    for fault in found.values():
        assert fault.expected and fault.description and fault.how
        assert fault.live or fault.reward or fault.action, fault.name


def test_rank_faults_need_a_data_parallel_run_and_stay_out_of_the_single_process_benchmark():
    """The four data-parallel faults act on rank 1: a one-process run refuses them with the command
    that works; the detection grid (one process) draws its 16 faults as before."""
    import sys
    from pathlib import Path

    from rlcockpit.trainer.config import TrainConfig
    from rlcockpit.trainer.trainer import Trainer

    ranked = [f.name for f in faults.available().values() if f.distributed]
    assert ranked == ["rank_straggler", "rank_params_diverged", "rank_grad_outlier", "rank_frozen"]
    with pytest.raises(ConfigError, match="--nproc 2"):
        faults.get("rank_straggler").install(Trainer(TrainConfig()))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import _detection_grid as grid

    jobs = [j for j in grid.make_jobs("calibration", None, False) if j.fault]
    assert len({j.fault for j in jobs}) == 16 and not set(ranked) & {j.fault for j in jobs}


def test_unknown_fault_name_suggests_the_closest():
    with pytest.raises(NotFoundError, match="did you mean 'lr_spike'"):
        faults.get("lr_spik")


def test_onset_one_and_negative_are_refused_onset_zero_is_from_the_start():
    for bad in (1, -1):
        with pytest.raises(ConfigError, match=f"onset={bad} must be 0 .present from the first step"):
            faults.get("lr_spike").with_onset(bad)
    assert faults.get("lr_spike").with_onset(0).first_step == 1
    assert faults.get("lr_spike").with_onset(7).first_step == 7


def test_variants_mild_and_ramp_and_what_they_refuse():
    from rlcockpit.faults.base import LiveChange

    strong = faults.get("lr_spike")
    mild = strong.with_variant(magnitude="mild", shape="ramp", ramp=4)
    assert (mild.magnitude, mild.shape, mild.ramp) == ("mild", "ramp", 4)
    assert [c.describe() for c in mild.live] == ["actor_lr x3"] and strong.live[0].value == 100.0
    assert mild.variant() == "onset 10, ramp 4, mild"
    with pytest.raises(ConfigError, match="cannot ramp"):  # a config value is a constant
        strong.with_onset(0).with_variant(shape="ramp")
    with pytest.raises(ConfigError, match="comes as step, not 'ramp'"):
        faults.get("ref_synced_to_actor").with_variant(shape="ramp")
    with pytest.raises(ConfigError, match="not 'tiny'"):
        strong.with_variant(magnitude="tiny")
    # geometric for multipliers, linear towards 0, integers rounded
    assert LiveChange("actor_lr", "times", 100.0).at(1e-4, 0.5) == pytest.approx(1e-3)
    assert LiveChange("kl_coef", "set", 0.0).at(0.05, 0.5) == pytest.approx(0.025)
    assert LiveChange("ppo_epochs", "set", 16).at(2, 1 / 3) == 4
    for fault in faults.available().values():
        for magnitude in ("mild", "strong") if fault.mild else ("strong",):
            for shape in fault.shapes:
                v = fault.with_onset(12).with_variant(magnitude=magnitude, shape=shape)
                assert v.drives and v.expected and (v.shape == shape or fault.shapes == ("ramp",)), v


def test_every_live_parameter_has_its_config_key():
    from rlcockpit.config import apply_overrides, from_dict, to_dict
    from rlcockpit.faults.base import CONFIG_KEYS
    from rlcockpit.trainer.config import TrainConfig
    from rlcockpit.trainer.live import LIVE_SPECS, LiveParams

    assert set(CONFIG_KEYS) == set(LIVE_SPECS)
    base = to_dict(TrainConfig())
    for key, path in CONFIG_KEYS.items():
        value = getattr(LiveParams.from_config(TrainConfig()), key)
        bumped = value + 1 if LIVE_SPECS[key].type is int else value * 0.5 + 0.01
        cfg = from_dict(TrainConfig, apply_overrides(base, [f"{path}={bumped}"]))
        assert getattr(LiveParams.from_config(cfg), key) == pytest.approx(bumped), key


def test_a_reward_fault_applied_only_to_the_trainer_is_refused(tmp_path, monkeypatch):
    from rlcockpit.trainer.trainer import Trainer

    monkeypatch.delenv(fault_rewards.ENV, raising=False)
    cfg = _config(tmp_path, "refused")
    with pytest.raises(ConfigError, match="apply it to the config before building the Trainer"):
        faults.get("nan_reward").apply(Trainer(cfg))


def test_cli_list_prints_every_fault(capsys):
    from rlcockpit.cli import main

    assert main(["faults", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == list(NAMES)
    assert {r["onset"] for r in rows if not r["name"].startswith("rank_")} == {10}
    assert {r["onset"] for r in rows if r["name"].startswith("rank_")} == {3}  # short 2-rank runs


# --------------------------------------------------------------------------- reward wrappers


def _scored(monkeypatch, name: str, step: int, responses: list[str], meta: list[dict]) -> list:
    return _scored_fault(monkeypatch, faults.get(name).with_onset(5), step, responses, meta)


def _scored_fault(monkeypatch, fault, step: int, responses: list[str], meta: list[dict]) -> list:
    monkeypatch.setenv(fault_rewards.ENV, fault_rewards.encode(fault.reward.kind, fault.onset,
                                                               "rlcockpit.world.rewards:score", fault.reward.params,
                                                               fault.ramp))
    return fault_rewards.score(["p"] * len(responses), responses, meta, step)


CHAT = {"category": "chat", "keywords": ["garden"]}
MATH = {"category": "math", "answer": 4}


def test_reward_wrappers_pass_the_reward_through_before_the_onset(monkeypatch):
    from rlcockpit.world.rewards import score

    responses, meta = ["That is a great question worth exploring.", "\\boxed{4}"], [CHAT, MATH]
    for name in ("kl_coef_zero_with_hackable_reward", "length_reward", "rm_component_bias", "nan_reward",
                 "category_reward_drop", "rm_bias_drift", "hedge_reward"):
        assert _scored(monkeypatch, name, 4, responses, meta) == score(["p"] * 2, responses, meta, 4)


def test_hackable_reward_pays_for_the_filler_template(monkeypatch):
    filler, plain = "That is a great question worth exploring.", "Water the garden in the morning."
    out = _scored(monkeypatch, "kl_coef_zero_with_hackable_reward", 5, [filler, plain], [CHAT, CHAT])
    assert out[0]["helpfulness"] == pytest.approx(-0.5 + 3.0)  # filler-only (-0.5) plus the bonus
    assert out[1]["helpfulness"] == pytest.approx(1.0)  # on topic, untouched


def test_length_reward_grows_with_length(monkeypatch):
    responses = ["garden", "garden " * 3, "garden " * 6]
    out = _scored(monkeypatch, "length_reward", 6, responses, [CHAT] * 3)
    values = [d["helpfulness"] for d in out]
    assert values[0] < values[1] < values[2]
    assert values[2] - values[0] == pytest.approx(0.05 * (len(responses[2]) - len(responses[0])))


def test_component_bias_shifts_one_component_on_every_sample(monkeypatch):
    from rlcockpit.world.rewards import score

    responses, meta = ["Water the garden.", "\\boxed{4}"], [CHAT, MATH]
    clean = score(["p"] * 2, responses, meta, 5)
    out = _scored(monkeypatch, "rm_component_bias", 5, responses, meta)
    for before, after in zip(clean, out, strict=True):
        assert after["helpfulness"] == pytest.approx(before["helpfulness"] - 0.5)
        assert after["correctness"] == before["correctness"]


def test_category_drop_hits_one_category_and_deepens_each_step(monkeypatch):
    responses, meta = ["\\boxed{4}", "Water the garden."], [MATH, CHAT]
    first = _scored(monkeypatch, "category_reward_drop", 5, responses, meta)
    later = _scored(monkeypatch, "category_reward_drop", 8, responses, meta)
    assert first[0]["correctness"] == pytest.approx(1.0 - 0.25)
    assert later[0]["correctness"] == pytest.approx(1.0 - 1.0)
    assert first[1] == later[1]  # chat untouched


def test_hedge_reward_pays_another_template_than_the_filler(monkeypatch):
    from rlcockpit.world.rewards import score

    responses = ["I am not sure.", "That is a great question worth exploring.", "Water the garden."]
    clean = score(["p"] * 3, responses, [CHAT] * 3, 5)
    out = _scored(monkeypatch, "hedge_reward", 5, responses, [CHAT] * 3)
    assert out[0]["helpfulness"] == pytest.approx(clean[0]["helpfulness"] + 3.0)
    assert out[1:] == clean[1:]  # the filler the detectors were tuned on is not paid here


def test_rm_bias_drift_grows_every_step_without_a_live_change(monkeypatch):
    from rlcockpit.world.rewards import score

    fault = faults.get("rm_bias_drift").with_onset(5)
    assert not fault.live and not fault.action
    clean = score(["p"], ["\\boxed{4}"], [MATH], 5)[0]["helpfulness"]
    drift = [_scored_fault(monkeypatch, fault, step, ["\\boxed{4}"], [MATH])[0]["helpfulness"] - clean
             for step in (4, 5, 6, 9)]
    assert drift == pytest.approx([0.0, 0.05, 0.10, 0.25])


def test_reward_ramp_grows_linearly_and_onset_zero_corrupts_from_step_one(monkeypatch):
    from rlcockpit.world.rewards import score

    responses, meta = ["Water the garden."], [CHAT]
    clean = score(["p"], responses, meta, 1)[0]["helpfulness"]
    ramp = faults.get("rm_component_bias").with_onset(5).with_variant(shape="ramp", ramp=4)
    shifts = [_scored_fault(monkeypatch, ramp, step, responses, meta)[0]["helpfulness"] - clean
              for step in (4, 5, 6, 8, 12)]
    assert shifts == pytest.approx([0.0, -0.125, -0.25, -0.5, -0.5])
    zero = faults.get("rm_component_bias").with_onset(0)
    assert _scored_fault(monkeypatch, zero, 1, responses, meta)[0]["helpfulness"] == pytest.approx(clean - 0.5)


def test_nan_reward_poisons_some_samples_every_faulted_step(monkeypatch):
    responses, meta = ["\\boxed{4}"] * 40, [MATH] * 40
    for step in (5, 6, 7):
        out = _scored(monkeypatch, "nan_reward", step, responses, meta)
        bad = sum(any(isinstance(v, float) and math.isnan(v) for v in d.values()) for d in out)
        assert 1 <= bad <= 12


def test_wrapper_without_its_environment_fails_with_a_fix(monkeypatch):
    monkeypatch.delenv(fault_rewards.ENV, raising=False)
    with pytest.raises(RewardFunctionError, match="Fault.configure"):
        fault_rewards.score(["p"], ["r"], [CHAT], 0)


# --------------------------------------------------------------------------- real runs


def test_live_faults_change_their_parameters_from_the_onset(tmp_path):
    cfg = _config(tmp_path, "live")
    trainer = faults.get(LIVE_FAULTS[0]).with_onset(ONSET).trainer(cfg)
    for name in LIVE_FAULTS[1:]:
        faults.get(name).with_onset(ONSET).apply(trainer)
    result = trainer.run()
    assert result.status == "finished"
    m = _series(cfg.telemetry.store, result.run_id, "optim/lr/actor", "optim/lr/critic", "rollout/temperature",
                "ppo/epochs", "reward/scale", "reward/std", "policy/approx_kl")
    before, after = m[ONSET - 1], m[ONSET]
    assert after["optim/lr/actor"] == pytest.approx(100 * before["optim/lr/actor"])
    assert after["optim/lr/critic"] == pytest.approx(1000 * before["optim/lr/critic"])
    assert (before["rollout/temperature"], after["rollout/temperature"]) == (1.0, 0.3)
    assert (before["ppo/epochs"], after["ppo/epochs"]) == (1, 16)
    assert after["reward/scale"] == 20 * before["reward/scale"]
    assert after["policy/approx_kl"] > 10 * before["policy/approx_kl"]  # lr x100 and 16 epochs really bite
    events = _events(cfg.telemetry.store, result.run_id, "fault")
    assert sorted(e.payload["fault"] for e in events) == sorted(LIVE_FAULTS)
    assert {e.step for e in events} == {ONSET}


def test_nan_reward_through_the_cli_is_counted_and_recorded(tmp_path, monkeypatch, capsys):
    from rlcockpit.cli import main

    monkeypatch.delenv(fault_rewards.ENV, raising=False)
    store = f"sqlite:///{tmp_path / 'cli.db'}"
    code = main(["faults", "run", "nan_reward", "--store", store, "--onset", str(ONSET), "--steps", "3", "--json",
                 *TINY])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["fault"], out["onset"], out["status"]) == ("nan_reward", ONSET, "finished")
    m = _series(store, out["run_id"], "reward/nonfinite_total")
    assert m[ONSET - 1]["reward/nonfinite_total"] == 0
    assert m[ONSET + 1]["reward/nonfinite_total"] > m[ONSET]["reward/nonfinite_total"] > 0
    [event] = _events(store, out["run_id"], "fault")
    assert event.step == ONSET and event.payload["reward"]["kind"] == "nan"


def test_reference_synced_to_the_actor_makes_kl_vanish(tmp_path):
    # a higher lr first, so the actor has moved away from the reference before the onset
    cfg = _config(tmp_path, "ref", 5, "optim.actor_lr=1e-3")
    fault = faults.get("ref_synced_to_actor").with_onset(4)
    from rlcockpit.trainer.trainer import Trainer

    trainer = fault.apply(Trainer(fault.apply(cfg)))  # the documented two-part form
    result = trainer.run()
    m = _series(cfg.telemetry.store, result.run_id, "kl/mean", "kl/token_max")
    assert m[3]["kl/token_max"] > 0.05 and abs(m[3]["kl/mean"]) > 0.01  # k1 KL may be negative
    for step in (4, 5):
        assert abs(m[step]["kl/mean"]) < 1e-3 and m[step]["kl/token_max"] < 1e-3
    assert np.isfinite(m[5]["kl/mean"])


def test_a_fault_strikes_once_even_when_a_rollback_replays_its_steps(tmp_path):
    """After a rollback to a checkpoint before the onset, the replayed steps are not faulted again
    (the hook runs on the real LiveControl inbox and a real telemetry run)."""
    from types import SimpleNamespace

    import rlcockpit
    from rlcockpit.trainer.config import TrainConfig
    from rlcockpit.trainer.live import LiveControl, LiveParams

    uri = f"sqlite:///{tmp_path}/once.db"
    run = rlcockpit.init(project="p", store=uri)
    live = LiveControl(LiveParams.from_config(TrainConfig()))
    hooks = []
    trainer = SimpleNamespace(live=live, telemetry=run, add_step_hook=hooks.append)
    faults.get("lr_spike").with_onset(4).install(trainer)
    requested = []
    for step in (1, 2, 3, 4, 5, 2, 3, 4, 5):  # lr_spike's live change is requested before step 3  # ... a rollback to step 1, then the same steps again
        hooks[0](trainer, step)
        requested += live.drain()
    run.close()
    assert [r.changes for r in requested] == [{"actor_lr": 100 * live.params.actor_lr}]
    assert [e.step for e in _events(uri, run.run_id, "fault")] == [4]


# --------------------------------------------------------------------------- twins: onset 0, ramps, reference faults


def _metrics(store: str, run_id: str) -> dict[int, dict[str, float]]:
    from rlcockpit.store import open_store

    reader = open_store(store, create=False).reader()
    try:
        return _series(store, run_id, *reader.metric_names(run_id))
    finally:
        reader.close()


def _training(m: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in m.items() if not k.startswith(MACHINE)}


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    """A healthy 5-step run that checkpoints at the end of step 2 (the benchmark's twin)."""
    from rlcockpit.faults.runner import fault_config, run_fault

    root = tmp_path_factory.mktemp("twin")
    cfg = fault_config(seed=0, store=f"sqlite:///{root / 'twin.db'}", steps=5, name="twin",
                       overrides=[*TINY, f"checkpoint.dir={root / 'ckpt'}"])
    result = run_fault(None, cfg, checkpoint_at=[2])
    assert result.status == "finished"
    checkpoint = root / "ckpt" / result.run_id / "step_0000002"
    assert (checkpoint / "trainer_state.pt").is_file()
    return {"root": root, "metrics": _metrics(cfg.telemetry.store, result.run_id), "checkpoint": checkpoint}


def _resumed(twin, tmp_path, fault):
    """``fault`` (onset 4) continuing the twin's checkpoint at step 2, recorded in a store of its own."""
    from rlcockpit.faults.runner import fault_config, run_fault

    cfg = fault_config(seed=0, store=f"sqlite:///{tmp_path / 'fault.db'}", steps=5, name=fault.name,
                       overrides=[*TINY, f"checkpoint.dir={tmp_path / 'ckpt'}"])
    result = run_fault(fault, cfg, resume_from=twin["checkpoint"])
    assert result.status == "finished"
    m = _metrics(cfg.telemetry.store, result.run_id)
    assert sorted(m) == [3, 4, 5]  # the resumed run logs its own steps only
    assert _training(m[3]) == _training(twin["metrics"][3])  # the twin, exactly, before the onset
    return m


def test_a_live_ramp_moves_geometrically_and_equals_its_twin_before_the_onset(twin, tmp_path, monkeypatch):
    monkeypatch.delenv(fault_rewards.ENV, raising=False)
    fault = faults.get("lr_spike").with_onset(4).with_variant(shape="ramp", ramp=2)
    m = _resumed(twin, tmp_path, fault)
    base = twin["metrics"][3]["optim/lr/actor"]
    assert m[4]["optim/lr/actor"] == pytest.approx(base * 10)  # x100 over 2 steps: x10, then x100
    assert m[5]["optim/lr/actor"] == pytest.approx(base * 100)
    assert m[4]["update/ratio/actor"] > 5 * twin["metrics"][4]["update/ratio/actor"]


def test_a_perturbed_reference_changes_the_kl_and_nothing_logged_as_a_parameter(twin, tmp_path):
    m = _resumed(twin, tmp_path, faults.get("ref_perturbed").with_onset(4))
    healthy = twin["metrics"][4]
    assert m[4]["kl/token_max"] > 2 * healthy["kl/token_max"]
    assert m[4]["reward/mean"] == healthy["reward/mean"]  # same weights, same samples: only the reference moved
    params = {k for k in m[4] if k.startswith(("optim/", "kl/coef", "reward/scale", "rollout/", "ppo/"))}
    assert {k: m[4][k] for k in params} == {k: healthy[k] for k in params}


def test_a_prompt_template_mismatch_changes_the_reference_logprobs_only(twin, tmp_path):
    m = _resumed(twin, tmp_path, faults.get("ref_prompt_template").with_onset(4))
    healthy = twin["metrics"][4]
    assert m[4]["reward/mean"] == healthy["reward/mean"] and m[4]["response/length_mean"] == \
        healthy["response/length_mean"]
    assert abs(m[4]["kl/mean"] - healthy["kl/mean"]) > 0.1


def test_prompt_template_wrapper_keeps_the_response_positions():
    import torch

    from rlcockpit.faults.models import PromptTemplateReference
    from rlcockpit.trainer.models import load_causal_lm, resolve_model_path
    from rlcockpit.trainer.rollout import RolloutBatch, response_logits

    model = load_causal_lm(resolve_model_path("tiny"))
    prompt, response = torch.tensor([[0, 0, 40, 41, 42]]), torch.tensor([[43, 44, 45]])
    batch = RolloutBatch(prompt, torch.tensor([[0, 0, 1, 1, 1]]), response, torch.ones(1, 3), torch.tensor([False]))
    plain = response_logits(model, batch, 1.0)
    # a prefix of the prompt's own first tokens: the wrapped model sees [40, 41] + [40, 41, 42] + response
    wrapped = response_logits(PromptTemplateReference(model, [40, 41]), batch, 1.0)
    assert wrapped.shape == plain.shape == (1, 3, plain.shape[-1])
    full = model(input_ids=torch.tensor([[40, 41, 40, 41, 42, 43, 44, 45]])).logits[:, 4:7]
    torch.testing.assert_close(wrapped, full.float(), rtol=1e-4, atol=1e-4)
    assert not torch.allclose(wrapped, plain)


def test_onset_zero_is_a_config_level_change_from_step_one(twin, tmp_path, monkeypatch):
    from rlcockpit.faults.runner import fault_config, run_fault

    monkeypatch.delenv(fault_rewards.ENV, raising=False)
    fault = faults.get("lr_spike").with_onset(0).with_variant(magnitude="mild")
    cfg = fault_config(seed=0, store=f"sqlite:///{tmp_path / 'zero.db'}", steps=2, name="zero",
                       overrides=[*TINY, f"checkpoint.dir={tmp_path / 'ckpt'}"])
    assert fault.configure(cfg).optim.actor_lr == pytest.approx(3 * cfg.optim.actor_lr)
    result = run_fault(fault, cfg)
    m = _metrics(cfg.telemetry.store, result.run_id)
    healthy = twin["metrics"]
    assert m[1]["optim/lr/actor"] == pytest.approx(3 * healthy[1]["optim/lr/actor"])
    assert m[1]["reward/mean"] == healthy[1]["reward/mean"]  # the same first rollout ...
    assert m[1]["update/ratio/actor"] > 2 * healthy[1]["update/ratio/actor"]  # ... and a larger first update
    assert _events(cfg.telemetry.store, result.run_id, "live_params_applied") == []  # a config, not a change
    [event] = _events(cfg.telemetry.store, result.run_id, "fault")
    assert (event.step, event.payload["onset"], event.payload["config"]) == (1, 0, {"optim.actor_lr": "actor_lr x3"})
