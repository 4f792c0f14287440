"""What `rlcockpit doctor` says about an imported run's keys and coverage, its exit code on a
damaged store, and the alias rows of the sources added with the console importers."""

from __future__ import annotations

import contextlib
import io
import json
import sqlite3
from pathlib import Path

import pytest

import rlcockpit
from rlcockpit.cli import main
from rlcockpit.diagnostics.coverage import DetectorCoverage, logged_coverage
from rlcockpit.integrations.aliases import catalog_meanings, kept_note, to_catalog
from rlcockpit.integrations.keymap import build_key_map, suggest_names

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def run_cli(*args: object) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# --- keys not understood, step origin, logged coverage --------------------------------------------

def test_doctor_import_lists_every_key_it_did_not_understand_with_what_it_may_mean(tmp_path):
    log = jsonl(tmp_path / "custom.jsonl", [
        {"step": s, "loss": 0.5 / s, "mean_reward": 0.1 * s, "kl_div": 0.01} for s in range(1, 6)])
    code, out, err = run_cli("doctor", "--store", f"sqlite:///{tmp_path / 'd.db'}", "--import", log)
    assert code == 0, err
    assert "2 keys not understood" in out
    lines = {line.split()[0]: line for line in out.splitlines() if "import/" in line}
    assert "may mean reward/mean" in lines["import/trl-grpo/mean_reward"]
    assert "kl/" in lines["import/trl-grpo/kl_div"]
    assert "detectors whose inputs the log carries:" in out


def test_a_look_alike_says_why_it_is_kept_instead_of_guessing(tmp_path):
    log = jsonl(tmp_path / "verl.jsonl", [
        {"step": s, "data": {"critic/score/mean": 0.5, "critic/rewards/mean": 0.4}} for s in (1, 2)])
    code, out, _ = run_cli("doctor", "--store", f"sqlite:///{tmp_path / 'd.db'}", "--json",
                           "--import", log)
    (entry,) = json.loads(out)["import"]["keys_not_understood"]
    assert entry["key"] == "import/verl/critic/rewards/mean"
    assert "KL penalty" in entry["kept_on_purpose"] and entry["may_mean"] == []


def test_a_detector_input_carried_under_a_foreign_name_is_named(tmp_path):
    # verl keys and TRL's `entropy` in one log: verl's table wins, `entropy` lands under import/
    log = jsonl(tmp_path / "mixed.jsonl", [
        {"step": s, "actor/pg_loss": 0.1, "critic/score/mean": 0.5, "entropy": 1.5 - 0.1 * s}
        for s in range(1, 9)])
    code, out, _ = run_cli("doctor", "--store", f"sqlite:///{tmp_path / 'd.db'}", "--import", log)
    assert "entropy should have run: the log carries policy/entropy as import/verl/entropy" in out
    code, out, _ = run_cli("doctor", "--store", f"sqlite:///{tmp_path / 'e.db'}", "--json",
                           "--import", log)
    missed = {m["detector"]: m for m in json.loads(out)["import"]["logged_coverage"]["missed"]}
    assert missed["entropy"]["renamed"] == [["policy/entropy", "import/verl/entropy"]]


def test_doctor_says_when_the_step_was_derived_from_row_order(tmp_path):
    code, out, _ = run_cli("doctor", "--store", f"sqlite:///{tmp_path / 'd.db'}", "--import",
                           FIXTURES / "console" / "trl_grpo_console.log")
    assert "step derived from row order" in out


def test_logged_coverage_counts_carried_and_ran_detectors():
    def cov(name: str, reads: tuple[str, ...], ran: bool) -> DetectorCoverage:
        return DetectorCoverage(detector=name, family="f", reads=reads, steps_run=int(ran),
                                steps_skipped=int(not ran), missing=())

    meanings = {"reward/mean": {"reward/mean"}, "import/x/entropy": {"policy/entropy"},
                "import/x/Weird": set(), "grad/norm/actor": {"grad/norm/actor"}}
    result = logged_coverage(
        [cov("reward", ("reward/mean",), True), cov("entropy", ("policy/entropy",), False),
         cov("grads", ("grad/norm/",), True), cov("memory", ("sys/rss_gb",), False)],
        meanings, lambda key: meanings[key])
    assert (result.carried, result.ran) == (3, 2)
    (missed,) = result.missed
    assert missed.detector == "entropy" and missed.renamed == (("policy/entropy", "import/x/entropy"),)
    assert result.line() == "detectors whose inputs the log carries: 3, ran: 2"
    by_name = {d.detector: d for d in result.detectors}
    assert by_name["grads"].carried == (("grad/norm/", "grad/norm/actor"),)
    assert not by_name["memory"].carried and not by_name["memory"].should_have_run


def test_catalog_meanings_and_suggestions():
    assert catalog_meanings("import/unknown/kl") == {"kl/token_mean"}  # TRL's and OpenRLHF's kl
    assert catalog_meanings("reward/mean") == {"reward/mean"}
    assert catalog_meanings("import/unknown/zzz") == frozenset()
    # a look-alike its own source keeps foreign carries nothing, although another table maps the key
    assert catalog_meanings("import/minimind-grpo/KL_ref") == frozenset()
    assert catalog_meanings("import/unknown/KL_ref") == {"kl/token_mean"}  # MiniMind PPO's
    assert catalog_meanings("import/ms-swift/reward_std") == frozenset()
    assert suggest_names("import/unknown/mean_reward")[0] == "reward/mean"
    assert "sys/gpu_mem_gb" in suggest_names("import/unknown/memory_gb")
    assert kept_note("import/minimind-grpo/KL_ref").startswith("log pi_ref - log pi")


# --- map files ---------------------------------------------------------------------------------

def test_a_json_map_file_has_the_same_semantics_as_yaml(tmp_path):
    mapping = tmp_path / "map.json"
    mapping.write_text('{"Reward": "reward/mean", "KL": "kl/token_mean"}')
    assert build_key_map(["KL=kl/mean"], mapping) == {"Reward": "reward/mean", "KL": "kl/mean"}
    bad = tmp_path / "bad.json"
    bad.write_text('{"Reward": "reward/meen"}')
    code, _, err = run_cli("import", "--store", f"sqlite:///{tmp_path / 's.db'}", "--map-file", bad,
                           FIXTURES / "console" / "minimind_grpo.log")
    assert code == 2 and "close catalog names: reward/mean" in err
    assert not (tmp_path / "s.db").exists()
    broken = tmp_path / "broken.json"
    broken.write_text('{"Reward": ')
    code, _, err = run_cli("import", "--store", f"sqlite:///{tmp_path / 's.db'}", "--map-file",
                           broken, FIXTURES / "console" / "minimind_grpo.log")
    assert code == 2 and "is not valid JSON" in err and '{"KL_ref": "kl/token_mean"}' in err


# --- a damaged store ---------------------------------------------------------------------------

def _stored_run(tmp_path: Path, *, nan: bool) -> Path:
    path = tmp_path / "s.db"
    run = rlcockpit.init(project="p", name="r", store=f"sqlite:///{path}")
    for step in range(1, 41):
        run.log(step, {"policy/loss": float("nan") if nan and step == 20 else 0.5,
                       "reward/mean": 0.01 * step, "kl/mean": 0.05})
    run.close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path


def _corrupt_table(path: Path, table: str) -> None:
    """Overwrite the root page of one table's b-tree with garbage."""
    conn = sqlite3.connect(path)
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with path.open("r+b") as handle:
        handle.seek((root - 1) * page_size)
        handle.write(b"\xde\xad\xbe\xef" * (page_size // 4))


@pytest.mark.parametrize("table", ["steps", "metrics"])
def test_a_store_with_corrupt_pages_exits_3_not_no_failure_detected(tmp_path, table):
    path = _stored_run(tmp_path, nan=False)
    code, out, _ = run_cli("doctor", "--store", f"sqlite:///{path}")
    assert code == 0 and "No failure detected" in out  # intact: healthy
    _corrupt_table(path, table)
    code, out, err = run_cli("doctor", "--store", f"sqlite:///{path}")
    assert code == 3, (out, err)
    assert "No failure detected" not in out
    assert "cannot be read" in err and "Traceback" not in err


def test_a_red_finding_still_exits_2_and_a_malformed_import_exits_3(tmp_path):
    path = _stored_run(tmp_path, nan=True)
    code, _, _ = run_cli("doctor", "--store", f"sqlite:///{path}")
    assert code == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 1, "reward": 0.5, "kl": 0.1}\n{"step": 2, "reward": \n')
    code, _, err = run_cli("doctor", "--store", f"sqlite:///{tmp_path / 'x.db'}", "--import", bad)
    assert code == 3 and "bad.jsonl (line 2): is not valid JSON" in err


# --- the alias rows of the sources added with the console importers ------------------------------

@pytest.mark.parametrize(("key", "source", "expected"), [
    ("act_loss", "deepspeed-chat", "policy/loss"),
    ("cri_loss", "deepspeed-chat", "value/loss"),
    ("average reward score", "deepspeed-chat", "reward/mean"),
    ("ppo_ep", "deepspeed-chat", "ppo/epochs"),
    ("actor_grad_norm", "openrlhf", "grad/norm/actor"),
    ("train/truncated", "openrlhf", "response/truncated_frac"),
    ("timing/step_total", "openrlhf", "time/step_s"),
    ("eval/eval_math500_pass1", "openrlhf", "eval/reward/category/math500/mean"),
    ("entropy/mean", "ms-swift", "policy/entropy"),
    ("train/kl_penalty", "nemo-rl", "kl/token_mean"),
    ("timing/train/total_step_time", "nemo-rl", "time/step_s"),
    ("validation/accuracy", "nemo-rl", "eval/reward/mean"),
    ("Adv Std", "minimind-grpo", "advantage/whitened_std"),
    ("Approx KL", "minimind-ppo", "policy/approx_kl"),
    ("timing_s/step", "verl", "time/step_s"),
    ("timing_s/update_actor", "verl", "time/update_actor_s"),
    ("timing_per_token_ms/gen", "verl", "time/gen_ms_per_token"),
    ("perf/total_num_tokens", "verl", "perf/total_tokens"),
    ("prompt_length/clip_ratio", "verl", "prompt/clip_frac"),
    ("val-core/openai/gsm8k/reward/mean@1", "verl", "eval/reward/category/openai_gsm8k/mean"),
    ("val-core/math/acc/mean@4", "verl", "eval/accuracy/math"),
    ("step_time", "trl-grpo", "time/step_s"),
])
def test_new_alias_rows_map_real_keys(key, source, expected):
    assert to_catalog(key, source) == expected


@pytest.mark.parametrize(("key", "source"), [
    ("unsuper_loss", "deepspeed-chat"), ("EMA reward score", "deepspeed-chat"),
    ("score", "openrlhf"), ("vllm_kl", "openrlhf"), ("eval_math500_pass8", "openrlhf"),
    ("gen_kl_error", "nemo-rl"), ("val-core/openai/gsm8k/reward/best@4/mean", "verl"),
    ("KL_ref", "minimind-grpo"),
])
def test_look_alikes_of_the_new_sources_stay_foreign(key, source):
    assert to_catalog(key, source) is None


def _write_events(path: Path, points: dict[int, dict[str, float]], wall0: float = 1.7e9) -> None:
    """An event file through TensorBoard's own RecordWriter, as NeMo-RL's TensorboardLogger writes
    ``logger.log_metrics(metrics, step, prefix)`` (``<prefix>/<name>`` scalars)."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.record_writer import RecordWriter

    with path.open("wb") as handle:
        writer = RecordWriter(handle)
        writer.write(Event(wall_time=wall0, file_version="brain.Event:2").SerializeToString())
        for step, values in sorted(points.items()):
            summary = Summary(value=[Summary.Value(tag=t, simple_value=v) for t, v in values.items()])
            writer.write(Event(wall_time=wall0 + 30 * step, step=step, summary=summary).SerializeToString())
        writer.flush()


def test_a_nemo_rl_tensorboard_run_is_recognised_and_diagnosed(tmp_path):
    folder = tmp_path / "tb_logs"
    folder.mkdir()
    _write_events(folder / "events.out.tfevents.1700000000.node.1", {
        step: {"train/loss": 0.05, "train/reward": 0.1 * step, "train/grad_norm": 0.4,
               "train/lr": 1e-6, "train/kl_penalty": 0.001 * step, "train/approx_entropy": 0.9,
               "train/mean_gen_tokens_per_sample": 300.0, "train/truncation_rate": 0.02,
               "train/gen_kl_error": 0.0004, "timing/train/total_step_time": 30.0,
               "validation/accuracy": 0.4 + 0.01 * step}
        for step in range(1, 13)})
    code, out, err = run_cli("doctor", "--store", f"sqlite:///{tmp_path / 'd.db'}", "--json",
                             "--import", folder)
    report = json.loads(out)
    assert code == report["exit_code"] and "[nemo-rl]" in err
    ran = {c["detector"] for c in report["coverage"]["detectors"] if c["state"] == "ran"}
    assert {"entropy", "kl_tiers", "nonfinite"} <= ran
    keys = [k["key"] for k in report["import"]["keys_not_understood"]]
    assert keys == ["import/nemo-rl/train/gen_kl_error"]
    assert report["import"]["timing"]["synthetic"] is False  # the event times


def test_openrlhf_tensorboard_tags_reach_catalog_names(tmp_path):
    """OpenRLHF's TensorboardLogger writes add_scalar(f"train/{k}") and add_scalar(f"eval/{k}")
    (openrlhf/utils/logging_utils.py)."""
    from rlcockpit.integrations.importers import read_paths

    path = tmp_path / "events.out.tfevents.1700000000.host.1"
    _write_events(path, {step: {"train/policy_loss": 0.01, "train/actor_grad_norm": 0.3,
                                "train/kl": 0.001, "train/response_length": 300.0,
                                "train/rollout/truncated_rate": 0.05, "train/timing/step_total": 110.0,
                                "eval/eval_gsm8k_pass1": 0.6, "eval/eval_gsm8k_pass4": 0.8}
                         for step in (1, 2)})
    parsed = read_paths([path])
    names = {n for _, n in parsed.metrics}
    assert parsed.sources == {"openrlhf"}
    assert {"policy/loss", "grad/norm/actor", "kl/token_mean", "response/truncated_frac",
            "time/step_s", "eval/reward/category/gsm8k/mean", "kl/mean"} <= names
    assert "import/openrlhf/eval/eval_gsm8k_pass4" in names  # pass@4: no catalog name
