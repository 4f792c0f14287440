"""The telemetry SDK end to end on real SQLite files: what lands, when, and what happens when the
store is slow, locked or wrongly configured."""

from __future__ import annotations

import logging
import math
import os
import sqlite3
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import rlcockpit
from rlcockpit.errors import ConfigError, NotFoundError, StoreError
from rlcockpit.records import SampleRecord
from rlcockpit.store import SampleQuery, open_store
from rlcockpit.telemetry import DROPPED_EVENT, DROPPED_METRIC, Run, TokenArrayPolicy
from rlcockpit.telemetry.assembly import StepAssembler

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src")}


@pytest.fixture
def db(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'telemetry.db'}"


def reader_of(uri: str):
    return open_store(uri).reader()


def sample(i: int, **extra) -> dict:
    return {"sample_id": i, "prompt": f"prompt {i}", "response": f"response {i}",
            "reward": 0.1 * i, "category": "math" if i % 2 else "chat", **extra}


def wait_until(predicate, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


# --------------------------------------------------------------------------- what lands


def test_everything_logged_lands_in_the_store(db):
    run = rlcockpit.init(project="demo", name="ppo-1", store=db, config={"lr": 0.001})
    assert isinstance(run, Run) and run.run_id
    for step in range(3):
        run.log(step, {"reward/mean": 0.5 + step, "kl/mean": np.float32(0.25)})
        run.log_histogram(step, "reward/hist", np.arange(100.0), bins=10)
        run.log_samples(step, [sample(0), SampleRecord(step=step, sample_id=1, prompt="p",
                                                       response="r", reward=1.0,
                                                       flags=("truncated",))])
        run.phase(step, "ROLLOUT", "finished", duration_s=0.25, progress=1.0)
        run.commit(step)
    run.event(2, "config_change", {"kl.coef": [0.05, 0.1]})
    run.finding(step=2, detector="kl_token_spike", severity="orange", message="KL spiked",
                evidence={"kl": 3.0}, patterns=("reward_hacking",))
    run.checkpoint(2, "/tmp/ckpt-2", reason="manual")
    run.close()
    reader = reader_of(db)
    info = reader.get_run(run.run_id)
    assert (info.project, info.name, info.status, info.config) == ("demo", "ppo-1", "finished",
                                                                   {"lr": 0.001})
    assert info.last_step == 2 and info.ended_at is not None
    series = reader.read_series(run.run_id, ["reward/mean", "kl/mean"])
    assert series["reward/mean"].values == (0.5, 1.5, 2.5)
    assert series["kl/mean"].values == (0.25, 0.25, 0.25)
    hist = reader.read_histograms(run.run_id, "reward/hist")
    assert len(hist) == 3 and hist[0].counts == (10,) * 10 and hist[0].edges[-1] == 99.0
    page = reader.query_samples(run.run_id, SampleQuery(step_min=1, step_max=1))
    assert [(s.sample_id, s.prompt, s.flags) for s in page.items] == [
        (0, "prompt 0", ()), (1, "p", ("truncated",))]
    assert [e.kind for e in reader.read_events(run.run_id)] == ["config_change"]
    assert reader.read_findings(run.run_id)[0].patterns == ("reward_hacking",)
    assert [(p.step, p.duration_s) for p in reader.read_phases(run.run_id)] == [
        (0, 0.25), (1, 0.25), (2, 0.25)]
    assert reader.read_checkpoints(run.run_id)[0].reason == "manual"
    assert reader.summary(run.run_id).dropped_total == 0 and run.dropped_total == 0


def test_nonfinite_metric_values_are_stored_faithfully(db):
    with rlcockpit.init(store=db) as run:
        run.log(0, {"loss": float("nan"), "grad": float("inf"), "neg": -math.inf})
    latest = reader_of(db).latest(run.run_id)
    assert math.isnan(latest["loss"][1])
    assert latest["grad"][1] == math.inf and latest["neg"][1] == -math.inf


def test_torch_tensors_and_an_opened_store_are_accepted(db):
    import torch

    store = open_store(db)
    grads = torch.linspace(0, 1, 101, dtype=torch.bfloat16, requires_grad=True) * 2
    with rlcockpit.init(store=store) as run:
        run.log(0, {"loss": torch.tensor(0.5), "kl": torch.tensor([0.25])[0]})
        run.log_histogram(0, "grad/hist", grads, bins=4)
        run.log_samples(0, [sample(0, logprobs=torch.tensor([-1.0, -2.0]),
                                   token_kl=torch.zeros(2, requires_grad=True) + 0.5)])
        buffer = torch.linspace(0, 1, 11)
        run.log_histogram(0, "buffer/hist", buffer, bins=2)
        buffer.zero_()  # the trainer reuses its buffer right away: what was logged must not change
    reader = store.reader()
    assert reader.latest(run.run_id, ["loss", "kl"]) == {"loss": (0, 0.5), "kl": (0, 0.25)}
    (hist,) = reader.read_histograms(run.run_id, "grad/hist")
    assert sum(hist.counts) == 101 and hist.edges[0] == 0.0 and hist.edges[-1] == 2.0
    (buffered,) = reader.read_histograms(run.run_id, "buffer/hist")
    assert buffered.edges == (0.0, 0.5, 1.0) and buffered.counts == (5, 6)
    got = reader.get_sample(run.run_id, 0, 0)
    assert got.logprobs == (-1.0, -2.0) and got.token_kl == (0.5, 0.5)


def test_run_ids_are_unique_and_explicit_ids_are_kept(db):
    ids = {rlcockpit.telemetry.new_run_id() for _ in range(200)}
    assert len(ids) == 200
    with rlcockpit.init(store=db, run_id="my-run") as run:
        assert run.run_id == "my-run"
    assert reader_of(db).get_run("my-run").name == "my-run"


# --------------------------------------------------------------------------- whole steps


def test_assembler_completes_steps_on_larger_step_commit_idle_and_late_records():
    asm = StepAssembler()
    asm.add_step_records(0, "metrics", ["m0"], now=0.0)
    asm.add_step_records(0, "samples", ["s0"], now=0.1)
    assert len(asm.ready) == 0 and set(asm.open) == {0}
    asm.add_step_records(1, "metrics", ["m1"], now=0.2)  # a larger step completes step 0
    assert asm.ready.metrics == ["m0"] and asm.ready.samples == ["s0"] and set(asm.open) == {1}
    asm.commit(1)
    assert asm.ready.metrics == ["m0", "m1"] and not asm.open
    asm.add_step_records(2, "metrics", ["m2"], now=1.0)
    asm.complete_if_idle(now=1.5, idle_s=1.0)
    assert set(asm.open) == {2}
    asm.complete_if_idle(now=2.0, idle_s=1.0)
    assert not asm.open
    asm.add_step_records(5, "metrics", ["m5"], now=3.0)
    asm.add_step_records(4, "samples", ["late"], now=3.1)  # older than the newest: complete now
    assert "late" in asm.ready.samples and set(asm.open) == {5}
    asm.add_live_records("phases", ["phase"])
    assert asm.take_ready().phases == ["phase"] and len(asm.ready) == 0


def test_a_step_is_written_only_once_complete(db):
    run = rlcockpit.init(store=db, flush_interval_s=60.0)  # the idle rule never fires here
    reader = reader_of(db)

    def stored_steps() -> set[int]:
        series = reader.read_series(run.run_id, ["a"])["a"]
        page = reader.query_samples(run.run_id, SampleQuery(limit=100))
        return set(series.steps) | {s.step for s in page.items}

    run.log(0, {"a": 1.0})
    run.log_samples(0, [sample(0), sample(1)])
    run.log(1, {"a": 2.0})  # step 0 is now complete and written (first write goes at once)
    run.log_samples(1, [sample(0)])
    assert wait_until(lambda: stored_steps() == {0})
    page0 = reader.query_samples(run.run_id, SampleQuery(step_max=0))
    assert page0.total == 2  # step 0 whole: its metric and both samples
    time.sleep(0.3)
    assert stored_steps() == {0}  # step 1 is still open: nothing of it is visible
    run.commit(1)
    assert run.flush(timeout=10)
    assert stored_steps() == {0, 1}
    run.close()


def test_flush_writes_everything_logged_so_far_and_close_drains(db):
    run = rlcockpit.init(store=db, flush_every=1_000_000, flush_interval_s=60.0)
    for step in range(50):
        run.log(step, {"a": float(step)})
    assert run.flush(timeout=20)
    reader = reader_of(db)
    assert len(reader.read_series(run.run_id, ["a"])["a"].steps) == 50
    for step in range(50, 300):
        run.log(step, {"a": float(step)})
        run.log_samples(step, [sample(0)])
    run.close()
    run.close()  # idempotent
    assert reader.read_series(run.run_id, ["a"])["a"].steps == tuple(range(300))
    assert reader.summary(run.run_id).samples == 250
    assert reader.get_run(run.run_id).status == "finished"


def test_context_manager_marks_failed_on_exception_and_stopped_on_interrupt(db):
    with pytest.raises(ValueError, match="boom"), rlcockpit.init(store=db, run_id="bad") as run:
        run.log(3, {"a": 1.0})
        raise ValueError("boom")
    with pytest.raises(KeyboardInterrupt), rlcockpit.init(store=db, run_id="ctrl-c"):
        raise KeyboardInterrupt
    reader = reader_of(db)
    assert reader.get_run("bad").status == "failed"
    failure = reader.read_events("bad", kinds=["run_failed"])
    assert failure and failure[0].payload["exception"] == "ValueError"
    assert failure[0].step == 3
    assert reader.read_series("bad", ["a"])["a"].values == (1.0,)  # data logged before: kept
    assert reader.get_run("ctrl-c").status == "stopped"


def test_resume_continues_the_same_run(db):
    with rlcockpit.init(store=db, run_id="r1", config={"lr": 1.0}) as run:
        for step in range(5):
            run.log(step, {"a": float(step)})
    with rlcockpit.init(store=db, run_id="r1", resume=True, config={"lr": 0.5}) as run:
        assert run.run_id == "r1"
        for step in range(5, 10):
            run.log(step, {"a": float(step)})
    reader = reader_of(db)
    assert reader.read_series("r1", ["a"])["a"].steps == tuple(range(10))
    assert reader.get_run("r1").status == "finished"
    resumed = reader.read_events("r1", kinds=["run_resumed"])
    assert resumed[0].payload["config"] == {"lr": 0.5} and resumed[0].step == 4
    assert [r.run_id for r in reader.list_runs()] == ["r1"]


def test_a_deferred_block_reaches_the_writer_whole_at_its_end(db):
    """Run.deferred (the TRL callback's step boundary): what the block logs is handed over in order
    as one item at its end; another thread's records and a flush go through meanwhile; close()
    inside the block hands it over first."""
    import threading

    run = rlcockpit.init(store=db, run_id="held", flush_interval_s=0.05)
    with run.deferred():
        run.log(0, {"held": 1.0})
        run.log_samples(0, [sample(0), sample(1)])
        run.event(0, "note", {"n": 1})
        with run.deferred():  # nested: the outer block hands everything over
            run.log(0, {"nested": 2.0})
        run.commit(0)

        def direct():
            run.log(1, {"direct": 1.0})
            run.commit(1)
            assert run.flush()

        thread = threading.Thread(target=direct)
        thread.start()
        thread.join()
        assert set(reader_of(db).latest("held")) == {"direct"}
    assert run.flush()
    reader = reader_of(db)
    assert reader.latest("held") == {"held": (0, 1.0), "nested": (0, 2.0), "direct": (1, 1.0)}
    assert reader.summary("held").samples == 2 and [e.kind for e in reader.read_events("held")] == ["note"]
    with run.deferred():
        run.log(2, {"late": 3.0})
        run.close()
        run.log(3, {"after": 1.0})  # after close(): counted, as outside a block
    assert run.dropped == {"metrics": 1}
    assert reader_of(db).latest("held")["late"] == (2, 3.0)


# --------------------------------------------------------------------------- failing softly


def test_back_pressure_drops_new_items_never_blocks_and_reports(db, caplog, tmp_path):
    caplog.set_level(logging.WARNING, logger="rlcockpit.telemetry")
    run = rlcockpit.init(store=db, queue_size=4, flush_interval_s=0.05, warn_interval_s=0.0)
    blocker = sqlite3.connect(tmp_path / "telemetry.db", isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # the writer thread now waits for the lock
    run.log(0, {"a": 0.0})
    run.commit(0)
    time.sleep(0.3)
    durations = []
    for step in range(1, 400):
        t0 = time.perf_counter()
        run.log(step, {"a": float(step), "b": 1.0})
        run.log_samples(step, [sample(0), sample(1)])
        durations.append(time.perf_counter() - t0)
    blocker.execute("COMMIT")
    blocker.close()
    assert statistics.median(durations) < 0.001
    assert max(durations) < 0.5  # a blocking put would wait for the writer's 5 s busy timeout
    dropped = run.dropped_total
    assert dropped > 0 and set(run.dropped) == {"metrics", "samples"}
    run.close()
    assert run.dropped_total == dropped  # close drained; nothing else dropped
    reader = reader_of(db)
    assert reader.latest(run.run_id)[DROPPED_METRIC][1] == dropped
    assert reader.summary(run.run_id).dropped_total == dropped
    events = reader.read_events(run.run_id, kinds=[DROPPED_EVENT])
    assert events[-1].payload["dropped_total"] == dropped
    assert events[-1].payload["by_reason"] == {"queue_full": dropped}
    assert set(events[-1].payload["by_kind"]) == {"metrics", "samples"}
    assert any("dropped" in r.getMessage() and "queue_full" in r.getMessage()
               for r in caplog.records)
    kept = reader.read_series(run.run_id, ["a"])["a"]
    assert kept.steps and len(kept.steps) < 400  # what was not dropped was written


def test_write_errors_after_setup_are_counted_not_raised(tmp_path, caplog):
    """Without a spool (spool_max_mb=0) a write that still fails after the retries is dropped and
    counted (write_error); the steps after it land."""
    caplog.set_level(logging.WARNING, logger="rlcockpit.telemetry")
    path = tmp_path / "locked.db"
    uri = f"sqlite:///{path}?busy_timeout_s=0.05"
    run = rlcockpit.init(store=uri, write_retries=1, retry_backoff_s=0.01,
                         flush_interval_s=0.05, warn_interval_s=0.0, spool_max_mb=0)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    for step in range(5):
        run.log(step, {"a": float(step), "b": 0.0})
        run.commit(step)
    run.flush(timeout=20)  # the writes fail (locked) and are counted
    assert run.dropped_total == 10 and run.dropped == {"metrics": 10}
    blocker.execute("COMMIT")
    blocker.close()
    for step in range(5, 8):
        run.log(step, {"a": float(step)})
    run.close()
    reader = reader_of(uri)
    assert reader.read_series(run.run_id, ["a"])["a"].steps == (5, 6, 7)
    assert reader.latest(run.run_id)[DROPPED_METRIC][1] == 10
    event = reader.read_events(run.run_id, kinds=[DROPPED_EVENT])[-1]
    assert event.payload["by_reason"] == {"write_error": 10}
    assert reader.get_run(run.run_id).status == "finished"
    assert any("write_error" in r.getMessage() for r in caplog.records)


def test_a_store_locked_past_every_retry_is_spooled_and_replayed_once(tmp_path, caplog):
    """A lock held longer than every retry makes the store unavailable: the steps wait in the
    spool beside the store (runs.db-spool/<run>.spool) and are written, in order and once, when
    the lock is gone; nothing is dropped."""
    caplog.set_level(logging.WARNING, logger="rlcockpit.telemetry")
    path = tmp_path / "locked.db"
    uri = f"sqlite:///{path}?busy_timeout_s=0.05"
    run = rlcockpit.init(store=uri, write_retries=1, retry_backoff_s=0.01, flush_interval_s=0.05,
                         warn_interval_s=0.0, spool_retry_s=0.05)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    for step in range(5):
        run.log(step, {"a": float(step), "b": 0.0})
        run.event(step, "note", {"step": step})
        run.commit(step)
    spool = tmp_path / "locked.db-spool" / f"{run.run_id}.spool"
    assert wait_until(spool.is_file)
    assert any("kept in the spool" in r.getMessage() for r in caplog.records)
    blocker.execute("COMMIT")
    blocker.close()
    for step in range(5, 8):
        run.log(step, {"a": float(step)})
        run.commit(step)
    run.close()
    assert run.dropped_total == 0 and not spool.exists()
    reader = reader_of(uri)
    assert reader.read_series(run.run_id, ["a"])["a"].steps == tuple(range(8))
    assert [e.step for e in reader.read_events(run.run_id, kinds=["note"])] == list(range(5))
    (marker, *more) = reader.read_events(run.run_id, kinds=["telemetry_replayed"])
    assert not more and marker.payload["steps"] == [0, 4]
    assert reader.latest(run.run_id).get("telemetry/missing_steps", (0, 0.0))[1] == 0
    assert reader.get_run(run.run_id).status == "finished"


def test_bad_inputs_are_counted_as_invalid_not_raised(db):
    with rlcockpit.init(store=db, warn_interval_s=0.0) as run:
        run.log("three", {"a": 1.0})  # not a step
        run.log(0, {"ok": 1.0, "bad": "not a number"})
        run.log_samples(0, [sample(0), {"sample_id": 1, "prompt": "p", "response": "r",
                                        "reward": 0.0, "colour": "red"}, 42])
        run.log_histogram(0, "h", [float("nan")] * 3)
        run.close()
        run.log(1, {"a": 1.0})  # after close
    assert run.dropped == {"metrics": 3, "samples": 2, "histograms": 1}
    reader = reader_of(db)
    assert reader.latest(run.run_id)["ok"] == (0, 1.0)
    assert reader.query_samples(run.run_id, SampleQuery()).total == 1
    assert reader.latest(run.run_id)[DROPPED_METRIC][1] == 5  # the one after close: in memory
    assert run.dropped_total == 6


@pytest.mark.parametrize("uri, error, message", [
    ("mysql://x/y", StoreError, "valid schemes"),
    ("{tmp}", StoreError, "is a directory"),
    ("sqlite:///{tmp}/missing/x.db", StoreError, "does not exist"),
    ("{tmp}/corrupt.db", StoreError, "not a readable rlcockpit SQLite store"),
])
def test_setup_errors_fail_fast_at_init(tmp_path, uri, error, message):
    (tmp_path / "corrupt.db").write_bytes(b"\x00garbage" * 1000)
    with pytest.raises(error, match=message):
        rlcockpit.init(store=uri.format(tmp=tmp_path))


def test_an_unwritable_store_path_fails_fast_at_init(tmp_path):
    if os.geteuid() == 0:  # root passes permission checks; /proc refuses new files to root too
        target = "/proc/rlcockpit-telemetry.db"
    else:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        target = str(locked / "x.db")
    with pytest.raises(StoreError, match="(not writable|cannot open)"):
        rlcockpit.init(store=f"sqlite:///{target}")


def test_bad_options_and_run_ids_fail_fast_at_init(db):
    with pytest.raises(ConfigError, match="queue_size"):
        rlcockpit.init(store=db, queue_size=0)
    with pytest.raises(ConfigError, match="flush_interval_s"):
        rlcockpit.init(store=db, flush_interval_s=float("nan"))
    with pytest.raises(ConfigError, match="unknown telemetry option"):
        rlcockpit.init(store=db, flush_evry=3)
    with pytest.raises(ConfigError, match="recent_steps"):
        TokenArrayPolicy(recent_steps=-1)
    with pytest.raises(ConfigError, match="run_id"):
        rlcockpit.init(store=db, resume=True)
    with pytest.raises(NotFoundError, match="cannot resume run 'ghost'"):
        rlcockpit.init(store=db, run_id="ghost", resume=True)
    rlcockpit.init(store=db, run_id="taken").close()
    with pytest.raises(StoreError, match="resume=True"):
        rlcockpit.init(store=db, run_id="taken")


# --------------------------------------------------------------------------- payload policy


def arrays_by_step(uri: str, run_id: str) -> dict[int, set[int]]:
    page = reader_of(uri).query_samples(run_id, SampleQuery(has_token_arrays=True, limit=10_000))
    out: dict[int, set[int]] = {}
    for s in page.items:
        assert s.logprobs is not None and s.tokens is not None
        out.setdefault(s.step, set()).add(s.sample_id)
    return out


def log_with_arrays(uri: str, policy: TokenArrayPolicy, steps: int = 10, per_step: int = 6) -> str:
    with rlcockpit.init(store=uri, token_arrays=policy) as run:
        for step in range(steps):
            run.log_samples(step, [sample(i, tokens=["a", "b"], logprobs=np.array([-1.0, -2.0]),
                                          ref_logprobs=[-1.0, -1.5], token_kl=[0.0, 0.5])
                                   for i in range(per_step)])
            run.commit(step)
    return run.run_id


def test_token_arrays_kept_for_recent_steps_and_a_seeded_subset(tmp_path):
    policy = TokenArrayPolicy(recent_steps=3, subset_per_step=2, seed=7)
    uri = f"sqlite:///{tmp_path / 'a.db'}"
    kept = arrays_by_step(uri, log_with_arrays(uri, policy))
    for step in range(10):
        if step > 9 - 3:
            assert kept[step] == set(range(6)), step  # the 3 most recent steps: all samples
        else:
            assert kept[step] == policy.kept_subset(step, range(6)), step
            assert len(kept[step]) == 2
    # the same seed picks the same subset in another store; another seed picks differently
    uri_b = f"sqlite:///{tmp_path / 'b.db'}"
    assert arrays_by_step(uri_b, log_with_arrays(uri_b, policy)) == kept
    other = TokenArrayPolicy(recent_steps=3, subset_per_step=2, seed=8)
    assert any(other.kept_subset(s, range(6)) != policy.kept_subset(s, range(6))
               for s in range(7))
    reader = reader_of(uri)
    run_id = reader.list_runs()[0].run_id
    without = reader.query_samples(run_id, SampleQuery(has_token_arrays=False, limit=1000))
    assert without.total == 7 * 4 and all(s.logprobs is None for s in without.items)


def test_token_array_policy_helpers():
    policy = TokenArrayPolicy(recent_steps=2, subset_per_step=1, seed=0)
    chosen = policy.kept_subset(5, [3, 1, 2])
    assert len(chosen) == 1 and chosen == policy.kept_subset(5, [2, 3, 1])
    assert policy.keeps_arrays(9, 0, [0, 1], latest_step=10)  # within the 2 most recent
    keep = [policy.keeps_arrays(5, i, [1, 2, 3], latest_step=10) for i in (1, 2, 3)]
    assert sum(keep) == 1
    assert TokenArrayPolicy(subset_per_step=0).kept_subset(1, range(5)) == frozenset()


# --------------------------------------------------------------------------- cost and exit


def test_foreground_cost_of_a_step_is_small(db):
    """30 scalars + one 4096-value histogram + 64 samples: target 0.5 ms on the training thread
    (asserted with headroom for a loaded CI machine)."""
    rng = np.random.default_rng(0)
    scalars = {f"metric/{i}": float(i) for i in range(30)}
    values = rng.normal(size=4096)
    samples = [sample(i, components={"helpful": 0.5}) for i in range(64)]
    with rlcockpit.init(store=db, queue_size=100_000) as run:
        durations = []
        for step in range(200):
            t0 = time.perf_counter()
            run.log(step, scalars)
            run.log_histogram(step, "reward/hist", values, bins=64)
            run.log_samples(step, samples)
            run.commit(step)
            durations.append(time.perf_counter() - t0)
            time.sleep(0.001)
    assert statistics.median(durations) < 0.001, statistics.median(durations)
    assert run.dropped_total == 0


EXIT_SCRIPT = textwrap.dedent("""
    import sys, rlcockpit
    run = rlcockpit.init(store=sys.argv[1], run_id=sys.argv[2], flush_interval_s=60)
    for step in range(20):
        run.log(step, {"a": float(step)})
    if sys.argv[2] == "crash":
        raise RuntimeError("the training script crashed")
""")


@pytest.mark.parametrize("run_id, status, code", [("clean", "finished", 0),
                                                  ("crash", "failed", 1)])
def test_interpreter_exit_closes_the_run(db, run_id, status, code):
    done = subprocess.run([sys.executable, "-c", EXIT_SCRIPT, db, run_id], env=ENV,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == code, done.stderr
    reader = reader_of(db)
    assert reader.get_run(run_id).status == status
    assert reader.read_series(run_id, ["a"])["a"].steps == tuple(range(20))


def test_plain_pytorch_example_runs(tmp_path):
    uri = f"sqlite:///{tmp_path / 'example.db'}"
    done = subprocess.run([sys.executable, str(REPO / "examples" / "plain_pytorch_loop.py"),
                           "--store", uri, "--steps", "30"], env=ENV, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    reader = reader_of(uri)
    (run,) = reader.list_runs()
    assert run.status == "finished" and run.project == "examples"
    summary = reader.summary(run.run_id)
    assert summary.steps == 30 and summary.samples == 30 * 16
    assert {"reward/mean", "policy/entropy", "kl/mean"} <= set(summary.metric_names)
    rewards = reader.read_series(run.run_id, ["reward/mean"])["reward/mean"].values
    assert np.mean(rewards[-10:]) > np.mean(rewards[:10])  # the toy policy learns
    assert reader.get_sample(run.run_id, 29, 0).logprobs is not None


def test_every_telemetry_option_and_drop_reason_is_documented():
    import dataclasses

    from rlcockpit.telemetry import WriterOptions
    from rlcockpit.telemetry.drops import DROP_REASONS

    doc = (REPO / "docs" / "telemetry.md").read_text()
    fields = [f.name for cls in (WriterOptions, TokenArrayPolicy) for f in dataclasses.fields(cls)]
    for name in fields + list(DROP_REASONS) + [DROPPED_METRIC, DROPPED_EVENT]:
        assert f"`{name}`" in doc, name
    for method in ("log", "log_histogram", "log_samples", "event", "finding", "phase",
                   "checkpoint", "commit", "flush", "close"):
        assert f"run.{method}(" in doc, method
