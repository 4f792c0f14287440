"""A store that cannot be written at all does not lose steps: they wait in the run's spool and are
replayed, in order and exactly once, when the store answers again (or when the run is resumed);
when even the spool is full, the lost steps are counted and named. The full disk is SQLite's own
``database or disk is full``, made by ``PRAGMA max_page_count`` on the writer's connection, so the
real write path fails as it does on a full disk."""

from __future__ import annotations

import logging
import shutil
import sqlite3
import time

import pytest

import rlcockpit
from rlcockpit.store import SampleQuery, open_store
from rlcockpit.telemetry.recovery import missing_steps

FAST = {"flush_interval_s": 0.05, "write_retries": 0, "spool_retry_s": 0.05, "warn_interval_s": 0.0}


def writer_connection(run) -> sqlite3.Connection:
    """The SQLite connection of the run's writer thread (under the lease wrapper, if any)."""
    store = run._thread._store
    return getattr(store, "_inner", store)._conn


def fill_the_disk(run) -> None:
    """From now on the store file cannot grow: SQLITE_FULL, 'database or disk is full'."""
    assert run.flush(timeout=20)
    conn = writer_connection(run)
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")


def free_the_disk(run) -> None:
    writer_connection(run).execute("PRAGMA max_page_count = 1073741823")


def log_step(run, step: int) -> None:
    run.log(step, {"a": float(step), "b": 2.0 * step})
    run.log_samples(step, [{"sample_id": i, "prompt": "p" * 500, "response": "r" * 1500,
                            "reward": 0.1 * i} for i in range(4)])
    run.event(step, "note", {"step": step})
    run.commit(step)


def wait_until(predicate, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def stored(uri: str, run_id: str) -> tuple[tuple[int, ...], int, list[int], float]:
    """(metric steps, samples, note event steps, the run's telemetry/missing_steps)."""
    reader = open_store(uri).reader()
    try:
        steps = reader.read_series(run_id, ["a"])["a"].steps
        samples = reader.query_samples(run_id, SampleQuery(limit=1)).total
        notes = [e.step for e in reader.read_events(run_id, kinds=["note"])]
        missing = reader.latest(run_id).get("telemetry/missing_steps", (0, 0.0))[1]
        return steps, samples, notes, missing
    finally:
        reader.close()


def test_a_full_disk_spools_whole_steps_and_replays_them_once_space_is_back(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="rlcockpit.telemetry")
    uri = f"sqlite:///{tmp_path / 'runs.db'}"
    run = rlcockpit.init(store=uri, run_id="full", **FAST)
    for step in range(6):
        log_step(run, step)
    fill_the_disk(run)
    for step in range(6, 16):
        log_step(run, step)
    spool = tmp_path / "runs.db-spool" / "full.spool"
    assert run.flush(timeout=20) and spool.is_file()
    assert stored(uri, "full")[0] == tuple(range(6))  # the store really is full
    assert any("database or disk is full" in r.getMessage() and "kept in the spool" in r.getMessage()
               for r in caplog.records)
    free_the_disk(run)
    assert wait_until(lambda: not spool.exists())  # replayed at the next try, then removed
    log_step(run, 16)
    run.close()
    assert run.dropped_total == 0
    steps, samples, notes, missing = stored(uri, "full")
    assert steps == tuple(range(17)) and samples == 4 * 17
    assert notes == list(range(17))  # appended records exactly once
    assert missing == 0
    assert open_store(uri).reader().get_run("full").status == "finished"


def test_a_run_closed_while_the_disk_is_full_is_replayed_when_resumed_exactly_once(tmp_path):
    uri = f"sqlite:///{tmp_path / 'runs.db'}"
    run = rlcockpit.init(store=uri, run_id="closed-full", **FAST)
    for step in range(3):
        log_step(run, step)
    fill_the_disk(run)
    for step in range(3, 9):
        log_step(run, step)
    run.close()  # the store still refuses: the spool stays, the run cannot be marked
    spool = tmp_path / "runs.db-spool" / "closed-full.spool"
    assert spool.is_file() and run.dropped_total == 0
    assert stored(uri, "closed-full")[0] == (0, 1, 2)
    # what the trainer asks before resuming: nothing is missing, steps 3-8 wait in the spool
    assert missing_steps(uri, "closed-full", upto=8, first=0) == []
    kept = tmp_path / "copy.spool"
    shutil.copy(spool, kept)
    with rlcockpit.init(store=uri, run_id="closed-full", resume=True, **FAST) as resumed:
        log_step(resumed, 9)
    assert not spool.exists()
    steps, samples, notes, missing = stored(uri, "closed-full")
    assert steps == tuple(range(10)) and notes == list(range(10)) and missing == 0
    # a crash after the replay but before the file was removed: resuming again replays nothing
    shutil.copy(kept, spool)
    with rlcockpit.init(store=uri, run_id="closed-full", resume=True, **FAST):
        pass
    assert not spool.exists()
    assert stored(uri, "closed-full")[2] == list(range(10))


def test_when_the_spool_is_full_too_the_lost_steps_are_named_and_a_resume_refills_them(tmp_path):
    uri = f"sqlite:///{tmp_path / 'runs.db'}"
    run = rlcockpit.init(store=uri, run_id="lost", spool_max_mb=0.02, **FAST)  # ~20 KB
    for step in range(4):
        log_step(run, step)
    fill_the_disk(run)
    for step in range(4, 30):
        log_step(run, step)
    assert run.flush(timeout=20)
    lost = run.dropped
    assert lost and set(lost) <= {"metrics", "samples", "events"}
    free_the_disk(run)
    for step in range(30, 32):
        log_step(run, step)
    run.close()
    steps, _, _, missing = stored(uri, "lost")
    gone = sorted(set(range(32)) - set(steps))
    assert gone and missing == len(gone)  # the gap is marked on the run
    reader = open_store(uri).reader()
    (event,) = reader.read_events("lost", kinds=["telemetry_lost"])
    named = {s for lo, hi in event.payload["steps"] for s in range(lo, hi + 1)}
    assert named == set(gone) and event.payload["reason"].startswith("the spool")
    by_reason = reader.read_events("lost", kinds=["telemetry_dropped"])[-1].payload["by_reason"]
    assert set(by_reason) == {"spool_full"}
    assert missing_steps(uri, "lost", upto=31, first=0) == gone
    # the gap is visible: the run's summary, `rlcockpit runs`, and the API the cockpit reads
    from fastapi.testclient import TestClient

    from rlcockpit.cli.runs import run_rows
    from rlcockpit.server.app import create_app
    from rlcockpit.server.settings import ServerSettings

    assert reader.summary("lost").missing_steps == len(gone)
    (row,) = run_rows(uri)
    assert row["missing_steps"] == len(gone)
    with TestClient(create_app(ServerSettings(store=uri)), base_url="http://127.0.0.1") as client:
        assert client.get("/api/runs/lost").json()["missing_steps"] == len(gone)
    # a resumed run that logs the lost steps again closes the gap
    with rlcockpit.init(store=uri, run_id="lost", resume=True, **FAST) as resumed:
        for step in gone:
            log_step(resumed, step)
    steps, _, _, missing = stored(uri, "lost")
    assert steps == tuple(range(32)) and missing == 0
    assert open_store(uri).reader().summary("lost").missing_steps == 0


@pytest.mark.parametrize(("text", "spooled"), [
    # a ClickHouse server that does not answer: clickhouse-connect's network errors carry no code
    ("HTTPDriverException: Error HTTPConnectionPool(host='ch', port=8123): Max retries exceeded "
     "(Caused by NewConnectionError: [Errno 111] Connection refused)", True),
    ("Code: 243. DB::Exception: Cannot reserve 1.00 MiB, not enough space. (NOT_ENOUGH_SPACE)", True),
    ("Code: 252. DB::Exception: Too many parts (300). (TOO_MANY_PARTS)", True),
    ("Code: 241. DB::Exception: Memory limit (total) exceeded. (MEMORY_LIMIT_EXCEEDED)", True),
    # a value of the batch the server refuses: split the batch, drop the value, never spool
    ("Code: 53. DB::Exception: Type mismatch in VALUES section. (TYPE_MISMATCH)", False),
    ("Code: 27. DB::Exception: Cannot parse input. (CANNOT_PARSE_INPUT_ASSERTION_FAILED)", False),
])
def test_a_clickhouse_outage_goes_to_the_spool_and_a_refused_value_does_not(text, spooled):
    """The ClickHouse store marks what it cannot write now as unavailable; the telemetry spools
    exactly those batches (the same path as SQLite's full disk above)."""
    from rlcockpit.store.ch_transport import _error
    from rlcockpit.telemetry.delivery import splittable, store_unavailable

    error = _error("insert", RuntimeError(text), "clickhouse://ch:8123/db")
    assert store_unavailable(error) is spooled and splittable(error) is (not spooled)
