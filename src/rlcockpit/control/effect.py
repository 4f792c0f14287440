"""Effect of an applied change (DESIGN.md §7, seed 000 §2: "clip eps 0.2 -> 0.1, reward variance
-40%, KS p = 0.003"): the validation rewards right before applying vs ``effect_steps`` later, and
the training metrics over the windows before / after.

The KS test is passed in (``ks``: the trainer gives :func:`rlcockpit.metrics.ks.ks_2samp`), so this
module stays free of numpy and of the metrics layer.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

KS = Callable[[Sequence[float], Sequence[float]], tuple[float, float]]
WINDOW_METRICS = ("kl/mean", "policy/entropy", "reward/mean")


def _finite(values: Sequence[float]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _var(values: Sequence[float]) -> float | None:
    return statistics.pvariance(values) if len(values) >= 2 else None


def _delta(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else after - before


def _ratio(after: float | None, before: float | None) -> float | None:
    if after is None or before is None or before == 0:
        return None
    return after / before - 1.0


def reward_effect(before: Sequence[float], after: Sequence[float], ks: KS) -> dict[str, Any]:
    """KS test and mean / variance change of two validation reward samples (one value per prompt)."""
    b, a = _finite(before), _finite(after)
    out: dict[str, Any] = {"n_before": len(b), "n_after": len(a)}
    if b and a:
        stat, p = ks(b, a)
        out.update(ks_statistic=stat, ks_pvalue=p)
    else:
        out.update(ks_statistic=None, ks_pvalue=None)
    mb, ma, vb, va = _mean(b), _mean(a), _var(b), _var(a)
    out.update(reward_mean_before=mb, reward_mean_after=ma, reward_mean_delta=_delta(ma, mb),
               reward_var_before=vb, reward_var_after=va, reward_var_delta=_delta(va, vb),
               reward_var_change=_ratio(va, vb))
    return out


def window_effect(history: Mapping[int, Mapping[str, float]], boundary: int, steps: int,
                  names: Sequence[str] = WINDOW_METRICS) -> dict[str, Any]:
    """Mean of each metric over steps (boundary - steps, boundary] vs (boundary, boundary + steps]."""
    out: dict[str, Any] = {}
    for name in names:
        before = _finite([m[name] for s, m in history.items() if boundary - steps < s <= boundary and name in m])
        after = _finite([m[name] for s, m in history.items() if boundary < s <= boundary + steps and name in m])
        mb, ma = _mean(before), _mean(after)
        out[name] = {"before": mb, "after": ma, "delta": _delta(ma, mb), "n_before": len(before),
                     "n_after": len(after)}
    return out
