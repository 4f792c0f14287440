"""reward_components: judged once a log is complete — a trade-off between reward components in a
log too short for any history (a few rows pasted from an issue)."""

from __future__ import annotations

import contextlib
import io
import json

from detector_kit import feed
from rlcockpit.cli import main
from rlcockpit.diagnostics import registry


def make(**overrides):
    cls = registry.get("reward_components")
    return cls(cls.Config(**overrides))


def rows(**series):
    n = len(next(iter(series.values())))
    return [{f"reward/{k}/mean" if k not in ("mean", "std") else f"reward/{k}": v[i]
             for k, v in series.items()} for i in range(n)]


def finished(det, steps):
    assert all(conds == [] for _, conds in feed(det, steps))  # nothing while the run is live
    return {c.key: c for c in det.finish() or []}


def test_the_task_component_falling_while_the_format_rises_in_a_short_log():
    found = finished(make(), rows(accuracy=[0.16, 0.12, 0.064], format=[0.48, 0.55, 0.86],
                                  mean=[0.71, 0.69, 0.89], std=[0.53, 0.52, 0.34]))
    cond = found["tradeoff/accuracy"]
    assert cond.severity == "yellow" and cond.evidence["rising"] == "format"
    assert "'format'" in cond.message and "0.16 → 0.064" in cond.message


def test_no_tradeoff_without_a_monotone_fall_or_a_rise_as_large_or_in_a_long_log():
    wobble = rows(accuracy=[0.16, 0.20, 0.064], format=[0.48, 0.55, 0.86], mean=[0.7] * 3)
    assert "tradeoff/accuracy" not in finished(make(), wobble)
    small_rise = rows(accuracy=[0.16, 0.12, 0.064], format=[0.48, 0.50, 0.52], mean=[0.7] * 3)
    assert "tradeoff/accuracy" not in finished(make(), small_rise)
    tiny = rows(accuracy=[0.02, 0.015, 0.008], format=[0.48, 0.55, 0.86], mean=[0.7] * 3)
    assert "tradeoff/accuracy" not in finished(make(), tiny)  # under 0.05 reward units
    two_rows = rows(accuracy=[0.16, 0.064], format=[0.48, 0.86], mean=[0.7] * 2)
    assert finished(make(), two_rows) == {}  # a fall needs 3 points to be monotone
    long = rows(accuracy=[0.16 - 0.01 * i for i in range(12)], format=[0.4 + 0.04 * i for i in range(12)],
                mean=[0.7] * 12)
    assert finished(make(), long) == {}  # rm_component_bias judges long logs against their history


def test_a_component_at_zero_on_every_step_is_no_finding():
    # an idle penalty and a dead reward look alike in zeros alone (the tiny world's format penalty)
    assert finished(make(), rows(accuracy=[0.5, 0.5, 0.6], format=[0.0, 0.0, 0.0], mean=[1.4, 1.4, 1.5])) == {}


def test_doctor_on_pasted_trl_console_dicts_names_the_component_earned_instead(tmp_path):
    log = tmp_path / "pasted.txt"
    values = [(0.16, 0.48, 0.71), (0.12, 0.55, 0.69), (0.064, 0.86, 0.89)]
    log.write_text("".join(
        f"{{'loss': 0.001, 'grad_norm': 0.8, 'rewards/accuracy_reward': {a}, 'rewards/format_reward': {f}, "
        f"'reward': {r}, 'reward_std': 0.5, 'kl': 0.001, 'epoch': 0.0{i + 1}}}\n"
        for i, (a, f, r) in enumerate(values)), encoding="utf-8")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["doctor", "--import", str(log), "--store", f"sqlite:///{tmp_path / 'd.db'}", "--json"])
    report = json.loads(out.getvalue())
    keys = {(f["detector"], f["evidence"].get("key")) for f in report["findings"]}
    assert ("reward_components", "tradeoff/accuracy_reward") in keys
