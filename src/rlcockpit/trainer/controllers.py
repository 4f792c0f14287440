"""The KL and clip controllers: what moves beta and epsilon between steps (end of UPDATE).

- :class:`AdaptiveKLController` / :class:`FixedKLController` — Ziegler et al. 2019 (seed 002 §3.2,
  seed 004 §3.3: the KL coefficient follows the measured KL).
- :class:`AdaptiveClipEps` — clip epsilon from the entropy slope (seed 000 §3.2).

They keep plain-float state (``state_dict`` / ``load_state_dict``) so a checkpoint resumes them
exactly; their knobs are settable at run time (live parameters) and validated on every set.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlcockpit.errors import ConfigError


def _require(ok: bool, key: str, value: Any, how: str) -> None:
    if not ok:
        raise ConfigError(f"{key}={value!r} is invalid: {how}", details={"key": key, "value": value})


def _finite_positive(value: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


class FixedKLController:
    """A constant KL coefficient beta; settable at run time (``kl/coef``)."""

    target: float | None = None

    def __init__(self, coef: float) -> None:
        self.coef = coef

    @property
    def coef(self) -> float:
        return self._coef

    @coef.setter
    def coef(self, value: float) -> None:
        _require(
            isinstance(value, (int, float)) and math.isfinite(value) and value >= 0,
            "kl.coef", value, "must be a finite number >= 0 (typical 0.01-0.1, seed 003 §3.3)",
        )
        self._coef = float(value)

    def update(self, current_kl: float, n_steps: int) -> float:
        return self._coef

    def state_dict(self) -> dict[str, Any]:
        return {"kind": "fixed", "coef": self._coef}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.coef = float(state["coef"])


class AdaptiveKLController(FixedKLController):
    """Adaptive KL coefficient (Ziegler et al. 2019, "Fine-Tuning LMs from Human Preferences"):

        e = clip(KL / target - 1, -0.2, 0.2);   beta <- beta * (1 + e * n_steps / horizon)

    KL above target raises beta, below lowers it, at most 20 % per horizon. A non-finite KL
    leaves beta unchanged (fail soft; the diagnostics flag the NaN).
    """

    PROPORTIONAL_CLIP = 0.2

    def __init__(self, init_coef: float, target: float, horizon: float) -> None:
        super().__init__(init_coef)
        self.target = target
        _require(_finite_positive(horizon), "kl.horizon", horizon, "must be a number > 0")
        self.horizon = float(horizon)

    @property
    def target(self) -> float:
        return self._target

    @target.setter
    def target(self, value: float) -> None:
        _require(_finite_positive(value), "kl.target", value, "must be a number > 0 (e.g. 6.0)")
        self._target = float(value)

    def update(self, current_kl: float, n_steps: int) -> float:
        if not math.isfinite(current_kl):
            return self._coef
        error = min(max(current_kl / self._target - 1.0, -self.PROPORTIONAL_CLIP),
                    self.PROPORTIONAL_CLIP)
        self._coef *= 1.0 + error * n_steps / self.horizon
        return self._coef

    def state_dict(self) -> dict[str, Any]:
        return {"kind": "adaptive", "coef": self._coef, "target": self._target,
                "horizon": self.horizon}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.coef = float(state["coef"])
        self.target = float(state["target"])
        self.horizon = float(state["horizon"])


class AdaptiveClipEps:
    """Clip epsilon that follows the entropy trend (seed 000 §3.2):

        entropy_ma <- 0.95 * entropy_ma + 0.05 * H
        slope = (entropy_ma - entropy_ma_prev) / interval
        eps = base * (1 + 2 * tanh(10 * slope)), clamped to [min_eps, max_eps]

    Rising entropy (more exploration) widens the clip; collapsing entropy narrows it so the policy
    cannot collapse faster. The first call seeds the average with H (slope 0, eps = base).
    """

    DECAY = 0.95
    GAIN = 2.0
    SHARPNESS = 10.0

    def __init__(self, base_eps: float, min_eps: float, max_eps: float, interval: float = 1.0):
        _require(_finite_positive(min_eps), "clip.min_eps", min_eps, "must be a number > 0")
        _require(_finite_positive(max_eps) and max_eps >= min_eps, "clip.max_eps", max_eps,
                 f"must be a number >= min_eps ({min_eps})")
        _require(_finite_positive(interval), "clip.interval", interval, "must be a number > 0")
        self.min_eps, self.max_eps, self.interval = float(min_eps), float(max_eps), float(interval)
        self.entropy_ma: float | None = None
        self.slope = 0.0
        self.base_eps = base_eps

    @property
    def base_eps(self) -> float:
        return self._base

    @base_eps.setter
    def base_eps(self, value: float) -> None:
        _require(_finite_positive(value) and self.min_eps <= value <= self.max_eps,
                 "clip.base_eps", value, f"must lie in [{self.min_eps}, {self.max_eps}]")
        self._base = float(value)
        self.eps = self._eps_for(self.slope)

    def _eps_for(self, slope: float) -> float:
        eps = self._base * (1.0 + self.GAIN * math.tanh(self.SHARPNESS * slope))
        return min(max(eps, self.min_eps), self.max_eps)

    def update(self, entropy: float) -> float:
        if not math.isfinite(entropy):
            return self.eps
        if self.entropy_ma is None:
            self.entropy_ma = float(entropy)
            self.slope = 0.0
        else:
            previous = self.entropy_ma
            self.entropy_ma = self.DECAY * previous + (1.0 - self.DECAY) * float(entropy)
            self.slope = (self.entropy_ma - previous) / self.interval
        self.eps = self._eps_for(self.slope)
        return self.eps

    def state_dict(self) -> dict[str, Any]:
        return {"base_eps": self._base, "min_eps": self.min_eps, "max_eps": self.max_eps,
                "interval": self.interval, "entropy_ma": self.entropy_ma, "slope": self.slope,
                "eps": self.eps}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.min_eps, self.max_eps = float(state["min_eps"]), float(state["max_eps"])
        self.interval = float(state["interval"])
        ma = state["entropy_ma"]
        self.entropy_ma = None if ma is None else float(ma)
        self.slope = float(state["slope"])
        self.base_eps = float(state["base_eps"])
        self.eps = float(state["eps"])


@dataclass
class Controllers:
    """The run's adaptive coefficients: beta (``kl``) and epsilon (``clip``, None = the live ``clip_eps``)."""

    kl: FixedKLController
    clip: AdaptiveClipEps | None


__all__ = ["AdaptiveClipEps", "AdaptiveKLController", "Controllers", "FixedKLController"]
