"""Loading user reward functions ("module:function") and turning their output into rewards.

What a user relies on: a broken function is reported with its name before training; dict outputs
become named components summed with weights; flag/ and info/ keys are not components; NaN/inf
are reported per sample (the trainer drops those samples) instead of raising.
"""

from __future__ import annotations

import math
import sys
import textwrap

import numpy as np
import pytest

from rlcockpit.errors import RewardFunctionError
from rlcockpit.rewards import RewardFunction, parse_output, resolve


@pytest.fixture()
def user_module(tmp_path, monkeypatch):
    """An importable module ``user_rewards`` written to tmp_path."""
    src = textwrap.dedent('''
        import math

        def constant(prompts, responses, meta, step):
            return [0.5 for _ in responses]

        def parts(prompts, responses, meta, step):
            return [{"correctness": 1.0 if r.strip() == m.get("answer") else 0.0,
                     "brevity": -0.1 * len(r.split()),
                     "flag/too_long": 1.0 if len(r.split()) > 3 else 0.0,
                     "info/correct": 1.0 if r.strip() == m.get("answer") else 0.0}
                    for r, m in zip(responses, meta)]

        def short(prompts, responses, meta, step):
            return [1.0] * (len(responses) - 1)

        def strings(prompts, responses, meta, step):
            return ["good" for _ in responses]

        def nan_second(prompts, responses, meta, step):
            return [math.nan if i == 1 else 1.0 for i, _ in enumerate(responses)]

        def raises(prompts, responses, meta, step):
            raise KeyError("answer")

        def two_args(prompts, responses):
            return [0.0 for _ in responses]

        NOT_CALLABLE = 3
    ''')
    (tmp_path / "user_rewards.py").write_text(src, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "user_rewards"
    sys.modules.pop("user_rewards", None)


def test_plain_floats_give_totals_without_components(user_module):
    fn = RewardFunction.from_spec(f"{user_module}:constant")
    out = fn(["p1", "p2"], ["a", "b"], [{}, {}], step=3)
    assert out.totals.tolist() == [0.5, 0.5]
    assert out.components == {} and out.flags == ((), ())
    assert out.finite.tolist() == [True, True]


def test_dict_components_are_weighted_and_slash_keys_are_not_components(user_module):
    fn = RewardFunction.from_spec(f"{user_module}:parts", weights={"correctness": 2.0})
    out = fn(["q", "q"], ["42", "one two three four"], [{"answer": "42"}, {"answer": "7"}], step=0)
    assert sorted(out.components) == ["brevity", "correctness"]
    # total = 2.0 * correctness + 1.0 * brevity (default weight)
    assert out.totals.tolist() == pytest.approx([2.0 - 0.1, 0.0 - 0.4])
    assert out.flags == ((), ("too_long",))
    assert out.info["correct"].tolist() == [1.0, 0.0]


def test_zero_weight_switches_a_component_off():
    out = parse_output([{"a": 1.0, "b": math.nan}], 1, "f", {"b": 0.0})
    assert out.totals.tolist() == [1.0]


def test_nonfinite_rewards_are_reported_not_raised(user_module):
    fn = RewardFunction.from_spec(f"{user_module}:nan_second")
    out = fn(["p"] * 3, ["a", "b", "c"], [{}] * 3, step=1)
    assert out.finite.tolist() == [True, False, True]
    assert math.isnan(out.totals[1])


def test_unknown_weight_key_is_refused_naming_the_components(user_module):
    fn = RewardFunction.from_spec(f"{user_module}:parts", weights={"corectness": 2.0})
    with pytest.raises(RewardFunctionError, match=r"reward\.weights\.corectness.*did you mean 'correctness'.*correctness, brevity"):
        fn.probe("q", {"answer": "1"})


@pytest.mark.parametrize("spec, message", [
    ("no_such_module_xyz:score", r"cannot import 'no_such_module_xyz'"),
    ("{mod}:missing", r"has no attribute 'missing' \(callables there: .*constant"),
    ("{mod}:NOT_CALLABLE", r"is a int, not a callable"),
    ("{mod}:two_args", r"must accept \(prompts, responses, meta, step\)"),
    ("score_without_colon", r"must look like 'package.module:function'"),
])
def test_bad_specs_fail_at_resolve_naming_the_function(user_module, spec, message):
    with pytest.raises(RewardFunctionError, match=message):
        resolve(spec.format(mod=user_module))


@pytest.mark.parametrize("name, message", [
    ("short", r"returned 1 rewards for 2 responses"),
    ("strings", r"returned a str at index 0"),
    ("raises", r"raised KeyError"),
])
def test_bad_outputs_fail_at_the_first_call_naming_the_function(user_module, name, message):
    fn = RewardFunction.from_spec(f"{user_module}:{name}")
    with pytest.raises(RewardFunctionError, match=message) as info:
        fn(["p", "p"], ["a", "b"], [{}, {}], step=0)
    assert f"{user_module}:{name}" in str(info.value)


def test_output_type_checks():
    with pytest.raises(RewardFunctionError, match="returned dict"):
        parse_output({"a": 1.0}, 1, "f", {})
    with pytest.raises(RewardFunctionError, match="keys must be strings and values numbers"):
        parse_output([{"a": "high"}], 1, "f", {})
    with pytest.raises(RewardFunctionError, match="every item a dict"):
        parse_output([1.0, {"a": 1.0}], 2, "f", {})
    with pytest.raises(RewardFunctionError, match="returned bool|returned a bool"):
        parse_output([True], 1, "f", {})
    out = parse_output(np.asarray([1.0, 2.0]), 2, "f", {})  # numpy arrays are fine
    assert out.totals.tolist() == [1.0, 2.0]


def test_a_python_file_path_works_as_module(tmp_path):
    path = tmp_path / "my_reward.py"
    path.write_text("def fn(prompts, responses, meta, step):\n    return [len(r) for r in responses]\n")
    out = RewardFunction.from_spec(f"{path}:fn")(["p"], ["abc"], [{}], 0)
    assert out.totals.tolist() == [3.0]


def test_the_tiny_world_reward_loads_with_its_components():
    from rlcockpit.world.prompts import load_prompts

    prompt = next(p for p in load_prompts("validation") if p.category == "math")
    fn = RewardFunction.from_spec("rlcockpit.world.rewards:score")
    answer = " \\boxed{" + str(prompt.meta["answer"]) + "}"
    out = fn([prompt.prompt], [answer], [prompt.meta], 0)
    assert {"correctness", "format"} <= set(out.components)
    assert out.info["correct"].tolist() == [1.0]
    assert out.totals[0] > fn.probe(prompt.prompt, prompt.meta).totals[0]  # empty answer scores lower
