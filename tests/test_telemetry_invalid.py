"""Bad values drop only themselves: refused where they are logged (steps beyond 64 bits, huge
histogram bin counts), dropped alone from a batch the store refuses (the batch is split until the
bad record is found), and never echoed whole in a warning. Real SQLite files and chDB stores."""

from __future__ import annotations

import logging
import time

import pytest

import rlcockpit
from rlcockpit.records import SampleRecord
from rlcockpit.store import SampleQuery, open_store
from rlcockpit.telemetry import DROPPED_EVENT
from rlcockpit.telemetry.convert import MAX_BINS


def sample(i: int, **extra) -> dict:
    return {"sample_id": i, "prompt": f"prompt {i}", "response": f"response {i}", "reward": 0.5,
            **extra}


@pytest.fixture(params=["sqlite", pytest.param("chdb", marks=pytest.mark.slow)])
def store_uri(request, tmp_path) -> str:
    if request.param == "chdb":
        pytest.importorskip("chdb", reason="the chdb backend needs: pip install 'rlcockpit[clickhouse]'")
        return f"chdb:///{tmp_path / 'ch'}"
    return f"sqlite:///{tmp_path / 'runs.db'}"


def read_back(uri: str, run_id: str) -> tuple[tuple[int, ...], dict[int, int], dict]:
    store = open_store(uri)
    reader = store.reader()
    try:
        steps = reader.read_series(run_id, ["a"])["a"].steps
        per_step: dict[int, int] = {}
        for s in reader.query_samples(run_id, SampleQuery(limit=1000)).items:
            per_step[s.step] = per_step.get(s.step, 0) + 1
        report = reader.read_events(run_id, kinds=[DROPPED_EVENT])[-1].payload
        return steps, per_step, report
    finally:
        reader.close()
        store.close()


def test_an_integer_beyond_64_bits_drops_only_itself(store_uri):
    """Issue: run.log(2**70, ...) and a sample id beyond 64 bits made the writer drop the whole
    batch, the valid steps around them included."""
    run = rlcockpit.init(store=store_uri, run_id="big-ints", warn_interval_s=0.0)
    for step in range(10):
        run.log(step, {"a": float(step)})
        samples = [sample(0), sample(1)]
        if step == 5:
            samples += [sample(2**70), SampleRecord(step=5, sample_id=2**64, prompt="p",
                                                    response="r", reward=0.0),
                        sample(3, length=2**63), sample(4, group_id=-(2**63) - 1)]
        run.log_samples(step, samples)
        if step == 6:
            run.log(2**70, {"a": 1.0})  # a step beyond 64 bits: refused in log(), at once
            assert run.dropped["metrics"] == 1
            run.event(2**64, "note")
            run.phase(-(2**63) - 1, "ROLLOUT", "started")
        run.commit(step)
    run.close()
    assert run.dropped == {"metrics": 1, "events": 1, "phases": 1, "samples": 4}
    steps, per_step, report = read_back(store_uri, "big-ints")
    assert steps == tuple(range(10))
    assert per_step == {s: 2 for s in range(10)}
    assert report["by_reason"] == {"invalid": 7}


def test_a_record_the_store_refuses_is_split_out_of_its_batch(store_uri, caplog):
    """A value validation lets through but the store cannot bind (a text with a lone surrogate,
    which is no UTF-8) fails its batch: the batch is bisected, the one record dropped and counted
    as ``unwritable``, every other record of every step written."""
    caplog.set_level(logging.WARNING, logger="rlcockpit.telemetry")
    uri = store_uri
    run = rlcockpit.init(store=uri, run_id="split", flush_interval_s=60.0, flush_every=10**6,
                         warn_interval_s=0.0)
    for step in range(10):
        run.log(step, {"a": float(step), "b": 1.0})
        bad = [sample(9, prompt="\ud800 not utf-8")] if step == 4 else []
        run.log_samples(step, [sample(0), sample(1), *bad])
        if step == 7:
            run.log(step, {"\udfff": 1.0})  # a metric name that is no UTF-8
        run.commit(step)
    assert run.flush(timeout=20)  # one batch of all ten steps
    run.close()
    assert run.dropped == {"samples": 1, "metrics": 1}
    steps, per_step, report = read_back(uri, "split")
    assert steps == tuple(range(10))
    assert per_step == {s: 2 for s in range(10)}
    assert report["by_reason"] == {"unwritable": 2}
    assert any("unwritable" in r.getMessage() and "surrogates" in r.getMessage()
               for r in caplog.records)


def test_a_huge_bins_count_is_refused_where_it_is_logged(tmp_path, caplog):
    """Issue: bins=10**9 allocated ~16 GB in the writer thread. At most MAX_BINS bins (or
    MAX_BINS + 1 edges): anything else is refused in log_histogram, counted, and said."""
    caplog.set_level(logging.WARNING, logger="rlcockpit.telemetry")
    uri = f"sqlite:///{tmp_path / 'runs.db'}"
    with rlcockpit.init(store=uri, warn_interval_s=0.0) as run:
        t0 = time.perf_counter()
        run.log_histogram(0, "h/huge", [1.0, 2.0], bins=10**9)
        run.log_histogram(0, "h/edges", [1.0, 2.0], bins=list(range(MAX_BINS + 2)))
        run.log_histogram(0, "h/zero", [1.0, 2.0], bins=0)
        run.log_histogram(0, "h/ok", [1.0, 2.0], bins=MAX_BINS)
        assert time.perf_counter() - t0 < 0.5
        assert run.dropped == {"histograms": 3}  # at once, on the calling thread
    assert any(f"at most {MAX_BINS} bins" in r.getMessage() for r in caplog.records)
    reader = open_store(uri).reader()
    assert [len(h.counts) for h in reader.read_histograms(run.run_id, "h/ok")] == [MAX_BINS]
    assert reader.read_histograms(run.run_id, "h/huge") == []


def test_warnings_show_at_most_a_few_hundred_characters_of_a_value(tmp_path, caplog):
    """Issue: a 10 MB invalid string was echoed whole in one 20 MB warning line."""
    caplog.set_level(logging.WARNING, logger="rlcockpit.telemetry")
    uri = f"sqlite:///{tmp_path / 'runs.db'}"
    huge = "x" * 10_000_000
    with rlcockpit.init(store=uri, warn_interval_s=0.0) as run:
        run.log(0, {"bad": huge, huge: "also bad"})
        run.log(huge, {"a": 1.0})
        run.log_samples(0, [sample(0, reward=huge), {**sample(1), huge: 1}])
        run.log_histogram(0, huge, [float("nan")])
    assert run.dropped_total == 6
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) >= 6
    assert max(len(m) for m in messages) < 2000, max(len(m) for m in messages)
    assert all("chars)" in m for m in messages)  # each says how long the value it cut was
