"""Load a user reward function from ``"module:function"`` and turn its output into a ``ScoredBatch``.

The contract (docs/trainer.md, "Custom reward functions")::

    def fn(prompts: list[str], responses: list[str], meta: list[dict], step: int)
            -> list[float] | list[dict[str, float]]

A dict holds named *components*; the total reward is their weighted sum (weights from
``reward.weights``, default 1.0). Keys with a slash are not components: ``flag/<name>`` >= 0.5
sets the flag ``<name>`` on the sample, ``info/<name>`` is recorded (``info/correct`` becomes the
trainer's ``eval/accuracy/<category>``). NaN/inf are *not* errors here: they are reported in
``ScoredBatch.finite`` so the trainer can drop the sample from the update and still store it.
Everything else that is wrong — a bad import path, a non-callable, a wrong signature, a wrong
return length or type — raises :class:`RewardFunctionError` naming the function.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import math
import numbers
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlcockpit.errors import RewardFunctionError

FLAG_PREFIX = "flag/"
INFO_PREFIX = "info/"


@dataclass(frozen=True)
class ScoredBatch:
    """Rewards of N samples. ``totals`` keep NaN/inf; ``finite[i]`` is False for such samples."""

    totals: np.ndarray  # [N] float64, weighted sum of components (or the plain float)
    components: dict[str, np.ndarray] = field(default_factory=dict)  # name -> [N]
    flags: tuple[tuple[str, ...], ...] = ()
    info: dict[str, np.ndarray] = field(default_factory=dict)  # name -> [N], NaN where absent

    @property
    def finite(self) -> np.ndarray:
        return np.isfinite(self.totals)

    def __len__(self) -> int:
        return int(self.totals.shape[0])


class RewardFunction:
    """A resolved, validated reward function with its component weights."""

    def __init__(self, fn: Callable[..., Any], name: str, weights: Mapping[str, float] | None = None) -> None:
        self.fn = fn
        self.name = name
        self.weights = dict(weights or {})
        self.components: tuple[str, ...] | None = None  # learnt from the first call

    @classmethod
    def from_spec(cls, spec: str, weights: Mapping[str, float] | None = None) -> RewardFunction:
        return cls(resolve(spec), spec, weights)

    def __call__(self, prompts: Sequence[str], responses: Sequence[str], meta: Sequence[Mapping[str, Any]],
                 step: int) -> ScoredBatch:
        n = len(responses)
        try:
            out = self.fn(list(prompts), list(responses), [dict(m) for m in meta], int(step))
        except RewardFunctionError:
            raise
        except Exception as exc:  # a bug in user code: name the function, keep the cause
            raise RewardFunctionError(
                f"reward function {self.name} raised {type(exc).__name__}: {exc} (step {step}, {n} samples)",
                details={"function": self.name, "step": step}) from exc
        batch = parse_output(out, n, self.name, self.weights)
        if self.components is None:
            self.components = tuple(batch.components)
            self._check_weights()
        return batch

    def configure(self, cfg: Any) -> None:
        """Hand ``reward.rm`` to a function that takes settings (``fn.configure(cfg)``); others ignore it."""
        configure = getattr(self.fn, "configure", None)
        if callable(configure):
            configure(cfg)

    @property
    def observer(self) -> Callable[[int, Mapping[str, float]], Any] | None:
        """``fn.observe(step, metrics)`` when the function learns from the run (the fusion of
        rlcockpit.world.rm:score reads the step's uncertainty, rule rate and entropy); else None."""
        observe = getattr(self.fn, "observe", None)
        return observe if callable(observe) else None

    def state_dict(self) -> Any:
        """``fn.state_dict()`` for a function with state worth a checkpoint (the fusion's history), else None."""
        state_dict = getattr(self.fn, "state_dict", None)
        return state_dict() if callable(state_dict) else None

    def load_state_dict(self, state: Any) -> None:
        load = getattr(self.fn, "load_state_dict", None)
        if state is not None and callable(load):
            load(state)

    def probe(self, prompt: str, meta: Mapping[str, Any]) -> ScoredBatch:
        """Call once on one real prompt (with an empty response) so a broken function fails at set-up."""
        return self([prompt], [""], [meta], 0)

    def _check_weights(self) -> None:
        unknown = sorted(set(self.weights) - set(self.components or ()))
        if unknown:
            have = ", ".join(self.components or ()) or "none (it returns plain floats)"
            close = difflib.get_close_matches(unknown[0], list(self.components or ()), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise RewardFunctionError(
                f"reward.weights.{unknown[0]} names a component that {self.name} does not return{hint} "
                f"(its components: {have})", details={"function": self.name, "key": f"reward.weights.{unknown[0]}"})


def resolve(spec: str) -> Callable[..., Any]:
    """``"pkg.module:function"`` (or ``"path/to/file.py:function"``) -> the callable, checked."""
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise RewardFunctionError(f"reward.fn={spec!r} must look like 'package.module:function'",
                                  details={"function": str(spec)})
    module_name, attr_path = spec.split(":")
    module = _import(module_name, spec)
    obj: Any = module
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            names = sorted(n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n)))
            raise RewardFunctionError(
                f"reward function {spec}: module '{module_name}' has no attribute '{attr_path}' "
                f"(callables there: {', '.join(names[:15]) or 'none'})", details={"function": spec})
        obj = getattr(obj, part)
    if not callable(obj):
        raise RewardFunctionError(f"reward function {spec} is a {type(obj).__name__}, not a callable",
                                  details={"function": spec})
    _check_signature(obj, spec)
    return obj


def _import(module_name: str, spec: str) -> Any:
    try:
        if module_name.endswith(".py"):
            path = Path(module_name).expanduser().resolve()
            if not path.is_file():
                raise FileNotFoundError(f"no such file: {path}")
            mod_spec = importlib.util.spec_from_file_location(f"rlcockpit_user_reward_{path.stem}", path)
            module = importlib.util.module_from_spec(mod_spec)  # type: ignore[arg-type]
            sys.modules[mod_spec.name] = module  # type: ignore[union-attr]
            mod_spec.loader.exec_module(module)  # type: ignore[union-attr]
            return module
        return importlib.import_module(module_name)
    except Exception as exc:  # import errors of user code come in every flavour
        raise RewardFunctionError(f"reward function {spec}: cannot import '{module_name}': "
                                  f"{type(exc).__name__}: {exc}", details={"function": spec}) from exc


def _check_signature(fn: Callable[..., Any], spec: str) -> None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # builtins without a signature: the probe call will tell
    try:
        sig.bind(["p"], ["r"], [{}], 0)
    except TypeError as exc:
        raise RewardFunctionError(f"reward function {spec}{sig} must accept (prompts, responses, meta, step): "
                                  f"{exc}", details={"function": spec}) from None


def parse_output(out: Any, n: int, name: str, weights: Mapping[str, float]) -> ScoredBatch:
    """Validate a reward function's return value for ``n`` samples and build the ScoredBatch."""
    if isinstance(out, np.ndarray):
        out = out.tolist()
    if isinstance(out, (str, bytes, Mapping)) or not isinstance(out, Sequence):
        raise RewardFunctionError(f"reward function {name} returned {type(out).__name__}; expected a list of "
                                  f"{n} floats or dicts", details={"function": name})
    if len(out) != n:
        raise RewardFunctionError(f"reward function {name} returned {len(out)} rewards for {n} responses; "
                                  "it must return exactly one per response", details={"function": name})
    if all(_is_number(x) for x in out):
        return ScoredBatch(totals=np.asarray([float(x) for x in out], dtype=np.float64),
                           flags=tuple(() for _ in out))
    if all(isinstance(x, Mapping) for x in out):
        return _parse_dicts(out, name, weights)
    bad = next((i for i, x in enumerate(out) if not (_is_number(x) or isinstance(x, Mapping))), None)
    what = "numbers mixed with dicts" if bad is None else f"a {type(out[bad]).__name__} at index {bad}"
    raise RewardFunctionError(f"reward function {name} returned {what}; every item must be a number, or every "
                              "item a dict of named numbers", details={"function": name})


def _parse_dicts(out: Sequence[Mapping[str, Any]], name: str, weights: Mapping[str, float]) -> ScoredBatch:
    n = len(out)
    comp_names: list[str] = []
    info_names: list[str] = []
    for d in out:
        for k, v in d.items():
            if not isinstance(k, str) or not _is_number(v):
                raise RewardFunctionError(f"reward function {name} returned {{{k!r}: {v!r}}}; keys must be "
                                          "strings and values numbers", details={"function": name})
            target = info_names if k.startswith(INFO_PREFIX) else comp_names if "/" not in k else None
            if target is not None and k not in target:
                target.append(k)
    components = {c: np.asarray([float(d.get(c, 0.0)) for d in out]) for c in comp_names}
    totals = np.zeros(n, dtype=np.float64)
    for c, values in components.items():
        w = float(weights.get(c, 1.0))
        if w != 0.0:  # a zero weight switches a component off, NaN included
            totals = totals + w * values
    info = {k[len(INFO_PREFIX):]: np.asarray([float(d.get(k, math.nan)) for d in out]) for k in info_names}
    flags = tuple(tuple(sorted(k[len(FLAG_PREFIX):] for k, v in d.items()
                               if k.startswith(FLAG_PREFIX) and float(v) >= 0.5)) for d in out)
    return ScoredBatch(totals=totals, components=components, flags=flags, info=info)


def _is_number(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)
