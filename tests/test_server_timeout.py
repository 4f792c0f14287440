"""Read queries have a time limit: a heavy query on a big store is interrupted and answered 504
``query_timeout``, while a light request made at the same time answers at once; the reader's
connection is clean afterwards."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from rlcockpit.errors import QueryTimeoutError
from rlcockpit.records import Batch, RunInfo, SampleRecord
from rlcockpit.server.app import create_app
from rlcockpit.server.settings import ServerSettings
from rlcockpit.store import SampleQuery, open_store
from server_testkit import ServerThread

RUN = "big"
SAMPLES = 100_000
PER_BATCH = 2_000
TEXT = "the quick brown fox jumps over the lazy dog; " * 10  # ~450 characters
HEAVY = f"/api/runs/{RUN}/samples?text=no-such-words-anywhere"  # scans every prompt and response
LIGHT = f"/api/runs/{RUN}/samples?step_min=3&step_max=3&limit=5"  # one index range


@pytest.fixture(scope="module")
def big_store(tmp_path_factory):
    """100k samples with ~1 KB of text each, written through the store writer in big batches."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('timeout') / 'big.db'}"
    store = open_store(uri)
    writer = store.writer()
    writer.create_run(RunInfo(run_id=RUN, project="p", name="big"))
    for step in range(SAMPLES // PER_BATCH):
        writer.write_batch(RUN, Batch(samples=[
            SampleRecord(step=step, sample_id=i, prompt=TEXT, response=f"{TEXT} {i}",
                         reward=i / PER_BATCH, category="math") for i in range(PER_BATCH)]))
    writer.close()
    return store


def test_reader_deadline_interrupts_only_the_heavy_query(big_store):
    reader = big_store.reader()
    heavy = SampleQuery(text="no-such-words-anywhere", limit=5)
    started = time.monotonic()
    full = reader.query_samples(RUN, heavy)  # no limit: the scan finishes
    scan_s = time.monotonic() - started
    assert full.total == 0
    limit = scan_s / 5
    started = time.monotonic()
    with pytest.raises(QueryTimeoutError, match="time limit") as caught, reader.deadline(limit):
        reader.query_samples(RUN, heavy)
    assert time.monotonic() - started < scan_s * 0.7
    assert caught.value.http_status == 504 and caught.value.code == "query_timeout"
    # the connection is clean: the next query, with or without a deadline, works
    assert reader.query_samples(RUN, SampleQuery(step_min=3, step_max=3, limit=2)).total == \
        PER_BATCH
    with reader.deadline(10.0):
        assert reader.get_run(RUN).run_id == RUN
    reader.close()


def test_heavy_request_gets_504_while_a_light_one_answers(big_store):
    reader = big_store.reader()
    started = time.monotonic()
    reader.query_samples(RUN, SampleQuery(text="no-such-words-anywhere", limit=5))
    scan_s = time.monotonic() - started
    reader.close()
    limit = max(0.05, scan_s / 4)
    app = create_app(ServerSettings(store=big_store.uri, query_timeout_s=limit), big_store)
    heavy: dict = {}
    with ServerThread(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        assert client.get(LIGHT).status_code == 200  # warm the connection pool

        def send_heavy() -> None:
            t0 = time.monotonic()
            heavy["response"] = client.get(HEAVY)
            heavy["done"] = time.monotonic()
            heavy["seconds"] = heavy["done"] - t0

        thread = threading.Thread(target=send_heavy)
        thread.start()
        time.sleep(min(0.02, limit / 3))
        light = client.get(LIGHT)
        light_done = time.monotonic()
        thread.join()
    assert light.status_code == 200 and light.json()["total"] == PER_BATCH
    assert light_done < heavy["done"]  # answered while the heavy query was still running
    r = heavy["response"]
    assert r.status_code == 504, r.text
    err = r.json()["error"]
    assert err["code"] == "query_timeout" and err["details"]["limit_s"] == pytest.approx(limit)
    assert "narrower" in err["message"]
    assert heavy["seconds"] < scan_s  # stopped, not run to the end
