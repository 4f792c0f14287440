"""The validation metrics (``eval/*``, DESIGN.md §4), reduced in one place: the trainer's EVAL phase
(:mod:`rlcockpit.trainer.evaluation`) and ``rlcockpit world eval`` (:mod:`rlcockpit.world.evaluate`)
both call :func:`eval_metrics`.

NaN policy: non-finite rewards and verdicts are left out of the means; a category without a finite
reward has no ``eval/reward/category/<c>/mean``, and no finite reward at all gives an
``eval/reward/mean`` of NaN ("not measurable").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["eval_metrics"]


def eval_metrics(categories: Sequence[str], rewards: Sequence[float],
                 correct: Sequence[float] | None = None) -> dict[str, float]:
    """``eval/reward/mean``, ``eval/reward/category/<c>/mean`` and ``eval/accuracy/<c>`` (the mean of the
    per-sample ``info/correct`` verdicts, when given) over one evaluation's samples, categories sorted."""
    cats = np.asarray(list(categories))
    totals = np.asarray(rewards, dtype=np.float64)
    verdicts = None if correct is None else np.asarray(correct, dtype=np.float64)
    finite = np.isfinite(totals)
    out = {"eval/reward/mean": float(totals[finite].mean()) if finite.any() else float("nan")}
    for cat in sorted(set(cats.tolist())):
        sel = (cats == cat) & finite
        if sel.any():
            out[f"eval/reward/category/{cat}/mean"] = float(totals[sel].mean())
        if verdicts is not None:
            judged = verdicts[(cats == cat) & np.isfinite(verdicts)]
            if judged.size:
                out[f"eval/accuracy/{cat}"] = float(judged.mean())
    return out
