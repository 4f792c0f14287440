"""Rewards: user reward-function loading and combination (rule rewards of the tiny world live in
:mod:`rlcockpit.world.rewards`; any ``"module:function"`` works the same way)."""

from __future__ import annotations

from rlcockpit.rewards.loader import (
    FLAG_PREFIX,
    INFO_PREFIX,
    RewardFunction,
    ScoredBatch,
    parse_output,
    resolve,
)

__all__ = ["FLAG_PREFIX", "INFO_PREFIX", "RewardFunction", "ScoredBatch", "parse_output", "resolve"]
