"""A baseline run: a healthy run of the same recipe that a new run is compared with, step by step.

A failure present from the first step has no "before" inside its own run: every history-based
detector takes it as normal (docs/detection.md: a learning rate ×3, β = 10 or a reward ×3 from
step 1 leave a run that looks like some healthy run). What an RL engineer does then is compare the
new run with the last good run of the recipe, at the same steps. The ``baseline`` detector does
that when ``diagnostics.baseline`` names such a run (``STORE_URI#RUN_ID``).

This module holds the value the detector reads (:class:`Baseline`: per metric, the baseline's
values by step) and reads it from a store through the :class:`StoreReader` protocol. Opening the
store is the caller's job (the trainer, ``rlcockpit doctor``, a benchmark): diagnostics sees only
the store protocol.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from rlcockpit.errors import ConfigError
from rlcockpit.store.base import StoreReader

# What the baseline detector compares: scale quantities judged as ratios (log space), and the
# reward mean judged as a shift in units of its own step-to-step noise.
RATIO_METRICS = ("kl/token_mean", "kl/mean", "policy/approx_kl", "policy/clip_frac",
                 "policy/entropy", "reward/std", "value/loss", "grad/norm/actor",
                 "grad/norm/critic", "response/length_mean")
SHIFT_METRICS = ("reward/mean",)
METRICS = RATIO_METRICS + SHIFT_METRICS


def parse_ref(ref: str) -> tuple[str, str]:
    """``"STORE_URI#RUN_ID"`` → (store URI, run id); a fix-it error for anything else."""
    store, sep, run_id = ref.rpartition("#")
    if not sep or not store or not run_id:
        raise ConfigError(f"diagnostics.baseline={ref!r} must name a store and a run in it as "
                          "STORE_URI#RUN_ID, e.g. runs/rlcockpit.db#ppo-tiny-20261201-101500 "
                          "(`rlcockpit runs --store STORE` lists the run ids)")
    return store, run_id


@dataclass(frozen=True)
class Baseline:
    """Per metric, the baseline run's finite values in step order (``steps`` and ``values``)."""

    label: str
    series: Mapping[str, tuple[tuple[int, ...], tuple[float, ...]]] = field(default_factory=dict)

    @classmethod
    def from_steps(cls, label: str, rows: Iterable[tuple[int, Mapping[str, float]]],
                   metrics: Iterable[str] = METRICS) -> Baseline:
        """Build from (step, metrics) rows (a stored run, a recorded stream)."""
        wanted = tuple(metrics)
        acc: dict[str, list[tuple[int, float]]] = {m: [] for m in wanted}
        for step, row in rows:
            for m in wanted:
                v = row.get(m)
                if v is not None and math.isfinite(float(v)):
                    acc[m].append((int(step), float(v)))
        series = {}
        for m, pairs in acc.items():
            if pairs:
                pairs.sort()
                series[m] = (tuple(s for s, _ in pairs), tuple(v for _, v in pairs))
        return cls(label, series)

    def window(self, metric: str, step: int, half: int) -> list[float]:
        """The baseline's values of ``metric`` at steps ``step - half`` … ``step + half``."""
        found = self.series.get(metric)
        if not found:
            return []
        steps, values = found
        lo = bisect.bisect_left(steps, step - half)
        hi = bisect.bisect_right(steps, step + half)
        return list(values[lo:hi])

    @property
    def last_step(self) -> int:
        return max((s[-1] for s, _ in self.series.values() if s), default=0)


def load_baseline(reader: StoreReader, run_id: str, *, label: str = "") -> Baseline:
    """Read a stored run's metrics (full resolution) into a :class:`Baseline`."""
    from rlcockpit.diagnostics.offline import iter_steps

    rows = ((step, metrics) for step, metrics, _, _ in iter_steps(reader, run_id, with_samples=False))
    base = Baseline.from_steps(label or run_id, rows)
    if not base.series:
        raise ConfigError(f"the baseline run {run_id!r} logged none of {', '.join(METRICS)}; "
                          "choose a run of the same recipe that trained (rlcockpit runs)")
    return base


def load_baseline_ref(ref: str, open_store: Callable[..., object]) -> Baseline:
    """``"STORE_URI#RUN_ID"`` read into a :class:`Baseline`. ``open_store`` is
    :func:`rlcockpit.store.open_store` (passed in: diagnostics sees only the store protocol).
    Fails fast, with a fix-it message, when the store or the run does not exist."""
    from rlcockpit.errors import NotFoundError, StoreError

    uri, run_id = parse_ref(ref)
    try:
        reader = open_store(uri, create=False, read_only=True).reader()  # type: ignore[attr-defined]
    except (StoreError, NotFoundError, OSError) as exc:
        raise ConfigError(f"diagnostics.baseline={ref!r}: cannot open the store {uri!r} ({exc}); "
                          "give the store of a finished run of the same recipe") from exc
    try:
        known = {r.run_id for r in reader.list_runs()}
        if run_id not in known:
            listed = ", ".join(sorted(known)[:5]) or "none"
            raise ConfigError(f"diagnostics.baseline={ref!r}: the store has no run {run_id!r} "
                              f"(runs there: {listed}; `rlcockpit runs --store {uri}` lists them)")
        return load_baseline(reader, run_id)
    finally:
        reader.close()

