"""Faulty reward functions: a wrapper around the run's real reward function (``reward.fn``).

A fault that lives in the reward is injected through the documented reward-function hook only:
the run's ``reward.fn`` becomes ``rlcockpit.faults.rewards:score`` and the wrapper calls the
original function, then corrupts its output from the onset step on. The wrapper's parameters come
from the environment variable :data:`ENV` (JSON: kind, onset, the inner function, parameters),
because ``reward.fn`` takes no arguments; :meth:`rlcockpit.faults.Fault.configure` sets it. One
reward fault per process.

Kinds (what each does from ``onset`` on):

- ``filler_bonus``: a hackable reward model -- responses with the filler template ("that is a
  great question ...", seed 000 §3.1) get ``bonus`` added to ``helpfulness``.
- ``length_bonus``: ``per_char`` reward per response character (a reward that grows with length).
- ``component_shift``: one component is shifted by ``shift`` on every sample -- a reward-model
  head whose bias was reset (seed 000 §4.1: truthfulness head mean 0.63 -> 0.31).
- ``nan``: a seeded fraction ``rate`` of the rewards becomes NaN.
- ``category_drop``: the components of one ``category`` fall by ``per_step`` per step since the
  onset, down to ``floor``.
"""

from __future__ import annotations

import functools
import json
import math
import os
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rlcockpit.errors import RewardFunctionError
from rlcockpit.rewards.loader import resolve
from rlcockpit.world.rewards import has_filler

ENV = "RLCOCKPIT_FAULT_REWARD"
SPEC = "rlcockpit.faults.rewards:score"
Output = list[Any]


def encode(kind: str, onset: int, inner: str, params: Mapping[str, Any]) -> str:
    """The JSON the wrapper reads from :data:`ENV`."""
    if kind not in TRANSFORMS:
        raise RewardFunctionError(f"unknown reward fault kind {kind!r}; known: {', '.join(TRANSFORMS)}",
                                  details={"kind": kind})
    if inner == SPEC:
        raise RewardFunctionError("the fault reward cannot wrap itself; reward.fn must be the real reward function",
                                  details={"function": inner})
    return json.dumps({"kind": kind, "onset": int(onset), "inner": inner, "params": dict(params)})


def score(prompts: Sequence[str], responses: Sequence[str], meta: Sequence[Mapping[str, Any]],
          step: int) -> Output:
    """``reward.fn`` of a faulted run: the inner reward, corrupted from the onset step on."""
    raw = os.environ.get(ENV)
    if not raw:
        raise RewardFunctionError(f"{SPEC} needs the environment variable {ENV} (set by Fault.configure); "
                                  "use the run's real reward function instead", details={"function": SPEC})
    kind, onset, inner, params = _parse(raw)
    out = list(inner(prompts, responses, meta, step))
    if step < onset:
        return out
    return TRANSFORMS[kind](out, responses, meta, step - onset, params)


@functools.lru_cache(maxsize=8)
def _parse(raw: str) -> tuple[str, int, Callable[..., Any], dict[str, Any]]:
    try:
        data = json.loads(raw)
        kind, onset, inner, params = data["kind"], int(data["onset"]), data["inner"], dict(data["params"])
    except (ValueError, KeyError, TypeError) as exc:
        raise RewardFunctionError(f"{ENV}={raw!r} is not a valid fault spec ({exc}); set it with "
                                  "Fault.configure", details={"function": SPEC}) from exc
    if kind not in TRANSFORMS:
        raise RewardFunctionError(f"{ENV}: unknown kind {kind!r}; known: {', '.join(TRANSFORMS)}",
                                  details={"function": SPEC})
    return kind, onset, resolve(inner), params


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
                 params: Mapping[str, Any]) -> Output:
    bonus = float(params.get("bonus", 2.0))
    return [_add(x, "helpfulness", bonus) if has_filler(r) else x for x, r in zip(out, responses, strict=True)]


def length_bonus(out: Output, responses: Sequence[str], meta: Sequence[Mapping[str, Any]], since: int,
                 params: Mapping[str, Any]) -> Output:
    per_char = float(params.get("per_char", 0.05))
    return [_add(x, "helpfulness", per_char * len(r)) for x, r in zip(out, responses, strict=True)]


def component_shift(out: Output, responses: Sequence[str], meta: Sequence[Mapping[str, Any]], since: int,
                    params: Mapping[str, Any]) -> Output:
    name, shift = str(params.get("component", "helpfulness")), float(params.get("shift", -0.5))
    items = _dicts(out, "component_shift")
    if items and name not in items[0]:
        raise RewardFunctionError(f"reward fault component_shift: component {name!r} is not returned by the "
                                  f"reward function (its keys: {', '.join(items[0])})", details={"function": SPEC})
    return [_add(x, name, shift) for x in items]


def nan_rewards(out: Output, responses: Sequence[str], meta: Sequence[Mapping[str, Any]], since: int,
                params: Mapping[str, Any]) -> Output:
    rate, seed = float(params.get("rate", 0.1)), int(params.get("seed", 0))
    rng = random.Random(seed * 1_000_003 + since)  # the same samples go NaN in every rerun
    bad = {i for i in range(len(out)) if rng.random() < rate}
    if not bad and out:
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
                  params: Mapping[str, Any]) -> Output:
    category = str(params.get("category", "math"))
    drop = max(float(params.get("floor", -1.5)), -float(params.get("per_step", 0.25)) * (since + 1))
    component = str(params.get("component", "correctness"))
    return [_add(x, component, drop) if m.get("category") == category else x
            for x, m in zip(out, meta, strict=True)]


TRANSFORMS: dict[str, Callable[..., Output]] = {
    "filler_bonus": filler_bonus, "length_bonus": length_bonus, "component_shift": component_shift,
    "nan": nan_rewards, "category_drop": category_drop,
}
