"""Two-sample Kolmogorov-Smirnov test in numpy (two-sided), following scipy's ``method='auto'``.

Used to measure the effect of a live change: the reward distribution before vs after a ticket
(DESIGN.md §7, seed 000 §2: "p-value = 0.003"). Exact p-values when both samples have at most
10,000 values, as scipy does:

- equal sizes: Hodges (1958) closed form, summed in Horner form (scipy's
  ``_compute_prob_outside_square``);
- unequal sizes: the share of lattice paths from (0, 0) to (n1, n2) that touch the boundary
  |x / n1 - y / n2| >= d, by dynamic programming over anti-diagonals. The DP carries the
  *outside* probability (it is a convex combination at each cell, so it never overflows and
  keeps its relative precision for tiny p-values).

Larger samples use the one-sample distribution of D_N with N = round(n1 n2 / (n1 + n2)) as scipy
does (``kstwo.sf``), computed by Simard & L'Ecuyer's (2011) recipe: Ruben-Gambino at the edges,
2 * Smirnov's one-sided exact sum in the tail, the Pelz-Good (1976) expansion in the body. When
N <= 140 (one sample tiny) the exact path count above is cheap and is used instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

MAX_EXACT_N = 10_000  # scipy's MAX_AUTO_N: 'auto' is exact when both samples are this small
_SMALL_N = 140


def ks_statistic(x: np.ndarray, y: np.ndarray) -> float:
    """sup |F1 - F2| of two sorted samples (right-continuous ECDFs, ties handled)."""
    data_all = np.concatenate([x, y])
    cdf1 = np.searchsorted(x, data_all, side="right") / x.size
    cdf2 = np.searchsorted(y, data_all, side="right") / y.size
    diffs = cdf1 - cdf2
    return float(max(diffs.max(), np.clip(-diffs.min(), 0.0, 1.0)))


def ks_2samp(a, b) -> tuple[float, float]:
    """Two-sided two-sample KS test -> (statistic, pvalue), matching ``scipy.stats.ks_2samp``.

    A NaN in either sample gives (nan, nan) (scipy's ``nan_policy='propagate'``); an empty sample
    raises ValueError.
    """
    x = np.sort(np.asarray(a, dtype=np.float64).ravel())
    y = np.sort(np.asarray(b, dtype=np.float64).ravel())
    if x.size == 0 or y.size == 0:
        raise ValueError("ks_2samp needs two non-empty samples")
    if np.isnan(x).any() or np.isnan(y).any():
        return math.nan, math.nan
    d = ks_statistic(x, y)
    n1, n2 = x.size, y.size
    if max(n1, n2) <= MAX_EXACT_N:
        d, p = _exact_two_sided(n1, n2, d)
        if 0.0 <= p <= 1.0:
            return d, p
    return d, float(np.clip(_asymptotic_two_sided(n1, n2, d), 0.0, 1.0))


def _exact_two_sided(n1: int, n2: int, d: float) -> tuple[float, float]:
    """(d rounded to the lattice, P(D >= d)) under H0; scipy's ``_attempt_exact_2kssamp``."""
    g = math.gcd(n1, n2)
    lcm = (n1 // g) * n2
    h = int(np.round(d * lcm))
    d = h / lcm
    if h == 0:
        return d, 1.0
    if n1 == n2:
        return d, _prob_outside_square(n1, h)
    return d, _prob_outside_band(n1, n2, h)


def _prob_outside_square(n: int, h: int) -> float:
    """P(D_{n,n} >= h / n) = 2 * sum_k (-1)^(k+1) binom(2n, n - kh) / binom(2n, n) (Hodges 1958),
    evaluated as 2 * A0 (1 - A1 (1 - A2 (...))) to avoid cancellation."""
    p = 0.0
    for k in range(n // h, -1, -1):
        term = 1.0
        for j in range(h):
            term = (n - k * h - j) * term / (n + k * h + j + 1)
        p = term * (1.0 - p)
    return 2.0 * p


def _prob_outside_band(n1: int, n2: int, h: int) -> float:
    """Share of monotone lattice paths (0, 0) -> (n1, n2) with some point where
    |x * n2/g - y * n1/g| >= h, i.e. |x/n1 - y/n2| >= h / lcm.

    Normalised counts B(x, y) = (#paths to (x, y) already outside) / binom(x + y, x) obey
    B(x, y) = (x B(x-1, y) + y B(x, y-1)) / (x + y), with B = 1 on the boundary. Walking the
    anti-diagonals x + y = s vectorises each step. x runs over the smaller sample.
    """
    if n1 > n2:
        n1, n2 = n2, n1
    g = math.gcd(n1, n2)
    step_x, step_y = n2 // g, n1 // g
    # prev[k] holds B(k - 1, s - k) of the previous diagonal; prev[0] is a zero-weight pad.
    prev = np.zeros(n1 + 2)
    for s in range(1, n1 + n2 + 1):
        xs = np.arange(max(0, s - n2), min(n1, s) + 1)
        ys = s - xs
        cur = (xs * prev[xs] + ys * prev[xs + 1]) / s
        outside = np.abs(xs * step_x - ys * step_y) >= h
        cur[outside] = 1.0
        prev[xs + 1] = cur
    return float(prev[n1 + 1])


def _asymptotic_two_sided(n1: int, n2: int, d: float) -> float:
    big, small = max(n1, n2), min(n1, n2)
    n_eff = int(np.round(big * small / (big + small)))
    if n_eff <= _SMALL_N:
        # One sample is tiny: the exact path count costs O((n1 + n2) * small) and beats the
        # one-sample approximation; h is rounded to the lattice as in the exact branch.
        return _exact_two_sided(n1, n2, d)[1]
    return kstwo_sf(d, n_eff)


def kstwo_sf(d: float, n: int) -> float:
    """P(D_n >= d) for the two-sided one-sample KS statistic (Simard & L'Ecuyer 2011 recipe)."""
    if d >= 1.0:
        return 0.0
    if d <= 0.0:
        return 1.0
    t = n * d
    if t <= 1.0:  # Ruben-Gambino: P(D_n < d) = n!/n^n (2t - 1)^n for 1/2n <= d <= 1/n
        if t <= 0.5:
            return 1.0
        return 1.0 - math.exp(math.lgamma(n + 1) - n * math.log(n) + n * math.log(2 * t - 1))
    if t >= n - 1:
        return 2.0 * (1.0 - d) ** n
    nd2 = t * d
    if d >= 0.5 or nd2 >= 2.2:
        return 0.0 if nd2 >= 370.0 else 2.0 * smirnov_sf(n, d)
    return _pelz_good_sf(n, d)


def smirnov_sf(n: int, d: float) -> float:
    """P(D+_n >= d), the one-sided one-sample KS tail, by the exact Birnbaum-Tingey sum:
    d * sum_{j <= n(1-d)} binom(n, j) (1 - d - j/n)^(n-j) (d + j/n)^(j-1), in log space."""
    j = np.arange(0, int(math.floor(n * (1.0 - d))) + 1, dtype=np.float64)
    rest = 1.0 - d - j / n
    j, rest = j[rest > 0], rest[rest > 0]  # a zero base makes the term 0
    if j.size == 0:
        return 0.0
    log_binom = np.concatenate([[0.0], np.cumsum(np.log((n - j[1:] + 1) / j[1:]))])
    logs = log_binom + (n - j) * np.log(rest) + (j - 1) * np.log(d + j / n)
    top = logs.max()
    return float(d * math.exp(top) * np.exp(logs - top).sum())


def _pelz_good_sf(n: int, d: float) -> float:
    """Pelz-Good (1976) expansion of P(D_n >= d): sum of K_i(z) / n^(i/2), i = 0..3, z = d sqrt(n),
    with the theta-function forms for small z (coefficients as in Simard & L'Ecuyer 2011)."""
    z = math.sqrt(n) * d
    z2, z4, z6 = z * z, z**4, z**6
    pi2 = math.pi**2
    qlog = -pi2 / 8.0 / z2
    if qlog < math.log(np.finfo(np.float64).tiny):
        return 1.0
    q = math.exp(qlog)
    k_terms = np.zeros(4)
    for k in range(int(math.ceil(16 * z / math.pi)), 0, -1):
        m2 = (2 * k - 1) ** 2
        coeffs = np.array([
            1.0,
            -z2 + pi2 / 4 * m2,
            6 * z6 + 2 * z4 + (2 * z4 - 5 * z2) * pi2 / 4 * m2 + pi2**2 * (1 - 2 * z2) / 16 * m2**2,
            -30 * z6 - 90 * z**8 + pi2 * (135 * z4 - 96 * z6) / 4 * m2
            + pi2**2 * (-60 * z2 + 212 * z4) / 16 * m2**2 + pi2**3 * (5 - 30 * z2) / 64 * m2**3,
        ])
        k_terms = k_terms * q ** (8 * k) + coeffs
    k_terms *= q * math.sqrt(2 * math.pi)
    k_terms /= np.array([z, 6 * z4, 72 * z**7, 6480 * z**10])
    ks = np.arange(int(math.ceil(16 * z / math.pi)), 0, -1, dtype=np.float64)
    qk = math.exp(-pi2 / 2 / z2) ** (ks**2)
    k_terms[2] += np.sum(ks**2 * qk) * pi2 * math.sqrt(2 * math.pi) / (-36 * z**3)
    k_terms[3] += (np.sum((3 * z2 - pi2 * ks**2) * ks**2 * qk)
                   * pi2 * math.sqrt(2 * math.pi) / (216 * z6))
    k_terms /= np.power(float(n), np.arange(4) / 2.0)
    return float(1.0 - k_terms.sum())


def ks_test(a: Sequence[float], b: Sequence[float], exact_max: int = 64) -> tuple[float, float]:
    """Two-sided two-sample KS test -> (D, p) for one step's samples against a pooled reference.

    Exact (``ks_2samp``) when both samples have at most ``exact_max`` values; otherwise D with the
    one-sample distribution of D_N at N = n1·n2 / (n1 + n2) (scipy's asymptotic form), because the
    exact lattice count for 32 values against 640 costs ~10 ms per call in a detector that runs
    every step. The detectors use p-value thresholds of 1e-4 and below, where both agree in order
    of magnitude (checked in tests/test_detectors_b.py).
    """
    x = np.sort(np.asarray(a, dtype=float).ravel())
    y = np.sort(np.asarray(b, dtype=float).ravel())
    if x.size == 0 or y.size == 0:
        raise ValueError("ks_test needs two non-empty samples")
    if max(x.size, y.size) <= exact_max:
        return ks_2samp(x, y)
    d = ks_statistic(x, y)
    n_eff = max(1, int(round(x.size * y.size / (x.size + y.size))))
    return d, float(min(max(kstwo_sf(d, n_eff), 0.0), 1.0))
