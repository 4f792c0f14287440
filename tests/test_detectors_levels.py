"""The `levels` detector: failures present from the first step (truncation at the cap, entropy near
zero or near uniform, KL exactly zero with beta > 0, no reward variance, a zero gradient with a
learning signal, constant responses), judged against fixed levels after a short confirmation.
Synthetic streams that must and must not fire (step, severity, boundaries), the recorded healthy
tiny-world runs (no finding at all), and real tiny trainings through the CLI and `doctor`."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from detector_kit import feed, first
from rlcockpit.diagnostics import SKIPPED, DiagnosticsConfig, Engine, registry
from rlcockpit.diagnostics.reference import docstring_parts
from rlcockpit.errors import ConfigError
from rlcockpit.records import SampleRecord
from streams import HEALTHY, load_samples, load_stream

ROOT = Path(__file__).resolve().parent.parent
UNIFORM_1K = math.log(1024)  # the tiny world's vocabulary


def make(**overrides):
    cls = registry.get("levels")
    return cls(cls.Config(**overrides))


def keyed(det, rows, key):
    """[(step, severity)] of the conditions with ``key``, step by step."""
    return [(step, c.severity) for step, conds in feed(det, rows) if conds is not SKIPPED
            for c in conds if c.key == key]


def samples(*responses: str) -> list[SampleRecord]:
    return [SampleRecord(step=0, sample_id=i, prompt=f"p{i}", response=r, reward=0.0)
            for i, r in enumerate(responses)]


# ---------------------------------------------------------------------------- registration


def test_levels_is_registered_with_its_family_and_a_documented_docstring():
    cls = registry.get("levels")
    assert cls.family == "levels" and cls.reads_samples
    _, parts = docstring_parts(cls)
    assert {"Failure mode", "Signal", "Default thresholds", "False positives", "Fix"} <= set(parts)
    for key in ("truncation", "entropy_zero", "entropy_uniform", "kl_zero_start", "no_signal",
                "no_update", "constant_responses"):
        assert f"``{key}``" in parts["Signal"], key
    assert "Real runs" in " ".join(parts.values())  # what each real run gives is documented


def test_skipped_without_any_input_and_bad_thresholds_fail_at_setup():
    assert feed(make(), [{"sys/rss_gb": 1.0}]) == [(0, SKIPPED)]
    with pytest.raises(ConfigError, match="entropy_low"):
        make(entropy_low=1e-4, entropy_zero=1e-3)
    with pytest.raises(ConfigError, match="persist"):
        make(confirm=5, persist=3)
    with pytest.raises(ConfigError, match="trunc_frac"):
        make(trunc_frac=1.5)


# ---------------------------------------------------------------------------- truncation


def test_every_answer_cut_from_step_zero_is_orange_after_three_steps():
    # issue 26: a run broken from step 1 must not look like a "watch"
    rows = [{"response/truncated_frac": 1.0, "response/length_mean": 3.0,
             "rollout/max_new_tokens": 3.0}] * 40
    found = keyed(make(), rows, "truncation")
    assert found[0] == (2, "orange") and {s for _, s in found} == {"orange"}
    step, cond = first(make(), rows, key="truncation")
    assert cond.evidence["onset_step"] == 0 and cond.evidence["length_cap"] == 3.0
    assert cond.evidence["from_start"] is True and "since the run began" in cond.message
    assert "100% of responses hit the length cap" in cond.message and "100% of the cap 3" in cond.message
    assert "截断" in cond.message_zh


@pytest.mark.parametrize("rows", [
    # most but not nearly every answer cut (real run 002, healthy: 100 %, 87.5 %, 37.5 % ...)
    [{"response/truncated_frac": f} for f in (1.0, 0.875, 0.95, 1.0, 1.0, 1.0, 1.0)],
    # every answer cut, but only from step 3 on: a change, not a failure present from the start
    [{"response/truncated_frac": f} for f in (0.3, 0.4, 1.0, 1.0, 1.0, 1.0, 1.0)],
])
def test_truncation_not_total_from_the_start_stays_yellow(rows):
    """(and see the next test: 31 of 32 answers cut counts as every answer)"""
    found = keyed(make(), rows, "truncation")
    assert found and {s for _, s in found} == {"yellow"}


@pytest.mark.parametrize("frac, fires", [(0.5, True), (0.49, False), (0.0, False)])
def test_truncation_boundary_is_half_of_the_responses(frac, fires):
    rows = [{"response/truncated_frac": frac}] * 5
    assert bool(keyed(make(), rows, "truncation")) is fires


@pytest.mark.parametrize("length, fires", [(22.8, True), (22.7, False)])
def test_mean_length_pinned_at_the_logged_cap_counts_without_truncated_frac(length, fires):
    rows = [{"response/length_mean": length, "rollout/max_new_tokens": 24.0}] * 5  # 0.95 x 24 = 22.8
    assert bool(keyed(make(), rows, "truncation")) is fires


def test_the_cap_comes_from_the_config_when_the_run_does_not_log_it():
    rows = [{"response/length_mean": 500.0}] * 5
    assert keyed(make(), rows, "truncation") == []  # unknown cap: not judged
    assert keyed(make(length_cap=512), rows, "truncation")[0] == (2, "yellow")
    pinned = [{"response/length_mean": 508.0}] * 5  # >= 0.99 x 512 from the start: every answer
    assert keyed(make(length_cap=512), pinned, "truncation")[0] == (2, "orange")


def test_one_odd_step_neither_starts_nor_ends_a_finding():
    hi, lo = {"response/truncated_frac": 0.9}, {"response/truncated_frac": 0.1}
    rows = [hi, hi, lo, hi, hi, hi, lo, hi, lo, lo, lo, lo]
    steps = [s for s, _ in keyed(make(), rows, "truncation")]
    assert steps == [5, 6, 7, 8, 9]  # on at 5; 6 and 8-9 inside the hysteresis; off after 3 misses


# ---------------------------------------------------------------------------- entropy


@pytest.mark.parametrize("entropy, expected", [
    (0.005, (2, "yellow")), (0.0005, (2, "orange")), (0.01, None), (0.2, None)])
def test_entropy_near_zero_yellow_below_a_hundredth_orange_below_a_thousandth(entropy, expected):
    rows = [{"policy/entropy": entropy}] * 6
    found = keyed(make(), rows, "entropy_zero")
    assert (found[0] if found else None) == expected


def test_entropy_near_uniform_needs_the_vocabulary_and_is_orange():
    noisy = [{"policy/entropy": 0.91 * UNIFORM_1K, "policy/entropy_uniform": UNIFORM_1K}] * 4
    step, cond = first(make(), noisy, key="entropy_uniform")
    assert (step, cond.severity) == (2, "orange") and cond.evidence["ratio"] == pytest.approx(0.91)
    below = [{"policy/entropy": 0.89 * UNIFORM_1K, "policy/entropy_uniform": UNIFORM_1K}] * 4
    assert keyed(make(), below, "entropy_uniform") == []
    unknown = [{"policy/entropy": 6.5}] * 4
    assert keyed(make(), unknown, "entropy_uniform") == []
    assert keyed(make(vocab_size=1024), unknown, "entropy_uniform")[0] == (2, "orange")


# ---------------------------------------------------------------------------- KL exactly zero


def _kl_rows(kl_after, n=8, **extra):
    first_step = {"kl/token_mean": 0.0, "kl/coef": 0.05, "policy/approx_kl": 3e-4, **extra}
    later = {"kl/token_mean": kl_after, "kl/coef": 0.05, "policy/approx_kl": 3e-4, **extra}
    return [first_step] + [later] * (n - 1)


def test_kl_zero_after_the_policy_moved_is_orange_after_three_steps_not_at_step_one():
    step, cond = first(make(), _kl_rows(0.0), key="kl_zero_start")
    assert (step, cond.severity) == (3, "orange")  # step 0: actor = reference; zero at 1, 2, 3
    assert cond.evidence["onset_step"] == 1 and "β = 0.05" in cond.message
    assert keyed(make(), _kl_rows(4e-7), "kl_zero_start")  # float noise of a reference = actor
    assert keyed(make(), _kl_rows(2e-6), "kl_zero_start") == []


@pytest.mark.parametrize("change", [
    {"kl/coef": 0.0},  # no KL term: a zero KL is expected
    {"policy/approx_kl": 0.0},  # the policy never moved
    {"kl/token_max": 0.2},  # some token differs from the reference
])
def test_kl_zero_stays_quiet_without_beta_a_moved_policy_or_with_a_token_above_zero(change):
    rows = [{**row, **change} for row in _kl_rows(0.0)]
    assert keyed(make(), rows, "kl_zero_start") == []


def test_kl_zero_counts_a_gradient_only_with_a_learning_rate_above_zero():
    base = {"kl/token_mean": 0.0, "kl/coef": 0.05, "grad/norm/actor": 0.2}
    warmup = [{**base, "optim/lr/actor": 0.0}] * 6  # lr 0: the weights do not move (real run 005)
    assert keyed(make(), warmup, "kl_zero_start") == []
    moving = [{**base, "optim/lr/actor": 1e-5}] * 6
    assert keyed(make(), moving, "kl_zero_start")[0] == (3, "orange")


def test_a_kl_that_was_positive_and_falls_to_zero_is_left_to_kl_zero():
    rows = _kl_rows(0.01, n=5) + _kl_rows(0.0, n=6)[1:]
    assert keyed(make(), rows, "kl_zero_start") == []


# ---------------------------------------------------------------------------- no learning signal


def test_zero_reward_std_is_yellow_after_three_steps_and_orange_after_ten():
    rows = [{"reward/std": 0.3, "reward/mean": 0.2}] * 2 + [{"reward/std": 0.0, "reward/mean": 0.0}] * 12
    found = dict(keyed(make(), rows, "no_signal"))
    assert min(found) == 4 and found[4] == found[10] == "yellow" and found[11] == "orange"


def test_zero_reward_std_from_the_first_step_is_orange_at_once():
    rows = [{"reward/std": 0.0, "reward/mean": 0.0}] * 12
    found = dict(keyed(make(), rows, "no_signal"))
    assert min(found) == 2 and set(found.values()) == {"orange"}


@pytest.mark.parametrize("frac, fires", [(1.0, True), (0.99, True), (0.98, False)])
def test_every_grpo_group_identical_counts_even_when_the_batch_std_is_positive(frac, fires):
    rows = [{"reward/std": 0.4, "reward/frac_zero_std_groups": frac}] * 4
    assert bool(keyed(make(), rows, "no_signal")) is fires


def test_rewards_that_differ_give_no_no_signal_finding():
    rows = [{"reward/std": 0.3, "reward/frac_zero_std_groups": 0.2}] * 20
    assert keyed(make(), rows, "no_signal") == []


# ---------------------------------------------------------------------------- no update


def test_zero_gradient_with_a_learning_signal_is_orange_at_once_and_red_after_three_steps():
    rows = [(1, {"grad/norm/actor": 0.0, "reward/std": 0.13, "reward/frac_zero_std_groups": 0.52})]
    det = make()
    cond = det.update(_view(*rows[0]))[0]  # real run 021: one logged step, step 1
    assert (cond.key, cond.severity) == ("no_update", "orange") and "exactly 0" in cond.message
    severities = [det.update(_view(s, rows[0][1]))[0].severity for s in (2, 3)]
    assert severities == ["orange", "red"]


def test_zero_gradient_is_not_judged_when_the_log_skips_steps():
    det = make()
    row = {"grad/norm/actor": 0.0, "reward/std": 0.3, "reward/frac_zero_std_groups": 0.6}
    results = [det.update(_view(step, row)) for step in (5, 10, 15, 20, 25)]  # every 5th step
    assert all(c.key != "no_update" for r in results for c in r)


@pytest.mark.parametrize("row", [
    {"grad/norm/actor": 0.0, "reward/std": 0.0},  # no signal: a zero gradient is expected
    {"grad/norm/actor": 0.0, "reward/std": 0.3, "reward/frac_zero_std_groups": 1.0},
    {"grad/norm/actor": 1e-6, "reward/std": 0.3},  # small but not zero
    {"grad/norm/actor": 0.0},  # signal unknown
])
def test_zero_gradient_needs_a_learning_signal_and_an_exact_zero(row):
    assert keyed(make(), [row] * 5, "no_update") == []


def _view(step, metrics, samples_=()):
    from rlcockpit.diagnostics import StepView

    return StepView(step, metrics, tuple(samples_))


# ---------------------------------------------------------------------------- constant responses


def test_constant_responses_are_orange_after_three_steps():
    same = samples(*(["The answer is 4."] * 9 + ["42"]))
    rows = [({"reward/std": 0.2}, same)] * 4
    step, cond = first(make(), rows, key="constant_responses")
    assert (step, cond.severity) == (2, "orange") and cond.evidence["share"] == pytest.approx(0.9)
    assert "'The answer is 4.'" in cond.message


@pytest.mark.parametrize("batch", [
    samples(*(["same"] * 8 + ["a", "b"])),  # 80 % identical
    samples("same", "same", "same"),  # too few samples to judge
])
def test_diverse_or_too_few_responses_are_not_constant(batch):
    assert keyed(make(), [({"reward/std": 0.2}, batch)] * 5, "constant_responses") == []


# ---------------------------------------------------------------------------- healthy runs


@pytest.mark.parametrize("name", HEALTHY)
def test_recorded_healthy_tiny_world_runs_give_no_level_condition(name):
    rows = load_stream(name)
    by_step = load_samples(name)
    det = make()
    found = []
    for step, metrics in rows:
        result = det.update(_view(step, metrics, by_step.get(step, ())))
        found += [] if result is SKIPPED else [(step, c.key) for c in result]
    assert found == []


# ---------------------------------------------------------------------------- nonfinite from step 1


def test_nonfinite_fires_at_the_first_step_without_any_history():
    engine = Engine.from_config(DiagnosticsConfig())
    out = engine.observe(1, {"policy/loss": math.nan, "reward/mean": 0.1, "kl/mean": 0.0})
    (finding,) = [f for f in out if f.detector == "nonfinite"]
    assert finding.step == 1 and finding.severity == "red" and finding.status == "raised"
    assert not [f for f in out if f.detector == "levels"]  # not duplicated here


# ---------------------------------------------------------------------------- real training


def _train(tmp_path: Path, algo: str, steps: int, *extra: str) -> str:
    db = tmp_path / f"{algo}.db"
    cmd = [sys.executable, "-m", "rlcockpit", "train", "--quiet", "--config",
           str(ROOT / "examples" / f"{algo}_tiny.yaml"), "--store", f"sqlite:///{db}",
           f"train.steps={steps}", "eval.every=0", "checkpoint.every=0",
           f"checkpoint.dir={tmp_path / 'ckpt'}", "model.threads=1", *extra]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return f"sqlite:///{db}"


def _doctor(uri: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "rlcockpit", "doctor", "--store", uri, "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1, 2), proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_every_response_cut_at_three_tokens_is_orange_in_doctor(tmp_path):
    uri = _train(tmp_path, "ppo", 6, "rollout.max_new_tokens=3")
    report = _doctor(uri)
    found = [f for f in report["findings"] if f["detector"] == "levels"
             and f["evidence"]["key"] == "truncation" and f["status"] == "raised"]
    assert found and found[0]["step"] == 3 and found[0]["severity"] == "orange"
    assert found[0]["evidence"]["onset_step"] == 1 and found[0]["evidence"]["length_cap"] == 3
    assert "hit the length cap" in found[0]["message"]


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ppo", "grpo"])
def test_a_healthy_tiny_run_gives_no_levels_finding(tmp_path, algo):
    uri = _train(tmp_path, algo, 30, "rollout.batch_size=8", "ppo.minibatch_size=8")
    report = _doctor(uri)
    assert report["last_step"] == 30
    assert [f for f in report["findings"] if f["detector"] == "levels"] == []
    (levels,) = [c for c in report["coverage"]["detectors"] if c["detector"] == "levels"]
    assert levels["state"] == "ran"  # the trainer logs the cap and the uniform entropy it judges by
    assert not {"policy/entropy_uniform", "rollout/max_new_tokens", "samples"} & set(levels["missing"])


def test_one_whole_answer_in_a_batch_of_32_does_not_hide_a_run_cut_at_the_cap():
    # rollout.max_new_tokens=4: 31 of 32 answers cut, the 32nd ends exactly at the cap
    rows = [{"response/truncated_frac": f, "response/length_mean": 4.0, "rollout/max_new_tokens": 4.0}
            for f in (0.969, 1.0, 1.0, 0.969, 1.0, 1.0)]
    assert keyed(make(), rows, "truncation")[0] == (2, "orange")



# ---------------------------------------------------------------------------- a few pasted lines


def _engine():
    return Engine.from_config(DiagnosticsConfig())


def _whole_log(rows):
    """Live findings step by step, then what the end of the complete log adds."""
    engine = _engine()
    live = [f for step, row in rows for f in engine.observe(step, row)]
    return live, engine.finish()


def test_one_pasted_line_without_reward_variance_is_orange_once_the_log_is_complete():
    # TRL console dict of issue 3857: loss 0, grad_norm 0, every group with one total reward
    row = {"policy/loss": 0.0, "grad/norm/actor": 0.0, "reward/std": 0.0,
           "reward/frac_zero_std_groups": 1.0, "reward/mean": 1.0}
    live, end = _whole_log([(1, row)])
    assert [f for f in live if f.detector == "levels"] == []  # one step is no confirmation live
    (found,) = [f for f in end if f.detector == "levels"]
    assert (found.severity, found.evidence["key"], found.step) == ("orange", "no_signal", 1)
    assert "every step of this 1-step log" in found.message and found.evidence["short_log_steps"] == 1


def test_a_verl_score_with_max_equal_to_min_counts_as_no_variance():
    # verl logs critic/score/{mean,max,min} and no std: two pasted steps, every sample scored 0
    rows = [(s, {"reward/mean": 0.0, "reward/max": 0.0, "reward/min": 0.0, "kl/token_mean": 0.01})
            for s in (4, 7)]
    _, end = _whole_log(rows)
    (found,) = [f for f in end if f.detector == "levels"]
    assert found.evidence["key"] == "no_signal" and found.severity == "orange"
    assert "max - min 0" in found.message
    # and on a long run it is the ordinary three-step rule
    long_rows = [(s, {"reward/max": 0.5, "reward/min": 0.5}) for s in range(1, 6)]
    assert dict(keyed(make(), [r for _, r in long_rows], "no_signal"))[3] == "orange"


def test_a_spread_above_zero_or_a_missing_bound_is_no_finding():
    for row in ({"reward/max": 1.0, "reward/min": 0.0}, {"reward/max": 0.0}):
        _, end = _whole_log([(1, row), (2, row)])
        assert [f for f in end if f.detector == "levels"] == []


def test_a_short_log_reports_only_checks_that_held_on_every_step_and_never_red():
    signal = {"grad/norm/actor": 0.0, "reward/std": 0.2}
    live, end = _whole_log([(1, signal), (2, signal)])  # a zero gradient with a signal on both
    assert [(f.evidence["key"], f.severity) for f in live] == [("no_update", "orange")]
    assert end == []  # the end of the log judges with confirm 1, yet red needs three steps
    _, end = _whole_log([(1, {"reward/std": 0.3}), (2, {"reward/std": 0.0})])  # held on one of two
    assert [f for f in end if f.detector == "levels"] == []


def test_a_log_long_enough_to_confirm_adds_nothing_at_its_end():
    rows = [(s, {"reward/std": 0.0}) for s in (1, 2, 3, 4)]
    live, end = _whole_log(rows)
    assert any(f.detector == "levels" for f in live) and end == []


def test_doctor_on_an_imported_paste_of_one_console_dict_names_the_missing_signal(tmp_path):
    # what people paste into issues: one TRL console dict, no step
    log = tmp_path / "paste.log"
    log.write_text("{'loss': 0.0, 'grad_norm': 0.0, 'learning_rate': 1.7e-06, "
                   "'rewards/fmt/mean': 2.0, 'rewards/fmt/std': 0.0, 'reward': 2.0, "
                   "'reward_std': 0.0, 'frac_reward_zero_std': 1.0, 'kl': 0.0, 'epoch': 0.33}\n",
                   encoding="utf-8")
    uri = f"sqlite:///{tmp_path / 'p.db'}"
    proc = subprocess.run([sys.executable, "-m", "rlcockpit", "import", str(log), "--store", uri],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = _doctor(uri)
    found = [f for f in report["findings"] if f["detector"] == "levels"]
    assert [(f["evidence"]["key"], f["severity"]) for f in found] == [("no_signal", "orange")]
