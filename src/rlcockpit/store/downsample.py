"""Server-side downsampling of one metric curve that keeps its spikes.

The step range is cut into ``B`` equal buckets; each bucket contributes the row holding its
minimum and the row holding its maximum (so a one-step spike always survives), plus its first NaN
row when it has one (a NaN detector and a human both need to see it). Bucket aggregation runs in
SQL over the clustered (run, name, step) range, so only ~``max_points`` rows reach Python.

SQLite returns the other ("bare") columns of a ``GROUP BY`` query from the row that holds the
single ``MIN()`` / ``MAX()`` aggregate (documented SQLite behaviour), which gives the extreme's
step and wall time without a window function.
"""

from __future__ import annotations

import math
import sqlite3

_RANGE = "run_key = ? AND name_id = ? AND step BETWEEN ? AND ?"


def series_rows(conn: sqlite3.Connection, run_key: int, name_id: int, lo: int, hi: int,
                max_points: int | None) -> tuple[list[tuple[int, float, float]], bool]:
    """((step, value, wall_time) ascending, downsampled?) for one metric in [lo, hi]."""
    args = (run_key, name_id, lo, hi)
    if max_points is not None:
        count, first, last, nans = conn.execute(
            f"SELECT COUNT(*), MIN(step), MAX(step), TOTAL(value IS NULL) FROM metrics "
            f"WHERE {_RANGE}", args).fetchone()
        if count > max_points:
            return _bucketed(conn, args, first, last, max_points, has_nan=nans > 0), True
    raw = conn.execute(f"SELECT step, value, wall_time FROM metrics WHERE {_RANGE} ORDER BY step",
                       args).fetchall()
    return [(s, math.nan if v is None else v, w) for s, v, w in raw], False


def _bucketed(conn: sqlite3.Connection, args: tuple, first: int, last: int, max_points: int,
              *, has_nan: bool) -> list[tuple[int, float, float]]:
    per_bucket = 3 if has_nan else 2
    buckets = max(1, max_points // per_bucket)
    span = last - first + 1
    bucket = f"((step - {int(first)}) * {int(buckets)}) / {int(span)}"
    points: dict[int, tuple[int, float, float]] = {}
    for agg in ("MIN", "MAX"):
        rows = conn.execute(
            f"SELECT {agg}(value), step, wall_time FROM metrics WHERE {_RANGE} "
            f"AND value IS NOT NULL GROUP BY {bucket}", args).fetchall()
        for value, step, wall in rows:
            points[step] = (step, value, wall)
    if has_nan:
        rows = conn.execute(
            f"SELECT MIN(step), wall_time FROM metrics WHERE {_RANGE} AND value IS NULL "
            f"GROUP BY {bucket}", args).fetchall()
        for step, wall in rows:
            points[step] = (step, math.nan, wall)
    return [points[s] for s in sorted(points)]
