"""metrics.evaluation: the eval/* reduction equals a naive per-category loop; non-finite rewards and
verdicts are left out (the one implementation behind the trainer's EVAL and ``rlcockpit world eval``)."""

from __future__ import annotations

import math
import random

import pytest

from rlcockpit.metrics.evaluation import eval_metrics


def naive(categories, rewards, correct):
    def mean(xs):
        xs = [x for x in xs if math.isfinite(x)]
        return sum(xs) / len(xs) if xs else None

    out = {"eval/reward/mean": mean(rewards)}
    if out["eval/reward/mean"] is None:
        out["eval/reward/mean"] = math.nan
    for cat in sorted(set(categories)):
        r = mean([x for c, x in zip(categories, rewards, strict=True) if c == cat])
        if r is not None:
            out[f"eval/reward/category/{cat}/mean"] = r
        if correct is not None:
            a = mean([x for c, x in zip(categories, correct, strict=True) if c == cat])
            if a is not None:
                out[f"eval/accuracy/{cat}"] = a
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equals_a_naive_loop(seed):
    rng = random.Random(seed)
    n = 40
    categories = [rng.choice(["math", "chat", "safety"]) for _ in range(n)]
    rewards = [rng.choice([rng.gauss(0, 1), math.nan]) if rng.random() < 0.2 else rng.gauss(0, 1) for _ in range(n)]
    correct = [float(rng.random() < 0.5) if rng.random() < 0.9 else math.nan for _ in range(n)]
    for verdicts in (correct, None):
        got, want = eval_metrics(categories, rewards, verdicts), naive(categories, rewards, verdicts)
        assert got.keys() == want.keys()
        assert all(got[k] == pytest.approx(want[k], rel=1e-12) for k in want)


def test_nothing_finite_is_nan_and_a_category_without_rewards_has_no_mean():
    got = eval_metrics(["math", "chat"], [math.nan, 1.0], [1.0, math.inf])
    assert got == {"eval/reward/mean": 1.0, "eval/reward/category/chat/mean": 1.0, "eval/accuracy/math": 1.0}
    assert math.isnan(eval_metrics(["math"], [math.inf])["eval/reward/mean"])
