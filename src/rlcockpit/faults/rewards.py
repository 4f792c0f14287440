"""Faulty reward functions: a wrapper around the run's real reward function (``reward.fn``).

A fault that lives in the reward is injected through the documented reward-function hook only:
the run's ``reward.fn`` becomes ``rlcockpit.faults.rewards:score`` and the wrapper calls the
original function, then corrupts its output from the onset step on. The wrapper's parameters come
from the environment variable :data:`ENV` (JSON: kind, onset, the inner function, parameters),
because ``reward.fn`` takes no arguments; :meth:`rlcockpit.faults.Fault.configure` sets it. One
reward fault per process.

Kinds (what each does from the first faulted step on; ``frac`` is the ramp's progress, 1.0 for a
step fault -- the spec's ``ramp`` = R makes the corruption grow linearly over R steps):

- ``filler_bonus``: a hackable reward model -- responses with the filler template ("that is a
  great question ...", seed 000 §3.1) get ``bonus`` × frac added to ``helpfulness``.
- ``template_bonus``: the same hack on another template: responses matching the regular
  expression ``pattern`` (case-insensitive) get ``bonus`` × frac added to ``helpfulness``.
- ``length_bonus``: ``per_char`` × frac reward per response character (a reward that grows with
  length).
- ``component_shift``: one component is shifted by ``shift`` × frac on every sample -- a
  reward-model head whose bias was reset (seed 000 §4.1: truthfulness head mean 0.63 -> 0.31).
- ``bias_drift``: one component drifts by ``per_step`` more each step (``per_step`` × (steps since
  the first faulted step + 1)) -- a reward-model head whose bias drifts; a drift is its own ramp.
- ``nan``: a seeded fraction ``rate`` × frac of the rewards becomes NaN (at least one per step once
  the ramp is complete).
- ``category_drop``: the ``component`` of one ``category`` falls by ``drop`` × frac (a negative
  number; the default fault ramps it over 6 steps: -0.25 per step down to -1.5).

The first faulted step is ``onset``, or step 1 for ``onset`` 0 (a fault present from the start).
"""

from __future__ import annotations

import functools
import json
import math
import os
import random
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rlcockpit.errors import RewardFunctionError
from rlcockpit.rewards.loader import resolve
from rlcockpit.world.rewards import has_filler

ENV = "RLCOCKPIT_FAULT_REWARD"
SPEC = "rlcockpit.faults.rewards:score"
Output = list[Any]


def encode(kind: str, onset: int, inner: str, params: Mapping[str, Any], ramp: int = 0) -> str:
    """The JSON the wrapper reads from :data:`ENV` (``ramp`` = R: the corruption grows over R steps)."""
    if kind not in TRANSFORMS:
        raise RewardFunctionError(f"unknown reward fault kind {kind!r}; known: {', '.join(TRANSFORMS)}",
                                  details={"kind": kind})
    if inner == SPEC:
        raise RewardFunctionError("the fault reward cannot wrap itself; reward.fn must be the real reward function",
                                  details={"function": inner})
    return json.dumps({"kind": kind, "onset": int(onset), "inner": inner, "params": dict(params),
                       "ramp": int(ramp)})


def ramp_fraction(since: int, ramp: int) -> float:
    """Progress of a ramp of ``ramp`` steps at ``since`` steps after its first step (1.0 = complete)."""
    return 1.0 if ramp <= 1 else min(1.0, (since + 1) / ramp)


def score(prompts: Sequence[str], responses: Sequence[str], meta: Sequence[Mapping[str, Any]],
          step: int) -> Output:
    """``reward.fn`` of a faulted run: the inner reward, corrupted from the first faulted step on."""
    raw = os.environ.get(ENV)
    if not raw:
        raise RewardFunctionError(f"{SPEC} needs the environment variable {ENV} (set by Fault.configure); "
                                  "use the run's real reward function instead", details={"function": SPEC})
    kind, onset, inner, params, ramp = _parse(raw)
    out = list(inner(prompts, responses, meta, step))
    first = max(onset, 1)
    if step < first:
        return out
    since = step - first
    return TRANSFORMS[kind](out, responses, meta, since, params, ramp_fraction(since, ramp))


@functools.lru_cache(maxsize=8)
def _parse(raw: str) -> tuple[str, int, Callable[..., Any], dict[str, Any], int]:
    try:
        data = json.loads(raw)
        kind, onset, inner, params = data["kind"], int(data["onset"]), data["inner"], dict(data["params"])
        ramp = int(data.get("ramp", 0))
    except (ValueError, KeyError, TypeError) as exc:
        raise RewardFunctionError(f"{ENV}={raw!r} is not a valid fault spec ({exc}); set it with "
                                  "Fault.configure", details={"function": SPEC}) from exc
    if kind not in TRANSFORMS:
        raise RewardFunctionError(f"{ENV}: unknown kind {kind!r}; known: {', '.join(TRANSFORMS)}",
                                  details={"function": SPEC})
    return kind, onset, resolve(inner), params, ramp


def _dicts(out: Output, kind: str) -> list[dict[str, float]]:
    if not all(isinstance(x, Mapping) for x in out):
        raise RewardFunctionError(f"reward fault {kind!r} needs a reward function that returns named "
                                  "components (dicts)", details={"function": SPEC})
    return [dict(x) for x in out]


def _add(item: Any, component: str, delta: float) -> Any:
    if isinstance(item, Mapping):
        return {**item, component: float(item.get(component, 0.0)) + delta}
    return float(item) + delta


def filler_bonus(out: Output, responses: Sequence[str], meta: Sequence[Mapping[str, Any]], since: int,
                 params: Mapping[str, Any], frac: float = 1.0) -> Output:
    bonus = float(params.get("bonus", 2.0)) * frac
    return [_add(x, "helpfulness", bonus) if has_filler(r) else x for x, r in zip(out, responses, strict=True)]


def template_bonus(out: Output, responses: Sequence[str], meta: Sequence[Mapping[str, Any]], since: int,
                   params: Mapping[str, Any], frac: float = 1.0) -> Output:
    pattern = _pattern(str(params.get("pattern", "")))
    bonus = float(params.get("bonus", 2.0)) * frac
    return [_add(x, "helpfulness", bonus) if pattern.search(r) else x for x, r in zip(out, responses, strict=True)]


@functools.lru_cache(maxsize=8)
def _pattern(text: str) -> re.Pattern[str]:
    if not text:
        raise RewardFunctionError("reward fault template_bonus needs a non-empty 'pattern' (a regular expression)",
                                  details={"function": SPEC})
    try:
        return re.compile(text, re.IGNORECASE)
    except re.error as exc:
        raise RewardFunctionError(f"reward fault template_bonus: pattern {text!r} is not a regular expression "
                                  f"({exc})", details={"function": SPEC}) from exc


def length_bonus(out: Output, responses: Sequence[str], meta: Sequence[Mapping[str, Any]], since: int,
                 params: Mapping[str, Any], frac: float = 1.0) -> Output:
    per_char = float(params.get("per_char", 0.05)) * frac
    return [_add(x, "helpfulness", per_char * len(r)) for x, r in zip(out, responses, strict=True)]


def component_shift(out: Output, responses: Sequence[str], meta: Sequence[Mapping[str, Any]], since: int,
                    params: Mapping[str, Any], frac: float = 1.0) -> Output:
    return _shift_component(out, "component_shift", params, float(params.get("shift", -0.5)) * frac)


def bias_drift(out: Output, responses: Sequence[str], meta: Sequence[Mapping[str, Any]], since: int,
               params: Mapping[str, Any], frac: float = 1.0) -> Output:
    # the drift is its own ramp: per_step more each step, without bound (a bias that keeps drifting)
    return _shift_component(out, "bias_drift", params, float(params.get("per_step", 0.02)) * (since + 1))


def _shift_component(out: Output, kind: str, params: Mapping[str, Any], shift: float) -> Output:
    name = str(params.get("component", "helpfulness"))
    items = _dicts(out, kind)
    if items and name not in items[0]:
        raise RewardFunctionError(f"reward fault {kind}: component {name!r} is not returned by the "
                                  f"reward function (its keys: {', '.join(items[0])})", details={"function": SPEC})
    return [_add(x, name, shift) for x in items]


def nan_rewards(out: Output, responses: Sequence[str], meta: Sequence[Mapping[str, Any]], since: int,
                params: Mapping[str, Any], frac: float = 1.0) -> Output:
    rate, seed = float(params.get("rate", 0.1)) * frac, int(params.get("seed", 0))
    rng = random.Random(seed * 1_000_003 + since)  # the same samples go NaN in every rerun
    bad = {i for i in range(len(out)) if rng.random() < rate}
    if not bad and out and frac >= 1.0:
        bad = {rng.randrange(len(out))}  # "occasional" still means at least one per faulted step
    return [_poison(x) if i in bad else x for i, x in enumerate(out)]


def _poison(item: Any) -> Any:
    if isinstance(item, Mapping):
        name = next((k for k in item if "/" not in k), None)
        if name is None:
            raise RewardFunctionError("reward fault nan: the reward function returned no component",
                                      details={"function": SPEC})
        return {**item, name: math.nan}
    return math.nan


def category_drop(out: Output, responses: Sequence[str], meta: Sequence[Mapping[str, Any]], since: int,
                  params: Mapping[str, Any], frac: float = 1.0) -> Output:
    category = str(params.get("category", "math"))
    drop = float(params.get("drop", -1.5)) * frac
    component = str(params.get("component", "correctness"))
    return [_add(x, component, drop) if m.get("category") == category else x
            for x, m in zip(out, meta, strict=True)]


TRANSFORMS: dict[str, Callable[..., Output]] = {
    "filler_bonus": filler_bonus, "template_bonus": template_bonus, "length_bonus": length_bonus,
    "component_shift": component_shift, "bias_drift": bias_drift, "nan": nan_rewards,
    "category_drop": category_drop,
}
