"""NeMo-RL's GRPO console (``nemo_rl/algorithms/grpo.py`` ``grpo_train`` / ``validate``, and
``algorithms/utils.py`` ``print_performance_metrics``) imported as a run.

tests/fixtures/console/nemo_rl_grpo.log is written in the trainer's printed format (the print
statements are quoted in the importer's docstring): the config dump and the Ray / vLLM start-up
first, an initial validation, then two epochs of two steps each (the step header restarts with the
epoch), a validation inside step 2, a Ray line between two timing bullets, and a NaN loss.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import pytest

from rlcockpit.cli import main
from rlcockpit.integrations.importers import FORMATS, detect_format, read_paths
from rlcockpit.store import open_store

CONSOLE = Path(__file__).resolve().parent / "fixtures" / "console"
NEMO = CONSOLE / "nemo_rl_grpo.log"
E = "=" * 25


def values(parsed) -> dict[tuple[int, str], float]:
    return {k: v for k, (v, _) in parsed.metrics.items()}


def doctor_json(tmp_path: Path, *paths: Path) -> tuple[int, dict, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["doctor", "--store", f"sqlite:///{tmp_path / 'd.db'}", "--json",
                     "--import", *map(str, paths)])
    return code, json.loads(out.getvalue()) if out.getvalue() else {}, err.getvalue()


# --- detection -------------------------------------------------------------------------------

def test_the_nemo_rl_console_is_detected_and_listed():
    assert "nemo-rl-console" in FORMATS
    assert detect_format(NEMO) == "nemo-rl-console"


@pytest.mark.parametrize(("name", "fmt"), [
    ("verl_console.log", "console-kv"),
    ("trl_grpo_console.log", "console-dicts"),
    ("openrlhf_ppo.log", "console-dicts"),
    ("ms_swift_grpo.log", "console-dicts"),
    ("deepspeed_chat_step3.log", "deepspeed-chat"),
    ("minimind_grpo.log", "console-kv"),
    ("trl_notebook_table.md", "console-table"),
])
def test_other_console_logs_are_not_taken_by_the_nemo_detector(name, fmt):
    assert detect_format(CONSOLE / name) == fmt


def test_the_step_header_alone_is_not_enough(tmp_path):
    """A log that only mentions `Step N/M` between `=` signs has none of the result blocks."""
    log = tmp_path / "other.log"
    log.write_text(f"{E} Step 1/10 {E}\nStep: 1/10, Loss: 0.5, Reward: 0.1\n"
                   f"{E} Step 2/10 {E}\nStep: 2/10, Loss: 0.4, Reward: 0.2\n", encoding="utf-8")
    assert detect_format(log) == "console-kv"


def test_a_header_deep_in_a_long_start_up_is_still_found(tmp_path):
    log = tmp_path / "slurm-123.out"
    start_up = "".join(f"(VllmGenerationWorker pid=7) INFO loading shard {i}\n" for i in range(3000))
    log.write_text(start_up + NEMO.read_text(encoding="utf-8"), encoding="utf-8")
    assert detect_format(log) == "nemo-rl-console"


# --- values on catalog names -----------------------------------------------------------------

def test_steps_and_values_land_on_catalog_names():
    parsed = read_paths([NEMO], now=10_000.0)
    got = values(parsed)
    assert parsed.sources == {"nemo-rl"}
    assert parsed.steps == [0, 1, 2, 3, 4]  # the initial validation at 0; epoch 2 continues at 3
    assert {s: got[(s, "reward/mean")] for s in range(1, 5)} == {1: 0.3125, 2: 0.375, 3: 0.4219,
                                                               4: 0.4688}
    assert got[(1, "response/length_mean")] == 287.5 and got[(4, "response/length_mean")] == 310.125
    assert got[(1, "policy/loss")] == 0.0123 and math.isnan(got[(3, "policy/loss")])
    assert {s: got[(s, "time/step_s")] for s in range(1, 5)} == {1: 45.67, 2: 68.12, 3: 44.9,
                                                              4: 46.02}
    assert got[(2, "time/rollout_s")] == 21.4 and got[(2, "time/update_s")] == 12.51
    assert got[(1, "time/advantage_s")] == 0.12
    # validation: the initial one at step 0, the one run inside step 2 at step 2
    assert got[(0, "eval/reward/mean")] == 0.25 and got[(2, "eval/reward/mean")] == 0.4375
    assert got[(0, "time/eval_s")] == 21.07 and (1, "eval/reward/mean") not in got
    assert (0, "reward/mean") not in got
    # the run's clock comes from the per-step durations
    assert parsed.timing["source"] == "per-step durations (time/step_s)"
    assert any("restarts at every epoch" in n for n in parsed.notes)
    (entry,) = parsed.files
    assert entry["format"] == "nemo-rl-console" and entry["step_headers"] == 4
    assert entry["lines_ignored"] > 0  # config dump, Ray / vLLM lines, "▶ ..." phases


def test_unknown_labels_are_kept_under_import():
    got = values(read_paths([NEMO]))
    assert got[(2, "import/nemo-rl/Samples processed")] == 64.0  # a label no table knows
    assert got[(2, "import/nemo-rl/Training FLOPS (TFLOPS)")] == 123.45  # its unit joins it
    assert got[(1, "import/nemo-rl/gen_kl_error")] == 0.0008  # "Generation KL Error", kept on purpose
    assert got[(1, "import/nemo-rl/timing/train/data_processing")] == 0.45
    assert got[(1, "import/nemo-rl/timing/train/prepare_for_generation/total")] == 3.21
    assert got[(1, "import/nemo-rl/performance/tokens_per_sec_per_gpu")] == 144.51
    assert got[(2, "import/nemo-rl/validation/avg_length")] == 301.2


def test_doctor_import_reports_the_unknown_labels(tmp_path):
    code, report, err = doctor_json(tmp_path, NEMO)
    assert code == report["exit_code"] and "Traceback" not in err
    assert "[nemo-rl]" in err  # the import summary, on stderr
    unknown = {k["key"]: k for k in report["import"]["keys_not_understood"]}
    assert "import/nemo-rl/Samples processed" in unknown
    assert "import/nemo-rl/Training FLOPS (TFLOPS)" in unknown
    assert unknown["import/nemo-rl/gen_kl_error"]["kept_on_purpose"]
    ran = {c["detector"] for c in report["coverage"]["detectors"] if c["state"] == "ran"}
    assert {"nonfinite", "reward_progress"} <= ran
    assert "nonfinite" in {f["detector"] for f in report["findings"]}  # the NaN loss of step 3


def test_rlcockpit_import_writes_the_run(tmp_path):
    db = tmp_path / "s.db"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["import", "--store", f"sqlite:///{db}", "--run-id", "r", str(NEMO)]) == 0
    assert "[nemo-rl]" in out.getvalue() and "5 steps" in out.getvalue()
    reader = open_store(db, create=False).reader()
    try:
        series = reader.read_series("r", ["reward/mean", "time/step_s"])
        assert list(series["reward/mean"].steps) == [1, 2, 3, 4]
        run = reader.get_run("r")
        assert run.config["import"]["formats"] == ["nemo-rl-console"]
        assert run.ended_at - run.started_at >= 45.67 + 68.12 + 44.9 + 46.02  # its own clock
    finally:
        reader.close()


# --- variants of the printed format ------------------------------------------------------------

def _block(step: int, total: int, reward: str, extra: str = "") -> str:
    return (f"\n{E} Step {step}/{total} {E}\n▶ Preparing batch...\n\n📊 Training Results:\n"
            f"  • Loss: 0.0100\n  • Generation KL Error: 0.0010\n{reward}"
            f"  • Mean Generation Length: 200.0000\n{extra}\n⏱️  Timing:\n"
            f"  • Total step time: 10.00s\n  • generation: 6.00s (60.0%)\n")


def test_async_grpo_without_epochs_keeps_the_header_step(tmp_path):
    """async_grpo_train: one header per step, no epoch header, and its own result lines."""
    log = tmp_path / "async.log"
    async_lines = "  • Buffer Size: 32\n  • Avg Trajectory Age: 1.50 steps\n"
    log.write_text(_block(7, 9, "  • Avg Reward: 0.5000\n", async_lines)
                   + _block(8, 9, "  • Avg Reward: 0.6000\n", async_lines), encoding="utf-8")
    parsed = read_paths([log])
    got = values(parsed)
    assert parsed.steps == [7, 8] and got[(8, "reward/mean")] == 0.6
    assert got[(7, "import/nemo-rl/Buffer Size")] == 32.0
    assert got[(7, "import/nemo-rl/Avg Trajectory Age (steps)")] == 1.5


def test_dynamic_sampling_rewards_and_a_repeated_header(tmp_path):
    """With dynamic sampling the printed total reward is NeMo-RL's `reward`; a batch retried
    prints the same header again (no epoch header between): it is the same step."""
    dynamic = "  • Avg Filtered Reward: 0.4000\n  • Avg Total Reward: 0.3000\n"
    log = tmp_path / "dapo.log"
    log.write_text(f"{E} Epoch 1/1 {E}\n{E} Step 1/5 {E}\n▶ Preparing batch...\n"
                   + _block(1, 5, dynamic) + _block(2, 5, dynamic), encoding="utf-8")
    parsed = read_paths([log])
    got = values(parsed)
    assert parsed.steps == [1, 2]
    assert got[(1, "reward/mean")] == 0.3 and got[(1, "import/nemo-rl/filtered_reward")] == 0.4


def test_a_block_before_the_first_header_is_left_out_and_said(tmp_path):
    log = tmp_path / "cut.log"
    text = _block(3, 9, "  • Avg Reward: 0.5000\n") + _block(4, 9, "  • Avg Reward: 0.7000\n")
    log.write_text(text.split("\n", 3)[3], encoding="utf-8")  # the first header cut away
    parsed = read_paths([log], fmt="nemo-rl-console")
    assert parsed.steps == [4] and values(parsed)[(4, "reward/mean")] == 0.7
    assert any("before the first 'Step N/M' header" in n for n in parsed.notes)


def test_a_file_without_step_blocks_is_refused_with_the_fix(tmp_path):
    log = tmp_path / "empty.log"
    log.write_text(f"{E} Step 1/3 {E}\n▶ Preparing batch...\n", encoding="utf-8")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["import", "--store", f"sqlite:///{tmp_path / 'x.db'}", "--format",
                     "nemo-rl-console", str(log)])
    assert code == 2 and "NeMo-RL" in err.getvalue() and "Traceback" not in err.getvalue()


def test_follow_mode_refuses_the_nemo_console_with_the_way_to_read_it(tmp_path):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["import", "--store", f"sqlite:///{tmp_path / 'x.db'}", "--format",
                     "nemo-rl-console", "--follow", str(NEMO)])
    assert code == 2 and "--follow does not read nemo-rl-console" in err.getvalue()
    assert "import them when the run ends" in err.getvalue()
