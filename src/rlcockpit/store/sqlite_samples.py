"""SQL for the sample explorer: filtered, stably ordered pages and field histograms.

Every filter runs on the narrow ``samples`` table (and ``sample_flags``); prompt and response text
live in ``sample_payloads`` and are read for the page only — except a text search, which has to
look at them (a substring scan, slower than the indexed filters; see docs/store.md).
"""

from __future__ import annotations

import math
import sqlite3

from rlcockpit.errors import ConfigError
from rlcockpit.store import sqlite_rows as rows
from rlcockpit.store.base import SAMPLE_HISTOGRAM_FIELDS, SampleHistogram, SampleQuery

ORDERS = {
    "step_asc": "s.step, s.sample_id",
    "step_desc": "s.step DESC, s.sample_id DESC",
    "reward_asc": "s.reward, s.step, s.sample_id",
    "reward_desc": "s.reward DESC, s.step, s.sample_id",
}
MAX_PAGE = 10_000
_PAYLOAD_NO_ARRAYS = "p.prompt, p.response, p.components, NULL, NULL, NULL, NULL"


def sample_page_query(run_key: int, q: SampleQuery) -> tuple[str, str, tuple, tuple]:
    """(count sql, page sql, filter args, page args: limit and offset)."""
    _validate(q)
    where, args = _filters(run_key, q)
    order = ORDERS[q.order]
    payload = (rows.columns("p", rows.PAYLOAD_COLUMNS) if q.include_token_arrays
               else _PAYLOAD_NO_ARRAYS)
    count_sql = f"SELECT COUNT(*) FROM samples s WHERE {where}"
    # the page is chosen on the narrow table first; only its rows are joined to the payloads
    page_sql = (
        f"SELECT {rows.columns('pg', rows.SAMPLE_COLUMNS)}, {payload} FROM "
        f"(SELECT {rows.columns('s', rows.SAMPLE_COLUMNS + ('payload_id',))} FROM samples s "
        f"WHERE {where} ORDER BY {order} LIMIT ? OFFSET ?) pg "
        f"JOIN sample_payloads p ON p.payload_id = pg.payload_id "
        f"ORDER BY {order.replace('s.', 'pg.')}"
    )
    return count_sql, page_sql, args, (q.limit, q.offset)


def _validate(q: SampleQuery) -> None:
    if q.order not in ORDERS:
        raise ConfigError(f"sample order {q.order!r} is not one of {', '.join(ORDERS)}",
                          details={"key": "order", "value": q.order})
    if not 0 <= q.limit <= MAX_PAGE:
        raise ConfigError(f"limit={q.limit} must be in [0, {MAX_PAGE}]; page through larger "
                          "results with offset", details={"key": "limit", "value": q.limit})
    if q.offset < 0:
        raise ConfigError(f"offset={q.offset} must be >= 0",
                          details={"key": "offset", "value": q.offset})


def _filters(run_key: int, q: SampleQuery) -> tuple[str, tuple]:
    clauses = ["s.run_key = ?"]
    args: list = [run_key]
    simple = (("s.step >= ?", q.step_min), ("s.step <= ?", q.step_max),
              ("s.category = ?", q.category), ("s.reward >= ?", q.reward_min),
              ("s.reward <= ?", q.reward_max), ("s.prompt_id = ?", q.prompt_id))
    for clause, value in simple:
        if value is not None:
            clauses.append(clause)
            args.append(value)
    if q.has_token_arrays is not None:
        clauses.append("s.has_token_arrays = ?")
        args.append(int(bool(q.has_token_arrays)))
    for flag in q.flags:
        clauses.append("(s.step, s.sample_id) IN (SELECT f.step, f.sample_id FROM sample_flags f "
                       "WHERE f.run_key = ? AND f.flag = ?)")
        args += [run_key, flag]
    if q.text and "\x00" in q.text:
        # LIKE reads its pattern as a C string: a NUL ends it, and '%<NUL>...' matched every
        # sample. instr() and lower() compare the whole text (same ASCII case folding as LIKE).
        clauses.append(
            "EXISTS (SELECT 1 FROM sample_payloads t WHERE t.payload_id = s.payload_id AND "
            "(instr(lower(t.prompt), lower(?)) > 0 OR instr(lower(t.response), lower(?)) > 0))")
        args += [q.text, q.text]
    elif q.text:
        pattern = "%" + q.text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        clauses.append(
            "EXISTS (SELECT 1 FROM sample_payloads t WHERE t.payload_id = s.payload_id AND "
            "(t.prompt LIKE ? ESCAPE '\\' OR t.response LIKE ? ESCAPE '\\'))")
        args += [pattern, pattern]
    return " AND ".join(clauses), tuple(args)


def sample_histogram_query(conn: sqlite3.Connection, run_key: int, field: str, bins: int, *,
                           step_min: int | None, step_max: int | None) -> SampleHistogram:
    """Bin a sample field in SQL without sorting the samples.

    The finite range comes from two index seeks. Then either one range count per bin on the
    (run, reward) index — each index entry is visited once, no sort — or, for a step range of
    at most ``_SMALL_RANGE`` samples, one GROUP BY over the (run, step) range.
    """
    if field not in SAMPLE_HISTOGRAM_FIELDS:
        raise ConfigError(f"sample field {field!r} cannot be binned; choose one of "
                          f"{', '.join(SAMPLE_HISTOGRAM_FIELDS)}", details={"key": "field"})
    if not 1 <= bins <= 10_000:
        raise ConfigError(f"bins={bins} must be in [1, 10000]", details={"key": "bins"})
    q = _FieldQuery(conn, field, run_key, step_min, step_max)
    lo = q.value(f"MIN({field})", f"{field} > ?", -math.inf)
    hi = q.value(f"MAX({field})", f"{field} < ?", math.inf)
    nonfinite = (q.value("COUNT(*)", f"{field} IS NULL")
                 + q.value("COUNT(*)", f"{field} IN (?, ?)", -math.inf, math.inf))
    if lo is None:
        return SampleHistogram(field, (), (), nonfinite, 0, step_min, step_max)
    if hi == lo:
        lo, hi = lo - 0.5, hi + 0.5
    edges = [lo + (hi - lo) * i / bins for i in range(bins)] + [hi]
    ranged = step_min is not None or step_max is not None
    if ranged and q.value("COUNT(*)", limit=_SMALL_RANGE + 1) <= _SMALL_RANGE:
        counts = _grouped_counts(q, lo, hi, bins)
    else:
        counts = _ranged_counts(q, edges)
    return SampleHistogram(field, tuple(edges), tuple(counts), sum(counts) + nonfinite,
                           sum(counts), step_min, step_max)


class _FieldQuery:
    """``SELECT <expr> FROM samples`` of one run and step range, plus extra conditions."""

    def __init__(self, conn: sqlite3.Connection, field: str, run_key: int,
                 step_min: int | None, step_max: int | None) -> None:
        self.conn, self.field = conn, field
        self.where, self.args = "run_key = ?", (run_key,)
        for clause, value in (("step >= ?", step_min), ("step <= ?", step_max)):
            if value is not None:
                self.where += f" AND {clause}"
                self.args += (int(value),)

    def value(self, expr: str, condition: str = "", *args, limit: int | None = None):
        where = f"{self.where} AND {condition}" if condition else self.where
        sql = f"SELECT {expr} FROM samples WHERE {where}"
        if limit is not None:  # count at most `limit` rows
            sql = f"SELECT {expr} FROM (SELECT 1 FROM samples WHERE {where} LIMIT {int(limit)})"
        return self.conn.execute(sql, self.args + args).fetchone()[0]

    def rows(self, sql: str, *args) -> list[tuple]:
        return self.conn.execute(sql, args).fetchall()


_SMALL_RANGE = 200_000


def _ranged_counts(q: _FieldQuery, edges: list[float]) -> list[int]:
    last = len(edges) - 2
    return [q.value("COUNT(*)", f"{q.field} >= ? AND {q.field} {'<=' if i == last else '<'} ?",
                    edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


def _grouped_counts(q: _FieldQuery, lo: float, hi: float, bins: int) -> list[int]:
    width = (hi - lo) / bins
    found = q.rows(
        f"SELECT MIN(CAST(({q.field} - ?) / ? AS INTEGER), ?) AS b, COUNT(*) FROM samples "
        f"WHERE {q.where} AND +{q.field} > ? AND +{q.field} < ? GROUP BY b",  # +: scan the steps
        lo, width, bins - 1, *q.args, -math.inf, math.inf)
    counts = [0] * bins
    for b, n in found:
        counts[max(0, b)] += n
    return counts
