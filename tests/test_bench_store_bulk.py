"""The store benchmark's bulk build (``benchmarks/store_queries.py --bulk``, SQL inside the engine)
makes the same run as its writer path (``write_batch``), on both backends, as the reader API sees
it: the run row, the summary, a downsampled curve, a filtered sample page, the reward histogram,
the flag and category shares. The two builds draw different random numbers, so counts are
compared within a statistical tolerance and shapes exactly.

Both builds must also keep the store's rollup invariant: the ``metric_rollups`` rows equal what
``rollups.summarize`` makes of the raw points, and ``read_series(max_points=...)`` equals the
store's own downsampler (store/downsample.py) run over those raw points in a fresh SQLite file.
"""

from __future__ import annotations

import math
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rlcockpit.store import codec, downsample, open_store, rollups, schema
from rlcockpit.store.base import SampleQuery

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))  # the benchmark's modules, imported once (then in sys.modules)
try:
    import _store_bulk
    import store_queries as sq
finally:
    sys.path.remove(str(BENCH))

FX = sq.Fixture(steps=3000, metrics=12, samples_per_step=2)
# 1000: the short-range path at this size; 200 and 64 read the 64-step rollups
MAX_POINTS = (1000, 200, 64)
Point = tuple[int, float, float]


@dataclass
class Readback:
    """What the reader API says about one built fixture."""

    summary: Any
    run: Any
    curve: Any
    page: Any
    histogram: Any
    flagged: dict[str, int]
    categories: dict[str, int]
    with_arrays: int
    first_sample: Any


def build(tmp_path: Path, backend: str, bulk: bool) -> Path:
    path = sq.fixture_path(tmp_path, FX, backend, bulk)
    builder = sq.build_rlcockpit_bulk if bulk else sq.build_rlcockpit
    builder(path, FX, lambda n: None, backend)
    return path


def read_back(backend: str, path: Path) -> Readback:
    store = open_store(sq.store_uri(backend, path))
    reader = store.reader()
    try:
        def total(**kw: Any) -> int:
            return reader.query_samples(sq.RUN_ID, SampleQuery(limit=1, **kw)).total

        return Readback(
            summary=reader.summary(sq.RUN_ID),
            run=next(r for r in reader.list_runs() if r.run_id == sq.RUN_ID),
            curve=reader.read_series(sq.RUN_ID, [sq.CURVE_METRIC], max_points=1000)[sq.CURVE_METRIC],
            page=reader.query_samples(sq.RUN_ID, SampleQuery(limit=50, **sq.query_window(FX))),
            histogram=reader.sample_histogram(sq.RUN_ID, field="reward", bins=50),
            flagged={f: total(flags=(f,)) for f in sq.FLAGS},
            categories={c: total(category=c) for c in sq.CATEGORIES},
            with_arrays=total(has_token_arrays=True),
            first_sample=reader.get_sample(sq.RUN_ID, 0, 0))
    finally:
        reader.close()
        getattr(store, "close", lambda: None)()


def close_counts(a: int, b: int) -> bool:
    """Two binomial counts of the same expected size agree within 5 standard deviations of
    their difference (sd <= sqrt(a + b))."""
    return abs(a - b) <= 5 * math.sqrt(a + b) + 2


def assert_same_run(writer: Readback, bulk: Readback) -> None:
    for got in (writer, bulk):
        s = got.summary
        assert (s.steps, s.first_step, s.last_step, s.samples) == \
            (FX.steps, 0, FX.steps - 1, FX.samples)
        assert (got.run.status, got.run.last_step) == ("finished", FX.steps - 1)
        assert got.run.ended_at == 1.7e9 + FX.steps
        assert got.histogram.total == got.histogram.finite == FX.samples
    assert set(bulk.summary.metric_names) == set(writer.summary.metric_names) == \
        set(sq.metric_names(FX.metrics))
    for curve in (writer.curve, bulk.curve):
        assert_curve_shape(curve, 1000)
    assert len(bulk.histogram.counts) == len(writer.histogram.counts) == 50
    assert close_counts(writer.page.total, bulk.page.total), (writer.page.total, bulk.page.total)
    for name in sq.FLAGS:
        assert close_counts(writer.flagged[name], bulk.flagged[name]), name
    for name in sq.CATEGORIES:
        assert close_counts(writer.categories[name], bulk.categories[name]), name
    assert_page_shape(writer.page)
    assert_page_shape(bulk.page)


def assert_curve_shape(curve: Any, max_points: int) -> None:
    """A downsampled curve keeps each bucket's extremes, so which steps come first and last
    depends on the values: the first point lies in the first bucket, the last in the last, and
    (no NaN, no ties) all but a few buckets give two points."""
    width = math.ceil(FX.steps / (max_points // 2))
    assert curve.downsampled
    assert max_points * 0.98 <= len(curve.steps) <= max_points
    assert curve.steps[0] < width and curve.steps[-1] >= FX.steps - width


def assert_page_shape(page: Any) -> None:
    """The filtered page's rows look alike in both builds (sizes, fields, the filter held)."""
    window = sq.query_window(FX)
    assert len(page.items) == 50
    for s in page.items:
        assert s.category == "math"
        assert window["reward_min"] <= s.reward <= window["reward_max"]
        assert window["step_min"] <= s.step <= window["step_max"]
        assert (len(s.prompt), len(s.response)) == (FX.prompt_bytes, FX.response_bytes)
        assert tuple(s.components) == sq.COMPONENTS
        assert s.reward == pytest.approx(sum(s.components.values()) / 3, abs=1e-12)
        assert set(s.flags) <= set(sq.FLAGS) and len(s.flags) <= 1
        assert s.group_id == s.sample_id // 4 and s.length == 200
        assert s.prompt_id.startswith("p") and len(s.prompt_id) == 5


def test_the_bulk_cache_key_and_defaults_keep_the_two_builds_apart(tmp_path):
    for backend in sq.BACKENDS:
        writer, bulk = (sq.fixture_path(tmp_path, FX, backend, b) for b in (False, True))
        assert writer != bulk and "-bulk_" in bulk.name and "-bulk_" not in writer.name
        assert writer.name.split("_")[0] != bulk.name.split("_")[0]  # remove_stale keeps both
    assert sq.parse_args(["--steps", "1000000"]).bulk is True
    assert sq.parse_args(["--steps", "1000000", "--no-bulk"]).bulk is False
    assert sq.parse_args([]).bulk is False and sq.parse_args(["--bulk"]).bulk is True
    assert sq.build_how({"build_mode": "bulk"}) == "bulk-built (SQL inside the engine)"


@pytest.mark.parametrize("store", ["sqlite", "chdb"])
def test_the_bulk_build_reads_like_the_writer_build(tmp_path, store):
    paths = {bulk: build(tmp_path, store, bulk) for bulk in (False, True)}
    writer, bulk = (read_back(store, paths[b]) for b in (False, True))
    assert_same_run(writer, bulk)
    # token arrays: none written by the writer path, every 1000th sample in the bulk build
    assert writer.with_arrays == 0
    assert bulk.with_arrays == math.ceil(FX.samples / _store_bulk.TOKEN_EVERY)
    assert bulk.first_sample.tokens == _store_bulk.TOKENS
    assert bulk.first_sample.logprobs == codec.decode_f16(codec.encode_f16(_store_bulk.LOGPROBS))
    for path in paths.values():
        assert_rollups_consistent(store, path)


# --- the rollup invariant -----------------------------------------------------------------------

def assert_rollups_consistent(backend: str, path: Path) -> None:
    """Every metric: the stored rollup rows (partial rows folded) equal ``rollups.summarize`` of
    its raw points for both block sizes, and ``read_series`` at each of MAX_POINTS equals the
    store's downsampler over those raw points."""
    names = sq.metric_names(FX.metrics)
    store = open_store(sq.store_uri(backend, path))
    reader = store.reader()
    try:
        raw = reader.read_series(sq.RUN_ID, names, max_points=None)
        stored = stored_rollups(store, backend)
        for name in names:
            points = list(zip(raw[name].steps, raw[name].values, raw[name].wall_times,
                              strict=True))
            assert len(points) == FX.steps
            for size in rollups.SIZES:
                expected = {b: acc for b, acc in rollups.summarize(points, size).items()}
                assert stored[(name, size)] == expected, (name, size)
            for max_points in MAX_POINTS:
                got = reader.read_series(sq.RUN_ID, [name], max_points=max_points)[name]
                assert list(zip(got.steps, got.values, got.wall_times, strict=True)) == \
                    reference_downsample(points, max_points, backend), (name, max_points)
    finally:
        reader.close()
        getattr(store, "close", lambda: None)()


def stored_rollups(store: Any, backend: str) -> dict[tuple[str, int], dict[int, list]]:
    """(name, size) -> bucket -> accumulator, the partial rows of a block folded together."""
    cols = "min_step, min_value, min_wall, max_step, max_value, max_wall, nan_step, nan_wall"
    if backend == "chdb":
        from rlcockpit.store.ch_transport import ChdbTransport
        from rlcockpit.store.uri import parse_store_uri

        t = ChdbTransport(parse_store_uri(store.uri).path, store.database)
        try:
            rows = t.query(f"SELECT toString(name), size, bucket, {cols} FROM "
                           f"{store.database}.metric_rollups WHERE run_id = '{sq.RUN_ID}'")
        finally:
            t.close()
    else:
        with sqlite3.connect(store.path) as conn:
            rows = conn.execute(f"SELECT n.name, r.size, r.bucket, {cols} FROM metric_rollups r "
                                "JOIN names n ON n.name_id = r.name_id").fetchall()
    out: dict[tuple[str, int], dict[int, list]] = {}
    for name, size, bucket, *acc in rows:
        into = out.setdefault((name, int(size)), {}).setdefault(int(bucket), [None] * 8)
        downsample._fold(into, acc)
    return out


def reference_downsample(points: list[Point], max_points: int, backend: str) -> list[Point]:
    """The store's downsampler (store/downsample.py) over ``points`` in a fresh in-memory SQLite
    store whose rollups the store's own code builds. ClickHouse's short-range path buckets by
    width (ceil(span / buckets)) where SQLite splits the span evenly, so there the reference
    is the same extremes per bucket of that width."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    schema.migrate(conn)
    conn.executemany("INSERT INTO metrics VALUES (1, 1, ?, ?, ?)", points)
    rollups.merge(conn, 1, 1, points)
    lo, hi = points[0][0], points[-1][0]
    found, _down = downsample.series_rows(conn, 1, 1, lo, hi, max_points)
    uses_rollups = any((hi - lo + 1) // z >= max_points // 2 - 2 for z in rollups.SIZES)
    if backend == "chdb" and not uses_rollups and len(points) > max_points:
        width = math.ceil(len(points) / (max_points // 2))
        accs = rollups.summarize([(s - lo, v, w) for s, v, w in points], width).values()
        found = sorted({(p[0] + lo, p[1], p[2]) for p in downsample._points(list(accs))})
    return [(int(s), float(v), float(w)) for s, v, w in found]
