"""Console logs: printed dicts (TRL / HF Trainer, ms-swift), OpenRLHF's ``✨ Global step`` lines,
DeepSpeed-Chat step 3 (2023 and later wording) and MiniMind's ``Key: value`` lines.

The fixtures in tests/fixtures/console/ are written by hand in each trainer's printed format (the
print statements are quoted in each importer's docstring), noise included: progress bars,
warnings, debug blocks, DeepSpeed's own log lines.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from rlcockpit.cli import main
from rlcockpit.integrations.importers import detect_format, read_paths
from rlcockpit.integrations.importers._text import kv_pairs, parse_duration, parse_pydict
from rlcockpit.store import open_store

CONSOLE = Path(__file__).resolve().parent / "fixtures" / "console"


def cli(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlcockpit", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def series(db: Path, run_id: str) -> dict[str, dict[int, float]]:
    reader = open_store(db, create=False).reader()
    try:
        names = reader.metric_names(run_id)
        return {n: dict(zip(s.steps, s.values, strict=True))
                for n, s in reader.read_series(run_id, names).items()}
    finally:
        reader.close()


def doctor_json(tmp_path: Path, *paths: Path, extra: tuple[str, ...] = ()) -> tuple[int, dict, str]:
    """`rlcockpit doctor --import` in process, the report as JSON (summary on stderr)."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["doctor", "--store", f"sqlite:///{tmp_path / 'd.db'}", "--json", *extra,
                     "--import", *map(str, paths)])
    return code, json.loads(out.getvalue()) if out.getvalue() else {}, err.getvalue()


# --- detection -------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "fmt"), [
    ("trl_grpo_console.log", "console-dicts"),
    ("ms_swift_grpo.log", "console-dicts"),
    ("openrlhf_ppo.log", "console-dicts"),
    ("deepspeed_chat_step3_2023.log", "deepspeed-chat"),
    ("deepspeed_chat_step3.log", "deepspeed-chat"),
    ("minimind_grpo.log", "console-kv"),
    ("minimind_ppo.log", "console-kv"),
    ("verl_console.log", "console-kv"),
    ("trl_notebook_table.md", "console-table"),
    ("hf_notebook_table.tsv", "console-table"),
    ("llamafactory_trainer_log.jsonl", "jsonl-logger"),
])
def test_each_console_log_is_detected(name, fmt):
    assert detect_format(CONSOLE / name) == fmt


def test_log_and_txt_files_of_a_folder_are_candidates(tmp_path):
    (tmp_path / "train.txt").write_text((CONSOLE / "minimind_ppo.log").read_text())
    (tmp_path / "notes.txt").write_text("nothing to see here\n")
    parsed = read_paths([tmp_path])
    assert [f["format"] for f in parsed.files] == ["console-kv"]
    assert list(parsed.ignored_files) == [str(tmp_path / "notes.txt")]


# --- printed dicts ---------------------------------------------------------------------------

def test_trl_console_dicts_take_their_row_order_as_the_step(tmp_path):
    db = tmp_path / "s.db"
    result = cli("import", "--store", f"sqlite:///{db}", "--run-id", "r", CONSOLE / "trl_grpo_console.log")
    assert result.returncode == 0, result.stderr
    assert "the step is their row order" in result.stdout
    assert "lines that hold no metric dict" in result.stdout  # tqdm bars and warnings, counted
    got = series(db, "r")
    assert got["reward/mean"] == {1: 0.2, 2: 0.2875, 3: 0.31}
    assert got["kl/token_mean"][2] == 0.0012 and math.isnan(got["kl/token_mean"][3])
    assert got["grad/norm/actor"][3] == math.inf and got["policy/entropy"][3] == -math.inf
    assert got["time/step_s"] == {1: 12.5, 2: 13.0, 3: 12.75}
    # the evaluation dict belongs to the step before it, the summary dict is left out
    assert got["eval/reward/mean"] == {2: 0.3}
    assert not [n for n in got if "train_runtime" in n or "top_k" in n]
    config = open_store(db, create=False).reader().get_run("r").config["import"]
    assert config["files"][0]["step_from"] == "row order"


def test_openrlhf_global_step_lines_keep_their_step_and_values(tmp_path):
    parsed = read_paths([CONSOLE / "openrlhf_ppo.log"])
    assert parsed.sources == {"openrlhf"} and parsed.steps == [1, 2, 3]
    values = {(s, n): v for (s, n), (v, _) in parsed.metrics.items()}
    assert values[(1, "policy/loss")] == 0.0123 and math.isnan(values[(3, "policy/loss")])
    assert values[(3, "grad/norm/actor")] == math.inf
    assert values[(2, "response/truncated_frac")] == 0.04  # `truncated` (the first of two aliases)
    assert values[(1, "time/step_s")] == 109.5 and values[(1, "time/rollout_s")] == 55.0
    assert values[(2, "reward/std")] == 0.41  # rollout/reward_std: the std over the step's samples
    assert (1, "import/openrlhf/group_reward_std") in values  # a mean within-group std: kept
    assert "step_from" not in parsed.files[0]  # the step is OpenRLHF's own global step


def test_openrlhf_sample_lines_and_tensorboard_text_import_as_one_sample_a_step(tmp_path):
    """tests/fixtures/openrlhf_real: OpenRLHF 0.11.2's own init_logger and TensorboardLogger output.
    A one-shot import keeps the step's sample as follow mode does, from either file, and once when
    both are passed."""
    real = CONSOLE.parent / "openrlhf_real"
    event = next(real.glob("events.out.tfevents.*"))
    for paths in ([real / "train.log"], [event], [real / "train.log", event]):
        parsed = read_paths(paths)
        got = sorted((s.step, s.sample_id, s.response, s.reward) for s in parsed.samples)
        assert got == [(k, 0, f"question {k} answer {k}", 0.25 * k) for k in range(1, 5)], paths
    db = tmp_path / "o.db"
    assert main(["import", "--store", f"sqlite:///{db}", str(real / "train.log"), str(event)]) == 0
    reader = open_store(db, create=False).reader()
    try:
        (run,) = reader.list_runs()
        assert reader.summary(run.run_id).samples == 4
    finally:
        reader.close()


def test_ms_swift_console_reads_the_step_and_the_run_clock(tmp_path):
    parsed = read_paths([CONSOLE / "ms_swift_grpo.log"])
    assert parsed.sources == {"ms-swift"} and parsed.steps == [1, 2]
    assert parsed.elapsed == {1: 318.0, 2: 631.0}  # '5m 18s', '10m 31s'
    assert parsed.timing["synthetic"] and parsed.timing["ended_at"] - parsed.timing["started_at"] == 631.0
    names = {n for _, n in parsed.metrics}
    assert {"reward/mean", "kl/token_mean", "sys/gpu_mem_reserved_gb"} <= names
    assert "import/ms-swift/reward_std" in names  # the mean within-group std, not reward/std


def test_printed_dicts_are_read_without_evaluating_code():
    assert parse_pydict("{'a': __import__('os').system('echo pwned')}") is None
    assert parse_pydict("{'loss': nan, 'x': -inf, 'n': np.float64(0.25), 't': tensor(3.0, device='cuda:0'),"
                        " 's': 'nan stays text', 'd': {'a': 1}}") == {
        "loss": pytest.approx(math.nan, nan_ok=True), "x": -math.inf, "n": 0.25, "t": 3.0,
        "s": "nan stays text", "d/a": 1}
    assert parse_pydict("{" * 100_000) is None  # no RecursionError
    assert parse_duration("2d 0h 18m 21s") == 173901.0 and parse_duration("soon") is None


# --- DeepSpeed-Chat --------------------------------------------------------------------------

def test_deepspeed_chat_2023_lines_attach_the_reward_to_their_step(tmp_path):
    db = tmp_path / "s.db"
    result = cli("import", "--store", f"sqlite:///{db}", "--run-id", "r",
                 CONSOLE / "deepspeed_chat_step3_2023.log")
    assert result.returncode == 0, result.stderr
    got = series(db, "r")
    assert got["reward/mean"] == {3183: -7.80859375, 3184: -6.359375, 3185: -4.54296875}
    assert got["policy/loss"][3183] == 30.921875 and got["policy/loss"][3184] == math.inf
    assert got["value/loss"][3185] == math.inf and got["ppo/epochs"][3183] == 1.0
    assert "import/deepspeed-chat/unsuper_loss" in got
    assert "time/step_s" not in got  # the |E2E latency= lines belong to the next generation


def test_deepspeed_chat_later_wording_shifts_later_epochs_and_keeps_latency(tmp_path):
    parsed = read_paths([CONSOLE / "deepspeed_chat_step3.log"])
    values = {(s, n): v for (s, n), (v, _) in parsed.metrics.items()}
    assert parsed.steps == [0, 1, 2, 3, 4]  # epoch 1 restarts at step 0: shifted past step 2
    assert values[(0, "reward/mean")] == -0.5654296875 and values[(4, "reward/mean")] == -0.4010
    assert values[(3, "policy/loss")] == 0.0152 and values[(0, "time/step_s")] == 2.55
    assert values[(1, "import/deepspeed-chat/EMA reward score")] == -0.5599
    assert any("restarts `step` every epoch" in n for n in parsed.notes)


# --- Key: value lines (MiniMind) -------------------------------------------------------------

def test_minimind_grpo_lines_take_the_counter_as_step_and_keep_kl_ref_foreign(tmp_path):
    assert kv_pairs("Epoch:[1/1](3/9751), Reward: -1.9, KL_ref: -0.0004")[0] == ("Epoch", "[1/1](3/9751)")
    parsed = read_paths([CONSOLE / "minimind_grpo.log"])
    values = {(s, n): v for (s, n), (v, _) in parsed.metrics.items()}
    assert parsed.sources == {"minimind-grpo"} and parsed.steps == [1, 2, 3, 4]
    assert values[(2, "reward/mean")] == -1.7233 and math.isnan(values[(4, "reward/mean")])
    assert values[(1, "advantage/whitened_std")] == 0.9258
    assert values[(3, "response/length_mean")] == 288.12
    # log pi_ref - log pi (the negative k1 estimate) is no KL: it stays foreign, nothing derived
    assert values[(1, "import/minimind-grpo/KL_ref")] == -0.001
    assert not any(n == "kl/mean" for _, n in parsed.metrics)


def test_minimind_ppo_lines_reach_the_kl_and_ppo_names():
    parsed = read_paths([CONSOLE / "minimind_ppo.log"])
    values = {(s, n): v for (s, n), (v, _) in parsed.metrics.items()}
    assert parsed.sources == {"minimind-ppo"}
    assert values[(2, "kl/token_mean")] == 0.0015 and values[(2, "policy/approx_kl")] == 0.0004
    assert values[(3, "value/loss")] == 0.4101 and values[(1, "optim/lr/critic")] == 1e-06
    assert values[(2, "kl/mean")] == pytest.approx(0.0015 * 121.75)  # derived


def test_a_unit_joins_the_key_instead_of_being_converted(tmp_path):
    log = tmp_path / "cosmos.log"
    log.write_text("[cosmos] 2025-05-01 - Step: 826/4725, Loss: 0.01, Iteration time: 20.1s, Reward: 0.4\n"
                   "[cosmos] 2025-05-01 - Step: 827/4725, Loss: 0.02, Iteration time: 19.8s, Reward: 0.5\n")
    parsed = read_paths([log])
    values = {(s, n): v for (s, n), (v, _) in parsed.metrics.items()}
    assert parsed.steps == [826, 827]
    (name,) = [n for s, n in values if s == 827 and n.endswith("/Iteration time (s)")]
    assert values[(827, name)] == 19.8 and values[(826, "reward/mean")] == 0.4


# --- doctor --import end to end, one per console format ---------------------------------------

@pytest.mark.parametrize(("name", "source", "must_run"), [
    ("trl_grpo_console.log", "trl-grpo", "nonfinite"),
    ("ms_swift_grpo.log", "ms-swift", "kl_tiers"),
    ("openrlhf_ppo.log", "openrlhf", "nonfinite"),
    ("deepspeed_chat_step3_2023.log", "deepspeed-chat", "nonfinite"),
    ("deepspeed_chat_step3.log", "deepspeed-chat", "reward_oscillation"),
    ("minimind_grpo.log", "minimind-grpo", "nonfinite"),
    ("minimind_ppo.log", "minimind-ppo", "kl_tiers"),
    ("verl_console.log", "verl", "entropy"),
    ("trl_notebook_table.md", "trl-grpo", "levels"),
])
def test_doctor_import_diagnoses_each_console_log(tmp_path, name, source, must_run):
    code, report, err = doctor_json(tmp_path, CONSOLE / name)
    assert code == report["exit_code"] and "Traceback" not in err
    assert f"[{source}]" in err  # the import summary, on stderr
    ran = {c["detector"] for c in report["coverage"]["detectors"] if c["state"] == "ran"}
    assert must_run in ran
    logged = report["import"]["logged_coverage"]
    assert logged["carried"] >= logged["ran"] >= 1
    if name == "trl_grpo_console.log":
        assert report["import"]["step_from_row_order"]


def test_ms_swift_logging_jsonl_is_told_from_trl_by_its_own_keys(tmp_path):
    """ms-swift appends the same dicts to output_dir/logging.jsonl (swift/trainers/patcher.py)."""
    line = parse_pydict((CONSOLE / "ms_swift_grpo.log").read_text().splitlines()[2])
    log = tmp_path / "logging.jsonl"
    log.write_text(json.dumps(line) + "\n")
    parsed = read_paths([log])
    assert parsed.sources == {"ms-swift"} and parsed.steps == [1]  # from "global_step/max_steps"
    assert parsed.elapsed == {1: 318.0}


def test_a_jsonl_without_steps_is_imported_by_row_order_and_says_so(tmp_path):
    log = tmp_path / "pasted.jsonl"
    log.write_text('{"loss": 0.1, "reward": 0.5, "kl": 0.01}\n{"loss": 0.2, "reward": 0.6, "kl": 0.02}\n')
    result = cli("import", "--store", f"sqlite:///{tmp_path / 's.db'}", log)
    assert result.returncode == 0, result.stderr
    assert "row order" in result.stdout and "2 steps" in result.stdout


def test_json_lines_of_dicts_without_a_step_are_numbered_by_row_order(tmp_path):
    # a Trainer's console dicts pasted from an issue and saved as JSON Lines: no step anywhere
    path = tmp_path / "pasted.jsonl"
    rows = [{"loss": 0.0, "grad_norm": 0.79, "reward": 0.5, "kl": float("nan")},
            {"loss": 0.01, "grad_norm": 0.81, "reward": 0.6, "kl": 0.002}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert detect_format(path) == "console-dicts"
    parsed = read_paths([path])
    assert parsed.steps == [1, 2]
    values = {(s, n): v for s, n, v in ((p.step, p.name, p.value) for p in parsed.metric_points())}
    assert values[(2, "reward/mean")] == 0.6 and math.isnan(values[(1, "kl/token_mean")])
    assert any(f.get("step_from") == "row order" for f in parsed.files)


# --- verl's console, notebook tables, LLaMA-Factory's trainer log ---------------------------------

def test_verl_console_lines_keep_their_step_names_and_nan(tmp_path):
    """verl's console logger prints `step:N - key:value - ...` (values with 3 decimals) behind
    Ray's `(TaskRunner pid=N)` prefix; progress bars and warnings around it are noise."""
    parsed = read_paths([CONSOLE / "verl_console.log"])
    assert parsed.sources == {"verl"} and parsed.steps == [1, 2, 3, 4, 5, 6]
    values = {k: v for k, (v, _) in parsed.metrics.items()}
    assert values[(1, "policy/entropy")] == 0.51 and values[(3, "reward/mean")] == 0.35
    assert math.isnan(values[(5, "grad/norm/actor")])
    assert "3 lines without a step" in " ".join(parsed.notes)  # progress bars, a warning


def test_a_markdown_table_pasted_in_an_issue_is_read_with_the_trainer_column_names(tmp_path):
    parsed = read_paths([CONSOLE / "trl_notebook_table.md"])
    assert parsed.steps == [1, 2, 3, 4] and parsed.sources == {"trl-grpo"}
    values = {k: v for k, (v, _) in parsed.metrics.items()}
    assert values[(2, "reward/mean")] == 0.5 and values[(3, "reward/std")] == 0.0
    assert values[(1, "policy/loss")] == 0.0  # "Training Loss" is the Trainer's name for loss
    assert values[(4, "kl/token_mean")] == 0.000028
    assert "2 lines outside the table" in " ".join(parsed.notes)  # the sentences around it


def test_a_notebook_table_copied_as_tabs_skips_no_log_cells(tmp_path):
    parsed = read_paths([CONSOLE / "hf_notebook_table.tsv"])
    assert parsed.steps == [10, 20, 30]
    values = {k: v for k, (v, _) in parsed.metrics.items()}
    assert (10, "policy/loss") not in values and values[(20, "policy/loss")] == 0.0001
    assert parsed.skipped["text values"] == 3  # two "No log" at step 10, one at step 20


def test_a_table_without_a_step_column_is_refused_with_the_fix(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("| loss | reward | kl |\n|---|---|---|\n| 0.1 | 0.5 | 0.01 |\n")
    result = cli("import", "--store", f"sqlite:///{tmp_path / 'x.db'}", "--format", "console-table",
                 path)
    assert result.returncode == 2 and "Step column" in result.stderr
    assert "Traceback" not in result.stderr


def test_llamafactory_trainer_log_takes_current_steps_and_its_elapsed_clock(tmp_path):
    parsed = read_paths([CONSOLE / "llamafactory_trainer_log.jsonl"], now=10_000.0)
    assert parsed.steps == [5, 10, 15]
    values = {k: v for k, (v, _) in parsed.metrics.items()}
    assert values[(10, "reward/mean")] == -0.41
    walls = {s: w for (s, n), (_, w) in parsed.metrics.items() if n == "reward/mean"}
    assert walls[15] - walls[5] == pytest.approx(302.0)  # "0:07:33" - "0:02:31"


@pytest.mark.parametrize(("text", "seconds"), [
    ("0:01:02", 62.0), ("1 day, 2:03:04", 93784.0), ("3 days, 0:00:01.5", 259201.5),
    ("5m 18s", 318.0), ("12:00", None)])
def test_durations_of_python_timedeltas_and_ms_swift(text, seconds):
    assert parse_duration(text) == seconds
