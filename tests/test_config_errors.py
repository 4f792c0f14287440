"""Bad configs and bad reward functions fail BEFORE training with a message naming the key, the value
and what is allowed (exit code 2); a NaN reward at run time is dropped, counted and flagged instead."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlcockpit.cli import main
from rlcockpit.store.base import SampleQuery
from rlcockpit.trainer.samples import NONFINITE_FLAG
from rlcockpit.trainer.trainer import Trainer
from trainer_testkit import FAST, events, make_config, make_model_dir, reader, series

ROOT = Path(__file__).resolve().parent.parent
GRPO = str(ROOT / "examples" / "grpo_tiny.yaml")
PPO = str(ROOT / "examples" / "ppo_tiny.yaml")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("model"), "gpt2")


def cli(capsys, *argv: str) -> tuple[int, str]:
    code = main(["train", "--quiet", *argv])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["kl.coeff=0.1"], r"unknown config key 'kl\.coeff'; did you mean 'kl\.coef'\?"),
    (["train.steps=many"], r"train\.steps='many' has the wrong type; expected an integer"),
    (["rollout.top_p=1.5"], r"rollout\.top_p=1\.5 is out of range; allowed: \[0\.05, 1\.0\]"),
    (["algo=sac"], r"algo='sac' is not allowed; choose one of: 'ppo', 'grpo'"),
    (["--config", GRPO, "rollout.n_samples=1"], r"rollout\.n_samples=1: GRPO .* needs at least 2"),
    (["--config", PPO, "ppo.minibatch_size=12"], r"ppo\.minibatch_size=12: must divide the 32 samples"),
    (["reward.fn=score"], r"reward\.fn='score': must look like \"package\.module:function\""),
    (["--config", "no/such.yaml"], r"config file not found: no/such\.yaml"),
])
def test_config_errors_name_key_value_and_allowed_values(capsys, tmp_path, argv, message):
    code, err = cli(capsys, f"--store=sqlite:///{tmp_path / 'runs.db'}", *argv)
    assert code == 2
    assert err.startswith("error: ")
    assert __import__("re").search(message, err), err
    assert not (tmp_path / "runs.db").exists(), "nothing may be recorded for a run that never started"


def test_the_real_command_exits_2_before_importing_torch(tmp_path):
    code = ("import sys\nfrom rlcockpit.cli import main\nrc = main(['train', 'ppo.clip_eps=7'])\n"
            "print(rc, 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.stdout.split() == ["2", "False"]
    assert "ppo.clip_eps=7.0 is out of range; allowed: [0.01, 1.0]" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "rlcockpit", "train", "kl.estimator=k4"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2 and "kl.estimator='k4' is not allowed; choose one of: 'k1', 'k2', 'k3'" in proc.stderr


def write_reward(tmp_path: Path, body: str) -> str:
    path = tmp_path / "user_reward.py"
    path.write_text("import math\n\n" + textwrap.dedent(body), encoding="utf-8")
    return f"{path}:fn"


@pytest.mark.parametrize("body, message", [
    ("def fn(prompts, responses, meta, step):\n    return [1.0, 2.0]\n",
     r"reward function .*user_reward\.py:fn returned 2 rewards for 1 responses"),
    ("def fn(prompts, responses, meta, step):\n    return 'good'\n", r"returned str; expected a list"),
    ("def fn(prompts, responses):\n    return []\n", r"must accept \(prompts, responses, meta, step\)"),
    ("def fn(prompts, responses, meta, step):\n    return [m['gold'] for m in meta]\n", r"raised KeyError: 'gold'"),
])
def test_a_bad_reward_function_fails_at_setup(capsys, tmp_path, model_dir, body, message):
    spec = write_reward(tmp_path, body)
    code, err = cli(capsys, f"--store=sqlite:///{tmp_path / 'runs.db'}", f"model.path={model_dir}",
                    f"reward.fn={spec}", *FAST)
    assert code == 2
    assert __import__("re").search(message, err), err
    assert not (tmp_path / "runs.db").exists()


def test_a_reward_function_that_cannot_be_imported_fails_at_setup(capsys, tmp_path, model_dir):
    code, err = cli(capsys, f"model.path={model_dir}", "reward.fn=no_such_pkg.rewards:score",
                    f"--store=sqlite:///{tmp_path / 'runs.db'}")
    assert code == 2
    assert "reward function no_such_pkg.rewards:score: cannot import 'no_such_pkg.rewards'" in err


def test_a_missing_model_directory_is_named(capsys, tmp_path):
    code, err = cli(capsys, f"model.path={tmp_path / 'nothing'}", f"--store=sqlite:///{tmp_path / 'runs.db'}")
    assert code == 2 and "is not a Hugging Face model directory (no config.json there)" in err


def test_a_nan_reward_at_run_time_is_dropped_counted_flagged_and_stored(tmp_path, model_dir):
    spec = write_reward(tmp_path, """
        def fn(prompts, responses, meta, step):
            # finite during the set-up probe (step 0), then NaN for sample 1 of every step
            return [math.nan if (step > 0 and i == 1) else 1.0 + 0.1 * i for i in range(len(responses))]
    """)
    cfg = make_config(tmp_path, "train.steps=2", f"reward.fn={spec}", model=model_dir)
    result = Trainer(cfg).run()
    assert (result.status, result.step) == ("finished", 2)
    assert series(cfg, result.run_id, ["reward/nonfinite_total"])["reward/nonfinite_total"] == [(1, 1.0), (2, 2.0)]
    r = reader(cfg)
    try:
        page = r.query_samples(result.run_id, SampleQuery(step_min=1, step_max=1, limit=100))
    finally:
        r.close()
    by_id = {s.sample_id: s for s in page.items}
    assert page.total == 8
    bad = by_id[1]
    assert math.isnan(bad.reward) and NONFINITE_FLAG in bad.flags and bad.advantage is None
    assert all(s.advantage is not None and NONFINITE_FLAG not in s.flags for i, s in by_id.items() if i != 1)
    flagged = events(cfg, result.run_id, "nonfinite_reward")
    assert [(e.step, e.payload["sample_ids"]) for e in flagged] == [(1, [1]), (2, [1])]
    means = dict(series(cfg, result.run_id, ["reward/mean"])["reward/mean"])
    assert math.isfinite(means[1])  # the step's statistics skip the dropped sample


def test_numbers_in_exponent_notation_are_numbers():
    # YAML 1.1 reads "2e-4" (no dot) as a string; a user typing optim.actor_lr=2e-4 means a number
    from rlcockpit.config import load_config
    from rlcockpit.trainer.config import TrainConfig

    cfg = load_config(TrainConfig, None, ["optim.actor_lr=2e-4", "kl.coef=5E-2"])
    assert (cfg.optim.actor_lr, cfg.kl.coef) == (2e-4, 5e-2)


def test_responses_that_cannot_fit_the_context_are_refused_with_the_largest_allowed(capsys, tmp_path, model_dir):
    code, err = cli(capsys, f"model.path={model_dir}", "rollout.max_new_tokens=200", "eval.every=0",
                    f"--store=sqlite:///{tmp_path / 'runs.db'}")
    assert code == 2
    assert __import__("re").search(r"rollout\.max_new_tokens=200 does not fit: the model's context is 128 tokens and "
                                   r"the longest prompt has \d+; use at most \d+", err), err
