"""The synthetic stores of the tests, written through the real SDK (rlcockpit.init / Run): the one
place a test gets a finished run without training one.

- :func:`build`: a finished run that looks like training — every dashboard metric, two
  histograms, samples with per-token arrays, an incident with a diagnostic snapshot built by
  rlcockpit.diagnostics.snapshots (the browser tests, docs screenshots);
- :func:`build_store`: two small runs full of edge cases for the API tests — a NaN metric, an
  infinite reward, a phase still running, events, a checkpoint, an incident of two findings.

The parts of :func:`build` (:func:`log_step`, :func:`step_metrics`, :func:`sample`,
:func:`write_incident`) are there for tests that write their own run.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import rlcockpit
from rlcockpit.diagnostics.snapshots import diagnostic_payload, metric_window
from rlcockpit.records import FindingRecord, SampleRecord

CATEGORIES = ("math", "knowledge", "safety", "chat")
LAYERS = ("embedding", "block_0", "block_1", "head")


def step_metrics(step: int, rng: random.Random) -> dict[str, float]:
    base = 0.2 + 0.5 * (1 - math.exp(-step / 15))
    out = {"reward/mean": base + rng.gauss(0, 0.03), "kl/mean": 0.02 * step + rng.random() * 0.05,
           "kl/target": 0.5, "policy/entropy": 2.0 - 0.01 * step, "policy/loss": rng.gauss(0, 0.05),
           "value/loss": 0.5 * math.exp(-step / 20), "response/length_mean": 12 + rng.random() * 3,
           "response/length_max": 20.0, "policy/clip_frac": 0.1 + rng.random() * 0.05,
           "response/truncated_frac": 0.05, "response/eos_frac": 0.95, "grad/norm/actor": 1 + rng.random(),
           "grad/norm/critic": 0.5 + rng.random() * 0.2}
    for i, c in enumerate(CATEGORIES):
        out[f"reward/category/{c}/mean"] = base + 0.1 * i
    return out


def sample(step: int, i: int, rng: random.Random) -> SampleRecord:
    tokens = ("The", " answer", " is", " 4", ".", "<eos>")
    logprobs = tuple(-rng.random() * 2 for _ in tokens)
    ref = tuple(lp - rng.gauss(0, 0.4) for lp in logprobs)
    return SampleRecord(
        step=step, sample_id=i, prompt=f"What is 2 + 2? (step {step}, #{i})", response="The answer is 4.",
        reward=0.5 + 0.1 * i, prompt_id=f"p{i}", group_id=i // 2, category=CATEGORIES[i % 4],
        components={"correctness": 1.0, "format": 0.5 - 0.1 * i}, uncertainty=0.05, flags=("truncated",) if i == 3 else (),
        length=len(tokens), advantage=0.1 * i - 0.15, value=0.4, kl_sum=sum(a - b for a, b in zip(logprobs, ref, strict=True)),
        kl_max=max(a - b for a, b in zip(logprobs, ref, strict=True)), tokens=tokens, logprobs=logprobs, ref_logprobs=ref,
        token_kl=tuple(a - b for a, b in zip(logprobs, ref, strict=True)))


def log_step(run: Any, step: int, rng: random.Random, samples: int = 4) -> None:
    run.log(step, step_metrics(step, rng))
    run.log_histogram(step, "reward/hist", [rng.gauss(0.3 + step * 0.01, 0.2) for _ in range(32)], bins=16)
    run.log_histogram(step, "response/length/hist", [rng.randint(5, 20) for _ in range(32)], bins=16)
    run.log_samples(step, [sample(step, i, rng) for i in range(samples)])
    run.commit(step)


def write_incident(run: Any, step: int, rng: random.Random) -> None:
    evidence = {"value": 3.2, "threshold": 0.75, "onset_step": step - 2, "signal": "kl/mean",
                "message_zh": "KL 持续高于目标的 1.5 倍"}
    incident = f"inc-{step}"
    run.finding(step=step, detector="kl_tiers", severity="red", message="KL stayed above 1.5x target",
                evidence=evidence, patterns=("kl_explosion",), incident=incident)
    finding = FindingRecord(step=step, detector="kl_tiers", severity="red", message="KL stayed above 1.5x target",
                            evidence=evidence, patterns=("kl_explosion",), incident=incident)
    steps = list(range(max(0, step - 20), step + 1))
    grads = {"steps": steps, "grad_norm": [1 + rng.random() for _ in steps], "layers": list(LAYERS),
             "layer_var": [[rng.random() * (3 if layer == "embedding" else 1) for layer in LAYERS] for _ in steps],
             "head_labels": ["policy_0", "policy_1", "critic_0", "critic_1"],
             "head_rows": [[rng.gauss(0, 1) for _ in range(4)] for _ in range(8)]}
    batch = [sample(step, i, rng).without_token_arrays() for i in range(4)]
    history = [(s, step_metrics(s, rng)) for s in steps]
    payload = diagnostic_payload(finding, grads, batch, batch, metric_window(history, ["kl/mean", "policy/entropy"]),
                                 {"kl": {"target": 0.5}})
    run.snapshot(step, "diagnostic", payload, incident=incident)


def build(path: Path, steps: int = 30, incident_at: int | None = 25, seed: int = 0) -> tuple[str, str]:
    """A finished run of ``steps`` steps; returns (store uri, run id)."""
    uri = f"sqlite:///{path}"
    rng = random.Random(seed)
    run = rlcockpit.init(project="e2e", name="fixture-run", store=uri, config={"algo": "ppo"})
    for step in range(1, steps + 1):
        log_step(run, step, rng)
        run.phase(step, "update", "finished", duration_s=0.1, progress=1.0)
        if step == incident_at:
            write_incident(run, step, rng)
    run.close()
    return uri, run.run_id


# --------------------------------------------------------------------------- the API tests' store

RUN = "run-a"
OTHER = "run-b"
STEPS = 30
PER_STEP = 4
API_CATEGORIES = ("math", "chat")


def api_samples(step: int) -> list[SampleRecord]:
    """PER_STEP samples; sample 3 of step 4 has an infinite reward, every sample 3 is truncated."""
    out = []
    for sid in range(PER_STEP):
        n = 3 + sid
        out.append(SampleRecord(
            step=step, sample_id=sid, prompt=f"prompt {step}-{sid}",
            response=("The ANSWER is " if sid % 2 else "no idea ") + str(step),
            reward=math.inf if (step, sid) == (4, 3) else round(sid * 0.5 - 0.5, 3),
            category=API_CATEGORIES[sid % 2], flags=("truncated",) if sid == 3 else (),
            length=n, tokens=tuple(f"t{i}" for i in range(n)),
            logprobs=tuple(-0.5 for _ in range(n)), ref_logprobs=tuple(-0.25 for _ in range(n)),
            token_kl=tuple(0.25 for _ in range(n))))
    return out


def api_metrics(step: int) -> dict[str, float]:
    """kl/mean is NaN at step 5; reward/mean jumps by 5 at step 17."""
    return {"reward/mean": 0.1 * step + (5.0 if step == 17 else 0.0),
            "kl/mean": math.nan if step == 5 else 0.01 * step,
            "policy/entropy": 2.0 - 0.01 * step,
            "reward/category/math/mean": 0.2, "reward/category/chat/mean": 0.4}


def build_store(tmp_path: Path) -> str:
    """Two runs: RUN with metrics, histograms, samples, phases, events, findings of two real
    detectors (kl_trend, gradients) in one incident, a snapshot and a checkpoint; OTHER with
    reward/mean only. Returns the store URI."""
    uri = f"sqlite:///{tmp_path / 'server.db'}"
    with rlcockpit.init(project="p", name="a", store=uri, run_id=RUN, config={"lr": 1e-5}) as run:
        for step in range(STEPS):
            run.phase(step, "ROLLOUT", "started")
            run.log(step, api_metrics(step))
            run.log_histogram(step, "reward/hist", [0.1 * step, 0.2, 0.3], bins=4)
            run.log_samples(step, api_samples(step))
            run.phase(step, "ROLLOUT", "finished", duration_s=0.1)
        run.phase(STEPS - 1, "UPDATE", "started")
        run.phase(STEPS - 1, "UPDATE", "running", progress=0.5)
        run.finding(step=12, detector="kl_trend", severity="yellow", message="KL above target",
                    evidence={"onset_step": 10, "signal": "kl/mean"}, incident="inc-1",
                    patterns=("kl_explosion",))
        run.finding(step=16, detector="gradients", severity="red", message="grad norm spike",
                    evidence={"onset_step": 16, "signal": "grad/norm/actor"}, incident="inc-1")
        run.snapshot(16, "diagnostic", {"grad_norm_hist": {"edges": [0, 1], "counts": [3],
                                                           "steps": [16]}}, incident="inc-1")
        run.event(10, "checkpoint", {"path": "ckpt-10"})
        run.event(11, "config_change", {"kl.coef": 0.05})
        run.checkpoint(10, "ckpt-10")
    with rlcockpit.init(project="p", name="b", store=uri, run_id=OTHER) as run:
        for step in range(10):
            run.log(step, {"reward/mean": -0.1 * step})
    return uri
