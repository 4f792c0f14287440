"""Server-side downsampling of one metric curve that keeps its spikes.

The step range is cut into at most ``max_points // 2`` buckets; each bucket contributes the row
holding its minimum and the row holding its maximum (so a one-step spike always survives), plus
its first NaN row when it has one (a NaN detector and a human both need to see it; buckets are
then fewer so the total stays within ``max_points``). Every returned point is a stored point.

Long ranges read the writer's rollups (store/rollups.py): buckets are whole 64- or 4096-step
blocks, so a 100k-step curve costs ~1.6k small rows. Short ranges (fewer than 64 blocks per
bucket budget) aggregate the raw rows in SQL. The first and last partial blocks of a range are
read raw and form buckets of their own.
"""

from __future__ import annotations

import math
import sqlite3

from rlcockpit.store import rollups

_RANGE = "run_key = ? AND name_id = ? AND step BETWEEN ? AND ?"
Point = tuple[int, float, float]  # step, value, wall_time


def series_rows(conn: sqlite3.Connection, run_key: int, name_id: int, lo: int, hi: int,
                max_points: int | None) -> tuple[list[Point], bool]:
    """((step, value, wall_time) ascending, downsampled?) for one metric in [lo, hi]."""
    args = (run_key, name_id, lo, hi)
    # two single-aggregate queries: SQLite answers each with one index seek
    first = conn.execute(f"SELECT MIN(step) FROM metrics WHERE {_RANGE}", args).fetchone()[0]
    last = conn.execute(f"SELECT MAX(step) FROM metrics WHERE {_RANGE}", args).fetchone()[0]
    if first is None:
        return [], False
    if max_points is None or last - first + 1 <= max_points:
        return _raw(conn, (run_key, name_id, first, last)), False
    buckets = max_points // 2 - 2
    size = next((s for s in reversed(rollups.SIZES) if (last - first + 1) // s >= buckets), None)
    if size is None or max_points < 16:
        return _aggregated(conn, (run_key, name_id, first, last), max_points), True
    return _from_rollups(conn, run_key, name_id, first, last, size, max_points), True


def _raw(conn: sqlite3.Connection, args: tuple) -> list[Point]:
    rows = conn.execute(f"SELECT step, value, wall_time FROM metrics WHERE {_RANGE} "
                        "ORDER BY step", args).fetchall()
    return [(s, math.nan if v is None else v, w) for s, v, w in rows]


def _from_rollups(conn: sqlite3.Connection, run_key: int, name_id: int, first: int, last: int,
                  size: int, max_points: int) -> list[Point]:
    k_lo = -(-first // size)  # first block that starts inside the range
    k_hi = (last + 1) // size - 1  # last block that ends inside the range
    rows = conn.execute(
        f"SELECT bucket, {rollups.COLUMNS} FROM metric_rollups WHERE run_key = ? AND "
        "name_id = ? AND size = ? AND bucket BETWEEN ? AND ? ORDER BY bucket",
        (run_key, name_id, size, k_lo, k_hi)).fetchall()
    head = _raw(conn, (run_key, name_id, first, k_lo * size - 1))
    tail = _raw(conn, (run_key, name_id, (k_hi + 1) * size, last))
    blocks = [list(acc) for acc in rollups.summarize(head, 1 << 62).values()]
    has_nan = any(r[7] is not None for r in rows) or any(math.isnan(p[1]) for p in head + tail)
    per_bucket = 3 if has_nan else 2
    buckets = max(1, max_points // per_bucket - 2)
    n_blocks = k_hi - k_lo + 1
    grouped: dict[int, list] = {}
    for bucket, *acc in rows:  # output bucket j = whole blocks [j*n/B, (j+1)*n/B)
        _fold(grouped.setdefault((bucket - k_lo) * buckets // n_blocks, [None] * 8), acc)
    blocks += list(grouped.values())
    blocks += [list(acc) for acc in rollups.summarize(tail, 1 << 62).values()]
    return _points(blocks)


def _fold(into: list, acc: list) -> None:
    """Merge one rollup row (min, max, first NaN) into a bucket accumulator."""
    if acc[0] is not None and (into[0] is None or acc[1] < into[1]):
        into[0:3] = acc[0:3]
    if acc[3] is not None and (into[3] is None or acc[4] > into[4]):
        into[3:6] = acc[3:6]
    if acc[6] is not None and (into[6] is None or acc[6] < into[6]):
        into[6:8] = acc[6:8]


def _points(blocks: list[list]) -> list[Point]:
    points: dict[int, Point] = {}
    for acc in blocks:
        if acc[0] is not None:
            points[acc[0]] = (acc[0], acc[1], acc[2])
        if acc[3] is not None:
            points[acc[3]] = (acc[3], acc[4], acc[5])
        if acc[6] is not None:
            points[acc[6]] = (acc[6], math.nan, acc[7])
    return [points[s] for s in sorted(points)]


def _aggregated(conn: sqlite3.Connection, args: tuple, max_points: int) -> list[Point]:
    """Short ranges: min and max per equal-width bucket straight from the metrics rows.

    SQLite returns the other ("bare") columns of a GROUP BY query from the row that holds the
    single MIN() / MAX() aggregate (documented behaviour), which gives the extreme's step and
    wall time without a window function.
    """
    first, last = args[2], args[3]
    has_nan = conn.execute(f"SELECT EXISTS (SELECT 1 FROM metrics WHERE {_RANGE} AND "
                           "value IS NULL)", args).fetchone()[0]
    buckets = max(1, max_points // (3 if has_nan else 2))
    bucket = f"((step - {int(first)}) * {int(buckets)}) / {int(last - first + 1)}"
    points: dict[int, Point] = {}
    for agg in ("MIN", "MAX"):
        for value, step, wall in conn.execute(
                f"SELECT {agg}(value), step, wall_time FROM metrics WHERE {_RANGE} "
                f"AND value IS NOT NULL GROUP BY {bucket}", args):
            points[step] = (step, value, wall)
    if has_nan:
        for step, wall in conn.execute(f"SELECT MIN(step), wall_time FROM metrics WHERE "
                                       f"{_RANGE} AND value IS NULL GROUP BY {bucket}", args):
            points[step] = (step, math.nan, wall)
    return [points[s] for s in sorted(points)]
