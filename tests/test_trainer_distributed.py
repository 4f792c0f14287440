"""Data-parallel training (issue 13, docs/distributed.md): 2 CPU ranks with gloo.

- 2 ranks x 16 prompts train like 1 rank x 32 prompts. What "like" can mean: every rank samples
  with its own seed, so with ordinary sampling the two runs draw different responses and agree only
  in distribution. The comparison therefore samples greedily (``rollout.top_p=0.05`` keeps only the
  most likely token; the logprobs still come from the full distribution) and trains one minibatch
  of the whole batch per epoch: then both runs see the same responses, and every difference is
  floating-point summation order (other padding widths, two partial sums instead of one). Tolerance:
  relative 1e-3 (absolute 1e-4 near 0) on every training metric of 3 steps — rewards, KL, losses,
  gradient norms, advantages, value statistics. Measured: at most 4e-4 relative, on policy/loss (a
  mean of terms of both signs near 0, ~4e-7 absolute); the rewards are identical.
- checkpoint + resume of a 2-rank run is exact (every metric but time / perf / sys / per-rank timing);
- adaptive controllers and normalisers hold identical state on both ranks;
- a ticket (a live parameter), pause / resume, rollback and stop reach both ranks at the same boundary;
- a slow rank and a rank whose weights were nudged show in the per-rank metrics (its own rollout
  time, the other rank's wait, dist/param_hash_mismatch) and ``rlcockpit doctor``'s distributed
  detectors (straggler, rank_divergence) find them in the stored run.

Slow tier (tests/conftest.py SLOW_MODULES): each test starts two training processes.
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from trainer_testkit import reader, series

pytestmark = pytest.mark.timeout(600)
TINY = ["model.threads=1", "rollout.max_new_tokens=8", "ppo.epochs=1", "eval.every=0", "checkpoint.every=0",
        "optim.warmup_steps=0", "diagnostics.enabled=false"]
MACHINE = ("time", "perf", "sys")
RTOL, ATOL = 1e-3, 1e-4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cli(tmp_path: Path, *args: str) -> int:
    """``rlcockpit train`` in a child process (``--nproc 2`` starts torchrun from there)."""
    import subprocess

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "rlcockpit", "train", "--quiet", *args]
    return subprocess.run(cmd, cwd=tmp_path, env=env, timeout=500).returncode


def _training_metrics(uri: str, run_id: str, steps: tuple[int, int]) -> dict[str, list]:
    got = series(uri, run_id, step_min=steps[0], step_max=steps[1])
    return {n: v for n, v in got.items() if n.split("/")[0] not in MACHINE and not n.startswith("dist/")}


def _only_run(uri: str) -> str:
    r = reader(uri)
    try:
        (run,) = r.list_runs()
        return run.run_id
    finally:
        r.close()


def test_two_ranks_of_16_prompts_train_like_one_rank_of_32(tmp_path):
    common = [*TINY, "train.steps=3", "rollout.batch_size=32", "ppo.minibatch_size=32", "rollout.top_p=0.05",
              "seed=5"]
    uris = {}
    for n in (1, 2):
        d = tmp_path / f"n{n}"
        d.mkdir()
        uris[n] = f"sqlite:///{d / 'runs.db'}"
        assert _cli(d, "--nproc", str(n), "--store", uris[n], f"checkpoint.dir={d / 'ckpt'}", *common) == 0
    one, two = (_training_metrics(uris[n], _only_run(uris[n]), (1, 3)) for n in (1, 2))
    assert set(one) == set(two)
    for name in sorted(one):
        assert [s for s, _ in one[name]] == [s for s, _ in two[name]], name
        for (_, a), (_, b) in zip(one[name], two[name], strict=True):
            assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=RTOL, abs=ATOL), (name, a, b)
    assert [s for s, _ in one["policy/loss"]] == [1, 2, 3] and len(one) > 40  # real training numbers
    worst = max((abs(a - b) / max(abs(a), ATOL), name) for name in one
                for (_, a), (_, b) in zip(one[name], two[name], strict=True) if math.isfinite(a) and math.isfinite(b))
    print(f"largest relative difference, 2 ranks vs 1: {worst[0]:.2e} ({worst[1]})")
    dist = series(uris[2], _only_run(uris[2]), [f"dist/grad_norm/rank/{r}" for r in (0, 1)] +
                  ["dist/param_hash_mismatch", "dist/param_hash_checked", "dist/world_size"])
    assert dict(dist["dist/world_size"]) == {0: 2.0}
    assert all(math.isfinite(v) and v > 0 for r in (0, 1) for _, v in dist[f"dist/grad_norm/rank/{r}"])
    r = reader(uris[2])
    try:
        samples = r.query_samples(_only_run(uris[2]), _sample_query(step=1))
    finally:
        r.close()
    assert samples.total == 32 and sorted(s.sample_id for s in samples.items) == list(range(32))


def _sample_query(step: int):
    from rlcockpit.store.base import SampleQuery

    return SampleQuery(step_min=step, step_max=step, limit=1000)


def test_a_resumed_two_rank_run_continues_exactly(tmp_path):
    common = [*TINY, "rollout.batch_size=4", "ppo.minibatch_size=4", "kl.adaptive=true", "kl.horizon=50",
              "reward.normalize=true", "model.normalize_values=true", "distributed.hash_every=1"]
    ref, cut = tmp_path / "ref", tmp_path / "cut"
    for d in (ref, cut):
        d.mkdir()
    ref_uri, cut_uri = f"sqlite:///{ref / 'runs.db'}", f"sqlite:///{cut / 'runs.db'}"
    assert _cli(ref, "--nproc", "2", "--store", ref_uri, f"checkpoint.dir={ref / 'ckpt'}", "train.steps=4",
                *common) == 0
    assert _cli(cut, "--nproc", "2", "--store", cut_uri, f"checkpoint.dir={cut / 'ckpt'}", "train.steps=2",
                *common) == 0
    (ckpt,) = (cut / "ckpt").glob("*/step_0000002")
    assert (ckpt / "rank_1.pt").is_file() and (ckpt / "trainer_state.pt").is_file()
    assert _cli(cut, "--nproc", "2", "--resume", "latest", f"checkpoint.dir={cut / 'ckpt'}", "train.steps=4") == 0
    run_id = _only_run(cut_uri)
    want, got = _training_metrics(ref_uri, _only_run(ref_uri), (3, 4)), _training_metrics(cut_uri, run_id, (3, 4))
    assert want and want == got
    assert dict(series(cut_uri, run_id, ["dist/param_hash_mismatch"])["dist/param_hash_mismatch"]) == \
        {1: 0.0, 2: 0.0, 3: 0.0, 4: 0.0}


# --------------------------------------------------------------------------- two ranks in this test


def _worker(rank: int, world: int, port: int, spec: dict) -> None:
    """One rank: its own Trainer in the group; records what it holds before every step."""
    import torch

    from rlcockpit.config import load_config
    from rlcockpit.trainer.config import TrainConfig
    from rlcockpit.trainer.distributed import init_group
    from rlcockpit.trainer.trainer import Trainer

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    cfg = load_config(TrainConfig, None, spec["overrides"])
    group = init_group(cfg.distributed)
    control = None
    if rank == 0 and spec["scenario"] == "tickets":
        from rlcockpit.store import open_store

        control = open_store(cfg.telemetry.store).control()
    trainer = Trainer(cfg, control_store=control, group=group)
    seen: list[dict] = []

    def record(t, step):
        ctl, norm = t.controllers, t.normalizers
        seen.append({"step": step, "kl_coef": ctl.kl.coef, "live_kl_coef": t.live.params.kl_coef,
                     "clip": ctl.clip.state_dict() if ctl.clip else None,
                     "reward_rms": norm.reward.state_dict() if norm.reward else None,
                     "value_norm": norm.value.state_dict() if norm.value else None})

    trainer.add_step_hook(record)
    if rank == 0 and spec["scenario"] == "tickets":
        _ticket_hooks(trainer, cfg)
    if rank == 1 and spec["scenario"] == "faults":
        _slow_and_perturbed(trainer)
    result = trainer.run()
    group.close()
    out = {"seen": seen, "status": result.status, "step": result.step, "run_id": result.run_id}
    Path(spec["out"].format(rank=rank)).write_text(json.dumps(out), encoding="utf-8")


def _ticket_hooks(trainer, cfg) -> None:
    """Rank 0's operators: a kl.coef ticket before step 2, pause before step 3 (resumed 3 s later by
    another thread), a rollback to step 2 before step 4, a stop before step 5."""
    from rlcockpit.control import ControlPlane
    from rlcockpit.store import open_store

    store = open_store(cfg.telemetry.store)
    plane = ControlPlane.over(store.control(), store.reader())
    p = {n: plane.users.authenticate(plane.users.add(n, r)[1]) for n, r in (("olga", "operator"), ("alex", "approver"))}
    done: set[str] = set()

    def approve(ticket):
        if ticket.status == "requested":  # a pause needs no second person
            plane.tickets.approve(p["alex"], ticket.ticket_id, "")

    def resume_later(run_id):
        while not trainer.paused:
            time.sleep(0.05)
        time.sleep(3.0)  # longer than a waiting rank's poll: the other rank keeps waiting, heartbeating
        approve(plane.tickets.command(p["olga"], run_id, "resume", "go on"))

    def hook(t, step):
        run_id = t.telemetry.run_id
        if step == 2 and "kl" not in done:
            done.add("kl")
            approve(plane.tickets.request(p["olga"], run_id, "kl.coef", 0.2, "tighten"))
        elif step == 3 and "pause" not in done:
            done.add("pause")
            approve(plane.tickets.command(p["olga"], run_id, "pause", "look"))
            threading.Thread(target=resume_later, args=(run_id,), daemon=True).start()
        elif step == 4 and "rollback" not in done:
            done.add("rollback")
            approve(plane.tickets.command(p["olga"], run_id, "rollback", "undo", {"step": 2}))
        elif step == 5 and "stop" not in done:
            done.add("stop")
            approve(plane.tickets.command(p["olga"], run_id, "stop", "enough"))

    trainer.add_step_hook(hook)


def _slow_and_perturbed(trainer) -> None:
    """Rank 1 only: every rollout 0.3 s slower (a straggler); before step 4 one weight nudged (the
    ranks' parameters diverge)."""
    import torch

    from rlcockpit.trainer import trainer as trainer_module

    sample = trainer_module.sample_responses

    def slow(*args, **kwargs):
        time.sleep(0.3)
        return sample(*args, **kwargs)

    trainer_module.sample_responses = slow

    def perturb(t, step):
        if step == 4:
            with torch.no_grad():
                next(t.models.actor.parameters()).view(-1)[0] += 1e-3

    trainer.add_step_hook(perturb)


def _run_two_ranks(tmp_path: Path, scenario: str, overrides: list[str]) -> list[dict]:
    spec = {"scenario": scenario, "overrides": overrides, "out": str(tmp_path / "rank{rank}.json")}
    ctx = mp.get_context("spawn")
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, 2, port, spec)) for r in (0, 1)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(400)
    for proc in procs:
        if proc.is_alive():
            proc.kill()
    assert [proc.exitcode for proc in procs] == [0, 0]
    return [json.loads((tmp_path / f"rank{r}.json").read_text(encoding="utf-8")) for r in (0, 1)]


def _uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


def _cfg_overrides(tmp_path: Path, *extra: str) -> list[str]:
    return [f"telemetry.store={_uri(tmp_path)}", f"checkpoint.dir={tmp_path / 'ckpt'}", *TINY, *extra]


@pytest.mark.parametrize("algo", ["ppo", "grpo"])
def test_controllers_and_normalisers_are_identical_on_every_rank(tmp_path, algo):
    extra = ["algo=grpo", "rollout.n_samples=2", "kl.estimator=k3"] if algo == "grpo" else \
        ["model.normalize_values=true"]
    ranks = _run_two_ranks(tmp_path, "controllers", _cfg_overrides(
        tmp_path, "train.steps=3", "rollout.batch_size=4", "ppo.minibatch_size=4", "kl.adaptive=true",
        "kl.horizon=20", "ppo.adaptive_clip=true", "reward.normalize=true", *extra))
    assert [r["status"] for r in ranks] == ["finished", "finished"]
    assert ranks[0]["seen"] == ranks[1]["seen"] and len(ranks[0]["seen"]) == 3
    last = ranks[0]["seen"][-1]
    assert last["kl_coef"] != 0.05 and last["clip"]["entropy_ma"] is not None  # they moved, alike
    assert last["reward_rms"]["count"] == 2 * 4 * (2 if algo == "grpo" else 1)  # two steps of the global batch
    if algo == "grpo":  # a group's samples stay on one rank: its id, its prompt
        r = reader(_uri(tmp_path))
        try:
            samples = r.query_samples(ranks[0]["run_id"], _sample_query(step=1)).items
        finally:
            r.close()
        groups: dict[int, set] = {}
        for s in samples:
            groups.setdefault(s.group_id, set()).add(s.prompt_id)
        assert len(samples) == 8 and len(groups) == 4 and all(len(v) == 1 for v in groups.values())


def test_tickets_pause_rollback_and_stop_reach_both_ranks_at_the_same_boundary(tmp_path):
    ranks = _run_two_ranks(tmp_path, "tickets", _cfg_overrides(
        tmp_path, "train.steps=6", "rollout.batch_size=4", "ppo.minibatch_size=4", "kl.coef=0.05",
        "control.effect_eval=false", "control.poll_interval_s=0.05"))
    for r in ranks:
        assert (r["status"], r["step"]) == ("stopped", 5)
        steps = [(s["step"], s["live_kl_coef"], s["kl_coef"]) for s in r["seen"]]
        assert steps == [(1, 0.05, 0.05), (2, 0.05, 0.05), (3, 0.2, 0.2), (4, 0.2, 0.2),  # ticket at 2
                         (3, 0.05, 0.05), (4, 0.05, 0.05), (5, 0.05, 0.05)]  # rolled back to 2, stop at 5
    assert ranks[0]["seen"] == ranks[1]["seen"]


def test_a_slow_rank_and_a_diverged_rank_show_in_the_per_rank_metrics_and_the_detectors(tmp_path):
    steps = 9
    ranks = _run_two_ranks(tmp_path, "faults", _cfg_overrides(
        tmp_path, f"train.steps={steps}", "rollout.batch_size=4", "ppo.minibatch_size=4",
        "distributed.hash_every=1"))
    assert [r["status"] for r in ranks] == ["finished", "finished"]
    uri, run_id = _uri(tmp_path), ranks[0]["run_id"]
    got = {n: dict(v) for n, v in series(uri, run_id).items() if n.startswith("dist/")}
    for step in range(1, steps + 1):
        slow, fast = got["dist/time/rollout_s/rank/1"][step], got["dist/time/rollout_s/rank/0"][step]
        assert slow - fast > 0.2, (step, slow, fast)  # the straggler's own phase
        # rank 0 waits for it at the first collective after ROLLOUT and SCORE (ADVANTAGE's moments)
        assert got["dist/time/advantage_s/rank/0"][step] > got["dist/time/advantage_s/rank/1"][step]
        assert all(math.isfinite(got[f"dist/{m}/rank/{r}"][step]) for m in ("heartbeat_age_s", "rss_gb", "step_s",
                                                                                 "grad_norm") for r in (0, 1))
    assert got["dist/param_hash_mismatch"] == {s: (0.0 if s < 4 else 1.0) for s in range(1, steps + 1)}
    assert set(got["dist/param_hash_checked"].values()) == {1.0}
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "rlcockpit", "doctor", "--store", uri, "--run", run_id, "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr  # a red finding: the ranks' parameters differ
    fired = {f["detector"] for f in json.loads(proc.stdout)["findings"]}
    assert {"straggler", "rank_divergence"} <= fired, fired


def test_the_distributed_benchmark_runs_quick(tmp_path):
    """benchmarks/distributed.py --quick: 1 and 2 real ranks, 4 simulated; the last line is its JSON."""
    import subprocess

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "distributed.py"
    proc = subprocess.run([sys.executable, str(script), "--quick"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    head = json.loads(proc.stdout.strip().splitlines()[-1])
    assert head["step_s_1"] > 0 and head["step_s_2"] > 0 and head["efficiency"] == pytest.approx(head["speedup"] / 2, abs=1e-3)  # JSON rounds
    sim = head["simulated"]
    assert sim["ranks"] == 4 and sim["samples_rank0_writes"] == 64 and sim["bytes_into_rank0"] > sim["bytes_per_rank"]


# ---------------------------------------------------------------------------- the rank faults

RANK_FAULTS = [
    # fault, steps, extra overrides, (detector, severity, key), exit code, run status
    ("rank_params_diverged", 5, ["distributed.hash_every=1"], ("rank_divergence", "red", None), 0, "finished"),
    ("rank_straggler", 11, [], ("straggler", "orange", "rank/1"), 0, "finished"),
    ("rank_grad_outlier", 8, [], ("rank_grad_outlier", "orange", "rank/1"), 0, "finished"),
    ("rank_frozen", 8, ["distributed.timeout_s=40", "diagnostics.detectors.rank_heartbeat.floor_s=10"],
     ("rank_heartbeat", "red", "rank/1"), 1, "failed"),
]


@pytest.mark.parametrize(("name", "steps", "extra", "want", "code", "status"), RANK_FAULTS,
                         ids=[f[0] for f in RANK_FAULTS])
def test_rlcockpit_faults_run_breaks_rank_1_of_2_and_its_detector_names_it(tmp_path, name, steps, extra, want,
                                                                          code, status):
    """`rlcockpit faults run NAME --nproc 2` as a user runs it (torchrun, 2 gloo ranks): rank 0 records the
    fault event (acting on rank 1) and the detector's finding, live; a frozen rank fails the run after the
    collective timeout, its heartbeat finding raised while the group waited."""
    import subprocess

    uri = _uri(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "rlcockpit", "faults", "run", name, "--nproc", "2", "--store", uri,
                           "--steps", str(steps), "rollout.batch_size=4", "ppo.minibatch_size=4", *extra],
                          capture_output=True, text=True, timeout=420, cwd=tmp_path)
    assert proc.returncode == code, proc.stdout[-2000:] + proc.stderr[-3000:]
    r = reader(uri)
    try:
        (run,) = r.list_runs()
        found = r.read_findings(run.run_id)
        (event,) = r.read_events(run.run_id, kinds=["fault"])
    finally:
        r.close()
    assert run.status == status
    assert event.step == 3 and event.payload["fault"] == name and event.payload["rank"] == 1
    detector, severity, key = want
    hits = [f for f in found if f.detector == detector and f.severity == severity]
    assert hits, [(f.step, f.detector, f.severity, f.message) for f in found]
    if key is not None:
        assert hits[0].evidence["key"] == key and "rank 1" in hits[0].message
    assert hits[0].step >= 2  # after the fault (a frozen rank: found after the last step it finished, 2)
