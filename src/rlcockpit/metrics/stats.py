"""Sample-level statistics in numpy: repetition and diversity, lengths, quantiles, EMA, histograms,
and the two-sample KS test (:mod:`rlcockpit.metrics.ks`).

NaN policy: ``quantile``, ``percentile``, ``ema``, ``length_stats`` and ``histogram`` ignore
non-finite values (a telemetry reducer must not turn one bad sample into a NaN curve); an empty
input gives NaN statistics. ``ks_2samp`` follows scipy (NaN in, NaN out). Tested against naive
loops and scipy in ``tests/test_metrics_stats.py``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from rlcockpit.metrics.ks import ks_2samp

__all__ = [
    "distinct_ngram_frac", "ema", "histogram", "ks_2samp", "length_stats", "percentile",
    "quantile", "repetition_rate",
]


def _ngrams(tokens: Sequence, n: int) -> list[tuple]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def _check_n(n: int) -> None:
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n-gram size n={n!r} must be an integer >= 1")


def repetition_rate(token_ids: Sequence[Sequence[int]], n: int = 3) -> float:
    """Mean over responses of the share of n-grams that repeat an earlier n-gram of the same
    response (``response/repetition_rate``). A response shorter than n counts as 0; no responses
    give 0.0. "a b c a b c" with n=3 has 4 trigrams, one of them a repeat -> 0.25."""
    _check_n(n)
    if len(token_ids) == 0:
        return 0.0
    rates = []
    for tokens in token_ids:
        grams = _ngrams(list(tokens), n)
        rates.append(1.0 - len(set(grams)) / len(grams) if grams else 0.0)
    return float(np.mean(rates))


def distinct_ngram_frac(sequences: Iterable[str | Sequence[int]], n: int = 2) -> float:
    """distinct-n (Li et al. 2016): unique n-grams / all n-grams over the whole batch.

    Strings are split on whitespace; token lists are used as they are. Low values mean the batch
    says the same thing over and over (degeneration). NaN when there is no n-gram at all.
    """
    _check_n(n)
    total, unique = 0, set()
    for seq in sequences:
        tokens = seq.split() if isinstance(seq, str) else list(seq)
        grams = _ngrams(tokens, n)
        total += len(grams)
        unique.update(grams)
    return len(unique) / total if total else math.nan


def _as_array(values: Iterable[float]) -> np.ndarray:
    """A flat float array from a list, tuple, numpy array, CPU tensor or any iterable."""
    if not (hasattr(values, "__array__") or isinstance(values, (list, tuple))):
        values = list(values)
    return np.asarray(values, dtype=float).ravel()


def _finite(values: Iterable[float]) -> np.ndarray:
    arr = _as_array(values)
    return arr[np.isfinite(arr)]


def length_stats(lengths: Iterable[float]) -> dict[str, float]:
    """{"mean", "std" (population), "max"} of response lengths; NaN for each when empty."""
    arr = _finite(lengths)
    if arr.size == 0:
        return {"mean": math.nan, "std": math.nan, "max": math.nan}
    return {"mean": float(arr.mean()), "std": float(arr.std()), "max": float(arr.max())}


def quantile(values: Iterable[float], q: float) -> float:
    """Quantile q in [0, 1] of the finite values (linear interpolation); NaN when none."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile q={q!r} must lie in [0, 1]")
    arr = _finite(values)
    return float(np.quantile(arr, q)) if arr.size else math.nan


def percentile(values: Iterable[float], p: float) -> float:
    """Percentile p in [0, 100] of the finite values (e.g. p=99 for ``kl/token_p99``)."""
    if not 0.0 <= p <= 100.0:
        raise ValueError(f"percentile p={p!r} must lie in [0, 100]")
    return quantile(values, p / 100.0)


def ema(values: Iterable[float], alpha: float) -> np.ndarray:
    """Exponential moving average series: e_0 = v_0, e_t = alpha * v_t + (1 - alpha) * e_{t-1}.

    The dashboard's "reward (EMA + raw)". A non-finite value leaves the average unchanged
    (NaN until the first finite value).
    """
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"ema alpha={alpha!r} must lie in (0, 1]; e.g. 0.1 for a 10-step memory")
    arr = _as_array(values)
    out = np.empty(arr.size)
    current = math.nan
    for i, v in enumerate(arr):
        if math.isfinite(v):
            current = v if math.isnan(current) else alpha * v + (1.0 - alpha) * current
        out[i] = current
    return out


def histogram(
    values: Iterable[float], bins: int | Sequence[float] = 20
) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """(edges, counts) of the finite values, ready for a ``HistogramRecord``.

    ``bins`` is a number of equal-width bins over the finite range, or explicit edges. NaN / inf
    are not counted. With no finite value the edges span [0, 1] and every count is 0.
    """
    arr = _finite(values)
    if isinstance(bins, int):
        if bins < 1:
            raise ValueError(f"histogram bins={bins!r} must be >= 1")
        lo_hi = (0.0, 1.0) if arr.size == 0 else None
        counts, edges = np.histogram(arr, bins=bins, range=lo_hi)
    else:
        edges_in = np.asarray(bins, dtype=float)
        if edges_in.ndim != 1 or edges_in.size < 2 or np.any(np.diff(edges_in) <= 0):
            raise ValueError("histogram edges must be at least two strictly increasing numbers")
        counts, edges = np.histogram(arr, bins=edges_in)
    return tuple(float(e) for e in edges), tuple(int(c) for c in counts)
