"""Metric rollups: per (run, metric) the extremes of every block of ``size`` steps, kept by the
writer so a downsampled curve over 100k steps reads ~1.6k rows instead of scanning 100k.

A rollup row holds, for steps ``[bucket * size, (bucket + 1) * size)``, the row with the smallest
value, the row with the largest value (NaN excluded) and the first NaN row — step, value and wall
time of each, so a curve built from rollups shows only points that were really stored.

The writer merges a batch into the rows it touches with one upsert per (metric, size, bucket).
When a batch rewrites steps that already had a value (a resumed run logging a step again), the
touched buckets are recomputed from the metrics table instead, so a replaced spike disappears.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterable

SIZES = (64, 4096)  # 64-step blocks for up to ~100k-step curves, 4096 beyond

COLUMNS = ("min_step, min_value, min_wall, max_step, max_value, max_wall, nan_step, nan_wall")

_UPSERT = f"""
INSERT INTO metric_rollups (run_key, name_id, size, bucket, {COLUMNS})
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (run_key, name_id, size, bucket) DO UPDATE SET
    min_step = CASE WHEN {{newmin}} THEN excluded.min_step ELSE min_step END,
    min_value = CASE WHEN {{newmin}} THEN excluded.min_value ELSE min_value END,
    min_wall = CASE WHEN {{newmin}} THEN excluded.min_wall ELSE min_wall END,
    max_step = CASE WHEN {{newmax}} THEN excluded.max_step ELSE max_step END,
    max_value = CASE WHEN {{newmax}} THEN excluded.max_value ELSE max_value END,
    max_wall = CASE WHEN {{newmax}} THEN excluded.max_wall ELSE max_wall END,
    nan_step = CASE WHEN {{newnan}} THEN excluded.nan_step ELSE nan_step END,
    nan_wall = CASE WHEN {{newnan}} THEN excluded.nan_wall ELSE nan_wall END
""".format(
    # in an upsert, bare column names are the stored row (all read before any is set)
    newmin="excluded.min_step IS NOT NULL AND (min_step IS NULL OR excluded.min_value < min_value)",
    newmax="excluded.max_step IS NOT NULL AND (max_step IS NULL OR excluded.max_value > max_value)",
    newnan="excluded.nan_step IS NOT NULL AND (nan_step IS NULL OR excluded.nan_step < nan_step)",
)


def summarize(points: Iterable[tuple[int, float, float]], size: int) -> dict[int, list]:
    """bucket -> [min_step, min_value, min_wall, max_step, max_value, max_wall, nan_step,
    nan_wall] of ``points`` (step, value, wall_time)."""
    out: dict[int, list] = {}
    for step, value, wall in points:
        acc = out.get(step // size)
        if acc is None:
            acc = out[step // size] = [None] * 8
        if value != value:  # NaN
            if acc[6] is None or step < acc[6]:
                acc[6], acc[7] = step, wall
            continue
        if acc[0] is None or value < acc[1]:
            acc[0], acc[1], acc[2] = step, value, wall
        if acc[3] is None or value > acc[4]:
            acc[3], acc[4], acc[5] = step, value, wall
    return out


def merge(conn: sqlite3.Connection, run_key: int, name_id: int,
          points: list[tuple[int, float, float]]) -> None:
    """Fold new points (steps that had no value yet) into the stored rollups."""
    rows = [(run_key, name_id, size, bucket, *acc)
            for size in SIZES for bucket, acc in summarize(points, size).items()]
    conn.executemany(_UPSERT, rows)


def recompute(conn: sqlite3.Connection, run_key: int, name_id: int, lo: int, hi: int) -> None:
    """Rebuild the rollups of every bucket that overlaps steps [lo, hi] from the metrics table."""
    for size in SIZES:
        first, last = (lo // size) * size, (hi // size + 1) * size - 1
        points = [(s, math.nan if v is None else v, w) for s, v, w in conn.execute(
            "SELECT step, value, wall_time FROM metrics WHERE run_key = ? AND name_id = ? "
            "AND step BETWEEN ? AND ?", (run_key, name_id, first, last))]
        conn.execute("DELETE FROM metric_rollups WHERE run_key = ? AND name_id = ? AND size = ? "
                     "AND bucket BETWEEN ? AND ?", (run_key, name_id, size, lo // size, hi // size))
        conn.executemany(
            f"INSERT INTO metric_rollups (run_key, name_id, size, bucket, {COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(run_key, name_id, size, b, *acc) for b, acc in summarize(points, size).items()])


def backfill(conn: sqlite3.Connection) -> None:
    """Build the rollups of every stored metric (the migration that adds the table)."""
    pairs = conn.execute("SELECT DISTINCT run_key, name_id FROM run_names "
                         "WHERE kind = 'metric'").fetchall()
    for run_key, name_id in pairs:
        bounds = conn.execute("SELECT MIN(step), MAX(step) FROM metrics WHERE run_key = ? "
                              "AND name_id = ?", (run_key, name_id)).fetchone()
        if bounds[0] is not None:
            recompute(conn, run_key, name_id, bounds[0], bounds[1])
