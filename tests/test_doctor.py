"""`rlcockpit doctor`: the live engine replayed over a stored or imported run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import rlcockpit
from rlcockpit.cli import main
from rlcockpit.diagnostics.offline import diagnose_run
from rlcockpit.store import open_store

FIXTURES = Path(__file__).parent / "fixtures"


def _record(uri: str, *, nan_at: int | None, steps: int = 12) -> str:
    run = rlcockpit.init(project="p", name="doc", store=uri)
    for step in range(1, steps + 1):
        loss = math.nan if nan_at is not None and step in (nan_at, nan_at + 1) else 0.5 / step
        run.log(step, {"policy/loss": loss, "reward/mean": 0.1 * step, "kl/mean": 0.05})
        run.log_samples(step, [{"sample_id": 0, "prompt": "1+1=", "response": "2",
                                "reward": 1.0, "category": "math"}])
    run.close()
    return run.run_id


def test_healthy_run_exits_zero_and_writes_reports(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/ok.db"
    run_id = _record(uri, nan_at=None)
    html, md = tmp_path / "r.html", tmp_path / "r.md"
    code = main(["doctor", "--store", uri, "--run", run_id, "--html", str(html),
                 "--markdown", str(md)])
    assert code == 0
    assert "No failure detected" in capsys.readouterr().out
    assert "<html" in html.read_text() and "No failure detected" in md.read_text()


def test_nan_loss_gives_exit_two_with_incident_and_library_link(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/bad.db"
    run_id = _record(uri, nan_at=5, steps=60)
    code = main(["doctor", "--store", uri, "--json"])  # newest run by default
    assert code == 2
    report = json.loads(capsys.readouterr().out)
    assert report["run"]["run_id"] == run_id and report["exit_code"] == 2
    raised = [f for f in report["findings"] if f["status"] == "raised"]
    assert raised[0]["detector"] == "nonfinite" and raised[0]["step"] == 5
    assert raised[0]["severity"] == "red"
    resolved = [f for f in report["findings"] if f["status"] == "resolved"]
    # a red condition resolves only after resolve_after_severe (50) absent steps: 7..56
    assert resolved and resolved[0]["step"] == 56
    (incident,) = report["incidents"]
    assert incident["resolved"] and incident["library"][0]["id"] == "nonfinite_values"
    assert incident["library"][0]["zh"] != "nonfinite_values"  # the library knows the entry


def test_replay_matches_step_order_and_counts_samples(tmp_path):
    uri = f"sqlite:///{tmp_path}/c.db"
    run_id = _record(uri, nan_at=3, steps=8)
    reader = open_store(uri).reader()
    seen = []
    report = diagnose_run(reader, run_id, progress=lambda done, total: seen.append((done, total)))
    reader.close()
    assert report.steps == 8 and report.samples == 8 and report.first_step == 1
    assert seen[-1] == (8, 8)
    # NaN at steps 3-4, absent 5-8: a red condition stays open (resolve_after_severe = 50)
    assert report.statuses["nonfinite"] == "firing:red"


def test_overrides_and_bad_config_fail_fast(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/o.db"
    _record(uri, nan_at=5)
    assert main(["doctor", "--store", uri, "diagnostics.disabled=[nonfinite]"]) == 0
    capsys.readouterr()
    assert main(["doctor", "--store", uri, "diagnostics.disabled=[nonfinit]"]) == 2
    err = capsys.readouterr().err
    assert "unknown detector 'nonfinit'" in err and "did you mean 'nonfinite'" in err


def test_empty_store_says_how_to_get_a_run(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/empty.db"
    open_store(uri).writer().close()
    assert main(["doctor", "--store", uri]) == 2
    assert "has no runs" in capsys.readouterr().err


def test_imported_trl_run_is_diagnosed(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/imp.db"
    code = main(["doctor", "--store", uri, "--json", "--import",
                 str(FIXTURES / "trl_output" / "trainer_state.json")])
    report = json.loads(capsys.readouterr().out)
    assert code == report["exit_code"]
    assert report["run"]["project"] == "imported" and report["steps"] > 0
    assert report["detectors"]["nonfinite"] in ("ok", "firing:red", "firing:orange")


def test_a_silent_running_run_gets_the_heartbeat_finding(tmp_path, capsys):
    from rlcockpit.records import Batch, MetricPoint, RunInfo

    uri = f"sqlite:///{tmp_path}/hung.db"
    writer = open_store(uri).writer()
    long_ago = 1_000_000.0
    writer.create_run(RunInfo(run_id="hung", project="p", name="hung", started_at=long_ago))
    writer.write_batch("hung", Batch(metrics=[MetricPoint(step, "reward/mean", 0.1, long_ago + step)
                                              for step in range(1, 4)]))
    writer.close()
    assert main(["doctor", "--store", uri, "--json"]) == 2
    report = json.loads(capsys.readouterr().out)
    (beat,) = [f for f in report["findings"] if f["evidence"].get("key") == "heartbeat"]
    assert beat["detector"] == "stall" and beat["severity"] == "red"


def test_coverage_says_which_detectors_ran_and_what_the_skipped_ones_lack(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/cov.db"
    run_id = _record(uri, nan_at=None)  # logs policy/loss, reward/mean, kl/mean and samples
    md, html = tmp_path / "r.md", tmp_path / "r.html"
    assert main(["doctor", "--store", uri, "--run", run_id, "--markdown", str(md),
                 "--html", str(html)]) == 0
    out = capsys.readouterr().out
    assert "Coverage" in out and "detectors ran" in out
    assert "policy/entropy" in out  # the entropy detector is skipped for want of policy/entropy
    assert main(["doctor", "--store", uri, "--run", run_id, "--json"]) == 0
    coverage = json.loads(capsys.readouterr().out)["coverage"]
    by_name = {c["detector"]: c for c in coverage["detectors"]}
    entropy = by_name["entropy"]
    assert entropy["state"] == "skipped" and "policy/entropy" in entropy["missing"]
    assert entropy["steps_skipped"] == 12 and entropy["steps_run"] == 0
    nonfinite = by_name["nonfinite"]
    assert nonfinite["state"] == "ran" and nonfinite["steps_run"] == 12
    assert "kl/" not in nonfinite["missing"]  # a trailing "/" means any name under it
    ran = sum(c["state"] == "ran" for c in coverage["detectors"])
    assert coverage["summary"].startswith(f"{ran} of {len(by_name)} detectors ran")
    for text in (md.read_text(), html.read_text()):
        assert "Coverage" in text and "policy/entropy" in text


def test_coverage_counts_steps_a_detector_skipped_midway():
    from rlcockpit.diagnostics.coverage import CoverageCounter, input_present

    class Det:
        name, family, reads, reads_samples = "d", "f", ("a/b", "grad/norm/"), False

    counter = CoverageCounter([Det()])
    counter.count({"d": "ok"}, ["a/b"], False)
    counter.count({"d": "skipped"}, [], False)
    counter.count({"d": "firing:red"}, ["a/b"], False)
    (cov,) = counter.result({})
    assert (cov.state, cov.steps_run, cov.steps_skipped, cov.missing) == ("ran", 2, 1, ("grad/norm/",))
    assert input_present("grad/norm/", ["grad/norm/actor"]) and not input_present("grad/norm/", ["grad"])


def test_doctor_import_takes_the_same_map_options(tmp_path, capsys):
    log = tmp_path / "custom.jsonl"
    log.write_text("".join(json.dumps({"iteration": s, "Reward": 0.1 * s, "Entropy": 0.5})
                           + "\n" for s in range(1, 9)))
    uri = f"sqlite:///{tmp_path}/d.db"
    code = main(["doctor", "--store", uri, "--json", "--import", str(log), "--step-key",
                 "iteration", "--map", "Reward=reward/mean", "--map", "Entropy=policy/entropy"])
    captured = capsys.readouterr()
    report = json.loads(captured.out)  # stdout stays pure JSON; the import summary is on stderr
    assert code == report["exit_code"] and report["steps"] == 8
    assert "mapped by --map" in captured.err
    by_name = {c["detector"]: c for c in report["coverage"]["detectors"]}
    assert by_name["entropy"]["state"] == "ran"
    assert main(["doctor", "--store", uri, "--map", "Reward=reward/mean"]) == 2
    assert "apply to --import PATH" in capsys.readouterr().err
