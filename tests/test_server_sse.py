"""The live stream against a real uvicorn on a loopback port: a writer logs steps while a client
reads; the client drops the connection mid-way and resumes with Last-Event-ID; every step arrives
exactly once and in order, with findings, phases, events and the run status; a dropped client
leaves no stream thread behind."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

import rlcockpit
from rlcockpit.server.app import create_app
from rlcockpit.server.cursor import Cursor, decode, encode
from rlcockpit.server.errors import ParameterError
from rlcockpit.server.routes.stream import THREAD_PREFIX
from rlcockpit.server.settings import ServerSettings
from server_testkit import ServerThread

TOTAL = 40
RUN = "live-run"


def sse_messages(response: httpx.Response) -> Iterator[dict]:
    """Parse a text/event-stream into {event, id, data} dicts (comments as event ':')."""
    msg: dict = {}
    for line in response.iter_lines():
        if not line:
            if msg:
                yield msg
            msg = {}
        elif line.startswith(":"):
            yield {"event": ":", "data": line}
        else:
            key, _, value = line.partition(": ")
            msg[key] = json.loads(value) if key == "data" else value


def stream_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX)]


@pytest.fixture
def live(tmp_path):
    uri = f"sqlite:///{tmp_path / 'live.db'}"
    run = rlcockpit.init(project="p", name="live", store=uri, run_id=RUN, flush_interval_s=0.05)
    run.log(0, {"reward/mean": 0.0})
    run.commit(0)
    run.flush()
    app = create_app(ServerSettings(store=uri, sse_poll_s=0.05, keepalive_s=0.3))
    with ServerThread(app) as base:
        yield run, base
    run.close()


def write_steps(run, steps: range, pause: float = 0.01) -> None:
    for step in steps:
        run.phase(step, "ROLLOUT", "started")
        run.log(step, {"reward/mean": step * 0.1, "kl/mean": float("nan") if step == 7 else 0.1})
        run.phase(step, "ROLLOUT", "finished", duration_s=0.01)
        if step == 12:
            run.finding(step=12, detector="kl_trend", severity="red", message="KL growing",
                        incident="inc-12")
            run.event(12, "config_change", {"kl.coef": 0.1})
        run.commit(step)
        time.sleep(pause)


def read_until(client, base, headers, stop_step, params=None) -> tuple[list[dict], str]:
    """Read messages until the step ``stop_step`` arrives; returns them and the last id."""
    got, last_id = [], ""
    with client.stream("GET", f"{base}/api/runs/{RUN}/stream", headers=headers,
                       params=params or {}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        for msg in sse_messages(r):
            got.append(msg)
            last_id = msg.get("id", last_id)
            if msg.get("event") == "step" and msg["data"]["step"] >= stop_step:
                break
    return got, last_id


def test_every_step_once_in_order_across_a_reconnect(live):
    run, base = live
    writer = threading.Thread(target=write_steps, args=(run, range(1, TOTAL)))
    with httpx.Client(timeout=20) as client:
        writer.start()
        first, last_id = read_until(client, base, {}, 15, params={"after_step": 0})
        # reconnect the way a browser does: Last-Event-ID of the last message received
        second, _ = read_until(client, base, {"Last-Event-ID": last_id}, TOTAL - 1)
    writer.join()
    steps = [m["data"]["step"] for m in first + second if m.get("event") == "step"]
    assert steps == list(range(1, TOTAL))  # none missed, none twice, in order
    by_step = {m["data"]["step"]: m["data"] for m in first + second if m.get("event") == "step"}
    assert by_step[3]["metrics"] == {"kl/mean": 0.1, "reward/mean": pytest.approx(0.3)}
    assert by_step[7]["metrics"]["kl/mean"] is None  # NaN as null
    assert first[0] == {"retry": "2000"}  # the client's reconnect delay comes first
    assert first[1]["event"] == "run" and first[1]["data"]["status"] == "running"
    (finding,) = [m["data"] for m in first + second if m.get("event") == "finding"]
    assert (finding["step"], finding["severity"], finding["incident"]) == (12, "red", "inc-12")
    (event,) = [m["data"] for m in first + second if m.get("event") == "event"]
    assert event["kind"] == "config_change"
    phases = [m["data"] for m in first + second if m.get("event") == "phase"]
    assert len(phases) == len({(p["step"], p["status"]) for p in phases})  # no duplicates
    assert {p["step"] for p in phases} >= set(range(1, 16))


def test_cursor_query_parameter_resumes_and_run_status_change(live):
    run, base = live
    write_steps(run, range(1, 6), pause=0)
    run.flush()
    cursor = encode(Cursor(step=2, finding=0, phase=10**9, event=0))
    with httpx.Client(timeout=20) as client:
        got, last_id = read_until(client, base, {}, 5, params={"cursor": cursor})
        assert [m["data"]["step"] for m in got if m.get("event") == "step"] == [3, 4, 5]
        assert decode(last_id).step == 5
        run.close()
        with client.stream("GET", f"{base}/api/runs/{RUN}/stream",
                           params={"cursor": last_id}) as r:
            statuses = []
            for msg in sse_messages(r):
                if msg.get("event") == "run":
                    statuses.append(msg["data"]["status"])
                if msg.get("event") == "step":
                    raise AssertionError(f"step sent twice: {msg}")
                if msg.get("event") == ":":  # a keep-alive: nothing more is coming
                    break
    assert statuses == ["finished"]


def test_last_event_id_wins_over_a_stale_cursor_parameter(live):
    run, base = live
    write_steps(run, range(1, 6), pause=0)
    run.flush()
    stale = encode(Cursor(step=1, finding=0, phase=10**9, event=0))
    newer = encode(Cursor(step=4, finding=0, phase=10**9, event=0))
    with httpx.Client(timeout=20) as client:
        got, _ = read_until(client, base, {"Last-Event-ID": newer}, 5, params={"cursor": stale})
    assert [m["data"]["step"] for m in got if m.get("event") == "step"] == [5]


def test_a_fresh_stream_starts_after_the_last_complete_step(live):
    """The run's last_step already counts a phase of the step in progress; a stream opened
    now must still deliver that step when its metrics arrive."""
    run, base = live
    write_steps(run, range(1, 4), pause=0)
    run.phase(4, "ROLLOUT", "started")
    run.flush()
    with httpx.Client(timeout=20) as client, client.stream(
            "GET", f"{base}/api/runs/{RUN}/stream") as r:
        messages = sse_messages(r)
        first = next(m for m in messages if m.get("event") == "run")
        assert first["data"]["last_step"] == 4 and decode(first["id"]).step == 3
        run.log(4, {"reward/mean": 0.4})
        run.commit(4)
        step = next(m for m in messages if m.get("event") == "step")
    assert step["data"]["step"] == 4


def test_disconnect_ends_the_stream_thread(live):
    run, base = live
    before = len(stream_threads())
    with httpx.Client(timeout=20) as client:
        with client.stream("GET", f"{base}/api/runs/{RUN}/stream") as r:
            for msg in sse_messages(r):
                if msg.get("event") == "run":
                    break
            assert len(stream_threads()) == before + 1
        deadline = time.monotonic() + 5
        while len(stream_threads()) > before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(stream_threads()) == before
        assert client.get(f"{base}/api/runs").status_code == 200  # the server is fine


def test_cursor_codec_round_trip_and_refusal():
    for cursor in (Cursor(), Cursor(step=0), Cursor(step=12, finding=3, phase=40, event=7)):
        assert decode(encode(cursor)) == cursor
    assert encode(Cursor(step=5, finding=1, phase=2, event=3)) == "v1.5.1.2.3"
    for bad in ("", "v1.5.1.2", "v2.5.1.2.3", "v1.x.1.2.3", "v1.5.-1.2.3"):
        with pytest.raises(ParameterError, match="not a stream cursor"):
            decode(bad)


def test_reader_live_tail_methods(tmp_path):
    """The additive reader methods the stream uses: steps after a step with their metrics, rows
    after an id in write order, and where a tail starts."""
    from rlcockpit.store import open_store

    uri = f"sqlite:///{tmp_path / 'tail.db'}"
    with rlcockpit.init(project="p", store=uri, run_id="t") as run:
        for step in range(5):
            run.phase(step, "SCORE", "started")
            run.log(step, {"a": step, "b": -step})
        run.event(1, "late", {})  # written last, about an early step
    reader = open_store(uri).reader()
    assert [s for s, _ in reader.steps_after("t", 2)] == [3, 4]
    assert [s for s, _ in reader.steps_after("t", None, limit=2)] == [0, 1]
    assert reader.step_metrics("t", 3, 4) == {3: {"a": 3.0, "b": -3.0}, 4: {"a": 4.0, "b": -4.0}}
    phases = reader.rows_after("t", "phases", 2)
    assert [(i, p.step) for i, p in phases] == [(3, 2), (4, 3), (5, 4)]
    assert reader.tail_start_ids("t") == {"step": 4, "findings": 0, "phases": 5, "events": 1}
    assert reader.tail_start_ids("t", after_step=2) == {"step": 2, "findings": 0, "phases": 3,
                                                        "events": 1}
    assert reader.tail_start_ids("t", after_step=0) == {"step": 0, "findings": 0, "phases": 1,
                                                        "events": 0}
    reader.close()
