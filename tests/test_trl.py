"""The TRL callback (issue 11 part 1): real TRL GRPOTrainer runs on the tiny world's model, a few
steps each, checked through the store and the HTTP API — metrics in catalog names, completions
with every reward function's score, tickets requested by one user and approved by another applied
at the paused boundary, pause / resume / stop, and a red finding that stops the run with a
checkpoint and a post-mortem."""

from __future__ import annotations

import importlib.util
import math
import threading
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("trl")

from transformers import TrainerCallback  # noqa: E402

from rlcockpit.control import ControlConfig, ControlPlane  # noqa: E402
from rlcockpit.diagnostics import DiagnosticsConfig, PolicyConfig  # noqa: E402
from rlcockpit.integrations.trl import watch  # noqa: E402
from rlcockpit.store import open_store  # noqa: E402
from rlcockpit.store.base import SampleQuery  # noqa: E402
from server_testkit import ServerThread  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(300)


def _example():
    spec = importlib.util.spec_from_file_location("trl_grpo_example", ROOT / "examples" / "trl_grpo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXAMPLE = _example()


def _trainer(tmp_path: Path, steps: int, **overrides):
    args = EXAMPLE.parse_args(["--steps", str(steps), "--prompts", "2", "--generations", "2",
                               "--max-completion-length", "8"])
    trainer = EXAMPLE.build_trainer(args, str(tmp_path / "out"))
    for key, value in overrides.items():
        setattr(trainer.args, key, value)
    return trainer


def test_a_grpo_run_is_live_in_the_store(tmp_path):
    uri = f"sqlite:///{tmp_path / 'trl.db'}"
    trainer = _trainer(tmp_path, 3)
    cockpit = watch(trainer, store=uri)
    trainer.train()
    reader = open_store(uri).reader()
    run_id = cockpit.run.run_id
    summary = reader.summary(run_id)
    assert reader.get_run(run_id).status == "finished" and summary.steps == 3
    inputs = {"reward/mean", "kl/mean", "kl/token_mean", "policy/entropy", "policy/clip_frac",
              "response/length_mean", "reward/std", "optim/lr/actor", "kl/coef"}
    assert inputs <= set(summary.metric_names)  # the KL, entropy, clip, length and reward detectors' inputs
    assert {f"reward/{c}/mean" for c in EXAMPLE.COMPONENTS} <= set(summary.metric_names)
    assert summary.samples == 3 * 4
    sample = reader.query_samples(run_id, SampleQuery(step_min=2, step_max=2, limit=1)).items[0]
    assert set(sample.components) == set(EXAMPLE.COMPONENTS) and sample.advantage is not None
    assert sample.reward == pytest.approx(sum(sample.components.values()))
    assert sample.category and sample.ref_logprobs is not None and sample.tokens is not None
    live = open_store(uri).control().read_live_params(run_id, limit=1)[0]
    assert set(live.specs) == {"learning_rate", "beta", "temperature", "max_completion_length", "epsilon"}
    assert [e.kind for e in reader.read_events(run_id)][0] == "trl_attached"


def test_an_rloo_run_is_detected_and_live_too(tmp_path):
    import json

    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import RLOOConfig, RLOOTrainer

    from rlcockpit.world import SFT_CHECKPOINT
    from rlcockpit.world.prompts import load_prompts

    rows = [{"prompt": p.prompt, "meta_json": json.dumps(p.meta)} for p in load_prompts("train")[:16]]
    config = RLOOConfig(output_dir=str(tmp_path / "out"), report_to="none", save_strategy="no", logging_steps=1,
                        use_cpu=True, bf16=False, disable_tqdm=True, per_device_train_batch_size=4, num_generations=2,
                        max_completion_length=8, beta=0.05, max_steps=2)
    trainer = RLOOTrainer(model=AutoModelForCausalLM.from_pretrained(SFT_CHECKPOINT),
                          reward_funcs=[EXAMPLE.world_reward("correctness")], args=config,
                          train_dataset=Dataset.from_list(rows),
                          processing_class=AutoTokenizer.from_pretrained(SFT_CHECKPOINT))
    uri = f"sqlite:///{tmp_path / 'rloo.db'}"
    cockpit = watch(trainer, store=uri)
    trainer.train()
    reader = open_store(uri).reader()
    summary = reader.summary(cockpit.run.run_id)
    assert summary.steps == 2 and summary.samples == 2 * 4
    assert {"reward/mean", "kl/mean", "policy/entropy", "reward/correctness/mean"} <= set(summary.metric_names)
    assert reader.read_events(cockpit.run.run_id)[0].payload["trainer"] == "RLOOTrainer"


def test_the_plain_callback_takes_a_learning_rate_ticket(tmp_path):
    """RlcockpitCallback in callbacks=[...] without the trainer: the learning rate is still a knob."""
    from rlcockpit.control import Principal
    from rlcockpit.integrations.trl import RlcockpitCallback

    uri = f"sqlite:///{tmp_path / 'plain.db'}"
    cockpit = RlcockpitCallback(store=uri, diagnostics=False)

    class Approve(TrainerCallback):  # another person approves a change while step 1 ends
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 1:
                store = open_store(uri)
                plane = ControlPlane.over(store.control(), store.reader())
                ticket = plane.tickets.request(Principal("olga", "operator"), cockpit.run.run_id, "learning_rate",
                                               5e-5, "slower")
                plane.tickets.approve(Principal("alex", "approver"), ticket.ticket_id)

    trainer = _trainer(tmp_path, 3)
    trainer.add_callback(Approve())
    trainer.add_callback(cockpit)
    trainer.train()
    live = open_store(uri).control().read_live_params(cockpit.run.run_id, limit=1)[0]
    assert set(live.specs) == {"learning_rate"} and live.values["learning_rate"] == 5e-5
    lrs = open_store(uri).reader().read_series(cockpit.run.run_id, ["optim/lr/actor"])["optim/lr/actor"]
    assert list(lrs.values) == pytest.approx([1e-4, 5e-5, 5e-5])


def test_tickets_and_commands_over_http_reach_the_trainer_at_its_boundary(tmp_path):
    from rlcockpit.server.app import create_app
    from rlcockpit.server.auth import control_for
    from rlcockpit.server.settings import ServerSettings

    uri = f"sqlite:///{tmp_path / 'steer.db'}"
    store = open_store(uri)
    plane = ControlPlane.over(store.control(), store.reader())
    tokens = {n: plane.users.add(n, r)[1] for n, r in (("olga", "operator"), ("alex", "approver"))}
    settings = ServerSettings(store=uri)
    access, control = control_for(settings, store)
    trainer = _trainer(tmp_path, 400)
    cockpit = watch(trainer, store=uri, diagnostics=False,
                    control=ControlConfig(effect_steps=2, poll_interval_s=0.05))
    training = threading.Thread(target=trainer.train, daemon=True)
    training.start()
    with ServerThread(create_app(settings, store, access=access, control=control)) as url, \
            httpx.Client(base_url=url, timeout=30) as http:
        def post(user, path, body):
            resp = http.post(path, json=body, headers={"Authorization": f"Bearer {tokens[user]}"})
            assert resp.status_code in (200, 201), resp.text
            return resp.json()["ticket"]

        def ticket(tid):
            return http.get(f"/api/tickets/{tid}", headers={"Authorization": f"Bearer {tokens['alex']}"}
                            ).json()["ticket"]

        run_id = _wait(lambda: cockpit.run and cockpit.run.run_id, training, "the run")
        post("olga", f"/api/runs/{run_id}/commands", {"command": "pause", "reason": "look"})
        paused = _wait(lambda: _event_step(store, run_id, "paused"), training, "the pause")
        lr = post("olga", f"/api/runs/{run_id}/tickets", {"param": "optim/lr/actor", "value": 5e-5, "reason": "slower"})
        temp = post("olga", f"/api/runs/{run_id}/tickets", {"param": "temperature", "value": 0.7, "reason": "sharper"})
        for t in (lr, temp):
            post("alex", f"/api/tickets/{t['ticket_id']}/approve", {"comment": "ok"})
        resume = post("olga", f"/api/runs/{run_id}/commands", {"command": "resume", "reason": "go"})
        post("alex", f"/api/tickets/{resume['ticket_id']}/approve", {"comment": "ok"})
        done = _wait(lambda: ticket(lr["ticket_id"])["status"] == "evaluated" and ticket(lr["ticket_id"]), training,
                     "the effect of the learning-rate change")
        stop = post("olga", f"/api/runs/{run_id}/commands", {"command": "stop", "reason": "enough"})
        post("alex", f"/api/tickets/{stop['ticket_id']}/approve", {"comment": "ok"})
        training.join(120)
    assert not training.is_alive() and trainer.state.global_step < 400
    assert done["boundary_step"] == paused and done["effect"]["ks_pvalue"] is not None
    assert ticket_status(plane, temp["ticket_id"]) == ("evaluated", paused)
    assert trainer.temperature == 0.7 and trainer.generation_config.temperature == 0.7
    lrs = store.reader().read_series(run_id, ["optim/lr/actor"])["optim/lr/actor"]
    by_step = dict(zip(lrs.steps, lrs.values, strict=True))
    assert by_step[paused] == pytest.approx(1e-4) and by_step[paused + 1] == pytest.approx(5e-5)
    assert plane.runs.get_run(run_id).status == "stopped"


def ticket_status(plane, tid):
    t = plane.store.get_ticket(tid)
    return t.status, t.boundary_step


class NanGradAt(TrainerCallback):
    """A fault: the logged gradient norm of one step is NaN (runs before the cockpit's callback)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is not None and state.global_step == self.step:
            logs["grad_norm"] = math.nan


@pytest.mark.parametrize("background", [True, False], ids=["background", "same-step"])
def test_a_red_finding_checkpoints_stops_and_writes_a_post_mortem(tmp_path, background):
    uri = f"sqlite:///{tmp_path / 'red.db'}"
    trainer = _trainer(tmp_path, 20, save_strategy="steps", save_steps=2)
    trainer.add_callback(NanGradAt(3))
    policy = PolicyConfig(actions={"red": ("alert", "checkpoint", "stop")})
    cockpit = watch(trainer, store=uri, diagnostics=DiagnosticsConfig(policy=policy),
                    background_diagnostics=background)
    trainer.train()
    run_id = cockpit.run.run_id
    reader = open_store(uri).reader()
    # background detectors: step 3's finding is acted on at the first boundary after it is ready —
    # the next step's, or the one after (at most MAX_BEHIND logged steps behind)
    from rlcockpit.integrations.trl import MAX_BEHIND

    acted = trainer.state.global_step
    assert (3 < acted <= 3 + MAX_BEHIND) if background else acted == 3
    found = [f for f in reader.read_findings(run_id) if f.detector == "nonfinite"]
    assert found and found[0].step == 3 and found[0].severity == "red"
    events = {e.kind: e for e in reader.read_events(run_id)}
    assert events["post_mortem"].payload["resume_from"].endswith("checkpoint-2")
    assert reader.get_run(run_id).status == "stopped"
    tickets = open_store(uri).control().list_tickets(run_id=run_id)
    assert {(t.target, t.status, t.decided_by) for t in tickets} >= {("checkpoint", "applied", "policy"),
                                                                     ("stop", "applied", "policy")}
    assert Path(tmp_path / "out" / f"checkpoint-{acted}").is_dir()


def _wait(predicate, thread, what, timeout=120.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value is not None and value is not False:
            return value
        if not thread.is_alive():
            raise AssertionError(f"training ended while waiting for {what}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _event_step(store, run_id, kind):
    steps = [e.step for e in store.reader().read_events(run_id) if e.kind == kind]
    return steps[0] if steps else None


def test_the_callback_cost_benchmark_runs_and_reports_json():
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "trl_callback.py"), "--quick", "--steps", "3",
                           "--rounds", "1"], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["benchmark"] == "trl_callback" and result["step_ms_without"] > 0
    assert result["detectors"] == "same_step" and 0 < result["detectors_share"] < result["callback_share"] < 0.5


def test_the_trl_faults_benchmark_runs_and_reports_json():
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "trl_faults.py"), "--quick", "--steps", "6",
                           "--onset", "3"], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["benchmark"] == "trl_faults" and list(result["faults"]) == ["lr_spike"]
    assert "gradients" in result["faults"]["lr_spike"]["expected"]
