"""The ClickHouse store beyond the contract suite (docs/store.md, "ClickHouse"): copies between
backends verified by checksums, the control plane beside it, the CLI and the API on a chdb://
URI, many writers on one run, a SIGKILLed writer, URI errors. chDB in-process, small data."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("chdb", reason="needs the [clickhouse] extra")

from rlcockpit.errors import NotFoundError, StoreError  # noqa: E402
from rlcockpit.records import (  # noqa: E402
    AuditEntry,
    Batch,
    LiveParamsRecord,
    MetricPoint,
    RunInfo,
    SampleRecord,
    TicketRecord,
    UserRecord,
)
from rlcockpit.store import SampleQuery, open_store  # noqa: E402
from rlcockpit.store.copy import check_run, compare  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src"), "COLUMNS": "200"}


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "rlcockpit", *args], capture_output=True,
                          text=True, env=ENV, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.fixture(scope="module")
def server_store(tmp_path_factory) -> str:
    from storekit import build_store

    return build_store(tmp_path_factory.mktemp("api"))


# --------------------------------------------------------------------------- copy


def test_store_copy_sqlite_to_chdb_and_back_is_verified_by_checksums(tmp_path, server_store):
    ch, back = f"chdb:///{tmp_path / 'ch'}", f"sqlite:///{tmp_path / 'back.db'}"
    out = cli("store", "copy", server_store, ch, "--json")
    report = json.loads(out.stdout)
    assert [r["run_id"] for r in report] == ["run-b", "run-a"] or \
        {r["run_id"] for r in report} == {"run-a", "run-b"}
    assert all(not r["differences"] for r in report)
    run_a = next(r for r in report if r["run_id"] == "run-a")
    assert run_a["counts"]["samples"] == 120 and run_a["counts"]["snapshots"] == 1
    cli("store", "copy", ch, back, "--run", "run-a")
    first, last = open_store(server_store).reader(), open_store(back).reader()
    assert compare(check_run(first, "run-a"), check_run(last, "run-a")) == []
    assert [r.run_id for r in last.list_runs()] == ["run-a"]
    again = cli("store", "copy", server_store, back, "--run", "run-a", check=False)
    assert again.returncode == 2 and "already in the destination" in again.stderr
    missing = cli("store", "copy", server_store, back, "--run", "nope", check=False)
    assert missing.returncode == 2 and "not in the source store" in missing.stderr


def test_check_run_notices_a_changed_record(tmp_path):
    one = open_store(f"sqlite:///{tmp_path / 'one.db'}")
    two = open_store(f"chdb:///{tmp_path / 'two'}")
    try:
        for store, value in ((one, 1.0), (two, 1.0 + 1e-12)):
            writer = store.writer()
            writer.create_run(RunInfo(run_id="r", project="p", name="n"))
            writer.write_batch("r", Batch(metrics=[MetricPoint(0, "m", value, 5.0)]))
        diffs = compare(check_run(one.reader(), "r"), check_run(two.reader(), "r"))
        assert len(diffs) == 1 and diffs[0].startswith("metrics: 1 rows")
    finally:
        two.close()


# --------------------------------------------------------------------------- serve, CLI


API_URLS = [
    "/api/runs/run-a", "/api/runs/run-a/series?names=reward/mean,kl/mean",
    "/api/runs/run-a/series?names=reward/mean&max_points=10", "/api/runs/run-a/latest",
    "/api/runs/run-a/histograms?name=reward/hist&max_points=5",
    "/api/runs/run-a/samples?category=math&reward_min=0&limit=5",
    "/api/runs/run-a/samples?flags=truncated&order=step_asc&limit=100",
    "/api/runs/run-a/samples?text=answer%20is%2012", "/api/runs/run-a/samples?limit=1&token_arrays=true",
    "/api/runs/run-a/sample_histogram?field=reward&bins=3", "/api/runs/run-a/categories",
    "/api/runs/run-a/phases?limit=3", "/api/runs/run-a/events", "/api/runs/run-a/checkpoints",
    "/api/runs/run-a/incidents", "/api/runs/run-b/phases", "/api/runs/run-a/samples/3/1",
]


def _without_ids(value):
    if isinstance(value, dict):
        return {k: _without_ids(v) for k, v in value.items()
                if k not in ("finding_id", "snapshot_id", "heartbeat_at", "status", "id")}
    if isinstance(value, list):
        return [_without_ids(v) for v in value]
    return value


def test_the_api_answers_the_same_on_sqlite_and_chdb(tmp_path, server_store):
    from fastapi.testclient import TestClient

    from rlcockpit.server.app import create_app
    from rlcockpit.server.settings import ServerSettings

    ch = f"chdb:///{tmp_path / 'ch'}"
    cli("store", "copy", server_store, ch)
    opened = open_store(ch, create=False)
    try:
        with TestClient(create_app(ServerSettings(store=server_store)),
                        base_url="http://127.0.0.1") as lite, \
                TestClient(create_app(ServerSettings(store=ch), opened),
                           base_url="http://127.0.0.1") as click:
            for url in API_URLS:
                a, b = lite.get(url), click.get(url)
                assert a.status_code == b.status_code == 200, (url, b.text[:300])
                assert _without_ids(a.json()) == _without_ids(b.json()), url
            runs = [_without_ids(r) for r in click.get("/api/runs").json()["items"]]
            assert runs == [_without_ids(r) for r in lite.get("/api/runs").json()["items"]]
            assert [r["status"] for r in click.get("/api/runs").json()["items"]] == \
                ["finished", "finished"]
    finally:
        opened.close()


def test_runs_doctor_export_and_audit_work_on_a_chdb_uri(tmp_path, server_store):
    ch = f"chdb:///{tmp_path / 'ch'}"
    cli("store", "copy", server_store, ch)
    runs = json.loads(cli("runs", "--store", ch, "--json").stdout)
    assert {(r["run_id"], r["steps"]) for r in runs} == {("run-a", 30), ("run-b", 10)}
    doctor = cli("doctor", "--store", ch, "--run", "run-a", "--json", check=False)
    assert not doctor.stderr and json.loads(doctor.stdout)["live_findings"] == 2, doctor.stderr
    out = tmp_path / "samples.jsonl"
    cli("export", "--store", ch, "--run", "run-a", "--what", "samples", "--out", str(out))
    assert len(out.read_text().splitlines()) == 120
    cli("users", "add", "alice", "--role", "admin", "--store", ch)
    verify = cli("audit", "verify", "--store", ch)
    assert "ok" in (verify.stdout + verify.stderr).lower()
    no_store = cli("runs", "--store", f"chdb:///{tmp_path / 'absent'}", check=False)
    assert no_store.returncode == 2 and "no store at" in no_store.stderr


# --------------------------------------------------------------------------- control plane


def test_the_control_plane_keeps_its_guarantees_beside_clickhouse(tmp_path):
    store = open_store(f"chdb:///{tmp_path / 'ch'}")
    try:
        writer = store.writer()
        writer.create_run(RunInfo(run_id="r", project="p", name="n"))
        control = store.control()
        assert (tmp_path / "ch" / "control.db").exists()
        audit = AuditEntry(actor="admin", action="user_added", outcome="ok", details={"name": "al"})
        control.add_user(UserRecord(name="al", role="operator", key_id="k1", salt="s",
                                    token_hash="h", created_at=1.0, created_by="admin"), audit)
        with pytest.raises(StoreError, match="already exists"):
            control.add_user(UserRecord(name="al", role="viewer", key_id="k2", salt="s",
                                        token_hash="h", created_at=1.0, created_by="admin"), audit)
        ticket = control.create_ticket(
            TicketRecord(run_id="r", kind="param", target="lr", value=1e-5, reason="why",
                         requested_by="al"),
            AuditEntry(actor="al", action="ticket_requested", outcome="ok"))
        # compare-and-set: of two approvals racing, exactly one wins
        wins = []
        barrier = threading.Barrier(2)

        def approve(who: str) -> None:
            barrier.wait()
            wins.append(control.transition(
                ticket.ticket_id, ["requested"], {"status": "approved", "decided_by": who},
                AuditEntry(actor=who, action="ticket_approved", outcome="ok")))

        threads = [threading.Thread(target=approve, args=(w,)) for w in ("bo", "cy")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sum(w is not None for w in wins) == 1
        chain = control.read_audit()
        assert [e.seq for e in chain] == [1, 2, 3]
        assert all(e.prev_hash == p.hash for p, e in zip(chain, chain[1:], strict=False))
        published = control.publish_live_params(LiveParamsRecord(
            run_id="r", step=3, source="trainer", values={"lr": 1e-5}, specs={}))
        assert published.version == 1
        assert [p.values for p in control.read_live_params("r")] == [{"lr": 1e-5}]
        with pytest.raises(NotFoundError):
            control.publish_live_params(LiveParamsRecord(run_id="nope", step=0, source="t",
                                                         values={}, specs={}))
    finally:
        store.close()


def test_a_server_store_needs_a_shared_control_file(monkeypatch):
    from rlcockpit.store.clickhouse import ClickHouseStore
    from rlcockpit.store.uri import parse_store_uri

    # no server needed: only the control() refusal is exercised
    opened = object.__new__(ClickHouseStore)
    opened._control_path = ClickHouseStore._control_location(
        parse_store_uri("clickhouse://u:pw@h:8123/db"))
    opened._shown = "clickhouse://u:***@h:8123/db"
    with pytest.raises(StoreError, match=r"\?control=/shared/path/control.db"):
        opened.control()


# --------------------------------------------------------------------------- URIs


@pytest.mark.parametrize("uri, message", [
    ("chdb://", "has no directory"),
    ("chdb:///x?secure=true", "unknown chdb store option 'secure'"),
    ("chdb:///x?database=a-b", "plain name"),
    ("clickhouse://h:8123/", "needs a host and a database"),
    ("clickhouse://h:port/db", "not a number"),
    ("clickhouse://h/db?bogus=1", "known: secure"),
    ("mysql://h/db", "valid schemes: sqlite, clickhouse, chdb"),
])
def test_bad_clickhouse_uris_fail_fast_with_a_fix(uri, message):
    with pytest.raises(StoreError, match=message):
        open_store(uri)


def test_clickhouse_uri_parts_and_redaction():
    from rlcockpit.store.uri import parse_store_uri

    u = parse_store_uri("clickhouse://rl:s3cret@ch.example:8443/runs?secure=true&control=/c.db")
    assert (u.host, u.port, u.user, u.password, u.database) == ("ch.example", 8443, "rl",
                                                                 "s3cret", "runs")
    assert u.options == {"secure": True, "control": "/c.db"}
    assert "s3cret" not in u.redacted()


def test_a_second_chdb_directory_in_one_process_is_refused_with_a_fix(tmp_path):
    first = open_store(f"chdb:///{tmp_path / 'a'}")
    try:
        with pytest.raises(StoreError, match="one directory per process"):
            open_store(f"chdb:///{tmp_path / 'b'}")
        same = open_store(f"chdb:///{tmp_path / 'a'}?database=other")  # same directory: fine
        same.close()
    finally:
        first.close()
    open_store(f"chdb:///{tmp_path / 'b'}").close()  # released once closed


# --------------------------------------------------------------------------- many writers


def test_many_writers_on_one_run_lose_and_duplicate_nothing(tmp_path):
    """Four writers (ranks) write disjoint samples of the same steps, rank 0 also the metrics,
    concurrently, in small batches; every step ends whole and exactly once."""
    store = open_store(f"chdb:///{tmp_path / 'ch'}")
    try:
        store.writer().create_run(RunInfo(run_id="r", project="p", name="n"))
        steps, per_rank, ranks = 30, 5, 4
        errors: list[BaseException] = []

        def rank(k: int) -> None:
            try:
                writer = store.writer()
                for step in range(steps):
                    writer.write_batch("r", Batch(
                        metrics=[MetricPoint(step, "loss", float(step))] if k == 0 else [],
                        samples=[SampleRecord(step=step, sample_id=k * 100 + i, prompt="p",
                                              response="r", reward=float(k))
                                 for i in range(per_rank)]))
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=rank, args=(k,)) for k in range(ranks)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        reader = store.reader()
        page = reader.query_samples("r", SampleQuery(limit=10_000))
        keys = [(s.step, s.sample_id) for s in page.items]
        assert page.total == len(keys) == len(set(keys)) == steps * per_rank * ranks
        assert reader.summary("r").steps == steps
        assert reader.read_series("r", ["loss"])["loss"].steps == tuple(range(steps))
        assert reader.get_run("r").last_step == steps - 1
    finally:
        store.close()


def test_a_retried_insert_is_not_written_twice(tmp_path):
    """Each insert carries a deduplication token; sending the same insert again (a writer's
    retry after a timeout whose first attempt did land) writes nothing."""
    store = open_store(f"chdb:///{tmp_path / 'ch'}")
    try:
        writer = store.writer()
        writer.create_run(RunInfo(run_id="r", project="p", name="n"))
        row = [("r", "m", 0, 1.0, 2.0)]
        for _ in range(2):
            writer._insert("metrics", row, token="batch-1:metrics")
        assert store.reader().read_series("r", ["m"])["m"].steps == (0,)
    finally:
        store.close()


def test_a_sigkilled_writer_loses_at_most_its_unflushed_buffer(tmp_path):
    """The child logs through the telemetry SDK into chdb:// and is killed mid-stream. chDB is
    one process per directory, so the store is read after the kill: every stored step is whole,
    steps have no gaps, and every step logged a flush interval (plus slack) before the kill is
    stored."""
    flush_s, slack_s = 0.2, 2.0
    uri = f"chdb:///{tmp_path / 'killed'}"
    child = subprocess.Popen([sys.executable, str(REPO / "tests" / "telemetry_kill_child.py"),
                              uri, str(flush_s)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=ENV)
    logged: list[tuple[int, float]] = []

    def read() -> None:
        for line in child.stdout:
            step, when = line.split()
            logged.append((int(step), float(when)))

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + 120
    while (len(logged) < 40 or time.time() - logged[0][1] < slack_s + 1.5) and \
            time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.05)
    t_kill = time.time()
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL, child.stderr.read()
    time.sleep(0.2)
    store = open_store(uri, create=False)  # the directory lock died with the process
    try:
        reader = store.reader()
        summary = reader.summary("victim")
        steps = tuple(range(summary.steps))
        assert summary.steps >= 10
        # every step listed in `steps` is whole; the batch the kill cut may have left the tables
        # that landed before its `steps` rows (no cross-table transaction): only steps after
        # the last whole one, and never a duplicate
        names = [f"m/{k}" for k in range(20)]
        series = reader.read_series("victim", names)
        for n in names:
            assert series[n].steps[:len(steps)] == steps
            assert series[n].steps == tuple(range(len(series[n].steps)))
        page = reader.query_samples("victim", SampleQuery(limit=10_000, step_max=steps[-1]))
        keys = [(s.step, s.sample_id) for s in page.items]
        assert page.total == len(keys) == len(set(keys)) == 8 * len(steps)
        assert sorted(keys) == [(st, i) for st in steps for i in range(8)]
        old_enough = [s for s, when in logged if when <= t_kill - flush_s - slack_s]
        assert old_enough and max(old_enough) < summary.steps
    finally:
        store.close()


def test_a_telemetry_run_into_chdb_frees_the_directory_when_it_closes(tmp_path):
    """rlcockpit.init keeps only the writer: closing the run releases chDB's directory, so the
    same process can open another chDB store afterwards."""
    import rlcockpit

    with rlcockpit.init(store=f"chdb:///{tmp_path / 'one'}", run_id="r", project="p") as run:
        run.log(0, {"loss": 1.0})
    other = open_store(f"chdb:///{tmp_path / 'two'}")
    other.close()
    back = open_store(f"chdb:///{tmp_path / 'one'}", create=False)
    try:
        assert back.reader().read_series("r", ["loss"])["loss"].values == (1.0,)
        assert back.reader().get_run("r").status == "finished"
    finally:
        back.close()


def test_a_batch_retried_after_a_partial_write_lands_exactly_once(tmp_path):
    """The telemetry retries a failed write_batch with the same Batch: tables that landed the
    first time are not written twice, the rest is written, nothing is lost."""
    store = open_store(f"chdb:///{tmp_path / 'ch'}")
    try:
        writer = store.writer()
        writer.create_run(RunInfo(run_id="r", project="p", name="n"))
        writer.write_batch("r", Batch(metrics=[MetricPoint(0, "m", 0.0)]))
        batch = Batch(metrics=[MetricPoint(s, "m", float(s)) for s in range(1, 4)],
                      samples=[SampleRecord(step=s, sample_id=0, prompt="p", response="r",
                                            reward=0.5) for s in range(1, 4)])
        real, calls = writer._t.insert, []

        def flaky(table, *args, **kwargs):
            calls.append(table)
            if table == "samples" and calls.count("samples") == 1:
                raise StoreError("timed out (the insert may or may not have landed)")
            return real(table, *args, **kwargs)

        writer._t.insert = flaky
        with pytest.raises(StoreError):
            writer.write_batch("r", batch)
        writer.write_batch("r", batch)  # the retry
        reader = store.reader()
        assert reader.read_series("r", ["m"])["m"].values == (0.0, 1.0, 2.0, 3.0)
        assert reader.query_samples("r", SampleQuery()).total == 3
        assert reader.summary("r").steps == 4
    finally:
        store.close()


def test_an_unreachable_server_fails_fast_naming_the_ports():
    pytest.importorskip("clickhouse_connect")
    with pytest.raises(StoreError, match=r"cannot reach the ClickHouse server .*\(8123 HTTP") as err:
        open_store("clickhouse://rl:pw@127.0.0.1:1/db?connect_timeout_s=2")
    assert "rl:***@" in err.value.message and "pw@" not in err.value.message


WRITER_CHILD = """
import sys
from rlcockpit.records import Batch, MetricPoint, SampleRecord
from rlcockpit.store import open_store
uri, rank = sys.argv[1], int(sys.argv[2])
writer = open_store(uri).writer()
for step in range(40):
    writer.write_batch("r", Batch(
        metrics=[MetricPoint(step, f"rank{rank}/loss", float(step))],
        samples=[SampleRecord(step=step, sample_id=rank * 1000 + i, prompt="p", response="r",
                              reward=0.0) for i in range(25)]))
"""


@pytest.mark.skipif(not os.environ.get("RLCOCKPIT_TEST_CLICKHOUSE_URI"),
                    reason="several writer processes need a ClickHouse server "
                           "(RLCOCKPIT_TEST_CLICKHOUSE_URI, docs/store.md)")
def test_writer_processes_on_one_run_of_a_server(tmp_path):
    from test_store_contract import _clickhouse_store

    store = _clickhouse_store(tmp_path)
    store.writer().create_run(RunInfo(run_id="r", project="p", name="n"))
    children = [subprocess.Popen([sys.executable, "-c", WRITER_CHILD, store.uri, str(k)], env=ENV)
                for k in range(4)]
    assert [c.wait(timeout=300) for c in children] == [0, 0, 0, 0]
    reader = store.reader()
    page = reader.query_samples("r", SampleQuery(limit=10_000))
    keys = {(s.step, s.sample_id) for s in page.items}
    assert page.total == len(keys) == 4 * 40 * 25
    assert reader.summary("r").steps == 40
    assert len(reader.metric_names("r")) == 4


def test_token_arrays_ttl_is_a_column_ttl_and_a_dropped_array_reads_as_absent(tmp_path):
    store = open_store(f"chdb:///{tmp_path / 'ch'}?token_arrays_ttl_days=7")
    try:
        t = store._transport
        ddl = t.query("SELECT create_table_query FROM system.tables WHERE database = 'rlcockpit' "
                      "AND name = 'samples'")[0][0]
        assert ddl.count("TTL toDateTime(wall_time) + toIntervalSecond(604800)") == 4
        writer = store.writer()
        writer.create_run(RunInfo(run_id="r", project="p", name="n"))
        writer.write_batch("r", Batch(samples=[SampleRecord(
            step=0, sample_id=0, prompt="p", response="r", reward=0.0, tokens=("a",),
            logprobs=(-1.0,), ref_logprobs=(-1.0,), token_kl=(0.0,))]))
        # what the TTL does when it expires: the arrays become NULL, the flag stays
        t.command("ALTER TABLE rlcockpit.samples UPDATE tokens = NULL, logprobs = NULL, "
                  "ref_logprobs = NULL, token_kl = NULL WHERE 1 SETTINGS mutations_sync = 1")
        reader = store.reader()
        assert reader.query_samples("r", SampleQuery(has_token_arrays=True)).total == 0
        page = reader.query_samples("r", SampleQuery())
        assert page.has_token_arrays == (False,) and page.items[0].logprobs is None
    finally:
        store.close()


def test_store_doc_covers_the_clickhouse_tables_and_options(tmp_path):
    from rlcockpit.store.uri import CLICKHOUSE_OPTIONS

    doc = (REPO / "docs" / "store.md").read_text()
    store = open_store(f"chdb:///{tmp_path / 'ch'}")
    try:
        tables = [r[0] for r in store._transport.query(
            "SELECT name FROM system.tables WHERE database = 'rlcockpit'")]
    finally:
        store.close()
    assert "metric_rollups" in tables and "samples" in tables
    for name in tables + list(CLICKHOUSE_OPTIONS):
        assert f"`{name}`" in doc, name
    for needle in ("RLCOCKPIT_TEST_CLICKHOUSE_URI", "Kafka", "store copy", "control.db"):
        assert needle in doc, needle


def test_a_curve_whose_rollups_were_lost_is_still_read_whole(tmp_path):
    """A writer killed between its metrics and its rollups leaves rows without rollup rows: the
    whole-run curve's ends then come from the rows themselves, not from the rollups."""
    store = open_store(f"chdb:///{tmp_path / 'ch'}")
    try:
        writer = store.writer()
        writer.create_run(RunInfo(run_id="r", project="p", name="n"))
        writer.write_batch("r", Batch(metrics=[MetricPoint(s, m, float(s % 97), 1e3 + s)
                                               for s in range(5, 20_000) for m in ("kept", "lost")]))
        store._transport.command("ALTER TABLE rlcockpit.metric_rollups DELETE WHERE name = 'lost' "
                                 "SETTINGS mutations_sync = 1")
        reader = store.reader()
        got = reader.read_series("r", ["kept", "lost"], max_points=500)
        for name in ("kept", "lost"):
            assert got[name].downsampled and got[name].steps[0] >= 5 and got[name].steps[-1] <= 19_999
            assert max(got[name].values) == 96.0 and len(got[name].steps) > 100, name
        short = reader.read_series("r", ["lost"], max_points=20_000)["lost"]
        assert (short.steps[0], short.steps[-1], len(short.steps)) == (5, 19_999, 19_995)
    finally:
        store.close()


def test_a_version_4_database_gets_uncompressed_sample_numbers_and_keeps_its_samples(tmp_path):
    """Migration 5 changes only the codec of the numbers the explorer filters and bins: the
    samples written under version 4 read back the same, and new parts store them uncompressed."""
    from rlcockpit.store import ch_schema
    from rlcockpit.store.ch_transport import ChdbTransport

    path = tmp_path / "ch"
    t = ChdbTransport(path, "rlcockpit")
    try:
        t.command("CREATE DATABASE IF NOT EXISTS rlcockpit")
        t.command("CREATE TABLE rlcockpit.schema_version (version UInt32, applied_at Float64) "
                  "ENGINE = MergeTree ORDER BY version")
        for version, statements in enumerate(ch_schema.MIGRATIONS[:4], start=1):
            for statement in statements:
                t.command(statement.format(db="rlcockpit"))
            t.command(f"INSERT INTO rlcockpit.schema_version VALUES ({version}, 0)")
    finally:
        t.close()
    store = open_store(f"chdb:///{path}")
    try:
        assert store.schema_version == ch_schema.SCHEMA_VERSION == 6
        store.close()
        store = open_store(f"chdb:///{path}")  # reopening applies nothing twice
        writer = store.writer()
        writer.create_run(RunInfo(run_id="r", project="p", name="n"))
        writer.write_batch("r", Batch(samples=[SampleRecord(step=0, sample_id=i, prompt="p", response="r",
                                                            reward=i / 7, advantage=-i / 3) for i in range(20)]))
        page = store.reader().query_samples("r", SampleQuery(reward_min=1.0, limit=100))
        assert sorted(s.sample_id for s in page.items) == list(range(7, 20))
        assert [s.advantage for s in sorted(page.items, key=lambda s: s.sample_id)] == [-i / 3 for i in range(7, 20)]
        ddl = store._transport.query("SELECT create_table_query FROM system.tables WHERE "
                                     "database = 'rlcockpit' AND name = 'samples'")[0][0]
        assert "`reward` Float64 CODEC(NONE)" in ddl and "`kl_max` Nullable(Float64) CODEC(NONE)" in ddl
        assert [r[0] for r in store._transport.query(
            "SELECT version FROM rlcockpit.schema_version ORDER BY version")] == [1, 2, 3, 4, 5, 6]
    finally:
        store.close()
