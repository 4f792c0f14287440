"""Statistics shared by the detectors (no detector here; numpy only).

- :class:`Lagged` — the last ``recent`` values of a quantity against the ``window`` values logged
  before them (a reference that can be frozen while a condition holds, so a lasting change stays
  visible instead of becoming the new normal);
- distribution shape of one step's samples: :func:`skewness`, :func:`excess_kurtosis`,
  :func:`bimodality_coefficient` (Sarle), rank correlation :func:`spearman`;
- :class:`PooledLevel` — the same for per-step arrays of sample values: the pooled recent samples
  against the pooled reference samples (Welch's z), for levels whose noise the samples tell;
- :func:`sample_values` — a numeric field of the step's samples, finite values only;
- the two-sample KS test lives in :mod:`rlcockpit.metrics.ks` (``ks_test``: fast for a small
  sample against a large pool).

Each statistic is checked against a naive formula in tests/test_detectors_b.py.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence

import numpy as np

from rlcockpit.diagnostics.windows import MAD_TO_SIGMA, Window, mad, median, ranks, robust_z
from rlcockpit.records import SampleRecord

BC_UNIFORM = 5.0 / 9.0  # Sarle's bimodality coefficient of a uniform distribution: above → bimodal


class Lagged:
    """The last ``recent`` finite values against the ``window`` values before them."""

    def __init__(self, window: int, recent: int) -> None:
        if recent < 1:
            raise ValueError(f"recent must be >= 1, got {recent}")
        self.reference = Window(window)
        self._recent: deque[tuple[int, float]] = deque(maxlen=recent)
        self.frozen = False  # True: values leaving `recent` are not added to the reference

    def push(self, value: float | None, step: int) -> bool:
        if value is None or not math.isfinite(value):
            return False
        if len(self._recent) == self._recent.maxlen and not self.frozen:
            old_step, old_value = self._recent[0]
            self.reference.push(old_value, old_step)
        self._recent.append((int(step), float(value)))
        return True

    def ready(self, min_reference: int) -> bool:
        return len(self._recent) == self._recent.maxlen and len(self.reference) >= min_reference

    @property
    def recent(self) -> np.ndarray:
        return np.asarray([v for _, v in self._recent], dtype=float)

    @property
    def recent_steps(self) -> list[int]:
        return [s for s, _ in self._recent]

    @property
    def median(self) -> float:
        ref = self.reference.values
        return median(ref)

    def scale(self, floor: float) -> float:
        """Robust spread of the reference (1.4826 · MAD), never below ``floor``."""
        ref = self.reference.values
        return max(MAD_TO_SIGMA * mad(ref), floor) if ref.size else floor

    def z(self, floor: float) -> float:
        """Robust z-score of the mean of the recent values against the reference."""
        return robust_z(float(self.recent.mean()), self.reference.values, floor)

    def onset(self, moved: Callable[[float], bool]) -> int:
        """First step of the trailing run of values (recent, then reference) for which
        ``moved(value)`` holds: a change that began before the recent steps is dated there."""
        onset = self._recent[-1][0]
        history = [*zip(self.reference.steps.tolist(), self.reference.values.tolist(),
                        strict=True), *self._recent]
        for step, value in reversed(history):
            if not moved(value):
                break
            onset = step
        return onset

    def rebase(self) -> None:
        """Forget the reference (after a long-lasting change was acknowledged as the new level)."""
        self.reference.clear()
        self.frozen = False


class PooledLevel:
    """Per-step arrays of values: the last ``recent`` steps pooled against the ``window`` before.

    :meth:`z` is Welch's statistic (mean difference over its standard error), so the threshold
    means the same whether a step holds 8 values or 800.
    """

    def __init__(self, window: int, recent: int) -> None:
        self._recent: deque[tuple[int, np.ndarray]] = deque(maxlen=recent)
        self._reference: deque[tuple[int, np.ndarray]] = deque(maxlen=window)
        self.frozen = False

    def push(self, values: np.ndarray, step: int) -> None:
        values = np.asarray(values, dtype=float)
        values = values[np.isfinite(values)]
        if values.size == 0:
            return
        if len(self._recent) == self._recent.maxlen and not self.frozen:
            self._reference.append(self._recent[0])
        self._recent.append((int(step), values))

    def ready(self, min_reference: int) -> bool:
        return len(self._recent) == self._recent.maxlen and len(self._reference) >= min_reference

    @property
    def recent(self) -> np.ndarray:
        return np.concatenate([v for _, v in self._recent])

    @property
    def reference(self) -> np.ndarray:
        return np.concatenate([v for _, v in self._reference]) if self._reference else np.empty(0)

    def z(self, sd_floor: float = 0.0) -> float:
        """(mean recent − mean reference) / standard error; each std at least ``sd_floor``."""
        a, b = self.recent, self.reference
        if a.size < 2 or b.size < 2:
            return math.nan
        va = max(float(a.var(ddof=1)), sd_floor ** 2)
        vb = max(float(b.var(ddof=1)), sd_floor ** 2)
        se = math.sqrt(va / a.size + vb / b.size)
        return (float(a.mean()) - float(b.mean())) / se if se > 0 else math.nan

    def onset(self, moved: Callable[[float], bool]) -> int:
        """First step of the trailing run of steps (recent, then reference) whose mean satisfies
        ``moved``: a change that began before the recent steps is dated where it began."""
        onset = self._recent[-1][0]
        for step, values in reversed([*self._reference, *self._recent]):
            if not moved(float(values.mean())):
                break
            onset = step
        return onset

    def rebase(self) -> None:
        self._reference.clear()
        self.frozen = False


def sample_values(samples: Sequence[SampleRecord], field: str) -> np.ndarray:
    """A numeric field of the samples as a float array, non-finite values dropped."""
    values = np.asarray([float(getattr(s, field)) for s in samples], dtype=float)
    return values[np.isfinite(values)]


def _centered(x: Sequence[float], min_n: int) -> tuple[np.ndarray, float] | None:
    """Deviations from the mean and the second central moment; None below ``min_n`` values or
    without spread (the adjusted moments are then undefined)."""
    a = np.asarray(x, dtype=float)
    if a.size < min_n:
        return None
    d = a - a.mean()
    m2 = float(np.mean(d ** 2))
    return (d, m2) if m2 > 0.0 else None


def _skewness(d: np.ndarray, m2: float) -> float:
    n = d.size
    g1 = float(np.mean(d ** 3)) / m2 ** 1.5
    return g1 * math.sqrt(n * (n - 1)) / (n - 2)


def _excess_kurtosis(d: np.ndarray, m2: float) -> float:
    n = d.size
    g2 = float(np.mean(d ** 4)) / m2 ** 2 - 3.0
    return ((n + 1) * g2 + 6.0) * (n - 1) / ((n - 2) * (n - 3))


def skewness(x: Sequence[float]) -> float:
    """Adjusted Fisher–Pearson sample skewness G1; 0 for fewer than 3 values or no spread."""
    centered = _centered(x, 3)
    return 0.0 if centered is None else _skewness(*centered)


def excess_kurtosis(x: Sequence[float]) -> float:
    """Adjusted sample excess kurtosis G2; 0 for fewer than 4 values or no spread."""
    centered = _centered(x, 4)
    return 0.0 if centered is None else _excess_kurtosis(*centered)


def bimodality_coefficient(x: Sequence[float]) -> float:
    """Sarle's bimodality coefficient (g² + 1) / (κ + 3(n−1)² / ((n−2)(n−3))).

    Above 5/9 (the uniform distribution's value) hints at two modes (SAS Institute 1990; Pfister
    et al. 2013). NaN for fewer than 4 values or no spread.
    """
    a = np.asarray(x, dtype=float)
    n = a.size
    if n < 4 or float(np.ptp(a)) == 0.0:
        return math.nan
    centered = _centered(a, 4)  # the deviations once, for both moments
    g, k = (0.0, 0.0) if centered is None else (_skewness(*centered), _excess_kurtosis(*centered))
    return (g * g + 1.0) / (k + 3.0 * (n - 1) ** 2 / ((n - 2) * (n - 3)))


def spearman(x: Sequence[float], y: Sequence[float], *, x_ranks: np.ndarray | None = None) -> float:
    """Spearman's rank correlation of two paired samples; 0 when undefined (constant input).
    ``x_ranks``: ``ranks(x)`` when the caller correlates one ``x`` with several series."""
    a = np.asarray(x, dtype=float)
    b = np.asarray(y, dtype=float)
    if a.size != b.size:
        raise ValueError(f"spearman needs paired samples, got {a.size} and {b.size} values")
    if a.size < 3:
        return 0.0
    ra, rb = ranks(a) if x_ranks is None else x_ranks, ranks(b)
    sa, sb = ra.std(), rb.std()
    if sa == 0 or sb == 0:
        return 0.0
    return float(np.mean((ra - ra.mean()) * (rb - rb.mean())) / (sa * sb))


def cusum(z: Sequence[float], k: float) -> tuple[float, float]:
    """One-sided CUSUM statistics of a short series of z-scores, ending at its last value:
    (max over j of Σ_{i≥j} (z_i − k), max over j of Σ_{i≥j} (−z_i − k)), each at least 0.

    Page's CUSUM restarted at the start of the series (a window, so it needs no state): a slow
    drift of d standard deviations per step adds up to about d·n²/2 over n steps while the noise
    grows like √n, so the sum crosses a threshold h before any single step leaves a ±h band.
    ``k`` (in z units) is the allowance a step must exceed to count."""
    up = down = 0.0
    for value in z:
        up = max(0.0, up + value - k)
        down = max(0.0, down - value - k)
    return up, down


def two_mode_split(x: Sequence[float], min_share: float = 0.2) -> tuple[float, float] | None:
    """(Ashman's D, the smaller mode's share) of the best split of ``x`` into two groups.

    The split is the one of the sorted values that minimises the within-group sum of squares
    (1-D 2-means, exact: every cut point is tried); Ashman's D = √2 |μ₁ − μ₂| / √(σ₁² + σ₂²)
    measures how separated the two groups are (D > 2: two modes with a clear gap between them).
    None when fewer than 8 finite values, or when the best split leaves less than ``min_share`` of
    the values on one side. A group with no spread and a gap gives D = inf."""
    v = np.sort(np.asarray([float(t) for t in x], dtype=float))
    v = v[np.isfinite(v)]
    n = v.size
    if n < 8:
        return None
    c1, c2 = np.cumsum(v), np.cumsum(v * v)
    k = np.arange(1, n)  # left group sizes
    left_ss = c2[:-1] - c1[:-1] ** 2 / k
    right_n = n - k
    right_ss = (c2[-1] - c2[:-1]) - (c1[-1] - c1[:-1]) ** 2 / right_n
    cut = int(np.argmin(left_ss + right_ss)) + 1
    share = min(cut, n - cut) / n
    if share < min_share:
        return None
    a, b = v[:cut], v[cut:]
    var = float(a.var() + b.var())
    gap = abs(float(b.mean() - a.mean()))
    if var <= 0:
        return (math.inf if gap > 0 else 0.0), share
    return math.sqrt(2.0) * gap / math.sqrt(var), share

