"""A run stopped at step k and continued with ``rlcockpit train --resume latest`` is the same run: same
run id in the store, and steps k+1..k+5 log exactly the metrics of an uninterrupted run (time, perf
and sys metrics excluded — they measure the machine, not the training)."""

from __future__ import annotations

import math

import pytest

from rlcockpit.cli import main
from rlcockpit.trainer.checkpoint import resolve_checkpoint
from rlcockpit.trainer.trainer import Trainer
from trainer_testkit import make_config, make_model_dir, reader, series

K, TOTAL = 3, 8
# everything with state: adaptive KL and clip, reward and value normalisers, cosine lr, evaluation
STATEFUL = [f"train.steps={TOTAL}", "kl.adaptive=true", "kl.horizon=50", "ppo.adaptive_clip=true",
            "model.normalize_values=true", "reward.normalize=true", "optim.schedule=cosine",
            "optim.warmup_steps=2", "ppo.epochs=2", "eval.every=2", "eval.max_prompts=8", "data.shuffle=true"]
MACHINE = ("time", "perf", "sys")


def same(a: list, b: list) -> bool:
    """Equal point lists, NaN equal to NaN (e.g. explained variance of constant returns)."""
    return len(a) == len(b) and all(sa == sb and (va == vb or (math.isnan(va) and math.isnan(vb)))
                                    for (sa, va), (sb, vb) in zip(a, b, strict=True))


@pytest.mark.parametrize("algo", ["ppo", "grpo"])
def test_resume_continues_the_same_run_exactly(tmp_path, algo):
    model = make_model_dir(tmp_path / "model", "gpt2")
    extra = ["algo=grpo", "rollout.n_samples=2", "rollout.batch_size=4", "kl.estimator=k3"] if algo == "grpo" else []
    # uninterrupted reference run
    ref_cfg = make_config(tmp_path / "a", *STATEFUL, *extra, model=model)
    (tmp_path / "a").mkdir()
    ref = Trainer(ref_cfg).run()
    # the same run, stopped after step K ...
    (tmp_path / "b").mkdir()
    cfg = make_config(tmp_path / "b", *STATEFUL, *extra, model=model)
    first = Trainer(cfg)
    first.add_observer(lambda step, m: first.live.stop(reason="test", requested_by="test") if step == K else None)
    stopped = first.run()
    assert (stopped.status, stopped.step) == ("stopped", K)
    assert resolve_checkpoint("latest", cfg.checkpoint.dir).name == f"step_{K:07d}"
    # ... and continued through the real CLI
    code = main(["train", "--quiet", "--resume", "latest", f"checkpoint.dir={cfg.checkpoint.dir}"])
    assert code == 0
    r = reader(cfg)
    try:
        runs = r.list_runs()
        steps = r.read_series(stopped.run_id, ["reward/mean"])["reward/mean"].steps
    finally:
        r.close()
    assert [(run.run_id, run.status) for run in runs] == [(stopped.run_id, "finished")]
    assert list(steps) == list(range(1, TOTAL + 1))
    want = {n: v for n, v in series(ref_cfg, ref.run_id, step_min=K + 1, step_max=K + 5).items()
            if n.split("/")[0] not in MACHINE}
    got = {n: v for n, v in series(cfg, stopped.run_id, step_min=K + 1, step_max=K + 5).items()
           if n.split("/")[0] not in MACHINE}
    assert len(want) > 40 and "eval/reward/mean" in want and "kl/coef" in want
    assert sorted(got) == sorted(want)
    mismatched = {n: (want[n], got[n]) for n in want if not same(want[n], got[n])}
    assert not mismatched, mismatched
