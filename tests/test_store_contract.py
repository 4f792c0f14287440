"""The store contract: every StoreReader / StoreWriter method, on every backend.

Backends are listed in ``BACKENDS``: "sqlite", "chdb" (ClickHouse in-process) and, when
``RLCOCKPIT_TEST_CLICKHOUSE_URI`` names a server (docs/store.md), "clickhouse". Every backend must
pass every test in the first part of this file. The second part covers what only the SQLite
backend has: URIs, migrations, refusing newer files, the ``rlcockpit runs`` CLI.

Filters, ordering, downsampling and histograms are checked against naive Python references over
the exact records that were written.
"""

from __future__ import annotations

import json
import math
import os
import random
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from rlcockpit.errors import ConfigError, NotFoundError, StoreError
from rlcockpit.records import (
    Batch,
    CheckpointRecord,
    EventRecord,
    FindingRecord,
    HistogramRecord,
    MetricPoint,
    PhaseRecord,
    RunInfo,
    SampleRecord,
)
from rlcockpit.store import SampleQuery, open_store
from rlcockpit.store.base import SAMPLE_HISTOGRAM_FIELDS, StoreReader, StoreWriter

REPO = Path(__file__).resolve().parents[1]
RUN = "run-a"
STEPS = 40
PER_STEP = 6
CATEGORIES = ("math", "chat", "safety")
FLAGS = ("truncated", "low_confidence", "rule_violation")


def _sqlite_store(tmp_path: Path):
    return open_store(f"sqlite:///{tmp_path / 'contract.db'}")


def _chdb_store(tmp_path: Path):
    pytest.importorskip("chdb", reason="the chdb backend needs: pip install 'rlcockpit[clickhouse]'")
    return open_store(f"chdb:///{tmp_path / 'contract-ch'}")


def _clickhouse_store(tmp_path: Path):
    """A fresh database on the server of RLCOCKPIT_TEST_CLICKHOUSE_URI (its database part is
    replaced by a new name per test)."""
    base = os.environ["RLCOCKPIT_TEST_CLICKHOUSE_URI"].split("?")[0].rsplit("/", 1)[0]
    database = f"rlcockpit_test_{os.getpid()}_{random.randrange(10**9)}"
    return open_store(f"{base}/{database}?control={tmp_path / 'control.db'}")


# backend name -> factory(tmp_path) returning an object with .writer(), .reader(), .uri
BACKENDS: dict[str, Callable] = {"sqlite": _sqlite_store, "chdb": _chdb_store}
if os.environ.get("RLCOCKPIT_TEST_CLICKHOUSE_URI"):
    BACKENDS["clickhouse"] = _clickhouse_store


@pytest.fixture(params=sorted(BACKENDS))
def store(request, tmp_path):
    opened = BACKENDS[request.param](tmp_path)
    yield opened
    opened.close()  # chDB: releases the directory (one per process)


# --------------------------------------------------------------------------- data


def make_samples() -> list[SampleRecord]:
    rng = random.Random(3)
    out = []
    for step in range(STEPS):
        for sid in range(PER_STEP):
            reward = round(rng.uniform(-1, 1), 3) if (step, sid) != (7, 2) else math.nan
            flags = tuple(f for f in FLAGS if rng.random() < 0.3)
            arrays = step % 5 == 0
            out.append(SampleRecord(
                step=step, sample_id=sid, prompt=f"Prompt {step}-{sid} about 50% of X_y",
                response=("The ANSWER is " if sid % 2 else "no idea ") + str(step),
                reward=reward, prompt_id=f"p{(step * PER_STEP + sid) % 9}", group_id=sid // 2,
                category=CATEGORIES[(step + sid) % 3], components={"helpful": reward / 2},
                uncertainty=None if sid == 0 else 0.1 * sid, flags=flags, length=10 + sid,
                truncated=sid == 5, advantage=math.nan if (step, sid) == (3, 3) else 0.5,
                value=None, kl_sum=0.01 * step, kl_max=math.inf if (step, sid) == (9, 1) else 0.1,
                tokens=("a", "\u00e9", "中", "") if arrays else None,
                logprobs=(-0.5, -1.25, 0.0, -3.0) if arrays else None,
                ref_logprobs=(-0.5, -1.0, -0.125, -2.0) if arrays else None,
                token_kl=(0.0, 0.25, 0.125, 1.0) if arrays else None))
    return out


def metric_value(step: int) -> float:
    if step == 11:
        return math.nan
    if step == 13:
        return math.inf
    if step == 17:
        return -math.inf
    return math.sin(step / 5)


def populate(writer: StoreWriter, run_id: str = RUN) -> list[SampleRecord]:
    writer.create_run(RunInfo(run_id=run_id, project="proj", name="contract",
                              started_at=time.time(), config={"lr": 1e-3, "nested": {"k": [1]}}))
    samples = make_samples()
    for step in range(STEPS):
        writer.write_batch(run_id, Batch(
            metrics=[MetricPoint(step, "reward/mean", metric_value(step), 1000.0 + step),
                     MetricPoint(step, "kl/mean", 0.01 * step, 1000.0 + step)],
            histograms=[HistogramRecord(step, "reward/hist", (0.0, 0.5, 1.0), (step, 1))],
            samples=[s for s in samples if s.step == step],
            events=[EventRecord(step, "tick" if step % 2 else "tock", {"i": step, "x": [1.5]})],
            findings=[FindingRecord(step, "kl_token_spike", "yellow" if step % 3 else "red",
                                    f"kl high at {step}", {"kl": 0.1}, ("P1",))]
            if step % 10 == 0 else [],
            phases=[PhaseRecord(step, "ROLLOUT", "finished", 0.5, 1.0)],
            checkpoints=[CheckpointRecord(step, f"/ckpt/{step}", "periodic")]
            if step % 20 == 19 else []))
    return samples


def same_float(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return (math.isnan(a) and math.isnan(b)) or a == b


def naive_filter(samples: list[SampleRecord], q: SampleQuery) -> list[SampleRecord]:
    def keep(s: SampleRecord) -> bool:
        checks = [
            q.step_min is None or s.step >= q.step_min,
            q.step_max is None or s.step <= q.step_max,
            q.category is None or s.category == q.category,
            q.reward_min is None or (not math.isnan(s.reward) and s.reward >= q.reward_min),
            q.reward_max is None or (not math.isnan(s.reward) and s.reward <= q.reward_max),
            all(f in s.flags for f in q.flags),
            q.prompt_id is None or s.prompt_id == q.prompt_id,
            q.text is None or q.text.lower() in s.prompt.lower()
            or q.text.lower() in s.response.lower(),
            q.has_token_arrays is None or s.has_token_arrays == q.has_token_arrays,
        ]
        return all(checks)

    return [s for s in samples if keep(s)]


def naive_order(samples: list[SampleRecord], order: str) -> list[tuple[int, int]]:
    # NaN rewards are stored as NULL: first in ascending order, last in descending order
    def reward_key(s, sign):
        return (0, 0.0) if math.isnan(s.reward) else (1, sign * s.reward)

    keys = {
        "step_asc": lambda s: (s.step, s.sample_id),
        "step_desc": lambda s: (-s.step, -s.sample_id),
        "reward_asc": lambda s: (reward_key(s, 1), s.step, s.sample_id),
        "reward_desc": lambda s: ((1 - reward_key(s, -1)[0], reward_key(s, -1)[1]), s.step,
                                  s.sample_id),
    }
    return [(s.step, s.sample_id) for s in sorted(samples, key=keys[order])]


# --------------------------------------------------------------------------- runs


def test_backend_objects_satisfy_the_protocols(store):
    writer, reader = store.writer(), store.reader()
    assert isinstance(writer, StoreWriter)
    assert isinstance(reader, StoreReader)
    assert store.uri
    writer.close()
    reader.close()


def test_runs_list_get_status_and_unknown_run(store):
    writer, reader = store.writer(), store.reader()
    populate(writer)
    writer.create_run(RunInfo(run_id="run-b", project="proj", name="second",
                              started_at=time.time() + 5))
    runs = reader.list_runs()
    assert [r.run_id for r in runs] == ["run-b", RUN]  # newest first
    info = reader.get_run(RUN)
    assert (info.project, info.name, info.status) == ("proj", "contract", "running")
    assert info.config == {"lr": 1e-3, "nested": {"k": [1]}}
    assert info.last_step == STEPS - 1
    assert info.heartbeat_at is not None and abs(info.heartbeat_at - time.time()) < 60
    writer.set_run_status(RUN, "finished", ended_at=123.0)
    assert (reader.get_run(RUN).status, reader.get_run(RUN).ended_at) == ("finished", 123.0)
    with pytest.raises(NotFoundError, match="nope"):
        reader.get_run("nope")
    with pytest.raises(NotFoundError):
        reader.read_series("nope", ["reward/mean"])
    with pytest.raises(StoreError, match="already exists"):
        writer.create_run(RunInfo(run_id=RUN, project="p", name="dup"))
    with pytest.raises(StoreError, match="not one of"):
        writer.set_run_status(RUN, "exploded")


def test_a_running_run_with_a_stale_heartbeat_reads_as_crashed(store):
    writer, reader = store.writer(), store.reader()
    writer.create_run(RunInfo(run_id="dead", project="p", name="dead"))
    writer.heartbeat("dead", time.time() - 10 * reader.stale_after_s, 5)
    assert reader.get_run("dead").status == "crashed"
    assert reader.get_run("dead").last_step == 5
    writer.heartbeat("dead", time.time(), 6)
    assert reader.get_run("dead").status == "running"
    writer.set_run_status("dead", "finished", ended_at=time.time())
    writer.heartbeat("dead", time.time() - 10 * reader.stale_after_s, 6)
    assert reader.get_run("dead").status == "finished"  # only "running" runs can be stale


# --------------------------------------------------------------------------- metrics


def test_metric_and_histogram_names(store):
    writer, reader = store.writer(), store.reader()
    populate(writer)
    writer.create_run(RunInfo(run_id="other", project="p", name="o"))
    writer.write_batch("other", Batch(metrics=[MetricPoint(0, "only/here", 1.0)]))
    assert reader.metric_names(RUN) == ["kl/mean", "reward/mean"]
    assert reader.histogram_names(RUN) == ["reward/hist"]
    assert reader.metric_names("other") == ["only/here"]


def test_read_series_raw_range_unknown_and_nonfinite_round_trip(store):
    writer, reader = store.writer(), store.reader()
    populate(writer)
    series = reader.read_series(RUN, ["reward/mean", "kl/mean", "not/there"])
    s = series["reward/mean"]
    assert s.steps == tuple(range(STEPS)) and not s.downsampled
    assert all(same_float(v, metric_value(i)) for i, v in enumerate(s.values))
    assert math.isnan(s.values[11]) and s.values[13] == math.inf and s.values[17] == -math.inf
    assert s.wall_times[5] == 1005.0
    assert series["not/there"].steps == ()
    part = reader.read_series(RUN, ["kl/mean"], step_min=10, step_max=12)["kl/mean"]
    assert part.steps == (10, 11, 12) and part.values == pytest.approx((0.1, 0.11, 0.12))
    latest = reader.latest(RUN)
    assert latest["kl/mean"] == (STEPS - 1, pytest.approx(0.01 * (STEPS - 1)))
    assert set(reader.latest(RUN, ["reward/mean"])) == {"reward/mean"}


def test_latest_reports_a_nan_as_nan(store):
    writer, reader = store.writer(), store.reader()
    writer.create_run(RunInfo(run_id="n", project="p", name="n"))
    writer.write_batch("n", Batch(metrics=[MetricPoint(0, "loss", 1.0), MetricPoint(1, "loss",
                                                                                    math.nan)]))
    step, value = reader.latest("n")["loss"]
    assert step == 1 and math.isnan(value)


def test_downsampling_keeps_spikes_dips_and_nans_within_max_points(store):
    writer, reader = store.writer(), store.reader()
    writer.create_run(RunInfo(run_id="long", project="p", name="long"))
    n = 5000
    values = [math.sin(i / 300) for i in range(n)]
    values[1234] = 50.0  # one-step spike
    values[3210] = -40.0  # one-step dip
    values[4000] = math.nan
    writer.write_batch("long", Batch(metrics=[MetricPoint(i, "m", v, float(i))
                                              for i, v in enumerate(values)]))
    s = reader.read_series("long", ["m"], max_points=200)["m"]
    assert s.downsampled
    assert len(s.steps) <= 200
    assert list(s.steps) == sorted(set(s.steps))
    by_step = dict(zip(s.steps, s.values, strict=True))
    assert by_step[1234] == 50.0 and by_step[3210] == -40.0
    assert math.isnan(by_step[4000])
    assert max(v for v in s.values if not math.isnan(v)) == 50.0
    assert s.wall_times[s.steps.index(1234)] == 1234.0
    # every returned point is a real stored point
    assert all(same_float(values[st], v) for st, v in zip(s.steps, s.values, strict=True))
    # few points: returned as they are
    few = reader.read_series("long", ["m"], step_min=10, step_max=50, max_points=200)["m"]
    assert few.steps == tuple(range(10, 51)) and not few.downsampled
    with pytest.raises(StoreError, match="at least 8"):
        reader.read_series("long", ["m"], max_points=7)
    for tiny in (8, 9, 16, 17):  # the smallest budgets still hold, NaN bucket included
        assert len(reader.read_series("long", ["m"], max_points=tiny)["m"].steps) <= tiny


def long_curve(n: int, spikes: dict[int, float]) -> list[float]:
    values = [math.sin(i / 700) for i in range(n)]
    for step, v in spikes.items():
        values[step] = v
    return values


@pytest.mark.parametrize("step_min, step_max", [(None, None), (777, 38_123), (5000, 5000 + 6500)])
def test_long_curves_downsample_from_rollups_and_keep_every_extreme(store, step_min, step_max):
    writer, reader = store.writer(), store.reader()
    writer.create_run(RunInfo(run_id="long", project="p", name="long"))
    n = 40_000
    spikes = {1234: 50.0, 30_001: -40.0, 777: 9.0, 38_123: -9.0, 6000: math.nan, 11_400: 7.0}
    values = long_curve(n, spikes)
    for start in range(0, n, 5000):  # several batches: rollup blocks are merged across batches
        writer.write_batch("long", Batch(metrics=[MetricPoint(i, "m", values[i], 1e3 + i)
                                                  for i in range(start, start + 5000)]))
    s = reader.read_series("long", ["m"], step_min=step_min, step_max=step_max,
                           max_points=300)["m"]
    lo, hi = step_min or 0, n - 1 if step_max is None else step_max
    assert s.downsampled and len(s.steps) <= 300
    assert list(s.steps) == sorted(set(s.steps)) and s.steps[0] >= lo and s.steps[-1] <= hi
    assert all(same_float(values[st], v) for st, v in zip(s.steps, s.values, strict=True))
    assert all(w == 1e3 + st for st, w in zip(s.steps, s.wall_times, strict=True))
    by_step = dict(zip(s.steps, s.values, strict=True))
    window = [v for v in values[lo:hi + 1] if not math.isnan(v)]
    assert max(v for v in s.values if not math.isnan(v)) == max(window)
    assert min(v for v in s.values if not math.isnan(v)) == min(window)
    for step, v in spikes.items():
        if lo <= step <= hi:
            assert same_float(by_step.get(step), v), step
    # each returned extreme is the extreme of the stretch between its neighbours' buckets:
    # a coarse check that resolution is real — many distinct points, spread over the range
    assert len(s.steps) > 100 and s.steps[-1] - s.steps[0] > 0.9 * (hi - lo)


def test_whole_run_curves_are_raw_when_their_span_fits_else_downsampled_with_exact_ends(store):
    """Both stores decide by the span of steps: a curve over at most max_points steps comes back
    whole, a sparse or dense one over more is downsampled to stored rows; first and last steps
    are the curve's own, off block boundaries and on a NaN too."""
    writer, reader = store.writer(), store.reader()
    writer.create_run(RunInfo(run_id="sp", project="p", name="sp"))
    curves = {"sparse": range(10_005, 40_000, 50),      # 600 rows over a 30k-step span
              "short": range(777, 777 + 900),           # 900 consecutive rows
              "dense": range(0, 40_000),
              "nan_tail": range(100, 5_100)}            # ends on a NaN
    value = {name: {s: math.sin(s / 300) + k for s in steps} for k, (name, steps) in enumerate(curves.items())}
    value["nan_tail"][5_099] = math.nan
    points = [MetricPoint(s, name, v, 1e3 + s) for name, vals in value.items() for s, v in vals.items()]
    for start in range(0, len(points), 7_000):
        writer.write_batch("sp", Batch(metrics=points[start:start + 7_000]))
    got = reader.read_series("sp", list(curves), max_points=1000)
    assert not got["short"].downsampled
    assert list(got["short"].steps) == list(curves["short"])
    assert list(got["short"].values) == [value["short"][s] for s in curves["short"]]
    for name in ("sparse", "dense", "nan_tail"):
        s = got[name]
        assert s.downsampled and 100 < len(s.steps) <= 1000, name
        assert (s.steps[0], s.steps[-1]) == (curves[name][0], curves[name][-1]) or name == "dense"
        assert all(same_float(value[name][st], v) for st, v in zip(s.steps, s.values, strict=True))
    assert math.isnan(got["nan_tail"].values[-1])
    assert max(got["dense"].values) == max(value["dense"].values())
    everything = reader.read_series("sp", ["sparse"], max_points=None)["sparse"]
    assert list(everything.steps) == list(curves["sparse"]) and not everything.downsampled


def test_rewritten_steps_update_the_downsampled_curve(store):
    writer, reader = store.writer(), store.reader()
    writer.create_run(RunInfo(run_id="re", project="p", name="re"))
    values = long_curve(20_000, {4321: 99.0})
    writer.write_batch("re", Batch(metrics=[MetricPoint(i, "m", v) for i, v in enumerate(values)]))
    assert 99.0 in reader.read_series("re", ["m"], max_points=200)["m"].values
    writer.write_batch("re", Batch(metrics=[MetricPoint(4321, "m", 0.0)]))  # resumed run rewrites
    after = reader.read_series("re", ["m"], max_points=200)["m"]
    assert 99.0 not in after.values and max(after.values) == max(values[:4321] + values[4322:])


def test_read_histograms_range_and_thinning(store):
    writer, reader = store.writer(), store.reader()
    populate(writer)
    hists = reader.read_histograms(RUN, "reward/hist")
    assert [h.step for h in hists] == list(range(STEPS))
    assert hists[3].edges == (0.0, 0.5, 1.0) and hists[3].counts == (3, 1)
    assert [h.step for h in reader.read_histograms(RUN, "reward/hist", step_min=5,
                                                    step_max=7)] == [5, 6, 7]
    thin = reader.read_histograms(RUN, "reward/hist", max_points=5)
    assert len(thin) == 5 and thin[0].step == 0 and thin[-1].step == STEPS - 1
    assert reader.read_histograms(RUN, "nope") == []


# --------------------------------------------------------------------------- samples


def test_get_sample_round_trips_every_field(store):
    writer, reader = store.writer(), store.reader()
    samples = populate(writer)
    for want in samples[:PER_STEP] + [samples[3 * PER_STEP + 3], samples[9 * PER_STEP + 1]]:
        got = reader.get_sample(RUN, want.step, want.sample_id)
        for name in ("prompt", "response", "prompt_id", "group_id", "category", "flags",
                     "length", "truncated", "tokens", "components"):
            assert getattr(got, name) == getattr(want, name), name
        for name in ("reward", "uncertainty", "advantage", "value", "kl_sum", "kl_max"):
            assert same_float(getattr(got, name), getattr(want, name)), name
        # per-token arrays are float16: ~3 significant digits
        for name in ("logprobs", "ref_logprobs", "token_kl"):
            if getattr(want, name) is None:
                assert getattr(got, name) is None, name
            else:
                assert getattr(got, name) == pytest.approx(getattr(want, name), rel=1e-3)
        assert got.has_token_arrays == want.has_token_arrays
    nan_reward = reader.get_sample(RUN, 7, 2)
    assert math.isnan(nan_reward.reward)
    assert math.isnan(reader.get_sample(RUN, 3, 3).advantage)
    assert reader.get_sample(RUN, 9, 1).kl_max == math.inf
    assert reader.get_sample(RUN, 4, 0).uncertainty is None
    with pytest.raises(NotFoundError):
        reader.get_sample(RUN, 0, 99)


QUERIES = [
    SampleQuery(),
    SampleQuery(step_min=5, step_max=9),
    SampleQuery(category="math"),
    SampleQuery(reward_min=0.0, reward_max=0.5),
    SampleQuery(category="chat", reward_min=-0.5, step_min=10, step_max=30),
    SampleQuery(flags=("truncated",)),
    SampleQuery(flags=("truncated", "low_confidence")),
    SampleQuery(prompt_id="p4"),
    SampleQuery(text="answer"),
    SampleQuery(text="50%"),  # % is a literal, not a wildcard
    SampleQuery(text="x_y"),  # _ too
    SampleQuery(has_token_arrays=True),
    SampleQuery(has_token_arrays=False, category="safety", flags=("rule_violation",)),
]


@pytest.mark.parametrize("query", QUERIES, ids=lambda q: repr(q)[11:60])
def test_query_samples_filters_match_a_naive_filter(store, query):
    writer, reader = store.writer(), store.reader()
    samples = populate(writer)
    want = naive_order(naive_filter(samples, query), query.order)
    page = reader.query_samples(RUN, SampleQuery(**{**query.__dict__, "limit": 10_000}))
    assert page.total == len(want)
    assert [(s.step, s.sample_id) for s in page.items] == want
    assert want, "each query in QUERIES should match something"


@pytest.mark.parametrize("order", ["step_asc", "step_desc", "reward_asc", "reward_desc"])
def test_pages_are_stable_and_cover_everything_once(store, order):
    writer, reader = store.writer(), store.reader()
    samples = populate(writer)
    want = naive_order(samples, order)
    seen = []
    for offset in range(0, len(samples) + 7, 7):
        page = reader.query_samples(RUN, SampleQuery(order=order, limit=7, offset=offset))
        assert page.total == len(samples) and page.offset == offset and page.limit == 7
        seen += [(s.step, s.sample_id) for s in page.items]
    assert seen == want


def test_query_samples_can_leave_token_arrays_out_and_validates(store):
    writer, reader = store.writer(), store.reader()
    populate(writer)
    page = reader.query_samples(RUN, SampleQuery(step_max=0, include_token_arrays=False))
    assert page.items and all(s.logprobs is None and s.tokens is None for s in page.items)
    assert all(s.prompt for s in page.items)
    for bad in (SampleQuery(order="random"), SampleQuery(limit=-1), SampleQuery(offset=-3)):
        with pytest.raises(ConfigError):
            reader.query_samples(RUN, bad)


def test_sample_histogram_matches_numpy(store):
    writer, reader = store.writer(), store.reader()
    samples = populate(writer)
    h = reader.sample_histogram(RUN, "reward", bins=7)
    finite = np.array([s.reward for s in samples if math.isfinite(s.reward)])
    counts, edges = np.histogram(finite, bins=7)
    assert h.counts == tuple(counts.tolist())
    assert h.edges == pytest.approx(edges.tolist())
    assert (h.total, h.finite) == (len(samples), len(finite))
    part = reader.sample_histogram(RUN, "kl_max", bins=3, step_min=8, step_max=9)
    assert (part.total, part.finite) == (2 * PER_STEP, 2 * PER_STEP - 1)  # one +inf
    assert sum(part.counts) == part.finite
    single = reader.sample_histogram(RUN, "length", bins=4, step_min=0, step_max=0)
    assert sum(single.counts) == PER_STEP
    with pytest.raises(ConfigError, match="cannot be binned"):
        reader.sample_histogram(RUN, "prompt")
    assert "reward" in SAMPLE_HISTOGRAM_FIELDS


def test_sample_histogram_places_values_on_and_beside_its_edges_by_those_edges(store):
    """Each value lands in the bin whose reported edges hold it (lower edge in, upper edge out, the
    last bin closed) — also a value exactly on an edge or one float away from it."""
    writer, reader = store.writer(), store.reader()
    writer.create_run(RunInfo(run_id="edges", project="p", name="e"))
    lo, hi, bins = -0.7, 1.3, 13
    edges = [lo + (hi - lo) * i / bins for i in range(bins)] + [hi]
    rng = random.Random(5)
    values = [lo, hi] + [rng.uniform(lo, hi) for _ in range(300)]
    values += [v for e in edges[1:-1] for v in (e, math.nextafter(e, -math.inf), math.nextafter(e, math.inf))]
    writer.write_batch("edges", Batch(samples=[SampleRecord(step=i // 50, sample_id=i, prompt="p", response="r",
                                                            reward=v) for i, v in enumerate(values)]))
    h = reader.sample_histogram("edges", "reward", bins=bins)
    assert h.edges[0] == lo and h.edges[-1] == hi
    want = [0] * bins
    for v in values:
        i = next(i for i in range(bins) if h.edges[i] <= v < h.edges[i + 1] or (i == bins - 1 and v == hi))
        want[i] += 1
    assert h.counts == tuple(want)


@pytest.mark.parametrize("small_range", [0, 10**9], ids=["per-bin-counts", "grouped"])
def test_sample_histogram_over_a_step_range_matches_numpy(store, monkeypatch, small_range):
    from rlcockpit.store import sqlite_samples

    monkeypatch.setattr(sqlite_samples, "_SMALL_RANGE", small_range)  # both SQL strategies
    writer, reader = store.writer(), store.reader()
    samples = populate(writer)
    h = reader.sample_histogram(RUN, "reward", bins=9, step_min=5, step_max=30)
    window = [s.reward for s in samples if 5 <= s.step <= 30]
    finite = np.array([r for r in window if math.isfinite(r)])
    counts, edges = np.histogram(finite, bins=9)
    assert h.counts == tuple(counts.tolist()) and h.edges == pytest.approx(edges.tolist())
    assert (h.total, h.finite, h.step_min, h.step_max) == (len(window), len(finite), 5, 30)


def test_rewriting_a_step_replaces_its_samples_and_flags(store):
    writer, reader = store.writer(), store.reader()
    populate(writer)
    flagged = reader.query_samples(RUN, SampleQuery(step_min=2, step_max=2, flags=("truncated",)))
    new = [SampleRecord(step=2, sample_id=i, prompt="again", response="r", reward=0.0)
           for i in range(2)]
    writer.write_batch(RUN, Batch(samples=new, metrics=[MetricPoint(2, "kl/mean", 9.0)]))
    step2 = reader.query_samples(RUN, SampleQuery(step_min=2, step_max=2))
    assert {(s.sample_id, s.prompt) for s in step2.items} >= {(0, "again"), (1, "again")}
    assert all(s.sample_id >= 2 or not s.flags for s in step2.items)
    still = reader.query_samples(RUN, SampleQuery(step_min=2, step_max=2, flags=("truncated",)))
    assert {s.sample_id for s in still.items} == {s.sample_id for s in flagged.items} - {0, 1}
    assert reader.read_series(RUN, ["kl/mean"], step_min=2, step_max=2)["kl/mean"].values == (9.0,)


def test_strip_token_arrays_keeps_only_the_given_ids(store):
    writer, reader = store.writer(), store.reader()
    populate(writer)
    writer.strip_token_arrays(RUN, {0: {1, 4}, 5: set()})
    kept = reader.query_samples(RUN, SampleQuery(step_max=5, has_token_arrays=True))
    assert [(s.step, s.sample_id) for s in kept.items] == [(0, 1), (0, 4)]
    stripped = reader.get_sample(RUN, 0, 0)
    assert stripped.logprobs is None and stripped.tokens is None and not stripped.has_token_arrays
    assert reader.get_sample(RUN, 0, 4).logprobs is not None
    assert reader.get_sample(RUN, 10, 3).has_token_arrays  # other steps untouched


# --------------------------------------------------------------------------- the rest


def test_events_findings_phases_checkpoints_and_summary(store):
    writer, reader = store.writer(), store.reader()
    populate(writer)
    events = reader.read_events(RUN)
    assert [e.step for e in events] == list(range(STEPS))
    assert events[3].payload == {"i": 3, "x": [1.5]} and events[3].wall_time > 0
    ticks = reader.read_events(RUN, kinds=["tick"], step_min=10, step_max=15)
    assert [e.step for e in ticks] == [11, 13, 15]
    assert [e.step for e in reader.read_events(RUN, limit=3)] == [37, 38, 39]  # most recent
    findings = reader.read_findings(RUN)
    assert [(f.step, f.severity) for f in findings] == [(0, "red"), (10, "yellow"),
                                                        (20, "yellow"), (30, "red")]
    assert findings[0].patterns == ("P1",) and findings[0].evidence == {"kl": 0.1}
    assert [f.step for f in reader.read_findings(RUN, step_min=15, severities=["red"])] == [30]
    phases = reader.read_phases(RUN, limit=2)
    assert [(p.step, p.phase, p.duration_s) for p in phases] == [(38, "ROLLOUT", 0.5),
                                                                  (39, "ROLLOUT", 0.5)]
    assert [(c.step, c.path) for c in reader.read_checkpoints(RUN)] == [(19, "/ckpt/19"),
                                                                         (39, "/ckpt/39")]
    summary = reader.summary(RUN)
    assert (summary.steps, summary.first_step, summary.last_step) == (STEPS, 0, STEPS - 1)
    assert summary.samples == STEPS * PER_STEP
    assert summary.metric_names == ("kl/mean", "reward/mean")
    assert summary.findings_by_severity == {"red": 2, "yellow": 2}
    assert summary.dropped_total == 0


def test_layouts_round_trip_per_project_and_the_newest_save_wins(store):
    layouts = store.layouts()
    assert layouts.get("proj") is None
    first = layouts.put("proj", {"panels": [{"id": "p1", "metrics": ["kl/mean"], "runs": [RUN]}]}, by="ann")
    layouts.put("other", {"panels": []})
    assert layouts.get("proj").layout == first.layout and layouts.get("proj").updated_by == "ann"
    time.sleep(0.01)
    layouts.put("proj", {"panels": [], "folded": ["sys"]}, by="bob")
    got = layouts.get("proj")
    assert (got.layout, got.updated_by) == ({"panels": [], "folded": ["sys"]}, "bob")
    assert layouts.get("other").layout == {"panels": []}
    with pytest.raises(StoreError, match="JSON object"):
        layouts.put("proj", ["not", "an", "object"])
    with pytest.raises(StoreError, match="at most"):
        layouts.put("proj", {"panels": ["x" * 70000]})


def test_a_failed_batch_writes_nothing(store):
    writer, reader = store.writer(), store.reader()
    writer.create_run(RunInfo(run_id="atomic", project="p", name="a"))
    bad = Batch(metrics=[MetricPoint(0, "ok", 1.0)],
                samples=[SampleRecord(step=0, sample_id=0, prompt="p", response="r",
                                      reward=object())])  # not a number: the batch must fail
    with pytest.raises((StoreError, TypeError, ValueError)):
        writer.write_batch("atomic", bad)
    assert reader.read_series("atomic", ["ok"])["ok"].steps == ()
    writer.write_batch("atomic", Batch(metrics=[MetricPoint(0, "ok", 1.0)]))
    assert reader.read_series("atomic", ["ok"])["ok"].steps == (0,)


READER_CHILD = textwrap.dedent("""
    import sys, time
    from rlcockpit.store import open_store, SampleQuery
    reader = open_store(sys.argv[1]).reader()
    seen, deadline = -1, time.time() + 60
    while time.time() < deadline:
        try:
            run = reader.get_run("live")
        except Exception:
            time.sleep(0.01)
            continue
        summary = reader.summary("live")
        for step in range(summary.steps):
            n_metrics = len(reader.read_series("live", [f"m/{k}" for k in range(10)],
                                               step_min=step, step_max=step)["m/0"].steps)
            page = reader.query_samples("live", SampleQuery(step_min=step, step_max=step))
            if page.total != 4:
                print(f"BROKEN step {step}: {page.total} samples"); sys.exit(1)
        seen = max(seen, summary.steps)
        if run.status == "finished":
            print(f"OK {seen}"); sys.exit(0)
    print("TIMEOUT"); sys.exit(1)
""")


def test_readers_in_another_process_see_whole_batches_while_a_writer_writes(store):
    if not getattr(store, "multi_process", True):
        pytest.skip("chDB locks its directory to one process (docs/store.md); the same test "
                    "runs on a ClickHouse server with RLCOCKPIT_TEST_CLICKHOUSE_URI")
    child = subprocess.Popen([sys.executable, "-c", READER_CHILD, store.uri],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    writer = store.writer()
    writer.create_run(RunInfo(run_id="live", project="p", name="live"))
    for step in range(150):
        writer.write_batch("live", Batch(
            metrics=[MetricPoint(step, f"m/{k}", float(k)) for k in range(10)],
            samples=[SampleRecord(step=step, sample_id=i, prompt="p" * 300, response="r" * 900,
                                  reward=0.1) for i in range(4)]))
        time.sleep(0.002)
    writer.set_run_status("live", "finished", ended_at=time.time())
    out, err = child.communicate(timeout=90)
    assert child.returncode == 0, out + err
    assert out.startswith("OK") and int(out.split()[1]) == 150


# =========================================================================== SQLite only


def test_open_store_accepts_uri_forms(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    relative = open_store("sqlite:///rel.db")
    assert relative.path == Path("rel.db") and (tmp_path / "rel.db").exists()
    absolute = open_store(f"sqlite:///{tmp_path / 'abs.db'}")  # four slashes: absolute
    assert absolute.path == tmp_path / "abs.db"
    bare = open_store("bare.db")
    assert (tmp_path / "bare.db").exists() and bare.uri == "bare.db"
    tuned = open_store("sqlite:///tuned.db?busy_timeout_s=0.5&stale_after_s=10")
    assert (tuned.busy_timeout_s, tuned.stale_after_s) == (0.5, 10.0)
    assert tuned.reader().stale_after_s == 10.0


@pytest.mark.parametrize("uri, message", [
    ("postgres://x/y", "valid schemes: sqlite, clickhouse"),
    ("clickhouse://localhost:8123/", "needs a host and a database"),
    ("clickhouse://localhost:8123/db?cache=1", "unknown clickhouse store option 'cache'"),
    ("chdb://", "has no directory"),
    ("sqlite://", "no file path"),
    ("sqlite:///x.db?cache=1", "unknown sqlite store option 'cache'"),
    ("sqlite:///x.db?busy_timeout_s=abc", "must be a number"),
    ("", "empty"),
])
def test_open_store_refuses_bad_uris_with_a_fix(tmp_path, monkeypatch, uri, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError, match=message):
        open_store(uri)


def test_open_store_refuses_bad_paths_with_a_fix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError, match="is a directory"):
        open_store(f"sqlite:///{tmp_path}")
    with pytest.raises(StoreError, match="does not exist"):
        open_store(f"sqlite:///{tmp_path / 'missing' / 'x.db'}")
    with pytest.raises(StoreError, match="four slashes"):  # sqlite:///tmp/x.db meant /tmp/x.db
        open_store(f"sqlite:///{str(tmp_path)[1:]}/x.db")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(StoreError, match="does not exist"):
        open_store(f"sqlite:///{tmp_path / 'afile' / 'x.db'}")
    with pytest.raises(StoreError, match="no store at"):
        open_store(f"sqlite:///{tmp_path / 'absent.db'}", create=False)


def test_open_store_refuses_an_unwritable_place(tmp_path):
    if os.geteuid() == 0:
        # root may write anywhere permissions allow nothing; /proc refuses new files to root too
        target = "/proc/rlcockpit-test.db"
    else:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        target = str(locked / "x.db")
    with pytest.raises(StoreError, match="(not writable|cannot open|not readable|not a readable)"):
        open_store(f"sqlite:///{target}")


def test_open_store_refuses_corrupt_and_foreign_files(tmp_path):
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(os.urandom(8192))
    with pytest.raises(StoreError, match="not a readable rlcockpit SQLite store"):
        open_store(f"sqlite:///{corrupt}")
    foreign = tmp_path / "foreign.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE users (id INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="not an rlcockpit store"):
        open_store(f"sqlite:///{foreign}")


def test_store_file_uses_wal_and_records_its_schema_version(tmp_path):
    from rlcockpit.store.schema import SCHEMA_VERSION

    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    conn = sqlite3.connect(store.path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == SCHEMA_VERSION
    assert store.schema_version == SCHEMA_VERSION


def test_an_older_store_is_migrated_and_keeps_its_data(tmp_path):
    from rlcockpit.store.schema import SCHEMA_VERSION, migrate

    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    assert migrate(conn, target=1) == 1  # a file as version 1 of the code wrote it
    conn.execute("INSERT INTO runs (run_id, project, name, status, started_at, config) "
                 "VALUES ('old', 'p', 'n', 'finished', 1.0, '{}')")
    conn.execute("INSERT INTO names (name) VALUES ('reward/mean')")
    conn.execute("INSERT INTO run_names VALUES (1, 'metric', 1)")
    conn.execute("INSERT INTO metrics VALUES (1, 1, 0, 0.5, 1.0)")
    indices_before = {r[0] for r in conn.execute("SELECT name FROM sqlite_master "
                                                 "WHERE type='index' AND sql IS NOT NULL")}
    conn.close()
    assert indices_before == set()
    store = open_store(f"sqlite:///{path}")
    assert store.schema_version == SCHEMA_VERSION
    reader = store.reader()
    assert reader.read_series("old", ["reward/mean"])["reward/mean"].values == (0.5,)
    conn = sqlite3.connect(path)
    versions = [r[0] for r in conn.execute("SELECT version FROM schema_version ORDER BY 1")]
    assert versions == list(range(1, SCHEMA_VERSION + 1))
    indices = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert "samples_by_category_reward" in indices
    # the rollups migration built the extremes of the metrics already in the file
    assert conn.execute("SELECT size, bucket, min_step, max_value FROM metric_rollups "
                        "ORDER BY size").fetchall() == [(64, 0, 0, 0.5), (4096, 0, 0, 0.5)]


def test_a_store_from_newer_code_is_refused(tmp_path):
    from rlcockpit.store.schema import SCHEMA_VERSION

    path = tmp_path / "new.db"
    open_store(f"sqlite:///{path}")
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO schema_version VALUES (?, 0)", (SCHEMA_VERSION + 1,))
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="newer than this rlcockpit understands"):
        open_store(f"sqlite:///{path}")


def test_cli_runs_lists_runs_as_table_and_json(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'cli.db'}")
    writer = store.writer()
    populate(writer)
    writer.set_run_status(RUN, "finished", ended_at=time.time())
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "COLUMNS": "200"}
    cmd = [sys.executable, "-m", "rlcockpit", "runs", "--store", store.uri]
    out = subprocess.run(cmd + ["--json"], capture_output=True, text=True, env=env, check=True)
    rows = json.loads(out.stdout)
    assert [(r["run_id"], r["name"], r["project"], r["status"], r["steps"]) for r in rows] == [
        (RUN, "contract", "proj", "finished", STEPS)]
    table = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    assert RUN in table and "finished" in table and str(STEPS) in table
    helped = subprocess.run([sys.executable, "-m", "rlcockpit", "runs", "--help"],
                            capture_output=True, text=True, env=env)
    assert helped.returncode == 0 and "--json" in helped.stdout
    missing = subprocess.run([sys.executable, "-m", "rlcockpit", "runs", "--store",
                              str(tmp_path / "none.db")], capture_output=True, text=True, env=env)
    assert missing.returncode == 2 and "no store at" in missing.stderr
    assert not (tmp_path / "none.db").exists()


def test_store_doc_covers_tables_options_and_reader_methods(tmp_path):
    from rlcockpit.store.uri import SQLITE_OPTIONS

    doc = (REPO / "docs" / "store.md").read_text()
    conn = sqlite3.connect(open_store(f"sqlite:///{tmp_path / 'd.db'}").path)
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    for name in tables + list(SQLITE_OPTIONS):
        assert f"`{name}`" in doc, name
    methods = [m for m in dir(StoreReader) if not m.startswith("_") and m != "close"]
    for name in methods + ["sample_histogram", "histogram_names"]:
        assert f"`{name}" in doc, name


def test_snapshots_and_incidents_round_trip(tmp_path):
    """A red finding's incident id and its snapshot come back linked, payload only on request."""
    from rlcockpit.records import Batch, FindingRecord, RunInfo, SnapshotRecord
    from rlcockpit.store import open_store

    opened = open_store(f"sqlite:///{tmp_path}/snap.db")
    writer = opened.writer()
    writer.create_run(RunInfo(run_id="r1", project="p", name="n"))
    writer.write_batch("r1", Batch(
        findings=(FindingRecord(step=7, detector="kl_tiers", severity="red", message="KL 3x target",
                                incident="inc-7"),
                  FindingRecord(step=8, detector="clip_band", severity="yellow", message="clip")),
        snapshots=(SnapshotRecord(step=7, kind="diagnostic", payload={"grad": [1.0, 2.0]},
                                  incident="inc-7"),)))
    writer.close()
    reader = opened.reader()
    linked = reader.read_findings("r1", incident="inc-7")
    assert [(f.detector, f.incident) for f in linked] == [("kl_tiers", "inc-7")]
    assert linked[0].finding_id is not None
    listed = reader.read_snapshots("r1", incident="inc-7")
    assert len(listed) == 1 and listed[0].payload == {}
    full = reader.get_snapshot("r1", listed[0].snapshot_id)
    assert full.payload == {"grad": [1.0, 2.0]} and full.step == 7
    with pytest.raises(NotFoundError):
        reader.get_snapshot("r1", 999)
    reader.close()


@pytest.mark.parametrize("order", ["step_asc", "step_desc", "reward_desc"])
def test_pages_in_any_order_tile_the_filtered_samples_also_past_a_thousand(store, order):
    """Consecutive pages (shallow ones read in one pass in key order, deep ones by keys first)
    return every filtered sample once, in order, with its own texts."""
    writer, reader = store.writer(), store.reader()
    writer.create_run(RunInfo(run_id="tile", project="p", name="t"))
    writer.write_batch("tile", Batch(samples=[
        SampleRecord(step=i // 4, sample_id=i % 4, prompt=f"p{i}", response=f"r{i}", reward=(i * 37 % 101) / 10,
                     category="math" if i % 3 else "code") for i in range(1_800)]))
    query = {"category": "math", "reward_min": 1.0, "order": order}
    seen = []
    for offset in range(0, 1_300, 100):
        page = reader.query_samples("tile", SampleQuery(limit=100, offset=offset, **query))
        seen += [(s.step, s.sample_id, s.prompt, s.reward) for s in page.items]
    every = reader.query_samples("tile", SampleQuery(limit=10_000, **query))
    assert page.total == every.total == len(every.items) > 1_000
    assert seen == [(s.step, s.sample_id, s.prompt, s.reward) for s in every.items][:1_300]
    assert all(p == f"p{4 * st + sid}" for st, sid, p, _ in seen)


# --------------------------------------------------------------------------- run leases


def test_a_live_lease_refuses_a_second_holder_and_names_the_first(store):
    from rlcockpit.errors import RunLeasedError
    from rlcockpit.store.lease import LeaseHolder

    writer, reader, leases = store.writer(), store.reader(), store.leases()
    writer.create_run(RunInfo(run_id="leased", project="p", name="n"))
    first = LeaseHolder(kind="trainer", host="h1", pid=1234, token="t1")
    taken = leases.acquire("leased", first, stale_after_s=30)
    assert (taken.reason, taken.previous) == ("new", None)
    assert reader.get_lease("leased").holder == first
    with pytest.raises(RunLeasedError, match=r"run leased is being written by trainer pid 1234 on "
                                             r"host h1 since .*lease renewed \d+ s ago.*--force"):
        leases.acquire("leased", LeaseHolder("sdk", "h2", 99, "t2"), stale_after_s=30)
    assert leases.renew("leased", "t1", stale_after_s=30)
    assert not leases.renew("leased", "t2", stale_after_s=30)
    assert leases.holds("leased", "t1") and not leases.holds("leased", "t2")
    with pytest.raises(NotFoundError):
        leases.acquire("nope", first, stale_after_s=30)
    leases.close()


def test_a_stale_lease_is_taken_over_and_a_forced_takeover_fences_the_old_holder(store):
    from rlcockpit.store.lease import LeaseHolder

    writer, reader, leases = store.writer(), store.reader(), store.leases()
    writer.create_run(RunInfo(run_id="leased", project="p", name="n"))
    old = LeaseHolder("trainer", "h1", 1, "old")
    leases.acquire("leased", old, stale_after_s=0.05)
    time.sleep(0.1)
    stale = leases.acquire("leased", LeaseHolder("sdk", "h2", 2, "mid"), stale_after_s=30)
    assert (stale.reason, stale.previous.holder) == ("stale", old)
    assert not leases.renew("leased", "old", stale_after_s=30)  # the dead holder's late renewal
    forced = leases.acquire("leased", LeaseHolder("follower", "h3", 3, "new"), stale_after_s=30,
                            force=True)
    assert (forced.reason, forced.previous.holder.token) == ("forced", "mid")
    assert not leases.finish("leased", "mid", "stopped", time.time())  # only the holder ends a run
    assert reader.get_run("leased").status == "running"
    assert not leases.release("leased", "mid")
    assert leases.finish("leased", "new", "finished", 5.0)
    assert (reader.get_run("leased").status, reader.get_run("leased").ended_at) == ("finished", 5.0)
    assert reader.get_lease("leased") is None  # released with the final status
    again = leases.acquire("leased", LeaseHolder("sdk", "h4", 4, "later"), stale_after_s=30)
    assert (again.reason, again.previous) == ("new", None)
    leases.close()
