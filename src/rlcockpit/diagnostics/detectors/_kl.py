"""The KL scale every KL detector judges against: a target, or the run's own comfort level.

A KL of 10 nats means nothing by itself: it is a healthy per-sequence KL for a 1k-token answer at
0.01 nats per token and a collapse for a 24-token one. The seeds (001 Q12) set the tiers relative
to a *target* "found in the first experiments (the comfort zone)" and ask for thresholds that adapt
to the run. So each KL detector compares the KL with a :class:`KLScale`:

1. **a target** — ``kl/target`` when the run logs it (rlcockpit's trainer logs its ``kl.target``
   every step; the adaptive controller moves towards it), else the detector config's ``target``
   when it is set (> 0). The KL compared is ``kl/mean`` (per sequence, the target's unit), or
   ``kl/token_mean`` × ``response/length_mean`` when only the per-token mean is logged;
2. **the run's comfort level** — with no target (TRL, verl and most imported runs): the KL per
   token (``kl/token_mean``, or ``kl/mean`` / ``response/length_mean``), against the median of its
   values over the last ``comfort_steps`` steps before the ``lag`` most recent ones (001 Q12:
   "thresholds should adapt, e.g. to the mean of the recent N steps"), or their noise (1.4826 ×
   MAD) when a sampled estimator swings more than its median, but never below
   ``token_floor`` nats per token — the upper end of the seeds' comfort zone (0.01–0.05), which
   keeps a run whose KL starts at 1e-4 from calling 1e-3 "ten times the target". A KL that
   grows slowly (healthy: it rises from 0 and settles, 001 Q1) moves its comfort level with it;
   a KL that jumps within a few steps is judged against the level before the jump. A slow drift
   is ``kl_trend``'s to find.

Both are ratios, so a tier ("1.5× the target") means the same at any model size or answer length.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from rlcockpit.diagnostics.base import NO_REFERENCE, SKIPPED, StepView
from rlcockpit.diagnostics.windows import median

COMFORT_STEPS = 20  # logged values whose median is the comfort level (no target)
MIN_COMFORT = 5  # values needed (before the lag) to know the comfort level
COMFORT_LAG = 5  # the most recent values are left out of it (a jump is judged against before)
TOKEN_FLOOR = 0.05  # nats per token: the upper end of the seeds' comfort zone (001 Q12)
STARTED = 1e-6  # nats per token: the KL has left zero (actor != reference)


def _kl_and_length(view: StepView) -> tuple[float | None, float | None, float | None]:
    """(``kl/mean``, ``kl/token_mean``, a positive ``response/length_mean``), each None if absent."""
    length = view.finite("response/length_mean")
    return view.finite("kl/mean"), view.finite("kl/token_mean"), \
        length if length is not None and length > 0 else None


def per_token(view: StepView) -> float | None:
    """The batch-mean KL per token: ``kl/token_mean`` or ``kl/mean`` / ``response/length_mean``."""
    seq, token, length = _kl_and_length(view)
    if token is not None:
        return token
    return seq / length if seq is not None and length is not None else None


def per_sequence(view: StepView) -> float | None:
    """``kl/mean``, or ``kl/token_mean`` × ``response/length_mean`` when only that is logged."""
    seq, token, length = _kl_and_length(view)
    if seq is not None:
        return seq
    return token * length if token is not None and length is not None else None


def has_kl(view: StepView) -> bool:
    """Whether the step logs any KL to the reference (NaN included: that is nonfinite's job)."""
    return view.get("kl/mean") is not None or view.get("kl/token_mean") is not None


def no_reference(view: StepView) -> bool:
    """Whether the run declares it has no reference model: ``kl/coef`` = 0 and no KL logged (TRL
    GRPO's default β = 0 loads none; verl without a KL loss or KL reward neither). A run that logs
    a KL with β = 0 has a reference: its KL is judged as usual."""
    return view.get("kl/coef") == 0.0 and not has_kl(view)


def kl_missing(view: StepView) -> object:
    """What a KL detector answers for a step without a KL: NO_REFERENCE or SKIPPED."""
    return NO_REFERENCE if no_reference(view) else SKIPPED


@dataclass(frozen=True)
class KLReading:
    """One step's KL in the scale's units: ``ratio`` = ``value`` / ``unit``."""

    value: float  # the KL compared (per sequence with a target, per token without)
    unit: float  # the target or the comfort level, same units as value
    per: str  # "sequence" or "token"
    basis: str  # "kl/target", "config target", "comfort level"

    @property
    def ratio(self) -> float:
        return self.value / self.unit

    def evidence(self) -> dict[str, float | str]:
        return {"kl": self.value, "target": self.unit, "kl_per": self.per, "target_basis": self.basis}


class KLScale:
    """Reads a step's KL and the unit it is judged in (see the module docstring)."""

    def __init__(self, target: float = 0.0, comfort_steps: int = COMFORT_STEPS,
                 token_floor: float = TOKEN_FLOOR, lag: int = COMFORT_LAG) -> None:
        self.target = float(target)
        self.token_floor = float(token_floor)
        self.lag = int(lag)
        self._recent: deque[float] = deque(maxlen=int(comfort_steps) + self.lag)

    def read(self, view: StepView) -> KLReading | None:
        """This step's reading, or None when no finite KL is logged (or no unit is known yet)."""
        token = per_token(view)
        if token is not None and abs(token) > STARTED:
            self._recent.append(token)
        logged = view.finite("kl/target")
        if logged is not None and logged > 0:
            return self._target_reading(view, logged, "kl/target")
        if self.target > 0:
            return self._target_reading(view, self.target, "config target")
        if token is None or len(self._recent) < self.lag + MIN_COMFORT:
            return None  # no level to judge against yet (an imported run may start mid-training)
        return KLReading(token, self.comfort(), "token", "comfort level")

    def comfort(self) -> float:
        """The run's comfort level per token: the median of its recent values before the lag, or
        their noise (1.4826 × MAD) when that is larger — a sampled k1 estimate swings below 0 and
        back (real runs 013/014: -1.6 … 3.1 per token), and its swings are not KL excursions —
        never below the floor."""
        before = np.asarray(list(self._recent)[:-self.lag] if self.lag else list(self._recent))
        if not len(before):
            return self.token_floor
        level = median(before)
        noise = 1.4826 * median(np.abs(before - level))
        return max(level, noise, self.token_floor)

    @staticmethod
    def _target_reading(view: StepView, target: float, basis: str) -> KLReading | None:
        seq = per_sequence(view)
        if seq is None or not math.isfinite(seq):
            return None
        return KLReading(seq, target, "sequence", basis)
