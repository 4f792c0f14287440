"""The window/trend helpers equal naive loops on random inputs (ties and spikes included)."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from rlcockpit.diagnostics import windows as W

SEEDS = range(25)


def _series(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 40))
    x = rng.normal(size=n) + rng.normal() * np.arange(n) * 0.1
    if seed % 3 == 0:  # ties: rounded values
        x = np.round(x, 0)
    return x


def _naive_mk(x):
    n = len(x)
    s = sum(int(x[j] > x[i]) - int(x[j] < x[i]) for i in range(n) for j in range(i + 1, n))
    groups = {}
    for v in x:
        groups[v] = groups.get(v, 0) + 1
    ties = sum(t * (t - 1) * (2 * t + 5) for t in groups.values())
    var = (n * (n - 1) * (2 * n + 5) - ties) / 18
    if var <= 0:
        return s, 0.0, 0.0
    z = 0.0 if s == 0 else (s - 1) / math.sqrt(var) if s > 0 else (s + 1) / math.sqrt(var)
    return s, var, z


@pytest.mark.parametrize("seed", SEEDS)
def test_mann_kendall_matches_naive(seed):
    x = _series(seed)
    s, var, z = _naive_mk(list(x))
    got = W.mann_kendall(x)
    assert got.s == s
    assert got.var_s == pytest.approx(var)
    assert got.z == pytest.approx(z)
    assert got.p == pytest.approx(2 * (1 - statistics.NormalDist().cdf(abs(z))), abs=1e-9)
    assert got.tau == pytest.approx(s / (len(x) * (len(x) - 1) / 2))


def test_mann_kendall_sees_a_rise_and_not_noise():
    rng = np.random.default_rng(0)
    rising = np.arange(30) * 0.1 + rng.normal(scale=0.2, size=30)
    noise = rng.normal(size=30)
    assert W.mann_kendall(rising).p < 1e-4 and W.mann_kendall(rising).z > 0
    assert W.mann_kendall(noise).p > 0.05
    assert W.mann_kendall([1.0, 1.0, 1.0, 1.0]).p == 1.0


def _naive_rank(x):
    ranks = []
    for v in x:
        less = sum(1 for u in x if u < v)
        equal = sum(1 for u in x if u == v)
        ranks.append(less + (equal + 1) / 2)
    return ranks


@pytest.mark.parametrize("seed", SEEDS)
def test_spearman_matches_naive(seed):
    x = list(_series(seed))
    r = _naive_rank(x)
    t = list(range(1, len(x) + 1))
    mr, mt = statistics.fmean(r), statistics.fmean(t)
    num = sum((a - mr) * (b - mt) for a, b in zip(r, t, strict=True))
    den = math.sqrt(sum((a - mr) ** 2 for a in r) * sum((b - mt) ** 2 for b in t))
    expected = num / den if den else 0.0
    assert W.spearman_trend(x) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_slopes_match_naive(seed):
    x = list(_series(seed))
    n = len(x)
    mt, mx = (n - 1) / 2, statistics.fmean(x)
    ls = sum((i - mt) * (v - mx) for i, v in enumerate(x)) / sum((i - mt) ** 2 for i in range(n))
    pairs = [(x[j] - x[i]) / (j - i) for i in range(n) for j in range(i + 1, n)]
    assert W.slope(x) == pytest.approx(ls, abs=1e-12)
    assert W.theil_sen(x) == pytest.approx(statistics.median(pairs), abs=1e-12)


def test_theil_sen_ignores_a_spike_least_squares_does_not():
    x = list(np.arange(20, dtype=float))
    x[18] = 500.0
    assert W.theil_sen(x) == pytest.approx(1.0)
    assert W.slope(x) > 3.0


@pytest.mark.parametrize("seed", SEEDS)
def test_robust_z_and_mad_match_naive(seed):
    x = list(_series(seed))
    med = statistics.median(x)
    mad = statistics.median([abs(v - med) for v in x])
    value = float(np.random.default_rng(seed).normal() * 5)
    assert W.mad(x) == pytest.approx(mad)
    scale = max(1.4826 * mad, 1e-3)
    assert W.robust_z(value, x, floor=1e-3) == pytest.approx((value - med) / scale)


def test_robust_z_flat_reference_uses_the_floor_and_empty_is_nan():
    assert W.robust_z(2.0, [1.0] * 10, floor=0.5) == pytest.approx(2.0)
    assert math.isnan(W.robust_z(1.0, []))


@pytest.mark.parametrize("seed", SEEDS)
def test_relative_changes_match_naive(seed):
    x = list(_series(seed) + 10.0)
    k = 1 + seed % 4
    start, end = statistics.median(x[:k]), statistics.median(x[-k:])
    assert W.relative_drop(x, k) == pytest.approx((start - end) / abs(start))
    assert W.relative_growth(x, k) == pytest.approx((end - start) / abs(start))
    assert W.relative_range(x) == pytest.approx((max(x) - min(x)) / abs(statistics.fmean(x)))


@pytest.mark.parametrize("seed", SEEDS)
def test_rolling_matches_naive(seed):
    x = list(_series(seed))
    w = 1 + seed % 5
    expected = [x[i:i + w] for i in range(len(x) - w + 1)]
    got = W.rolling(x, w)
    assert got.shape == (len(expected), w)
    assert np.allclose(got, np.array(expected).reshape(-1, w))
    assert W.rolling([1.0], 3).shape == (0, 3)


def test_trailing_run():
    assert W.trailing_run([True, False, True, True]) == 2
    assert W.trailing_run([False]) == 0
    assert W.trailing_run([]) == 0


def test_window_keeps_the_last_finite_values_with_steps():
    win = W.Window(3)
    for step, v in enumerate([1.0, math.nan, 2.0, None, 3.0, 4.0, math.inf]):
        win.push(v, step)
    assert list(win.values) == [2.0, 3.0, 4.0]
    assert list(win.steps) == [2, 4, 5]
    assert win.full
    with pytest.raises(ValueError):
        W.Window(0)


def test_streak_counts_consecutive_steps_and_remembers_the_onset():
    streak = W.Streak()
    flags = [False, True, True, False, True, True, True]
    counts = [streak.update(f, step) for step, f in enumerate(flags)]
    assert counts == [0, 1, 2, 0, 1, 2, 3]
    assert streak.onset == 4
    streak.update(False, 7)
    assert streak.onset is None and streak.count == 0


def test_trailing_onset_is_the_first_step_of_the_last_run():
    steps = [10, 11, 12, 13, 14]
    assert W.trailing_onset(steps, [True, False, True, True, True]) == 12
    assert W.trailing_onset(steps, [True] * 5) == 10
    assert W.trailing_onset(steps, [True, True, True, True, False]) is None


def test_median_equals_numpy_on_random_series_with_nan_inf_and_long_inputs():
    from rlcockpit.diagnostics.windows import median

    rng = np.random.default_rng(11)
    for _ in range(500):
        n = int(rng.integers(0, 140))
        x = rng.normal(0, 10, n)
        if n and rng.random() < 0.2:
            x[rng.integers(0, n)] = rng.choice([np.nan, np.inf, -np.inf])
        for values in (x, list(x), x.astype(np.float32)):
            want = float(np.median(x)) if n else math.nan
            got = median(values)
            assert (math.isnan(want) and math.isnan(got)) or got == pytest.approx(want, rel=1e-6, abs=1e-6)


def _same(got: float, want: float) -> bool:
    return (math.isnan(want) and math.isnan(got)) or got == want


def test_median_is_numpy_bit_for_bit_on_float64_and_discrete_rewards():
    from rlcockpit.diagnostics.windows import SMALL, median

    rng = np.random.default_rng(12)
    for _ in range(2000):
        n = int(rng.integers(1, 6 * SMALL))
        x = rng.normal(0, 10, n) if rng.random() < 0.5 else rng.choice([1.0, 0.0, -0.5, -1.0, 0.3], n)
        for values in (x, list(x), [int(v) for v in np.round(x)]):
            assert _same(median(values), float(np.median(np.asarray(values, dtype=float))))


def test_quantile_is_numpy_bit_for_bit():
    from rlcockpit.diagnostics.windows import SMALL, quantile

    rng = np.random.default_rng(13)
    qs = [0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 1.0, 95 / 100]
    for _ in range(3000):
        n = int(rng.integers(1, 6 * SMALL))
        x = rng.normal(0, 10, n) * 10 ** rng.uniform(-6, 6)
        if rng.random() < 0.3:
            x = rng.choice([1.0, 0.0, -0.5, -1.0, 2.5], n)  # ties: a discrete reward
        if rng.random() < 0.1:
            x[rng.integers(0, n)] = rng.choice([np.nan, np.inf, -np.inf])
        q = float(rng.choice(qs)) if rng.random() < 0.5 else float(rng.random())
        for values in (x, list(x)):
            assert _same(quantile(values, q), float(np.quantile(x, q))), (n, q)
    # percentiles as numpy computes them: p / 100
    x = rng.normal(size=37)
    assert quantile(x, 95 / 100) == float(np.percentile(x, 95))
    lo, hi = np.percentile(x, [10, 90])
    assert (quantile(x, 0.1), quantile(x, 0.9)) == (float(lo), float(hi))
    with pytest.raises(ValueError):
        quantile(x, 1.5)  # numpy's own error


def test_ranks_average_ties_like_a_naive_loop_bit_for_bit():
    rng = np.random.default_rng(14)
    for _ in range(500):
        n = int(rng.integers(0, 60))
        x = rng.integers(-3, 4, n).astype(float) if rng.random() < 0.6 else rng.normal(size=n)
        if n and rng.random() < 0.1:
            x[rng.integers(0, n)] = np.nan
        got = W.ranks(x)
        for i in range(n):  # the naive definition: 1 + below + (equal - 1) / 2
            if math.isnan(x[i]):
                continue
            below, equal = int(np.sum(x < x[i])), int(np.sum(x == x[i]))
            assert got[i] == 1 + below + (equal - 1) / 2
