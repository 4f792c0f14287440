"""Detectors of data-parallel failure modes (issue 13): straggler, rank_divergence,
rank_grad_outlier, rank_heartbeat. Synthetic per-rank streams with realistic jitter, for 2 and 8
ranks: each detector fires on its failure and stays quiet on healthy ranks; a single-process run
reports all four skipped in `rlcockpit doctor`'s coverage table."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import rlcockpit
from detector_kit import conditions, feed, first, only
from rlcockpit.cli import main
from rlcockpit.diagnostics import SKIPPED, Engine, StepView, registry
from rlcockpit.diagnostics.offline import diagnose_run
from rlcockpit.diagnostics.policy import plan
from rlcockpit.diagnostics.reference import PARTS, detector_section, docstring_parts
from rlcockpit.metrics.catalog import spec_for
from rlcockpit.store import open_store

MINE = ("straggler", "rank_divergence", "rank_grad_outlier", "rank_heartbeat")
BASE = {"rollout": 0.6, "score": 0.15, "advantage": 0.03, "update": 0.4}  # seconds per phase


def make(name: str, **overrides):
    cls = registry.get(name)
    return cls(cls.Config(**overrides)) if overrides else cls()


def phase_rows(ranks: int, steps: int, *, slow: int | None = None, phase: str = "rollout",
               factor: float = 2.0, start: int = 10, jitter: float = 0.12, seed: int = 0,
               base: dict | None = None) -> list[dict[str, float]]:
    """Per-rank phase times of a synchronous data-parallel step. Rollout and score are local;
    advantage starts with a collective (every rank waits for the slowest), the all-reduce sits
    inside update (every rank's update lasts as long as the slowest one's). ``slow`` makes one
    rank's ``phase`` ``factor``× slower from step ``start``."""
    rng = np.random.default_rng(seed)
    base = base or BASE
    rows = []
    for step in range(steps):
        work = {p: base[p] * rng.lognormal(0.0, jitter, ranks) for p in base}
        if slow is not None and step >= start:
            work[phase][slow] *= factor
        local = work["rollout"] + work["score"]
        wait = local.max() - local  # the fast ranks wait at advantage's collective
        advantage = wait + work["advantage"]
        update = np.full(ranks, work["update"].max()) + rng.uniform(0, 0.005, ranks)
        row = {}
        for r in range(ranks):
            times = {"rollout": work["rollout"][r], "score": work["score"][r],
                     "advantage": advantage[r], "update": update[r]}
            row.update({f"dist/time/{p}_s/rank/{r}": float(t) for p, t in times.items()})
            row[f"dist/step_s/rank/{r}"] = float(sum(times.values()))
        rows.append(row)
    return rows


def norm_rows(ranks: int, steps: int, *, odd: int | None = None, factor: float = 10.0,
              start: int = 20, spread: float = 0.25, seed: int = 0,
              zero_p: float = 0.0) -> list[dict[str, float]]:
    """Per-rank local gradient norms: a level drifting 1.0 → 0.5 over the run, lognormal spread
    between ranks (their shards differ); ``odd`` multiplies one rank's norm by ``factor`` from
    ``start``; ``zero_p``: chance a rank's shard has no learning signal (norm ~0)."""
    rng = np.random.default_rng(seed)
    rows = []
    for step in range(steps):
        level = 1.0 - 0.5 * step / steps
        norms = level * rng.lognormal(0.0, spread, ranks)
        norms[rng.random(ranks) < zero_p] = 1e-6
        if odd is not None and step >= start:
            norms[odd] *= factor
        rows.append({f"dist/grad_norm/rank/{r}": float(v) for r, v in enumerate(norms)})
    return rows


def keys(conds) -> set[str]:
    return {c.key for c in conds}


# ---------------------------------------------------------------------------- catalog


@pytest.mark.parametrize(("concrete", "template"), [
    ("dist/step_s/rank/0", "dist/step_s/rank/<r>"),
    ("dist/time/rollout_s/rank/7", "dist/time/<phase>_s/rank/<r>"),
    ("dist/grad_norm/rank/63", "dist/grad_norm/rank/<r>"),
    ("dist/rss_gb/rank/1", "dist/rss_gb/rank/<r>"),
    ("dist/heartbeat_age_s/rank/2", "dist/heartbeat_age_s/rank/<r>"),
    ("dist/world_size", "dist/world_size"),
    ("dist/param_hash_mismatch", "dist/param_hash_mismatch"),
    ("dist/param_hash_checked", "dist/param_hash_checked"),
])
def test_the_agreed_distributed_names_are_in_the_catalog(concrete, template):
    spec = spec_for(concrete)
    assert spec is not None and spec.name == template and spec.group == "distributed"
    assert spec_for("time/rollout_s").name == "time/<phase>_s"  # the global phase time is unchanged


# ---------------------------------------------------------------------------- shared checks


@pytest.mark.parametrize("name", MINE)
def test_detector_declares_reads_patterns_signal_and_skips_without_inputs(name):
    cls = registry.get(name)
    assert cls.reads and cls.patterns and cls.signal and cls.family == "distributed"
    assert cls.__module__.endswith(name)
    assert cls().update(StepView(0, {"reward/mean": 1.0, "time/rollout_s": 0.5})) is SKIPPED


@pytest.mark.parametrize("name", MINE)
def test_detector_is_documented_for_the_generated_reference(name):
    cls = registry.get(name)
    title, parts = docstring_parts(cls)
    assert title and set(parts) == set(PARTS), (name, set(PARTS) - set(parts))
    assert f"### `{name}`" in detector_section(name, cls)
    cls.Config()  # defaults validate


@pytest.mark.parametrize("ranks", [2, 8])
@pytest.mark.parametrize("seed", range(4))
def test_healthy_ranks_raise_nothing(ranks, seed):
    engine = Engine.from_config(only(*MINE))
    phases = phase_rows(ranks, 150, seed=seed)
    norms = norm_rows(ranks, 150, seed=seed)
    findings = []
    for step, (times, grads) in enumerate(zip(phases, norms, strict=True)):
        ages = {f"dist/heartbeat_age_s/rank/{r}": float((step * 0.7 + r) % 5) for r in range(ranks)}
        checked = {"dist/param_hash_checked": 1.0, "dist/param_hash_mismatch": 0.0} \
            if step % 10 == 0 else {}
        metrics = {**times, **grads, **ages, **checked, "dist/world_size": float(ranks)}
        findings += engine.observe(step, metrics, wall_time=1000.0 + 1.3 * step)
    assert findings == [], [(f.detector, f.step, f.message) for f in findings]
    assert not engine.errors
    assert all(engine.status[name] == "ok" for name in MINE), engine.status


# ---------------------------------------------------------------------------- straggler


@pytest.mark.parametrize(("ranks", "slow"), [(2, 1), (8, 5)])
def test_straggler_names_the_slow_rank_and_phase_not_the_ranks_that_wait(ranks, slow):
    rows = phase_rows(ranks, 30, slow=slow, factor=2.0, start=10)
    step, cond = first(make("straggler"), rows, "orange")
    assert cond.key == f"rank/{slow}" and 14 <= step <= 16  # 5 slow steps of the last 8
    ev = cond.evidence
    assert ev["phase"] == "rollout" and ev["rank"] == slow and ev["onset_step"] >= 10
    assert ev["metric"] == f"dist/time/rollout_s/rank/{slow}" and ev["ratio"] >= 1.5
    assert ev["lost_s"] > 0.3 and "rank" in cond.message and "慢节点" in cond.message_zh
    # the fast rank of a pair waits in advantage for as long: never blamed
    assert keys(conditions(make("straggler"), rows)) == {f"rank/{slow}"}


def test_straggler_in_score_is_found_in_score():
    rows = phase_rows(8, 30, slow=2, phase="score", factor=4.0, start=5)
    _, cond = first(make("straggler"), rows, "orange")
    assert cond.key == "rank/2" and cond.evidence["phase"] == "score"


def test_mildly_slow_rank_is_yellow():
    rows = phase_rows(8, 40, slow=3, factor=1.35, start=10, jitter=0.05)
    found = conditions(make("straggler"), rows)
    assert found and {c.severity for c in found} == {"yellow"} and keys(found) == {"rank/3"}


def test_straggler_needs_persistence_and_the_seconds_floor():
    # one slow step in eight (a GC pause, a long answer) is not a straggler
    rows = phase_rows(8, 40, seed=1)
    for step in range(0, 40, 8):
        rows[step]["dist/time/rollout_s/rank/4"] *= 3
    assert conditions(make("straggler"), rows) == []
    # a 3× slower phase of 2 ms costs nothing worth an alarm
    tiny = {"rollout": 0.002, "score": 0.001, "advantage": 0.001, "update": 0.002}
    assert conditions(make("straggler"), phase_rows(2, 30, slow=1, factor=3.0, base=tiny)) == []


def test_straggler_falls_back_to_step_time_without_phase_times():
    rows = [{k: v for k, v in row.items() if k.startswith("dist/step_s/")}
            for row in phase_rows(4, 20, seed=2)]
    for row in rows[5:]:
        row["dist/step_s/rank/1"] *= 2.0  # asynchronous ranks: the step time itself differs
    _, cond = first(make("straggler"), rows, "orange")
    assert cond.key == "rank/1" and cond.evidence["phase"] == "step"
    assert cond.evidence["metric"] == "dist/step_s/rank/1"


def test_straggler_skips_one_rank_and_resolves_when_the_rank_recovers():
    assert feed(make("straggler"), [{"dist/time/rollout_s/rank/0": 1.0}])[0][1] is SKIPPED
    # (the engine's hold of orange+ conditions set to the plain resolve_after: this tests the
    # detector's own recovery, tests/test_diagnostics_engine.py the hold)
    engine = Engine.from_config(only("straggler", resolve_after_severe=3))
    rows = phase_rows(2, 20, slow=1, start=0) + phase_rows(2, 20, seed=3)
    found = [f for step, row in enumerate(rows) for f in engine.observe(step, row)]
    assert [(f.status, f.severity) for f in found] == [("raised", "orange"), ("resolved", "orange")]


# ---------------------------------------------------------------------------- rank_divergence


def hash_rows(steps: int, *, every: int = 5, diverge_at: int | None = None,
              healed_at: int | None = None, world: int = 8) -> list[dict[str, float]]:
    rows = []
    for step in range(steps):
        row: dict[str, float] = {"dist/world_size": float(world)} if step == 0 else {}
        if step % every == 0:
            bad = diverge_at is not None and step >= diverge_at and \
                (healed_at is None or step < healed_at)
            row.update({"dist/param_hash_checked": 1.0, "dist/param_hash_mismatch": 2.0 if bad else 0.0})
        rows.append(row)
    return rows


def test_rank_divergence_is_red_at_the_first_mismatching_check_and_holds_until_the_next():
    result = feed(make("rank_divergence"), hash_rows(40, diverge_at=23))
    firing = [step for step, conds in result if conds is not SKIPPED and conds]
    assert firing == list(range(25, 40))  # the check at 25 sees it; unchecked steps keep it
    (cond,) = result[25][1]
    assert cond.severity == "red" and cond.key == "mismatch"
    assert cond.evidence["last_matching_check"] == 20 and cond.evidence["mismatched_ranks"] == 2
    assert "2 of the 7 other ranks" in cond.message and "rank 0" in cond.message
    assert "哈希" in cond.message_zh


def test_rank_divergence_quiet_when_checked_and_equal_and_skipped_before_any_check():
    result = feed(make("rank_divergence"), hash_rows(30, every=10))
    assert [c for _, c in result] == [[]] * 30  # checked at 0: runs from then on, quiet
    late = [{}] * 3 + hash_rows(10)
    assert [c for _, c in feed(make("rank_divergence"), late)][:3] == [SKIPPED] * 3


def test_rank_divergence_is_one_red_finding_that_pauses_and_resolves_after_a_clean_check():
    engine = Engine.from_config(only("rank_divergence", resolve_after_severe=3))
    found = [f for step, row in enumerate(hash_rows(60, diverge_at=15, healed_at=40))
             for f in engine.observe(step, row)]
    assert [(f.step, f.status, f.severity) for f in found] == [(15, "raised", "red"),
                                                               (42, "resolved", "red")]
    actions = {a.name for a in plan(found[:1])}
    assert {"alert", "pause", "snapshot", "checkpoint"} <= actions  # red: pause and call a person
    assert found[0].patterns == ("dist_param_mismatch",)


# ---------------------------------------------------------------------------- rank_grad_outlier


def test_rank_grad_outlier_eight_ranks_yellow_then_orange():
    rows = norm_rows(8, 40, odd=3, factor=8.0, start=20)
    step, cond = first(make("rank_grad_outlier"), rows, "yellow")
    assert 22 <= step <= 24 and cond.key == "rank/3" and cond.evidence["onset_step"] >= 20
    assert "rank 3" in cond.message and cond.evidence["fold"] >= 5
    step, cond = first(make("rank_grad_outlier"), rows, "orange")
    assert 25 <= step <= 27 and cond.key == "rank/3"
    assert keys(conditions(make("rank_grad_outlier"), rows)) == {"rank/3"}


def test_rank_grad_outlier_huge_fold_is_orange_at_once():
    step, cond = first(make("rank_grad_outlier"), norm_rows(8, 30, odd=6, factor=50.0), "orange")
    assert step == 22 and cond.evidence["median_fold"] >= 20


def test_rank_grad_outlier_two_ranks_blames_the_rank_that_moved():
    # rank 1 jumps ×10: the fold alone cannot tell "1 high" from "0 low"; the history can
    rows = norm_rows(2, 40, odd=1, factor=10.0, start=20, spread=0.15)
    found = conditions(make("rank_grad_outlier"), rows)
    assert keys(found) == {"rank/1"} and found[0].severity == "yellow"
    # rank 0 falls to a tenth and stays there: a low outlier after 8 steps, never "1 is high"
    rows = norm_rows(2, 40, odd=0, factor=0.1, start=20, spread=0.15)
    step, cond = first(make("rank_grad_outlier"), rows, key="low/rank/0")
    assert step == 27 and cond.severity == "yellow" and cond.evidence["fold"] < 0.2
    assert keys(conditions(make("rank_grad_outlier"), rows)) == {"low/rank/0"}


def test_rank_grad_outlier_robust_z_with_tight_ranks():
    # ranks that agree within ~5% make a 3× rank an outlier, although 3 < the 5× fold
    rows = norm_rows(8, 30, odd=2, factor=3.0, start=10, spread=0.05)
    assert keys(conditions(make("rank_grad_outlier"), rows)) == {"rank/2"}
    # the same 3× among ranks whose shards honestly spread by ~60% is not
    rows = norm_rows(8, 30, odd=2, factor=3.0, start=10, spread=0.6, seed=4)
    assert conditions(make("rank_grad_outlier"), rows) == []


@pytest.mark.parametrize("seed", range(3))
def test_rank_grad_outlier_quiet_on_sparse_shards(seed):
    # tiny per-rank batches: a rank's shard has no reward spread now and then (norm ~0)
    rows = norm_rows(8, 200, zero_p=0.15, seed=seed)
    assert conditions(make("rank_grad_outlier"), rows) == []


# ---------------------------------------------------------------------------- rank_heartbeat


def beat_rows(ranks: int, steps: int, *, dead: int | None = None, start: int = 30,
              step_s: float = 2.0) -> list[dict[str, float]]:
    rows = []
    for step in range(steps):
        row = {}
        for r in range(ranks):
            age = (step * 0.37 + r) % 3.0  # beats every ~3 s
            if dead is not None and r == dead and step >= start:
                age = (step - start) * step_s + 1.0
            row[f"dist/heartbeat_age_s/rank/{r}"] = age
            row[f"dist/step_s/rank/{r}"] = step_s
        rows.append(row)
    return rows


@pytest.mark.parametrize("ranks", [2, 8])
def test_rank_heartbeat_red_names_the_silent_rank(ranks):
    dead = ranks - 1
    step, cond = first(make("rank_heartbeat"), beat_rows(ranks, 60, dead=dead), "red")
    assert step == 45 and cond.key == f"rank/{dead}"  # age 31 s > max(30 s, 5 × 2 s)
    assert cond.evidence["heartbeat_age_s"] > 30 and cond.evidence["limit_s"] == 30
    assert f"rank {dead} stopped sending heartbeats" in cond.message and "心跳" in cond.message_zh
    assert keys(conditions(make("rank_heartbeat"), beat_rows(ranks, 60, dead=dead))) == {f"rank/{dead}"}


def test_rank_heartbeat_limit_follows_slow_steps_and_wall_time():
    # 20 s steps: a 60 s old heartbeat is three steps, not a lost rank (limit 100 s)
    rows = beat_rows(4, 40, step_s=20.0)
    for row in rows[20:]:
        row["dist/heartbeat_age_s/rank/2"] = 60.0
    assert conditions(make("rank_heartbeat"), rows) == []
    # without dist/step_s the wall time between logged steps scales the limit
    det = make("rank_heartbeat")
    for step in range(10):
        det.update(StepView(step, {"dist/heartbeat_age_s/rank/0": 1.0}, wall_time=100.0 * step))
    assert det.limit() == 500.0
    assert det.update(StepView(10, {"dist/heartbeat_age_s/rank/0": 400.0}, wall_time=1000.0)) == []


def test_rank_heartbeat_tick_reads_the_attached_monitor():
    engine = Engine.from_config(only("rank_heartbeat"))
    for step, row in enumerate(beat_rows(4, 5)):
        engine.observe(step, row, wall_time=float(step))
    assert engine.tick(100.0) == []  # no monitor: a blocked group says nothing here (stall does)
    ages = {0: 0.5, 1: 1.0, 2: 95.0, 3: 0.2}
    (det,) = engine.detectors
    det.attach_monitor(lambda: ages)
    (finding,) = engine.tick(101.0)
    assert finding.severity == "red" and finding.evidence["rank"] == 2
    assert finding.patterns == ("heartbeat_lost",)
    assert engine.tick(102.0) == []  # raised once, not every beat

    def gone():
        raise RuntimeError("monitor closed")

    det.attach_monitor(gone)
    assert det.tick(103.0, 1.0) is None


# ---------------------------------------------------------------------------- doctor


def test_doctor_lists_the_distributed_detectors_as_skipped_on_a_single_process_run(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/one.db"
    run = rlcockpit.init(project="p", name="single", store=uri)
    for step in range(1, 9):
        run.log(step, {"reward/mean": 0.1 * step, "kl/mean": 0.05, "time/rollout_s": 0.5,
                       "grad/norm/actor": 1.0})
    run.close()
    assert main(["doctor", "--store", uri, "--json"]) == 0
    by_name = {c["detector"]: c for c in json.loads(capsys.readouterr().out)["coverage"]["detectors"]}
    for name in MINE:
        assert by_name[name]["state"] == "skipped" and by_name[name]["steps_run"] == 0, by_name[name]
        assert by_name[name]["family"] == "distributed"
    assert "dist/time/" in by_name["straggler"]["missing"]
    assert "dist/param_hash_mismatch" in by_name["rank_divergence"]["missing"]
    assert main(["doctor", "--store", uri]) == 0
    text = capsys.readouterr().out
    assert all(name in text for name in MINE)


def test_doctor_finds_a_straggler_in_a_stored_two_rank_run(tmp_path):
    """Rank 0 writes every rank's numbers as ordinary metrics: no schema change, one run."""
    uri = f"sqlite:///{tmp_path}/two.db"
    run = rlcockpit.init(project="p", name="dp", store=uri)
    rows = phase_rows(2, 24, slow=1, start=4)
    grads = norm_rows(2, 24)
    for step, (row, grad) in enumerate(zip(rows, grads, strict=True), start=1):
        extra = {"dist/world_size": 2.0} if step == 1 else {}
        run.log(step, {**row, **grad, **extra, "reward/mean": 0.1})
    run.close()
    report = diagnose_run(open_store(uri).reader(), run.run_id, only(*MINE))
    raised = [(f.detector, f.evidence["key"], f.severity) for f in report.findings
              if f.status == "raised"]
    assert raised == [("straggler", "rank/1", "orange")]
    states = {c.detector: c.state for c in report.coverage}
    assert states == {"straggler": "ran", "rank_grad_outlier": "ran", "rank_divergence": "skipped",
                      "rank_heartbeat": "skipped"}
    assert math.isclose(report.findings[0].evidence["ratio"], 2.0, rel_tol=0.5)
