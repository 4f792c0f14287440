"""Reading the per-rank metrics of a data-parallel run (``dist/<quantity>/rank/<r>``), shared by
the distributed detectors (straggler, rank_grad_outlier, rank_heartbeat).

Rank 0 writes every rank's numbers at each step as ordinary metrics of the one run
(docs/distributed.md); a single-process run logs none of them, so these detectors are skipped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from rlcockpit.diagnostics.base import StepView
from rlcockpit.diagnostics.windows import median

PHASES = ("rollout", "score", "advantage", "update")  # the phase machine's order (DESIGN.md §3)


def per_rank(view: StepView, quantity: str) -> dict[int, float]:
    """``{rank: value}`` of ``dist/<quantity>/rank/<r>`` at this step, finite values only, by rank."""
    prefix = f"dist/{quantity}/rank/"
    found = {}
    for name, value in view.matching(prefix).items():
        tail = name[len(prefix):]
        if tail.isdigit() and math.isfinite(value):
            found[int(tail)] = value
    return dict(sorted(found.items()))


def others(values: Mapping[int, float], rank: int) -> list[float]:
    """Every rank's value but ``rank``'s."""
    return [v for r, v in values.items() if r != rank]


def others_median(values: Mapping[int, float], rank: int) -> float:
    """The median of the other ranks' values (NaN when ``rank`` is the only one)."""
    return median(others(values, rank))


def rank_list(ranks: Iterable[int]) -> str:
    """``"1"``, ``"1 and 3"``, ``"1, 3 and 5"``."""
    names = [str(r) for r in sorted(ranks)]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def ranks_logged(names: frozenset[str], quantity: str) -> int:
    """How many ranks log ``dist/<quantity>/rank/<r>`` among ``names`` (a detector's coverage)."""
    prefix = f"dist/{quantity}/rank/"
    return sum(1 for n in names if n.startswith(prefix) and n[len(prefix):].isdigit())
