"""rlcockpit.metrics.stats: naive references for repetition / diversity / lengths / EMA /
histograms, and the numpy KS test against scipy.stats.ks_2samp (exact and asymptotic)."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import scipy.stats

from rlcockpit.metrics import ks, stats

# --- repetition and diversity ------------------------------------------------------------


def naive_repetition(tokens, n):
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    if not grams:
        return 0.0
    repeats = sum(1 for i, g in enumerate(grams) if g in grams[:i])
    return repeats / len(grams)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_repetition_rate_equals_naive(seed, n):
    rng = np.random.default_rng(seed)
    responses = [rng.integers(0, 4, size=int(k)).tolist() for k in rng.integers(0, 15, size=9)]
    want = sum(naive_repetition(r, n) for r in responses) / len(responses)
    assert stats.repetition_rate(responses, n) == pytest.approx(want, abs=1e-12)


def test_repetition_rate_examples():
    assert stats.repetition_rate([[1, 2, 3, 1, 2, 3]]) == pytest.approx(0.25)  # 1 of 4 trigrams
    assert stats.repetition_rate([[1, 2, 3, 4, 5]]) == 0.0
    assert stats.repetition_rate([[7] * 10]) == pytest.approx(7 / 8)  # a loop
    assert stats.repetition_rate([[1, 2], [5, 5, 5, 5]]) == pytest.approx(0.25)  # short = 0
    assert stats.repetition_rate([]) == 0.0
    with pytest.raises(ValueError, match="n-gram size"):
        stats.repetition_rate([[1, 2]], n=0)


def test_distinct_ngram_frac_counts_over_the_batch():
    texts = ["the cat sat", "the cat ran"]
    # bigrams: (the cat) x2, (cat sat), (cat ran) -> 3 unique of 4
    assert stats.distinct_ngram_frac(texts, 2) == pytest.approx(0.75)
    assert stats.distinct_ngram_frac([[1, 1, 1, 1]], 1) == pytest.approx(0.25)
    assert math.isnan(stats.distinct_ngram_frac(["one"], 2))


# --- lengths, quantiles, EMA -------------------------------------------------------------


def test_length_stats_match_numpy_and_ignore_non_finite():
    lengths = [3, 10, 7, 7, float("nan")]
    got = stats.length_stats(lengths)
    assert got == pytest.approx({"mean": 6.75, "std": float(np.std([3, 10, 7, 7])), "max": 10.0})
    empty = stats.length_stats([])
    assert all(math.isnan(v) for v in empty.values()) and set(empty) == {"mean", "std", "max"}


def test_quantile_and_percentile_are_nan_aware():
    values = [5.0, 1.0, float("nan"), 3.0, float("inf"), 2.0, 4.0]
    assert stats.quantile(values, 0.5) == 3.0
    assert stats.percentile(values, 99) == pytest.approx(np.percentile([1, 2, 3, 4, 5], 99))
    assert math.isnan(stats.quantile([float("nan")], 0.5))
    with pytest.raises(ValueError, match="percentile"):
        stats.percentile(values, 101)


def test_ema_equals_naive_recurrence_and_skips_nan():
    rng = np.random.default_rng(4)
    values = rng.normal(size=30).tolist()
    values[5] = float("nan")
    want, current = [], None
    for v in values:
        if not math.isnan(v):
            current = v if current is None else 0.1 * v + 0.9 * current
        want.append(current)
    assert np.allclose(stats.ema(values, 0.1), want)
    assert math.isnan(stats.ema([float("nan"), 1.0], 0.5)[0])
    with pytest.raises(ValueError, match="alpha"):
        stats.ema(values, 0.0)


def test_histogram_counts_only_finite_values():
    values = [0.0, 0.5, 1.0, float("nan"), float("inf"), -float("inf"), 1.0]
    edges, counts = stats.histogram(values, bins=2)
    assert edges == (0.0, 0.5, 1.0) and counts == (1, 3)
    assert all(isinstance(c, int) for c in counts) and all(isinstance(e, float) for e in edges)
    edges, counts = stats.histogram([float("nan")], bins=4)
    assert len(edges) == 5 and counts == (0, 0, 0, 0)
    edges, counts = stats.histogram([0.1, 0.2, 5.0], bins=[0.0, 1.0, 2.0])
    assert counts == (2, 0)  # 5.0 is outside the given edges
    with pytest.raises(ValueError, match="strictly increasing"):
        stats.histogram([1.0], bins=[1.0, 1.0])


# --- KS test -----------------------------------------------------------------------------


def assert_matches_scipy(a, b, rtol):
    want = scipy.stats.ks_2samp(a, b)
    stat, p = stats.ks_2samp(a, b)
    assert stat == pytest.approx(float(want.statistic), abs=1e-12)
    assert p == pytest.approx(float(want.pvalue), rel=rtol, abs=1e-300)


@pytest.mark.parametrize("seed", range(6))
def test_ks_2samp_exact_matches_scipy_on_random_small_samples(seed):
    rng = np.random.default_rng(seed)
    for _ in range(25):
        n1, n2 = (int(v) for v in rng.integers(1, 80, size=2))
        a = rng.normal(size=n1)
        b = rng.normal(rng.uniform(0, 1.5), size=n2)
        if rng.random() < 0.3:  # ties, as with discrete rule rewards
            a, b = np.round(a), np.round(b)
        assert_matches_scipy(a, b, rtol=1e-9)


@pytest.mark.parametrize(("n1", "n2"), [(50, 50), (300, 300), (1000, 1200), (2000, 1999)])
def test_ks_2samp_exact_matches_scipy_on_medium_samples(n1, n2):
    rng = np.random.default_rng(n1 + n2)
    a = rng.normal(size=n1)
    assert_matches_scipy(a, rng.normal(0.1, size=n2), rtol=1e-9)
    assert_matches_scipy(a, rng.normal(0.6, size=n2), rtol=1e-7)  # tiny p-values keep precision


@pytest.mark.parametrize(("n1", "n2", "shift"), [
    (12_000, 11_000, 0.0), (12_000, 11_000, 0.04), (20_000, 20_000, 0.03), (15_000, 400, 0.1),
])
def test_ks_2samp_asymptotic_matches_scipy_on_large_samples(n1, n2, shift):
    rng = np.random.default_rng(n1 - n2)
    assert_matches_scipy(rng.normal(size=n1), rng.normal(shift, size=n2), rtol=1e-4)


def test_ks_2samp_detects_a_shift_and_not_a_resample():
    rng = np.random.default_rng(0)
    before = rng.normal(0.4, 0.1, size=200)
    _, p_same = stats.ks_2samp(before, rng.normal(0.4, 0.1, size=200))
    _, p_shift = stats.ks_2samp(before, rng.normal(0.5, 0.1, size=200))
    assert p_same > 0.05 and p_shift < 1e-6


def test_ks_2samp_edge_cases():
    assert stats.ks_2samp([1.0, 2.0], [1.0, 2.0]) == (0.0, 1.0)
    assert stats.ks_2samp([0.0], [1.0]) == pytest.approx(
        (1.0, float(scipy.stats.ks_2samp([0.0], [1.0]).pvalue)))
    stat, p = stats.ks_2samp([1.0, float("nan")], [2.0])
    assert math.isnan(stat) and math.isnan(p)
    with pytest.raises(ValueError, match="non-empty"):
        stats.ks_2samp([], [1.0])


def test_kstwo_sf_matches_scipy_distribution():
    for n in (141, 1000, 50_000):
        for z in (0.2, 0.6, 1.0, 1.36, 2.0, 3.5, 8.0):
            d = z / math.sqrt(n)
            want = float(scipy.stats.kstwo.sf(d, n))
            assert ks.kstwo_sf(d, n) == pytest.approx(want, rel=1e-4, abs=1e-300)


def test_ks_2samp_exact_stays_fast_at_the_exact_limit():
    rng = np.random.default_rng(1)
    start = time.perf_counter()
    stats.ks_2samp(rng.normal(size=3000), rng.normal(size=2999))
    assert time.perf_counter() - start < 2.0


def test_stats_accept_tensors_arrays_and_generators():
    import torch

    values = [3.0, 1.0, 2.0]
    for given in (torch.tensor(values), np.array(values), tuple(values), (v for v in values)):
        assert stats.length_stats(given)["max"] == 3.0
    assert stats.histogram(torch.tensor([0.0, 1.0]), bins=1)[1] == (2,)
