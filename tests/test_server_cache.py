"""The shared read answers' cheap path (server/cache.py, docs/server.md "Time limits and load"):
an unchanged store costs no store read per request, a new step is seen by the next poll, answers
carry an ETag and a matching If-None-Match gets 304, Server-Timing says how a request was
answered. Real SQLite store, real uvicorn on loopback."""

from __future__ import annotations

import httpx

from control_testkit import RUN, build_world
from rlcockpit.records import Batch, MetricPoint, RunInfo
from rlcockpit.server.app import create_app
from rlcockpit.server.settings import ServerSettings
from rlcockpit.store import open_store
from server_testkit import ServerThread, serve_store


def _store(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'cache.db'}")
    writer = store.writer()
    writer.create_run(RunInfo(run_id="r", project="p", name="r"))
    return store, writer


def _step(writer, step: int) -> None:
    writer.write_batch("r", Batch(metrics=[MetricPoint(step=step, name="reward/mean", value=float(step))]))


class CountingReader:
    """A real store reader that counts its get_run calls."""

    def __init__(self, reader) -> None:
        self.reader = reader
        self.get_runs = 0

    def get_run(self, run_id):
        self.get_runs += 1
        return self.reader.get_run(run_id)

    def __getattr__(self, name: str):
        return getattr(self.reader, name)


def test_an_unchanged_store_is_not_read_again_and_the_next_poll_sees_a_new_step(tmp_path):
    store, writer = _store(tmp_path)
    _step(writer, 0)
    app = create_app(ServerSettings(store=store.uri, read_cache_s=30.0), store)
    versions = app.state.read_cache.versions
    versions.reader = counting = CountingReader(versions.reader)
    with ServerThread(app) as url, httpx.Client(base_url=url) as http:
        assert http.get("/api/runs/r/latest").json()["step"] == 0
        for _ in range(20):  # nothing was written: the run's version is not read again
            assert http.get("/api/runs/r/latest").headers["server-timing"].startswith("cache;desc=hit")
        assert counting.get_runs == 1
        for step in range(1, 6):  # every new step is in the very next answer
            _step(writer, step)
            assert http.get("/api/runs/r/latest").json()["step"] == step
            got = http.get("/api/runs/r/series?names=reward/mean").json()["series"]["reward/mean"]
            assert got["steps"][-1] == step
        assert counting.get_runs == 1 + 5
    writer.close()


def test_a_matching_if_none_match_gets_304_until_the_answer_changes(tmp_path):
    store, writer = _store(tmp_path)
    _step(writer, 0)
    with ServerThread(create_app(ServerSettings(store=store.uri), store)) as url, httpx.Client(base_url=url) as http:
        first = http.get("/api/runs/r/latest")
        etag = first.headers["etag"]
        assert etag.startswith('W/"') and first.headers["cache-control"] == "no-cache"
        again = http.get("/api/runs/r/latest", headers={"If-None-Match": etag})
        assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == etag
        strong = etag.removeprefix("W/")  # weak comparison: the tag without W/ matches too
        assert http.get("/api/runs/r/latest", headers={"If-None-Match": f'"x", {strong}'}).status_code == 304
        assert http.get("/api/runs/r/latest", headers={"If-None-Match": '"other"'}).status_code == 200
        _step(writer, 1)
        changed = http.get("/api/runs/r/latest", headers={"If-None-Match": etag})
        assert changed.status_code == 200 and changed.json()["step"] == 1
        assert changed.headers["etag"] != etag
        missing = http.get("/api/runs/nope/latest", headers={"If-None-Match": "*"})
        assert missing.status_code == 404 and "etag" not in missing.headers
    writer.close()


def test_server_timing_says_how_each_request_was_answered(tmp_path):
    store, writer = _store(tmp_path)
    _step(writer, 0)
    with ServerThread(create_app(ServerSettings(store=store.uri), store)) as url, httpx.Client(base_url=url) as http:
        timings = [http.get("/api/runs/r/phases").headers["server-timing"] for _ in range(3)]
    assert timings[0].startswith("cache;desc=read, app;dur=")
    assert all(t.startswith("cache;desc=hit, app;dur=") for t in timings[1:])
    assert float(timings[1].rsplit("=", 1)[1]) >= 0
    writer.close()


def test_a_token_checked_once_is_checked_again_after_a_revocation(tmp_path):
    world = build_world(tmp_path)
    server = serve_store(world.uri, world.store, plane=world.plane)
    try:
        path = f"{server.url}/api/runs/{RUN}/phases"
        for _ in range(5):  # passed checks are reused while nothing was written ...
            assert httpx.get(path, headers=world.headers("vera")).status_code == 200
        assert httpx.get(path, headers={"Authorization": "Bearer rlk_nope_nope"}).status_code == 401
        assert httpx.get(path, headers={"Authorization": "nope"}).status_code == 401  # not Bearer
        world.plane.users.revoke("vera", by="test")  # ... and never past a change of the users
        assert httpx.get(path, headers=world.headers("vera")).status_code == 401
        assert httpx.get(path, headers=world.headers("olga")).status_code == 200
    finally:
        server.stop()
