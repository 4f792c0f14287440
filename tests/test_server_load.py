"""What keeps 50 dashboards answered while a run trains (docs/server.md "Time limits and load"):
a request's deadline starts at its first store read, not when it arrived; identical read
answers are shared while the run is unchanged (and never past a role check); a new write is seen
at once. Real SQLite store; real uvicorn on loopback for the concurrent requests."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from control_testkit import RUN, build_world
from rlcockpit.records import Batch, RunInfo, SampleRecord
from rlcockpit.server.app import create_app
from rlcockpit.server.deps import TimedReader
from rlcockpit.server.settings import ServerSettings
from rlcockpit.store import open_store
from server_testkit import ServerThread, serve_store


def _store(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'load.db'}")
    writer = store.writer()
    writer.create_run(RunInfo(run_id="r", project="p", name="r"))
    return store, writer


def _write(writer, step: int, n: int) -> None:
    writer.write_batch("r", Batch(samples=[SampleRecord(step=step, sample_id=i, prompt="q", response="a",
                                                        reward=float(i)) for i in range(n)]))


def test_the_deadline_starts_at_the_first_read_not_when_the_request_arrived(tmp_path):
    store, writer = _store(tmp_path)
    _write(writer, 0, 3)
    reader = TimedReader(store.reader(), 0.2)  # made when the request arrived ...
    time.sleep(0.3)  # ... then it waited for a worker thread longer than its whole limit
    assert reader.get_run("r").run_id == "r"  # the store read itself is in time: no 504
    writer.close()


def test_identical_reads_are_read_once_and_a_write_is_seen_at_once(tmp_path):
    store, writer = _store(tmp_path)
    _write(writer, 0, 3)
    app = create_app(ServerSettings(store=store.uri), store)
    with ServerThread(app) as url:
        async def burst() -> list[int]:
            async with httpx.AsyncClient(base_url=url, timeout=30) as http:
                answers = await asyncio.gather(*(http.get("/api/runs/r/samples?limit=2") for _ in range(30)))
            return [a.json()["total"] for a in answers]

        # a thread of its own: another test of the session may have left an event loop running here
        with ThreadPoolExecutor(1) as pool:
            assert pool.submit(asyncio.run, burst()).result() == [3] * 30
        counts = app.state.read_cache.counts
        assert counts["read"] == 1 and counts["hit"] + counts["previous"] == 29, counts
        _write(writer, 1, 4)  # the run moved: the next answer is read again
        assert httpx.get(f"{url}/api/runs/r/samples?limit=2").json()["total"] == 7
        assert counts["read"] == 2
        assert httpx.get(f"{url}/api/runs/nope/samples").status_code == 404  # an unknown run: no answer kept
    writer.close()


def test_a_shared_answer_still_needs_a_valid_token(tmp_path):
    world = build_world(tmp_path)
    server = serve_store(world.uri, world.store, plane=world.plane)
    try:
        path = f"{server.url}/api/runs/{RUN}/checkpoints"
        assert httpx.get(path, headers=world.headers("vera")).status_code == 200
        assert httpx.get(path, headers=world.headers("olga")).status_code == 200  # shared
        assert httpx.get(path).status_code == 401  # no token: the kept answer is not given
        world.plane.users.revoke("vera", by="test")
        assert httpx.get(path, headers=world.headers("vera")).status_code == 401
    finally:
        server.stop()


class CountingReader:
    """A real store reader that counts the reads it is asked for."""

    def __init__(self, reader) -> None:
        self.reader = reader
        self.reads = 0

    def __getattr__(self, name: str):
        fn = getattr(self.reader, name)

        def call(*args, **kwargs):
            self.reads += 1
            return fn(*args, **kwargs)

        return call


def test_streams_at_one_cursor_poll_on_the_event_loop_from_the_shared_answers(tmp_path):
    import storekit
    from rlcockpit.server.tail import SharedReads, Tail

    uri, run_id = storekit.build(tmp_path / "tail.db")
    counting = CountingReader(open_store(uri).reader())
    shared = SharedReads(counting, ttl_s=60.0)
    first, second = (Tail.start(shared, run_id, cursor=None, after_step=10) for _ in range(2))
    assert first.poll_shared() is None and first.cursor == second.cursor  # a first poll reads: no change
    read = first.poll()
    assert any('"step":11' in m for m in read.messages)
    reads = counting.reads
    assert second.poll().messages == read.messages
    assert counting.reads == reads + 1  # only its own first status; the rest was shared
    first.poll()  # at the end now: the next reads after the new cursor
    reads = counting.reads
    again = second.poll_shared()  # the second stream's poll, answered without a store read
    assert again is not None and counting.reads == reads and second.cursor == first.cursor
