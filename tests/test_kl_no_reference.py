"""The KL detectors on runs without a reference model (TRL GRPO's default beta = 0, verl without a
KL term) say "no reference" instead of "skipped", and kl_zero leaves an intended reference sync
(TRL sync_ref_model every ref_model_sync_steps) alone."""

from __future__ import annotations

from detector_kit import only
from rlcockpit.diagnostics import Engine
from rlcockpit.diagnostics.coverage import (
    NO_REFERENCE_STATUS,
    CoverageCounter,
    coverage_line,
    coverage_rows,
)

KL_DETECTORS = ("kl_tiers", "kl_trend", "kl_zero", "kl_token_spike")


def _engine(*names: str) -> Engine:
    return Engine.from_config(only(*names))


def _feed(engine: Engine, rows: list[dict[str, float]], start: int = 1) -> list:
    found = []
    for i, row in enumerate(rows):
        found += engine.observe(start + i, row, wall_time=float(start + i))
    return found


def test_a_run_declaring_no_reference_reports_no_reference_not_skipped():
    engine = _engine(*KL_DETECTORS, "levels")
    rows = [{"kl/coef": 0.0, "reward/mean": 0.1 * i, "policy/entropy": 1.0} for i in range(5)]
    assert _feed(engine, rows) == []
    assert {n: engine.status[n] for n in KL_DETECTORS} == dict.fromkeys(KL_DETECTORS, NO_REFERENCE_STATUS)
    assert engine.status["levels"] == "ok"  # its other checks run; its KL check is not judged at beta 0


def test_without_a_declaration_a_missing_kl_is_skipped_and_a_logged_kl_with_beta_0_is_judged():
    engine = _engine(*KL_DETECTORS)
    _feed(engine, [{"reward/mean": 0.5}] * 3)
    assert {engine.status[n] for n in KL_DETECTORS} == {"skipped"}
    judged = _engine("kl_zero", "kl_tiers")
    _feed(judged, [{"kl/coef": 0.0, "kl/token_mean": 0.01, "response/length_mean": 10.0}] * 3)
    # beta 0 but a KL is logged: there is a reference, and the KL is judged
    assert not {judged.status[n] for n in ("kl_zero", "kl_tiers")} & {"skipped", NO_REFERENCE_STATUS}


def test_coverage_counts_no_reference_as_its_own_state():
    engine = _engine("kl_zero", "entropy")
    counter = CoverageCounter(engine.detectors)
    for step in range(1, 4):
        row = {"kl/coef": 0.0, "policy/entropy": 1.0}
        engine.observe(step, row, wall_time=float(step))
        counter.count(engine.status, row, had_samples=False)
    coverage = counter.result(engine.errors)
    states = {c.detector: c.state for c in coverage}
    assert states["kl_zero"] == NO_REFERENCE_STATUS and states["entropy"] == "ran"
    assert "1 no reference" in coverage_line(coverage)
    row = next(r for r in coverage_rows(coverage, 3) if r[0] == "kl_zero")
    assert row[2].startswith("no reference")
    assert next(c for c in coverage if c.detector == "kl_zero").to_dict()["steps_no_reference"] == 3


def _sync_stream(zero_from: int, period: float | None) -> list[dict[str, float]]:
    """Per-token KL 0.02 for 30 steps, then 0 from ``zero_from`` on (logged per token, as TRL)."""
    rows = []
    for step in range(1, 41):
        row = {"kl/token_mean": 0.0 if step >= zero_from else 0.02, "kl/coef": 0.04}
        if period is not None:
            row["kl/ref_sync_every"] = period
        rows.append(row)
    return rows


def test_kl_zero_leaves_an_intended_sync_alone_and_still_catches_the_accident():
    # the reference copied at the end of step 30, a period of 10: step 31 is the first after the sync
    assert _feed(_engine("kl_zero"), _sync_stream(31, 10)) == []
    # the same drop without a declared period: the reference was synced with the actor by mistake
    accident = [f for f in _feed(_engine("kl_zero"), _sync_stream(31, None)) if f.status == "raised"]
    assert [(f.detector, f.severity) for f in accident] == [("kl_zero", "red")]
    # a declared period that the drop does not fall on: still the failure
    off_period = [f for f in _feed(_engine("kl_zero"), _sync_stream(34, 10)) if f.status == "raised"]
    assert [f.severity for f in off_period] == ["red"]
