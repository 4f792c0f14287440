"""`rlcockpit import` / `rlcockpit export` through the real CLI on real SQLite stores.

Every import goes through `python -m rlcockpit import` in a subprocess, into a fresh store; what
arrived is read back through the StoreReader protocol. The foreign files are the committed fixtures
of tests/fixtures (tests/fixtures/make_fixtures.py).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rlcockpit
from rlcockpit.integrations.importers import detect_format, expand_paths
from rlcockpit.integrations.records_io import parquet_schema
from rlcockpit.records import (
    Batch,
    EventRecord,
    FindingRecord,
    MetricPoint,
    RunInfo,
    SampleRecord,
)
from rlcockpit.store import SampleQuery, open_store

FIXTURES = Path(__file__).resolve().parent / "fixtures"
WALL0 = 1_700_000_000.0


def cli(*args: object, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlcockpit", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def import_ok(db: Path, *args: object) -> str:
    """Import into ``db`` with run id ``r``; returns the CLI's summary line."""
    result = cli("import", "--store", f"sqlite:///{db}", "--run-id", "r", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def series(db: Path, run_id: str = "r") -> dict[str, dict[int, float]]:
    """Every metric of a run: name -> {step: value}."""
    store = open_store(db, create=False)
    reader = store.reader()
    try:
        names = reader.metric_names(run_id)
        out = {n: dict(zip(s.steps, s.values, strict=True))
               for n, s in reader.read_series(run_id, names).items()}
    finally:
        reader.close()
        store.close()
    return out


def samples(db: Path, run_id: str = "r") -> list[SampleRecord]:
    store = open_store(db, create=False)
    reader = store.reader()
    try:
        return list(reader.query_samples(run_id, SampleQuery(limit=1000)).items)
    finally:
        reader.close()
        store.close()


def run_info(db: Path, run_id: str = "r") -> RunInfo:
    store = open_store(db, create=False)
    reader = store.reader()
    try:
        return reader.get_run(run_id)
    finally:
        reader.close()
        store.close()


def run_ids(db: Path) -> list[str]:
    store = open_store(db, create=False)
    reader = store.reader()
    try:
        return [r.run_id for r in reader.list_runs()]
    finally:
        reader.close()
        store.close()


def f32(x: float) -> float:
    """TensorBoard stores scalars as float32."""
    return float(pa.array([x], pa.float32())[0].as_py())


# --- importing each foreign format ------------------------------------------------------------

def test_verl_file_logger_metrics_arrive_under_catalog_names(tmp_path):
    db = tmp_path / "s.db"
    out = import_ok(db, "--format", "jsonl-logger", FIXTURES / "verl_metrics.jsonl")
    assert "[verl]" in out
    got = series(db)
    raw = [json.loads(line) for line in (FIXTURES / "verl_metrics.jsonl").read_text().splitlines()]
    step1 = raw[0]["data"]
    assert got["policy/loss"][1] == step1["actor/pg_loss"]
    assert got["reward/mean"][1] == step1["critic/score/mean"]
    assert got["response/truncated_frac"][1] == step1["response_length/clip_ratio"]
    assert got["time/rollout_s"][1] == step1["timing_s/gen"]
    assert got["kl/token_mean"][2] == raw[1]["data"]["actor/kl_loss"]
    # the diverging step keeps its NaN and +inf exactly
    assert math.isnan(got["grad/norm/actor"][3])
    assert got["policy/loss"][3] == math.inf
    # keys without an alias are kept, marked as foreign; none keeps its verl name
    assert got["perf/tokens_per_s_per_gpu"][1] == 1500.0  # verl's perf/throughput: per GPU
    assert got["import/verl/critic/rewards/mean"][1] == step1["critic/rewards/mean"]
    assert got["eval/reward/category/openai_gsm8k/mean"] == {4: 0.55}  # val-core/openai/gsm8k/reward/mean@1
    assert got["policy/entropy"][4] == raw[3]["data"]["actor/entropy"]  # step 4 logged twice: merged
    assert not [n for n in got if n.startswith(("actor/", "critic/"))]
    info = run_info(db)
    assert info.status == "finished" and info.project == "imported"
    assert info.last_step == 4
    files = info.config["import"]["files"]
    assert files[0]["format"] == "jsonl-logger" and files[0]["path"].endswith("verl_metrics.jsonl")
    assert info.config["import"]["sources"] == ["verl"]


def test_openrlhf_prefixed_log_dict_is_detected_and_renamed(tmp_path):
    db = tmp_path / "s.db"
    out = import_ok(db, FIXTURES / "openrlhf_metrics.jsonl", "--name", "orlhf", "--project", "p")
    assert "[openrlhf]" in out
    got = series(db)
    assert got["policy/loss"] == {1: 0.1, 2: 0.05, 3: pytest.approx(0.1 / 3)}
    assert got["value/loss"][2] == 0.25
    assert got["returns/mean"][3] == pytest.approx(0.75)
    assert got["kl/token_mean"][3] == pytest.approx(0.03)
    assert got["import/openrlhf/train/total_length"][1] == 301.0
    info = run_info(db)
    assert (info.name, info.project) == ("orlhf", "p")


def test_source_can_be_forced(tmp_path):
    db = tmp_path / "s.db"
    out = import_ok(db, "--source", "trl-grpo", FIXTURES / "openrlhf_metrics.jsonl")
    assert "[trl-grpo]" in out
    got = series(db)
    assert got["reward/mean"][1] == 0.3  # TRL's table knows "reward" too
    assert got["import/trl-grpo/train/actor_lr"][1] == 5e-7  # but not OpenRLHF's actor_lr
    assert run_info(db).config["import"]["sources"] == ["trl-grpo"]


def test_tensorboard_trl_grpo_run(tmp_path):
    db = tmp_path / "s.db"
    import_ok(db, "--format", "tensorboard", FIXTURES / "tensorboard" / "trl_grpo")
    got = series(db)
    assert got["reward/mean"] == {s: f32(0.1 * s) for s in range(1, 6)}
    assert got["reward/accuracy_reward/mean"][2] == f32(0.2)
    assert got["reward/frac_zero_std_groups"][1] == 0.25
    assert got["response/length_mean"][3] == 43.0
    assert got["optim/lr/actor"][1] == f32(1e-6)
    assert math.isnan(got["kl/token_mean"][5])
    assert got["import/trl-grpo/train/num_tokens"][2] == 4096.0
    assert "import/trl-grpo/train/rewards/accuracy_reward/std" in got
    # wall times of the event file are kept
    store = open_store(db, create=False)
    reader = store.reader()
    try:
        walls = reader.read_series("r", ["reward/mean"])["reward/mean"].wall_times
    finally:
        reader.close()
        store.close()
    assert walls == tuple(WALL0 + s for s in range(1, 6))


def test_tensorboard_trl_ppo_run_keeps_look_alikes_foreign(tmp_path):
    db = tmp_path / "s.db"
    import_ok(db, FIXTURES / "tensorboard" / "trl_ppo")
    got = series(db)
    assert got["kl/mean"][2] == 1.0
    assert got["reward/mean"][3] == f32(0.9)
    assert got["policy/ratio_mean"][1] == 1.0
    assert got["perf/samples_per_s"][1] == 12.0
    # a per-sequence sum of -logprob is not the token entropy: kept under import/
    assert got["import/trl-ppo/train/objective/entropy"][1] == 30.0
    assert got["policy/entropy"][1] == 2.5


def test_trl_completion_tables_become_samples(tmp_path):
    db = tmp_path / "s.db"
    out = import_ok(db, "--format", "trl-completions", FIXTURES / "trl_completions")
    assert "16 samples" in out
    got = samples(db)
    rows = [r for f in sorted((FIXTURES / "trl_completions").glob("*.parquet"))
            for r in pq.read_table(f).to_pylist()]
    assert len(got) == len(rows) == 16
    for sample, row in zip(got, rows, strict=True):
        assert (sample.step, sample.prompt, sample.response) == (row["step"], row["prompt"], row["completion"])
        expected = {k: row[k] for k in ("accuracy_reward", "format_reward") if row[k] is not None}
        assert dict(sample.components) == expected
        assert sample.reward == pytest.approx(sum(expected.values()))
        assert sample.advantage == row["advantage"]
    # sample ids per step, one group per prompt (GRPO groups of 4)
    step10 = [s for s in got if s.step == 10]
    assert [s.sample_id for s in step10] == list(range(8))
    assert [s.group_id for s in step10] == [0] * 4 + [1] * 4
    assert len({s.prompt_id for s in step10}) == 2
    assert any("format_reward" not in s.components for s in got)  # a function that did not apply
    assert run_info(db).config["import"]["files"][0]["reward_columns"] == ["accuracy_reward",
                                                                            "format_reward"]


def test_trl_completion_tables_that_repeat_rows_are_imported_once(tmp_path):
    # TRL's buffers are a deque(maxlen=generation_batch_size), never cleared: a table logged without
    # a generation in between repeats the rows of the one before under its own step
    folder = tmp_path / "completions"
    folder.mkdir()
    rows = [{"prompt": f"p{i // 2}", "completion": f"c{i}", "correctness": float(i % 2),
             "advantage": 0.5 - i % 2} for i in range(12)]
    for step, upto in ((1, 8), (2, 8), (3, 12)):  # 2: nothing new; 3: 4 new rows after 4 old ones
        table = pa.Table.from_pylist([{"step": step, **r} for r in rows[max(0, upto - 8):upto]])
        pq.write_table(table, folder / f"completions_{step:05d}.parquet")
    db = tmp_path / "s.db"
    result = cli("import", "--store", f"sqlite:///{db}", "--run-id", "r", folder)
    assert result.returncode == 0, result.stderr
    got = samples(db)
    assert sorted(s.response for s in got) == sorted(r["completion"] for r in rows)  # each once
    assert {s.response: s.step for s in got}["c9"] == 3 and {s.step for s in got} == {1, 3}
    assert "12 completion rows repeated from the table before were left out" in \
        result.stdout + result.stderr


def test_trl_chat_completions_are_stored_as_role_lines(tmp_path):
    db = tmp_path / "s.db"
    import_ok(db, FIXTURES / "trl_chat_completions" / "completions_00005.parquet")
    got = samples(db)
    assert [(s.prompt, s.response, s.reward) for s in got] == [
        ("user: Say hi.", "assistant: hi", 1.0), ("user: Say hi.", "assistant: hello there", 0.5)]


def test_verl_rollout_dump_becomes_samples(tmp_path):
    db = tmp_path / "s.db"
    out = import_ok(db, "--format", "verl-rollout", FIXTURES / "verl_rollout")
    assert "gts, pred" in out
    got = samples(db)
    raw = [json.loads(line) for step in (1, 2)
           for line in (FIXTURES / "verl_rollout" / f"{step}.jsonl").read_text().splitlines()]
    assert [(s.step, s.prompt, s.response, s.reward) for s in got] == [
        (r["step"], r["input"], r["output"], r["score"]) for r in raw]
    assert [s.components["acc"] for s in got] == [float(r["acc"]) for r in raw]
    assert run_info(db).config["import"]["unstored_sample_keys"] == ["gts", "pred"]


def test_formats_are_detected_per_file_and_combine_into_one_run(tmp_path):
    expected = {
        "verl_metrics.jsonl": "jsonl-logger", "openrlhf_metrics.jsonl": "jsonl-logger",
        "1.jsonl": "verl-rollout", "completions_00010.parquet": "trl-completions",
        "events.out.tfevents.1700000000.fixture.1": "tensorboard",
    }
    expected["trainer_state.json"] = "jsonl-logger"
    for path, _ in expand_paths([FIXTURES]):
        if path.name in expected:
            assert detect_format(path) == expected[path.name], path
    db = tmp_path / "s.db"
    import_ok(db, FIXTURES / "verl_metrics.jsonl", FIXTURES / "verl_rollout")
    assert len(samples(db)) == 8
    assert series(db)["reward/mean"][2] == 0.4
    assert run_info(db).config["import"]["formats"] == ["jsonl-logger", "verl-rollout"]


def test_a_trl_output_folder_gives_metrics_and_samples_and_skips_non_logs(tmp_path):
    db = tmp_path / "s.db"
    out = import_ok(db, FIXTURES / "trl_output")
    assert "ignored" in out and "config.json" in out
    got = series(db)
    assert got["reward/mean"] == {1: 0.5, 2: 1.0}
    assert got["policy/loss"] == {1: 0.008, 2: 0.008}  # policy_loss wins over the Trainer's loss
    assert got["import/trl-grpo/loss"][1] == 0.01
    assert got["kl/token_mean"] == {2: 0.002}  # null (NaN over the whole window) is not a value
    assert got["eval/reward/mean"] == {2: 0.75}
    assert got["import/trl-grpo/train_runtime"] == {2: 7.1}
    assert [s.response for s in samples(db)] == ["42", "43"]
    config = run_info(db).config["import"]
    assert config["skipped_values"] == {"kl": 1}
    assert list(config["ignored_files"]) == [str(FIXTURES / "trl_output" / "config.json")]
    # with a format, the folder's other logs are left out too
    db2 = tmp_path / "t.db"
    out = import_ok(db2, "--format", "trl-completions", FIXTURES / "trl_output")
    assert "is jsonl-logger, not trl-completions" in out
    assert series(db2) == {} and len(samples(db2)) == 2


# --- export and round trips -------------------------------------------------------------------

def make_source_run(db: Path) -> None:
    """A run with NaN/inf metrics, samples with token arrays, findings and events, written through
    the StoreWriter protocol (values exactly representable in float16 where the store uses it)."""
    store = open_store(db)
    writer = store.writer()
    writer.create_run(RunInfo(run_id="src", project="demo", name="ppo-1", started_at=WALL0))
    metrics = []
    for step in range(4):
        metrics += [MetricPoint(step, "reward/mean", 0.25 * step, WALL0 + step),
                    MetricPoint(step, "kl/mean", 0.5 + step, WALL0 + step),
                    MetricPoint(step, "my/custom", float(step), WALL0 + step)]
    metrics += [MetricPoint(2, "grad/norm/actor", math.nan, WALL0 + 2),
                MetricPoint(3, "grad/norm/actor", math.inf, WALL0 + 3),
                MetricPoint(3, "policy/loss", -math.inf, WALL0 + 3)]
    rows = [
        SampleRecord(step=1, sample_id=0, prompt="2+2?", response="4", reward=1.0, prompt_id="p1",
                     group_id=0, category="math", components={"correct": 1.0, "format": 0.5},
                     uncertainty=0.125, flags=("checked",), length=3, truncated=False,
                     advantage=0.5, value=0.25, kl_sum=0.75, kl_max=0.5,
                     tokens=("4", "<eos>", "!"), logprobs=(-0.5, -1.25, -2.0),
                     ref_logprobs=(-0.75, -1.0, -2.0), token_kl=(0.25, -0.25, 0.0)),
        SampleRecord(step=1, sample_id=1, prompt="hi", response="", reward=math.nan,
                     flags=("nonfinite_reward", "empty"), truncated=True),
        SampleRecord(step=2, sample_id=0, prompt="x", response="y", reward=-math.inf,
                     components={"rm": math.inf}),
    ]
    writer.write_batch("src", Batch(
        metrics=metrics, samples=rows,
        findings=[FindingRecord(step=2, detector="nonfinite", severity="red", message="NaN",
                                evidence={"grad_norm": math.nan, "window": [1, 2]},
                                patterns=("nonfinite_values",), wall_time=WALL0 + 2)],
        events=[EventRecord(step=3, kind="checkpoint", payload={"path": "ckpt/3", "loss": math.inf},
                            wall_time=WALL0 + 3)]))
    writer.set_run_status("src", "finished", ended_at=WALL0 + 10)
    writer.close()
    store.close()


def export(db: Path, what: str, fmt: str = "jsonl", out: Path | None = None, run: str = "src") -> str:
    args = ["export", "--store", f"sqlite:///{db}", "--run", run, "--what", what, "--format", fmt]
    result = cli(*args, *(["--out", out] if out else []))
    assert result.returncode == 0, result.stderr
    return result.stdout


def strict_json(line: str) -> dict:
    def refuse(token: str) -> None:
        raise AssertionError(f"bare {token} in exported JSON")
    return json.loads(line, parse_constant=refuse)


def test_metrics_jsonl_is_one_strict_line_per_step(tmp_path):
    db = tmp_path / "s.db"
    make_source_run(db)
    lines = [strict_json(x) for x in export(db, "metrics").splitlines()]
    assert [x["step"] for x in lines] == [0, 1, 2, 3]
    assert all(set(x) == {"step", "metrics"} for x in lines)
    assert lines[2]["metrics"]["grad/norm/actor"] == "NaN"
    assert lines[3]["metrics"]["grad/norm/actor"] == "Infinity"
    assert lines[3]["metrics"]["policy/loss"] == "-Infinity"
    assert lines[1]["metrics"] == {"kl/mean": 1.5, "my/custom": 1.0, "reward/mean": 0.25}


def test_samples_export_carries_every_field_and_token_arrays(tmp_path):
    db = tmp_path / "s.db"
    make_source_run(db)
    lines = [strict_json(x) for x in export(db, "samples").splitlines()]
    assert len(lines) == 3
    assert set(lines[0]) == set(SampleRecord.__dataclass_fields__)
    assert lines[0]["logprobs"] == [-0.5, -1.25, -2.0]
    assert lines[0]["tokens"] == ["4", "<eos>", "!"]
    assert lines[0]["components"] == {"correct": 1.0, "format": 0.5}
    assert lines[1]["reward"] == "NaN" and lines[1]["logprobs"] is None
    assert lines[2]["components"] == {"rm": "Infinity"}


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_metrics_and_samples_round_trip_between_stores(tmp_path, fmt):
    src = tmp_path / "src.db"
    make_source_run(src)
    paths = []
    for what in ("metrics", "samples"):
        path = tmp_path / f"{what}.{fmt}"
        export(src, what, fmt, path)
        paths.append(path)
    dst = tmp_path / "dst.db"
    import_ok(dst, *paths)  # format detected: rlcockpit exports
    for what in ("metrics", "samples"):
        assert export(dst, what, run="r") == export(src, what), what
    assert samples(dst) == samples(src, "src")
    back = series(dst)
    assert math.isnan(back["grad/norm/actor"][2]) and back["grad/norm/actor"][3] == math.inf
    assert back["policy/loss"][3] == -math.inf
    assert back["my/custom"] == {0: 0.0, 1: 1.0, 2: 2.0, 3: 3.0}  # non-catalog names kept verbatim
    assert run_info(dst).config["import"]["formats"] == ["rlcockpit"]


def same_schema(read: pa.Schema, declared: pa.Schema) -> bool:
    """Columns and types equal, and the rlcockpit metadata (pyarrow annotates a map column it
    reads back with its name in the field metadata, so field metadata is not compared)."""
    return read.equals(declared) and read.metadata == declared.metadata


def test_a_run_logged_with_the_telemetry_sdk_moves_to_another_store(tmp_path):
    src, dst = tmp_path / "train.db", tmp_path / "archive.db"
    with rlcockpit.init(project="demo", name="sdk", store=f"sqlite:///{src}", run_id="sdk") as run:
        for step in range(3):
            run.log(step, {"reward/mean": 0.5 * step, "kl/mean": math.nan if step == 1 else 0.25})
            run.log_samples(step, [SampleRecord(step=step, sample_id=i, prompt=f"q{i}", response="a",
                                                reward=float(i), logprobs=(-0.5, -1.0))
                                   for i in range(2)])
            run.commit(step)
    paths = [tmp_path / "m.jsonl", tmp_path / "s.parquet"]
    export(src, "metrics", "jsonl", paths[0], run="sdk")
    export(src, "samples", "parquet", paths[1], run="sdk")
    import_ok(dst, *paths)
    for what in ("metrics", "samples"):
        assert export(dst, what, run="r") == export(src, what, run="sdk")
    assert math.isnan(series(dst)["kl/mean"][1])
    assert [s.logprobs for s in samples(dst)] == [(-0.5, -1.0)] * 6
    assert run_info(dst).status == run_info(src, "sdk").status == "finished"


def test_parquet_metrics_keep_wall_times_and_a_stable_schema(tmp_path):
    db = tmp_path / "s.db"
    make_source_run(db)
    out = tmp_path / "m.parquet"
    export(db, "metrics", "parquet", out)
    table = pq.read_table(out)
    assert same_schema(table.schema, parquet_schema("metrics"))
    rows = table.to_pylist()
    assert rows[0] == {"step": 0, "name": "kl/mean", "value": 0.5, "wall_time": WALL0}
    # another run with other metric names: the same schema
    import_ok(db, FIXTURES / "openrlhf_metrics.jsonl")
    other = tmp_path / "o.parquet"
    export(db, "metrics", "parquet", other, run="r")
    assert pq.read_schema(other).equals(table.schema, check_metadata=True)
    samples_out = tmp_path / "s.parquet"
    export(db, "samples", "parquet", samples_out)
    assert same_schema(pq.read_schema(samples_out), parquet_schema("samples"))


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_findings_and_events_export(tmp_path, fmt):
    db = tmp_path / "s.db"
    make_source_run(db)
    rows = {}
    for what in ("findings", "events"):
        if fmt == "jsonl":
            rows[what] = [strict_json(x) for x in export(db, what).splitlines()]
        else:
            export(db, what, fmt, tmp_path / f"{what}.parquet")
            rows[what] = pq.read_table(tmp_path / f"{what}.parquet").to_pylist()
    finding, event = rows["findings"][0], rows["events"][0]
    evidence = finding["evidence"] if fmt == "jsonl" else strict_json(finding["evidence"])
    payload = event["payload"] if fmt == "jsonl" else strict_json(event["payload"])
    assert (finding["detector"], finding["severity"], finding["patterns"]) == ("nonfinite", "red",
                                                                               ["nonfinite_values"])
    assert evidence == {"grad_norm": "NaN", "window": [1, 2]}
    assert (event["kind"], payload) == ("checkpoint", {"path": "ckpt/3", "loss": "Infinity"})
    # for reading elsewhere, not for importing back: a clear refusal
    path = tmp_path / f"findings.{fmt}"
    if fmt == "jsonl":
        path.write_text(export(db, "findings"))
    result = cli("import", "--store", f"sqlite:///{tmp_path / 'x.db'}", path)
    assert result.returncode == 2 and "only metrics and samples exports" in result.stderr


def test_export_errors_are_clear(tmp_path):
    db = tmp_path / "s.db"
    make_source_run(db)
    result = cli("export", "--store", f"sqlite:///{db}", "--run", "src", "--what", "metrics",
                 "--format", "parquet")
    assert result.returncode == 2 and "--out" in result.stderr
    result = cli("export", "--store", f"sqlite:///{db}", "--run", "nope", "--what", "metrics")
    assert result.returncode == 2 and "nope" in result.stderr
    out = tmp_path / "m.jsonl"
    export(db, "metrics", out=out)
    assert len(out.read_text().splitlines()) == 4
    assert not list(tmp_path.glob(".*partial"))
    # a run without findings: an empty JSONL and a Parquet file with the schema and no rows
    import_ok(db, FIXTURES / "openrlhf_metrics.jsonl")
    assert export(db, "findings", run="r") == ""
    export(db, "findings", "parquet", tmp_path / "f.parquet", run="r")
    empty = pq.read_table(tmp_path / "f.parquet")
    assert empty.num_rows == 0 and same_schema(empty.schema, parquet_schema("findings"))


# --- refusing bad input without writing anything ----------------------------------------------

def bad_files(tmp_path: Path) -> dict[str, tuple[list[str], Path, str]]:
    """name -> (extra CLI args, the bad file, what the error must say)."""
    good = (FIXTURES / "verl_metrics.jsonl").read_text().splitlines()
    cut = tmp_path / "cut.jsonl"  # a writer killed mid-line
    cut.write_text("\n".join(good[:2] + [good[2][:40]]) + "\n")
    nostep = tmp_path / "nostep.jsonl"
    nostep.write_text('{"step": 1, "data": {"a": 1}}\n{"data": {"a": 2}}\n')
    noprompt = tmp_path / "completions_00001.parquet"
    pq.write_table(pa.table({"step": [1], "text": ["x"], "reward": [1.0]}), noprompt)
    rollout = tmp_path / "3.jsonl"
    rollout.write_text('{"input": "q", "output": "a", "score": 1.0, "step": 3}\n'
                       '{"input": "q", "output": "b", "step": 3}\n')
    events_dir = tmp_path / "tb"
    events_dir.mkdir()
    garbage = events_dir / "events.out.tfevents.123.host"
    garbage.write_bytes(b"\x00\x01not a tfrecord at all" * 10)
    return {
        "truncated line": (["--format", "jsonl-logger"], cut, "cut.jsonl (line 3): is not valid JSON"),
        "missing step": (["--format", "jsonl-logger"], nostep, '(line 2): has "data" but no "step"'),
        "no prompt column": (["--format", "trl-completions"], noprompt, "not TRL's prompt/completion"),
        "rollout without score": (["--format", "verl-rollout"], rollout, "(line 2): lacks score"),
        "not an event file": (["--format", "tensorboard"], garbage, "(byte offset 0): fails the CRC check"),
    }


@pytest.mark.parametrize("case", ["truncated line", "missing step", "no prompt column",
                                  "rollout without score", "not an event file"])
def test_malformed_file_exits_2_and_writes_nothing(tmp_path, case):
    args, bad, message = bad_files(tmp_path)[case]
    db = tmp_path / "new.db"
    result = cli("import", "--store", f"sqlite:///{db}", *args, bad)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert not db.exists()  # the store was never opened


def test_a_bad_file_among_good_ones_leaves_an_existing_store_untouched(tmp_path):
    db = tmp_path / "s.db"
    import_ok(db, FIXTURES / "openrlhf_metrics.jsonl")
    _, bad, _ = bad_files(tmp_path)["truncated line"]
    result = cli("import", "--store", f"sqlite:///{db}", FIXTURES / "verl_rollout", bad)
    assert result.returncode == 2
    assert run_ids(db) == ["r"]


def test_undetectable_file_asks_for_a_format(tmp_path):
    csv = tmp_path / "metrics.jsonl"
    csv.write_text('{"hello": "world"}\n')
    result = cli("import", "--store", f"sqlite:///{tmp_path / 'x.db'}", csv)
    assert result.returncode == 2
    assert "matches no known format" in result.stderr and "--format" in result.stderr


def test_existing_run_id_and_two_tensorboard_runs_are_refused(tmp_path):
    db = tmp_path / "s.db"
    import_ok(db, FIXTURES / "openrlhf_metrics.jsonl")
    again = cli("import", "--store", f"sqlite:///{db}", "--run-id", "r", FIXTURES / "openrlhf_metrics.jsonl")
    assert again.returncode == 2 and "already exists" in again.stderr
    both = cli("import", "--store", f"sqlite:///{db}", FIXTURES / "tensorboard")
    assert both.returncode == 2 and "Import one run folder at a time" in both.stderr
    assert run_ids(db) == ["r"]


def test_default_run_id_and_name(tmp_path):
    db = tmp_path / "s.db"
    result = cli("import", "--store", f"sqlite:///{db}", FIXTURES / "openrlhf_metrics.jsonl")
    assert result.returncode == 0, result.stderr
    (run_id,) = run_ids(db)
    assert re.fullmatch(r"imp-\d{8}-\d{6}-[0-9a-f]{6}", run_id)
    assert run_id in result.stdout
    info = run_info(db, run_id)
    assert (info.name, info.project, info.status) == ("openrlhf_metrics", "imported", "finished")


def test_help_of_both_commands():
    for command, words in (("export", ["--what", "--format", "--out", '"NaN"']),
                           ("import", ["--format", "trl-completions", "--run-id", "import/<source>"])):
        result = cli(command, "--help")
        assert result.returncode == 0
        for word in words:
            assert word in result.stdout, (command, word)


# --- a custom trainer's keys: --map / --map-file / --step-key; the derived per-sequence KL -----

def _write_lines(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_map_puts_a_custom_trainers_keys_on_catalog_names_and_derives_sequence_kl(tmp_path):
    log = _write_lines(tmp_path / "minimind.jsonl", [
        {"step": s, "Reward": -1.8 + 0.01 * s, "KL_ref": 0.002 * s, "Avg Len": 200.0 + s,
         "Adv Skew": 0.93} for s in range(1, 6)])
    mapfile = tmp_path / "map.yaml"
    mapfile.write_text("Avg Len: response/length_mean\nReward: reward/max\n")
    db = tmp_path / "s.db"
    out = import_ok(db, log, "--map-file", mapfile, "--map", "Reward=reward/mean",
                    "--map", "KL_ref=kl/token_mean")
    got = series(db)
    assert got["reward/mean"][3] == pytest.approx(-1.77)  # --map wins over the map file
    assert got["kl/token_mean"][2] == pytest.approx(0.004)
    assert got["response/length_mean"][2] == 202.0
    assert got["import/unknown/Adv Skew"][1] == 0.93  # not mapped: kept, marked foreign
    # kl/mean = kl/token_mean x response/length_mean on every step, and the summary says so
    assert got["kl/mean"][2] == pytest.approx(0.004 * 202.0)
    assert "mapped by --map: Avg Len -> response/length_mean, KL_ref -> kl/token_mean" in out
    assert "derived kl/mean on 5 steps: kl/mean = kl/token_mean x response/length_mean" in out
    config = run_info(db).config["import"]
    assert config["derived"]["kl/mean"]["steps"] == 5
    assert config["key_map"]["KL_ref"] == "kl/token_mean"


def test_a_logged_sequence_kl_is_never_overwritten_by_the_derived_one(tmp_path):
    log = _write_lines(tmp_path / "trl.jsonl", [
        {"step": 1, "kl": 0.01, "completions/mean_length": 100.0, "reward": 0.5},
        {"step": 2, "kl": 0.02, "completions/mean_length": 100.0, "reward": 0.5,
         "objective/kl": 7.5},
        {"step": 3, "kl": 0.03, "reward": 0.5}])  # no length: nothing derived
    db = tmp_path / "s.db"
    out = import_ok(db, log, "--map", "objective/kl=kl/mean")
    got = series(db)
    assert got["kl/mean"] == {1: pytest.approx(1.0), 2: 7.5}
    assert "derived kl/mean on 1 steps" in out


def test_older_trl_and_verl_keys_reach_the_detectors_names(tmp_path):
    old_trl = _write_lines(tmp_path / "old_trl.jsonl", [
        {"step": 1, "completion_length": 256.0, "rewards/reward_fn": 0.125, "reward": 0.125,
         "kl": 0.0, "loss": 0.0}])
    db = tmp_path / "s.db"
    import_ok(db, old_trl)
    got = series(db)
    assert got["response/length_mean"] == {1: 256.0}
    assert got["reward/reward_fn/mean"] == {1: 0.125}
    assert got["kl/mean"] == {1: 0.0}
    old_verl = _write_lines(tmp_path / "old_verl.jsonl", [
        {"step": 101, "actor/entropy_loss": 0.035, "critic/vf_loss": 0.05, "critic/vpred_mean": 0.8,
         "critic/advantages/mean": 0.0, "critic/advantages/max": 3.1, "critic/returns/mean": 0.7,
         "critic/grad_norm": 19.5, "actor/pg_loss": 0.02, "critic/score/mean": 0.6}])
    db2 = tmp_path / "t.db"
    import_ok(db2, old_verl)
    got = series(db2)
    assert got["policy/entropy"] == {101: 0.035}  # older verl: the entropy, despite the name
    assert got["value/mean"] == {101: 0.8} and got["value/loss"] == {101: 0.05}
    assert got["grad/norm/critic"] == {101: 19.5} and got["returns/mean"] == {101: 0.7}
    assert got["advantage/max"] == {101: 3.1}


def test_an_unknown_catalog_name_in_a_map_fails_before_reading_with_close_names(tmp_path):
    db = tmp_path / "new.db"
    result = cli("import", "--store", f"sqlite:///{db}", FIXTURES / "openrlhf_metrics.jsonl",
                 "--map", "Reward=reward/meen")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "'reward/meen' is not a catalog metric name" in result.stderr
    assert "close catalog names: reward/mean" in result.stderr
    bad = cli("import", "--store", f"sqlite:///{db}", FIXTURES / "openrlhf_metrics.jsonl",
              "--map", "Reward")
    assert bad.returncode == 2 and "is not FOREIGN_KEY=catalog/name" in bad.stderr
    two = cli("import", "--store", f"sqlite:///{db}", FIXTURES / "openrlhf_metrics.jsonl",
              "--map", "a=reward/mean", "--map", "b=reward/mean")
    assert two.returncode == 2 and "both 'a' and 'b' map to 'reward/mean'" in two.stderr
    assert not db.exists()


def test_step_key_reads_a_log_whose_step_lives_elsewhere(tmp_path):
    log = _write_lines(tmp_path / "fragments.jsonl", [
        {"episode": 96, "objective/kl": 6.8, "objective/scores": 2.36, "eps": 1},
        {"episode": 112, "objective/kl": 7.1, "objective/scores": 2.41, "eps": 1}])
    db = tmp_path / "s.db"
    refused = cli("import", "--store", f"sqlite:///{db}", log)
    assert refused.returncode == 2 and "--step-key KEY" in refused.stderr
    out = import_ok(db, log, "--step-key", "episode")
    assert "step read from 'episode'" in out
    got = series(db)
    assert got["kl/mean"] == {96: 6.8, 112: 7.1} and got["reward/mean"][112] == 2.41
    assert not [n for n in got if "episode" in n]
    wrong = cli("import", "--store", f"sqlite:///{tmp_path / 'x.db'}", "--format", "jsonl-logger",
                log, "--step-key", "iteration")
    assert wrong.returncode == 2 and "has no step (looked for iteration)" in wrong.stderr
