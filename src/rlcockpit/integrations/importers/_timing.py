"""An imported run keeps its own clock: wall times, start and end from what the log recorded.

Logs carry time in one of three ways, used in this order:

1. **wall times** per record: TensorBoard event times, W&B's ``_timestamp``, a ``timestamp`` /
   ``wall_time`` key, Trackio's row timestamps;
2. **elapsed seconds** since the run began: W&B's ``_runtime``, ms-swift's ``elapsed_time``
   (``"5m 18s"``); a numeric ``elapsed_time`` counts only when it increases (some custom loops
   log each step's own duration under that name: then it is read as ``time/step_s``);
3. **per-step durations** under catalog names after renaming: ``time/step_s`` (verl
   ``timing_s/step``, TRL ``step_time``, OpenRLHF ``timing/step_total``...), else the sum of the
   step's ``time/<phase>_s``.

With (2) or (3) and no wall time, the clock starts at a synthetic origin chosen so that the run
ends at the import moment, and ``import.timing.synthetic`` says so. Without any of them the points
keep wall time 0 and the run is stamped with the import moment, as before.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlcockpit.integrations.importers._base import ParsedImport
from rlcockpit.integrations.importers._text import parse_duration, parse_number
from rlcockpit.records import decode_float

STEP_DURATION = "time/step_s"
_PHASE = re.compile(r"^time/[^/]+_s$")
RUNTIME_KEY = "_runtime"  # W&B: seconds since wandb.init
ELAPSED_KEY = "elapsed_time"  # ms-swift (text, cumulative) or a custom loop (number, ambiguous)


@dataclass(frozen=True)
class ClockReading:
    """One record's reading of the run clock: seconds, and whether they surely count from the
    start (``_runtime``, a duration text) or may be the step's own duration (a bare number)."""

    seconds: float
    cumulative: bool


def pop_clock(values: dict[str, Any]) -> ClockReading | None:
    """Remove the clock keys from one record's values and return their reading."""
    runtime = _seconds(values.pop(RUNTIME_KEY, None))
    elapsed = values.pop(ELAPSED_KEY, None)
    if runtime is not None:
        return ClockReading(runtime, cumulative=True)
    number = _seconds(elapsed)
    if number is not None:  # a bare number (also printed as text, as in a CSV cell): ambiguous
        return ClockReading(number, cumulative=False)
    seconds = parse_duration(elapsed) if isinstance(elapsed, str) else None
    return None if seconds is None else ClockReading(seconds, cumulative=True)


def _seconds(value: Any) -> float | None:
    """A finite number of seconds from a number or a number printed as text."""
    if isinstance(value, str):
        number = parse_number(value)
        value = number[0] if number is not None and not number[1] else None
    seconds = decode_float(value)
    return seconds if seconds is not None and seconds == seconds and abs(seconds) != float("inf") else None


def settle_clock(readings: Mapping[int, ClockReading],
                 rows: dict[int, dict[str, tuple[float, float]]], parsed: ParsedImport) -> None:
    """Put a file's clock readings where they belong: seconds since the start into
    ``parsed.elapsed``; a bare ``elapsed_time`` that does not increase into the rows as the
    per-step duration ``time/step_s`` (noted in the summary)."""
    steps = sorted(readings)
    values = [readings[s].seconds for s in steps]
    increasing = all(b > a for a, b in zip(values, values[1:], strict=False)) and len(values) > 1
    for step in steps:
        reading = readings[step]
        if reading.cumulative or increasing:
            parsed.elapsed[step] = reading.seconds
        else:
            rows.setdefault(step, {}).setdefault(STEP_DURATION, (reading.seconds, 0.0))
    if steps and not increasing and not any(readings[s].cumulative for s in steps):
        parsed.notes.append(f"{ELAPSED_KEY} does not increase from step to step: read as each "
                            f"step's own duration ({STEP_DURATION})")


def _step_walls(parsed: ParsedImport) -> dict[int, float]:
    walls: dict[int, float] = {}
    for (step, _), (_, wall) in parsed.metrics.items():
        if wall > 0:
            walls[step] = max(wall, walls.get(step, 0.0))
    return walls


def _durations(parsed: ParsedImport) -> tuple[dict[int, float], str]:
    """Per-step durations and where they came from ("" when the log has none)."""
    logged = {s: v for (s, n), (v, _) in parsed.metrics.items()
              if n == STEP_DURATION and v == v and v >= 0}
    if logged:
        return logged, STEP_DURATION
    phases: dict[int, float] = {}
    for (step, name), (value, _) in parsed.metrics.items():
        if _PHASE.match(name) and value == value and value >= 0:
            phases[step] = phases.get(step, 0.0) + value
    return phases, "sum of time/<phase>_s" if phases else ""


def _clock_from_durations(steps: list[int], durations: Mapping[int, float], now: float
                          ) -> dict[int, float]:
    """End time of every step: cumulative durations (a step without one takes the median)."""
    typical = statistics.median(durations.values())
    ends, total = {}, 0.0
    for step in steps:
        total += durations.get(step, typical)
        ends[step] = total
    origin = now - total
    return {step: origin + end for step, end in ends.items()}


def resolve_timing(parsed: ParsedImport, now: float) -> None:
    """Give every metric point of ``parsed`` a wall time and record the run's start and end in
    ``parsed.timing`` (empty when the log carries no time at all)."""
    steps = parsed.steps
    if not steps:
        return
    walls = _step_walls(parsed)
    durations, duration_source = _durations(parsed)
    if walls:
        source, synthetic = "wall times logged with the records", False
        start = min(walls[s] - parsed.elapsed.get(s, durations.get(s, 0.0)) for s in walls)
    elif parsed.elapsed:
        source, synthetic = "seconds since the start (elapsed time)", True
        origin = now - max(parsed.elapsed.values())
        walls = {s: origin + e for s, e in parsed.elapsed.items()}
        start = origin
    elif durations:
        source, synthetic = f"per-step durations ({duration_source})", True
        walls = _clock_from_durations(steps, durations, now)
        start = walls[steps[0]] - durations.get(steps[0], statistics.median(durations.values()))
    else:
        return
    filled = _fill(steps, walls)
    for key, (value, wall) in list(parsed.metrics.items()):
        if wall <= 0 and key[0] in filled:
            parsed.metrics[key] = (value, filled[key[0]])
    parsed.timing = {"source": source, "synthetic": synthetic, "started_at": start,
                     "ended_at": max(filled.values())}


def _fill(steps: list[int], walls: Mapping[int, float]) -> dict[int, float]:
    """A wall time for every step: its own, else the previous step's (else the next one's)."""
    out: dict[int, float] = {}
    last = next((walls[s] for s in steps if s in walls), 0.0)
    for step in steps:
        last = walls.get(step, last)
        out[step] = last
    return out
