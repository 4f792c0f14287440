"""Data safety of the importers: damaged or hostile input fails the import with exit 2, a one-line
error naming the file and the place, and no run written — never a traceback, never a partial run.
And an imported run keeps its own clock."""

from __future__ import annotations

import contextlib
import io
import json
import struct
from pathlib import Path

import pytest

from rlcockpit.cli import main
from rlcockpit.integrations.importers import read_paths
from rlcockpit.integrations.importers.tensorboard import check_records
from rlcockpit.store import open_store

FIXTURES = Path(__file__).resolve().parent / "fixtures"
EVENTS = FIXTURES / "tensorboard" / "trl_grpo" / "events.out.tfevents.1700000000.fixture.1"


def run_cli(*args: object) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


def record_offsets(data: bytes) -> list[tuple[int, int]]:
    """(offset, data length) of every TFRecord of an event file."""
    out, offset = [], 0
    while offset < len(data):
        (length,) = struct.unpack("<Q", data[offset:offset + 8])
        out.append((offset, length))
        offset += 16 + length
    return out


def damaged(tmp_path: Path, how: str) -> tuple[Path, int]:
    """A copy of the fixture event file damaged in one way; returns it and the bad offset."""
    folder = tmp_path / "run"
    folder.mkdir()
    path = folder / EVENTS.name
    data = bytearray(EVENTS.read_bytes())
    records = record_offsets(bytes(data))
    offset, length = records[3]
    if how == "data crc":
        data[offset + 12 + length // 2] ^= 0xFF
    elif how == "length":
        data[offset:offset + 8] = struct.pack("<Q", length + 7)
    elif how == "truncated":
        data = data[:offset + 12 + length // 2]
    path.write_bytes(bytes(data))
    return path, offset


def assert_refused(tmp_path: Path, path: Path, *message: str) -> None:
    db = tmp_path / "s.db"
    code, _, err = run_cli("import", "--store", f"sqlite:///{db}", path)
    assert code == 2, err
    assert "Traceback" not in err and err.count("\n") == 1  # one line
    for text in message:
        assert text in err, err
    assert not db.exists()  # checked before the store was opened


def test_the_fixture_event_file_is_intact():
    assert check_records(EVENTS) == len(record_offsets(EVENTS.read_bytes())) > 4


@pytest.mark.parametrize(("how", "says"), [
    ("data crc", "fails the CRC check of its data"),
    ("length", "fails the CRC check of its length"),
    ("truncated", "but only"),
])
def test_a_damaged_event_file_fails_the_import_naming_file_and_offset(tmp_path, how, says):
    path, offset = damaged(tmp_path, how)
    assert_refused(tmp_path, path, str(path), f"(byte offset {offset})", says)


def test_a_record_cut_inside_its_header_is_named(tmp_path):
    path = tmp_path / EVENTS.name
    data = EVENTS.read_bytes()
    offset, _ = record_offsets(data)[-1]
    path.write_bytes(data[:offset + 5])
    assert_refused(tmp_path, path, f"(byte offset {offset})", "ends inside a record header")


@pytest.mark.parametrize(("line", "says"), [
    ('{"step": 2e19, "reward": 0.5, "kl": 0.1}', "does not fit in a 64-bit integer"),
    ('{"step": 20000000000000000000, "reward": 0.5, "kl": 0.1}', "does not fit in a 64-bit integer"),
    ('{"step": 2, "reward": 1e400, "kl": 0.1}', "beyond the range of a float"),
    ('{"step": 2, "reward": 1' + "0" * 400 + ', "kl": 0.1}', "beyond the range of a float"),
    ('{"step": 2, "reward": ' + "[" * 100_000 + "]" * 100_000 + "}", "nests brackets deeper than"),
])
def test_out_of_range_and_hostile_jsonl_values_are_refused_cleanly(tmp_path, line, says):
    log = tmp_path / "train.jsonl"
    log.write_text('{"step": 1, "reward": 0.4, "kl": 0.1}\n' + line + "\n")
    assert_refused(tmp_path, log, "train.jsonl (line 2)", says)


def test_a_huge_integer_in_a_console_dict_is_refused_cleanly(tmp_path):
    log = tmp_path / "console.log"
    log.write_text("{'loss': 0.5, 'reward': 0.1}\n{'loss': 1" + "0" * 400 + ", 'reward': 0.2}\n")
    assert_refused(tmp_path, log, "console.log (line 2)", "beyond the range of a float")


def test_deep_nesting_under_doctor_import_is_a_clean_error_with_exit_3(tmp_path):
    log = tmp_path / "deep.jsonl"
    log.write_text('{"step": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    code, out, err = run_cli("doctor", "--store", f"sqlite:///{tmp_path / 'd.db'}", "--import", log)
    assert code == 3 and "nests brackets deeper than" in err and "Traceback" not in err
    assert "No failure detected" not in out


def test_a_binary_file_is_no_console_log(tmp_path):
    blob = tmp_path / "weights.log"
    blob.write_bytes(b"\x00\x01\x02" * 1000)
    assert_refused(tmp_path, blob, "matches no known format")


def test_a_mid_write_store_error_marks_the_run_failed_not_running(tmp_path):
    from rlcockpit.errors import StoreError
    from rlcockpit.integrations.importers import write_import

    parsed = read_paths([FIXTURES / "verl_metrics.jsonl"])
    parsed.metrics[(2**70, "reward/mean")] = (0.1, 0.0)  # past every check: the store refuses it
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    writer = store.writer()
    with pytest.raises(StoreError, match="marked failed"):
        write_import(writer, parsed, project="p", name="n", run_id="r")
    writer.close()
    reader = store.reader()
    assert reader.get_run("r").status == "failed"
    reader.close()
    store.close()


# --- the run's own clock -------------------------------------------------------------------------

def test_per_step_durations_give_the_run_its_time_axis(tmp_path):
    log = tmp_path / "verl.jsonl"
    log.write_text("".join(json.dumps({"step": s, "data": {"critic/score/mean": 0.1 * s,
                                                           "timing_s/step": 10.0 + s,
                                                           "timing_s/gen": 4.0}}) + "\n"
                           for s in (1, 2, 3)))
    parsed = read_paths([log], now=1_000_000.0)
    walls = {s: w for (s, n), (_, w) in parsed.metrics.items() if n == "reward/mean"}
    assert walls == {1: 1_000_000.0 - 25.0, 2: 1_000_000.0 - 13.0, 3: 1_000_000.0}
    assert parsed.timing == {"source": "per-step durations (time/step_s)", "synthetic": True,
                             "started_at": 1_000_000.0 - 36.0, "ended_at": 1_000_000.0}
    uri = f"sqlite:///{tmp_path / 's.db'}"
    code, out, err = run_cli("import", "--store", uri, "--run-id", "r", log)
    assert code == 0 and "36 s of training from per-step durations" in out
    reader = open_store(uri, create=False).reader()
    run = reader.get_run("r")
    assert run.ended_at - run.started_at == pytest.approx(36.0)
    reader.close()


def test_a_custom_elapsed_time_is_a_duration_unless_it_increases(tmp_path):
    durations = tmp_path / "a.jsonl"  # rookworld-style: each step's own seconds
    durations.write_text("".join(json.dumps({"step": s, "loss": 0.1, "mean_reward": 0.5,
                                             "elapsed_time": t}) + "\n"
                                 for s, t in ((1, 17.3), (2, 16.2), (3, 19.9))))
    parsed = read_paths([durations], now=100.0)
    assert {s: v for (s, n), (v, _) in parsed.metrics.items() if n == "time/step_s"} == {
        1: 17.3, 2: 16.2, 3: 19.9}
    assert any("read as each step's own duration" in n for n in parsed.notes)
    clock = tmp_path / "b.jsonl"
    clock.write_text("".join(json.dumps({"step": s, "loss": 0.1, "mean_reward": 0.5,
                                         "elapsed_time": 10.0 * s}) + "\n" for s in (1, 2, 3)))
    parsed = read_paths([clock], now=100.0)
    assert parsed.elapsed == {1: 10.0, 2: 20.0, 3: 30.0}
    assert parsed.timing["started_at"] == 70.0 and parsed.timing["ended_at"] == 100.0


def test_tensorboard_wall_times_set_the_runs_start_and_end(tmp_path):
    parsed = read_paths([EVENTS.parent])
    walls = sorted({w for _, (_, w) in parsed.metrics.items()})
    assert parsed.timing["synthetic"] is False
    assert parsed.timing["started_at"] <= walls[0] and parsed.timing["ended_at"] == walls[-1]
