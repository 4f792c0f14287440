"""A custom reward function with named components, weights, flags and info keys, end to end: what
lands in the metrics, on the samples, and in the evaluation."""

from __future__ import annotations

import pytest

from rlcockpit.store.base import SampleQuery
from rlcockpit.trainer.trainer import Trainer
from trainer_testkit import make_config, make_model_dir, reader, series

REWARD = '''
def fn(prompts, responses, meta, step):
    out = []
    for r, m in zip(responses, meta):
        words = len(r.split())
        out.append({"nonempty": 1.0 if words else 0.0,
                    "short": 1.0 if words <= 3 else -1.0,
                    "flag/rambling": 1.0 if words > 3 else 0.0,
                    "info/correct": 1.0 if m["category"] == "math" else 0.0})
    return out
'''


def test_components_weights_flags_and_info_reach_metrics_samples_and_eval(tmp_path):
    model = make_model_dir(tmp_path / "model", "gpt2")
    path = tmp_path / "my_reward.py"
    path.write_text(REWARD, encoding="utf-8")
    cfg = make_config(tmp_path, "train.steps=2", f"reward.fn={path}:fn", "reward.weights={short: 0.5}",
                      "reward.scale=2.0", "eval.every=2", "eval.max_prompts=16", model=model)
    result = Trainer(cfg).run()
    assert result.status == "finished"
    got = series(cfg, result.run_id)
    for name in ("reward/nonempty/mean", "reward/short/mean", "eval/accuracy/math", "eval/accuracy/chat"):
        assert name in got, name
    assert "reward/rambling/mean" not in got and "reward/correct/mean" not in got  # slash keys are no components
    assert dict(got["eval/accuracy/math"])[2] == 1.0 and dict(got["eval/accuracy/chat"])[2] == 0.0
    raw, scaled = dict(got["reward/raw/mean"]), dict(got["reward/mean"])
    assert scaled[1] == pytest.approx(2.0 * raw[1])
    r = reader(cfg)
    try:
        samples = r.query_samples(result.run_id, SampleQuery(step_min=1, step_max=2, limit=100)).items
    finally:
        r.close()
    assert samples
    for s in samples:
        expected = 2.0 * (s.components["nonempty"] + 0.5 * s.components["short"])
        assert s.reward == pytest.approx(expected)
        assert ("rambling" in s.flags) == (s.components["short"] < 0)
        assert set(s.components) == {"nonempty", "short"}
