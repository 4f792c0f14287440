"""Followers that survive what real trainers do to the files they write: verl's file logger
truncated and rewritten on resume ("wb"), a log rotated or replaced (another inode), TRL's
completion tables that repeat their predecessor's rows, verl's generation dumps written on a
background thread, an integer beyond the float range, and OpenRLHF's console log and TensorBoard
folder (its generated-samples text included) followed live. Nothing lost, nothing twice."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from rlcockpit.integrations.follow import FollowOptions, start_follow
from rlcockpit.integrations.tail import LineTail
from rlcockpit.integrations.verl_dumps import VALIDATION_ID_BASE, DumpReader
from rlcockpit.store import open_store
from rlcockpit.store.base import SampleQuery

FIXTURES = Path(__file__).resolve().parent / "fixtures"
pytestmark = pytest.mark.timeout(180)


def _line(step: int, **data: float) -> str:
    return json.dumps({"step": step, "data": {"critic/score/mean": 0.01 * step, **data}}) + "\n"


def _follower(tmp_path: Path, *paths: Path, **kwargs):
    uri = f"sqlite:///{tmp_path / 'f.db'}"
    return uri, start_follow(list(paths), store=uri, options=FollowOptions(diagnostics=False, settle_s=0.01),
                             **kwargs)


def _steps(uri: str, run_id: str, name: str = "reward/mean") -> tuple[int, ...]:
    return tuple(open_store(uri).reader().read_series(run_id, [name])[name].steps)


def test_a_file_truncated_and_rewritten_longer_is_read_again_from_its_start(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text("".join(_line(s) for s in range(1, 4)))
    tail = LineTail(path)
    assert [n for n, _ in tail.read()] == [1, 2, 3]
    path.write_bytes(b"")  # verl resumes: open(path, "wb") truncates ...
    path.write_text("".join(_line(s, extra=1.0) for s in range(3, 9)))  # ... and writes past the old end
    assert [json.loads(t)["step"] for _, t in tail.read()] == [3, 4, 5, 6, 7, 8]
    assert tail.rewrites == 1


def test_a_rotated_log_gives_the_rest_of_the_old_file_then_the_new_one(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text(_line(1))
    tail = LineTail(path)
    assert len(tail.read()) == 1
    with path.open("a") as f:
        f.write(_line(2) + _line(3).rstrip("\n"))  # written after the last read, the last without newline
    os.rename(path, tmp_path / "log.jsonl.1")
    path.write_text(_line(4))
    assert [json.loads(t)["step"] for _, t in tail.read()] == [2, 3, 4]
    assert tail.read() == []


def test_a_follower_restarted_after_its_log_was_replaced_reads_the_new_file_whole(tmp_path):
    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(_line(s) for s in range(1, 6)))
    uri, first = _follower(tmp_path, log)
    first.poll()
    first.close("stopped")
    replacement = tmp_path / "new.jsonl"
    replacement.write_text("".join(_line(s, extra=2.0) for s in range(4, 12)))  # longer than the old offset
    os.replace(replacement, log)  # another inode under the same name
    _, second = _follower(tmp_path, log)
    assert second.run.run_id == first.run.run_id
    second.poll()
    second.close("finished")
    assert _steps(uri, first.run.run_id) == tuple(range(1, 12))  # every step, once
    assert _steps(uri, first.run.run_id, "import/verl/extra") == tuple(range(4, 12))


def test_trl_completion_tables_that_repeat_rows_are_stored_once(tmp_path):
    import pandas as pd
    folder = tmp_path / "completions"
    folder.mkdir()
    rows = [{"prompt": f"p{i // 2}", "completion": f"c{i}", "correctness": float(i % 2), "advantage": 0.5 - i % 2}
            for i in range(12)]
    window = 8  # TRL's deque(maxlen=generation_batch_size): each table is the newest 8 completions

    def table(step: int, upto: int) -> None:
        frame = pd.DataFrame([{"step": step, **r} for r in rows[max(0, upto - window):upto]])
        frame.to_parquet(folder / f"completions_{step:05d}.parquet")

    table(1, 8)
    table(2, 8)  # no new generation since step 1: the same 8 rows under step 2
    uri, follower = _follower(tmp_path, folder)
    follower.poll()
    table(3, 12)  # 4 new completions: 4 old rows + 4 new
    time.sleep(0.05)
    follower.poll()
    follower.close("finished")
    reader = open_store(uri).reader()
    page = reader.query_samples(follower.run.run_id, SampleQuery(limit=100, include_token_arrays=False))
    assert sorted(s.response for s in page.items) == sorted(r["completion"] for r in rows)  # each once
    assert {s.response: s.step for s in page.items}["c9"] == 3 and follower.overlap.repeated == 12


def test_a_huge_integer_skips_its_line_and_the_follower_goes_on(tmp_path):
    log = tmp_path / "metrics.jsonl"
    log.write_text(_line(1) + json.dumps({"step": 2, "data": {"critic/score/mean": 10 ** 400}}) + "\n" + _line(3))
    uri, follower = _follower(tmp_path, log)
    follower.poll()
    follower.close("finished")
    assert follower.bad == 1 and _steps(uri, follower.run.run_id) == (1, 3)


def test_verl_dumps_written_on_a_background_thread_are_read_whole_and_once(tmp_path):
    rollouts, validation = tmp_path / "rollouts", tmp_path / "val"
    (rollouts / "old").mkdir(parents=True)
    (rollouts / "0.jsonl").write_text('{"input": "q", "output": "old", "score": 1.0, "step": 0}\n')  # an earlier run's
    dumps = DumpReader(rollouts, validation)
    release = threading.Event()

    def write(folder: Path, step: int, n: int, pause: bool) -> None:  # as verl's _write_generations
        folder.mkdir(exist_ok=True)
        with open(folder / f"{step}.jsonl", "w") as f:
            for i in range(n):
                f.write(json.dumps({"input": f"q{i // 2}", "output": f"a{i}", "gts": None, "score": 0.1 * i,
                                    "step": step, "acc": float(i % 2), "uid": f"u{i}"}, ensure_ascii=False) + "\n")
                if pause and i == 1:
                    f.flush()
                    release.wait(10)

    writer = threading.Thread(target=write, args=(rollouts, 1, 4, True))
    writer.start()
    time.sleep(0.1)
    assert dumps.read() == {}  # step 1 is half written and the newest: not read
    release.set()
    writer.join()
    write(validation, 1, 2, False)
    assert dumps.read() == {}  # both step-1 files wait for a later step
    write(rollouts, 2, 4, False)
    first = dumps.read()
    assert sorted(s.sample_id for s in first[1]) == [0, 1, 2, 3, VALIDATION_ID_BASE, VALIDATION_ID_BASE + 1]
    assert {s.flags for s in first[1]} == {(), ("validation",)}
    assert first[1][1].components == {"acc": 1.0} and "uid" in dumps.unstored_keys
    assert dumps.read() == {} and set(dumps.read(final=True)) == {2}  # the last file at the end, once
    assert dumps.read(final=True) == {}


def test_openrlhf_console_log_and_tensorboard_folder_followed_live(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    log = tmp_path / "train.log"
    lines = (FIXTURES / "console" / "openrlhf_ppo.log").read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:3]))  # start-up noise only: no record yet, looked at again later
    tb = tmp_path / "tb"
    writer = SummaryWriter(log_dir=str(tb))
    uri, follower = _follower(tmp_path, log, tb)
    follower.poll()
    with log.open("a") as f:
        f.write("".join(lines[3:]))
    samples = {1: ("Solve for {x}: 2x = 4. Answer: 2", 1.0), 2: ("a long\nanswer", -0.25)}
    for step, (text, reward) in samples.items():  # as openrlhf's TensorboardLogger.log_train writes them
        writer.add_scalar("train/policy_loss", 0.1 * step, step)
        writer.add_scalar("train/reward", 0.5 + step, step)
        writer.add_text("train/generated_samples", f"Sample:\\n{text}\\n\\nReward: {reward:.4f}", step)
    writer.flush()
    follower.poll()
    follower.close("finished")
    writer.close()
    reader = open_store(uri).reader()
    runs = {f["format"] for f in follower.file_states.values()}
    assert runs == {"console-dicts", "tensorboard"} and not follower.ignored
    series = reader.read_series(follower.run.run_id, ["reward/mean", "policy/loss"])
    assert set(series["policy/loss"].steps) >= {1, 2} and set(series["reward/mean"].steps) >= {1, 2}
    page = reader.query_samples(follower.run.run_id, SampleQuery(limit=100, include_token_arrays=False))
    # step 1's sample is in the console (its Sample line) and in TensorBoard: stored once
    assert sorted((s.step, s.response, s.reward) for s in page.items) == [(1, *samples[1]), (2, *samples[2])]


def test_files_written_by_openrlhfs_own_loggers_are_followed(tmp_path):
    """tests/fixtures/openrlhf_real: written by OpenRLHF 0.11.2's init_logger (console) and
    TensorboardLogger (scalars and the generated-samples text) in benchmarks/verl_tracking.py."""
    real = FIXTURES / "openrlhf_real"
    log, tb = tmp_path / "train.log", tmp_path / "tb"
    tb.mkdir()
    event = next(real.glob("events.out.tfevents.*"))
    data = event.read_bytes()
    (tb / event.name).write_bytes(data[:len(data) // 2])  # the event file half written
    text = (real / "train.log").read_text(encoding="utf-8")
    log.write_text(text[:len(text) // 2], encoding="utf-8")  # the console mid-line
    uri, follower = _follower(tmp_path, log, tb)
    follower.poll()
    (tb / event.name).write_bytes(data)
    log.write_text(text, encoding="utf-8")
    follower.poll()
    follower.close("finished")
    reader = open_store(uri).reader()
    summary = reader.summary(follower.run.run_id)
    assert summary.steps == 4 and summary.samples == 4  # one sample a step, in both files, stored once
    series = reader.read_series(follower.run.run_id, ["kl/token_mean", "policy/loss"])
    assert series["kl/token_mean"].steps == (1, 2, 3, 4) and series["policy/loss"].steps == (1, 2, 3, 4)
    page = reader.query_samples(follower.run.run_id, SampleQuery(step_min=3, step_max=3, include_token_arrays=False))
    assert [(s.response, s.reward) for s in page.items] == [("question 3 answer 3", 0.75)]
