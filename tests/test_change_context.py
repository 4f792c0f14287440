"""A change is not a failure (issue 10, point 3): live-parameter changes are context in the findings
that follow them (``recent_changes`` evidence, the incident summary in English and Chinese), never a
finding by themselves — live in the trainer and offline in ``rlcockpit doctor`` alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from detector_kit import only
from rlcockpit.config import Config, option
from rlcockpit.diagnostics import (
    Condition,
    Detector,
    Engine,
    group,
    register,
)
from rlcockpit.diagnostics.offline import diagnose_run
from trainer_testkit import events, make_config, make_model_dir, reader

LR_CHANGE = {"step": 99, "by": "fault-injector", "changes": {"actor_lr": {"before": 5e-05, "after": 0.005}}}


def kl_rows(engine: Engine, rows: list[float], start: int) -> list:
    out = []
    for i, kl in enumerate(rows):
        out += engine.observe(start + i, {"kl/mean": kl, "kl/target": 1.0}, wall_time=float(start + i))
    return out


def lr_change(engine: Engine, step: int = 99) -> None:
    engine.note_live_params(step, {"requested_by": "fault-injector", "before": {"actor_lr": 5e-05},
                                   "after": {"actor_lr": 0.005}, "reason": "lr_spike"})


# ---------------------------------------------------------------------------- engine


def test_a_change_alone_raises_nothing():
    engine = Engine.from_config()
    quiet = kl_rows(engine, [0.5] * 10, start=90)
    lr_change(engine)
    engine.note_change(99, {"kl_coef": 5.0}, "alice", before={"kl_coef": 0.05})
    after = kl_rows(engine, [0.5] * 10, start=100)
    assert quiet == [] and after == []
    assert engine.active() == {}


def test_a_change_before_a_finding_is_in_its_evidence_and_in_the_incident_summary_as_context():
    engine = Engine.from_config(only("kl_tiers"))
    found = kl_rows(engine, [0.5] * 10, start=90)
    lr_change(engine)
    found += kl_rows(engine, [1.8] * 10, start=100)
    raised = [f for f in found if f.status == "raised"]
    assert raised and raised[0].detector == "kl_tiers"  # raised by the KL condition, not by the change
    assert raised[0].evidence["recent_changes"] == [LR_CHANGE]
    (incident,) = group(found)
    assert incident.summary.endswith(" (after actor_lr 5e-05 → 0.005 at step 99)")
    assert incident.summary.startswith("KL")  # the behaviour that went wrong comes first
    assert incident.summary_zh.endswith("（在第 99 步 actor_lr 5e-05 → 0.005 之后）")


def test_a_change_more_than_incident_window_steps_before_the_onset_is_not_context():
    engine = Engine.from_config(only("kl_tiers", incident_window=5))
    kl_rows(engine, [0.5] * 10, start=80)
    lr_change(engine, step=89)  # 13 steps before the finding at 102: outside the window of 5
    found = kl_rows(engine, [0.5] * 12 + [1.8] * 3, start=90)
    (raised,) = [f for f in found if f.status == "raised"]
    assert raised.step == 104 and "recent_changes" not in raised.evidence
    (incident,) = group(found)
    assert "after" not in incident.summary and "之后" not in incident.summary_zh


def test_a_ramp_is_summarised_per_parameter_from_its_first_value_to_its_last():
    engine = Engine.from_config(only("kl_tiers"))
    kl_rows(engine, [0.5] * 10, start=90)
    for step in range(95, 100):
        engine.note_change(step, {"actor_lr": 1e-4 * (step - 94)}, "fault-injector",
                           before={"actor_lr": 1e-4 * (step - 95) or 5e-05})
    found = kl_rows(engine, [1.8] * 3, start=100)
    assert [c["step"] for c in found[0].evidence["recent_changes"]] == [95, 96, 97, 98, 99]
    (incident,) = group(found)
    assert incident.summary.endswith(" (after actor_lr 5e-05 → 0.0005 over steps 95–99)")
    assert incident.summary_zh.endswith("（在第 95–99 步 actor_lr 5e-05 → 0.0005 之后）")


def test_a_payload_the_engine_does_not_understand_is_ignored():
    engine = Engine.from_config(only("kl_tiers"))
    engine.note_live_params(3, {"after": "not a mapping"})
    engine.note_live_params(3, {})
    assert engine.recent_changes(10) == []


# ---------------------------------------------------------------------------- live = offline


@dataclass(frozen=True)
class AtStepConfig(Config):
    at: dict[str, str] = option(default_factory=dict, help="step -> severity to report at that step.")


@register
class ScriptedBehaviour(Detector):
    """A user's own detector reporting a behaviour at the steps its config names (silent unless
    configured, so it never fires in other tests)."""

    name = "test_change_context"
    family = "test"
    reads = ("reward/mean",)
    signal = "scripted behaviour"
    Config = AtStepConfig

    def update(self, view):
        severity = self.config.at.get(str(view.step))
        return Condition(severity, f"scripted behaviour at step {view.step}") if severity else None


@dataclass
class ChangeAt:
    """A step observer asking for ``actor_lr`` at ``step`` as a Python user would (no ticket)."""

    trainer: Any = None
    step: int = 3

    def __call__(self, step: int, metrics: dict) -> None:
        if step == self.step:
            self.trainer.live.request({"actor_lr": 5e-3}, reason="try a larger lr", requested_by="alice")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("model"), "gpt2")


def test_a_live_change_is_the_same_context_in_the_trainer_and_in_the_doctor(tmp_path, model_dir):
    import torch

    from rlcockpit.trainer.trainer import Trainer

    torch.set_num_threads(1)
    # levels is off: a random tiny model's answers hit the cap from step 1, an incident before the change
    cfg = make_config(tmp_path, "train.steps=7", "diagnostics.detectors.test_change_context.at={5: yellow}",
                      "diagnostics.disabled=[levels,reward_components]", model=model_dir)
    change = ChangeAt()
    trainer = Trainer(cfg, observers=[change])
    change.trainer = trainer
    result = trainer.run()
    assert result.status == "finished"
    (applied,) = events(cfg, result.run_id, "live_params_applied")
    assert applied.step == 3
    lr_before = applied.payload["before"]["actor_lr"]

    r = reader(cfg)
    try:
        live = r.read_findings(result.run_id)
        report = diagnose_run(r, result.run_id, cfg.diagnostics)
    finally:
        r.close()
    expected = [{"step": 3, "by": "alice", "changes": {"actor_lr": {"before": lr_before, "after": 0.005}}}]
    (mine,) = [f for f in live if f.detector == "test_change_context" and f.status == "raised"]
    assert mine.step == 5 and mine.evidence["recent_changes"] == expected
    (offline,) = [f for f in report.findings if f.detector == "test_change_context" and f.status == "raised"]
    assert offline.evidence == mine.evidence

    def context(findings):  # every finding's context, and every incident's summary
        return ([(f.step, f.detector, f.status, f.evidence.get("recent_changes")) for f in findings],
                sorted((i.summary, i.summary_zh) for i in group(findings)))

    assert context(report.findings) == context(live)
    summary = next(i.summary for i in group(live) if "test_change_context" in i.detectors)
    assert summary.endswith(f" (after actor_lr {lr_before:.4g} → 0.005 at step 3)"), summary
