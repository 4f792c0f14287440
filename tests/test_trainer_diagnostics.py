"""Diagnostics inside the trainer: findings, the severity policy's actions (pause, snapshot,
checkpoint, save batch, stop + rollback), fail-soft detectors and webhook notifications — on tiny
real PPO runs (real torch, real SQLite) and a real local HTTP server."""

from __future__ import annotations

import http.server
import io
import json
import logging
import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from rlcockpit.config import Config, option
from rlcockpit.diagnostics import Condition, Detector, register
from rlcockpit.diagnostics.config import PolicyConfig, WebhookConfig
from rlcockpit.diagnostics.notify import Notifier, WebhookNotifier
from rlcockpit.records import FindingRecord
from rlcockpit.trainer.trainer import Trainer
from trainer_testkit import events, make_model_dir, reader
from trainer_testkit import make_config as _make_config


def make_config(tmp_path, *overrides, model=None):
    """The testkit's config with the level checks off: these tests drive the policy's actions with
    a scripted detector on a randomly initialised model, whose answers all hit the length cap and
    whose entropy is that of a uniform distribution — which ``levels`` rightly reports (orange)."""
    return _make_config(tmp_path, "diagnostics.disabled=[levels]", *overrides, model=model)


@dataclass(frozen=True)
class ScriptConfig(Config):
    script: dict[str, str] = option(default_factory=dict, help="step -> severity to report at that step.")
    raise_at: int = option(0, help="Raise RuntimeError at this step; 0 = never.", range=(0, None))


@register
class Scripted(Detector):
    """A user's own detector: reports what its script says (silent unless configured, so it never
    fires in other tests' runs)."""

    name = "test_scripted"
    family = "test"
    reads = ("reward/mean", "kl/")
    signal = "scripted"
    Config = ScriptConfig

    def update(self, view):
        if view.step == self.config.raise_at:
            raise RuntimeError("detector bug")
        severity = self.config.script.get(str(view.step))
        return Condition(severity, f"scripted {severity} at step {view.step}") if severity else None


def script(**by_step: str) -> str:
    body = ", ".join(f"{k[1:]}: {v}" for k, v in by_step.items())
    return f"diagnostics.detectors.test_scripted.script={{{body}}}"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("model"), "gpt2")


def store_view(cfg: Any, run_id: str) -> dict[str, Any]:
    r = reader(cfg)
    try:
        return {"findings": r.read_findings(run_id), "snapshots": r.read_snapshots(run_id, with_payload=True),
                "checkpoints": r.read_checkpoints(run_id), "actions": r.read_events(run_id, kinds=["action"])}
    finally:
        r.close()


def resume_when_paused(trainer: Trainer, seen: dict[str, Any]) -> threading.Thread:
    """The person who was called: waits for the pause, looks at the step, resumes (another thread)."""
    def person() -> None:
        deadline = time.monotonic() + 60
        while not trainer.paused and time.monotonic() < deadline:
            time.sleep(0.02)
        seen["paused_at"] = trainer.step if trainer.paused else None
        trainer.live.resume(reason="looked at the snapshot", requested_by="alice")

    thread = threading.Thread(target=person, daemon=True)
    thread.start()
    return thread


def test_red_pauses_snapshots_and_checkpoints_until_a_person_resumes(tmp_path, model_dir):
    cfg = make_config(tmp_path, "train.steps=5", script(s3="red"), model=model_dir)
    trainer = Trainer(cfg)
    seen: dict[str, Any] = {}
    person = resume_when_paused(trainer, seen)
    result = trainer.run()
    person.join(5)
    assert result.status == "finished" and result.step == 5
    assert seen["paused_at"] == 3
    got = store_view(cfg, result.run_id)
    red = [f for f in got["findings"] if f.detector == "test_scripted"]
    assert [(f.step, f.severity, f.status) for f in red][0] == (3, "red", "raised")
    incident = red[0].incident
    assert incident
    assert [(c.step, c.reason) for c in got["checkpoints"] if c.reason == "incident"] == [(3, "incident")]
    assert Path(trainer.last_checkpoint).exists()
    acts = [(e.payload["action"], e.payload["incident"], e.payload["result"]["ok"]) for e in got["actions"]
            if e.payload["detector"] == "test_scripted"]
    assert acts == [(a, incident, True) for a in ("alert", "snapshot", "checkpoint", "pause")]
    paused = events(cfg, result.run_id, "paused")
    assert [(e.step, e.payload["requested_by"]) for e in paused] == [(3, "diagnostics:test_scripted")]
    assert [e.payload["requested_by"] for e in events(cfg, result.run_id, "resumed")] == ["alice"]

    (snap,) = [s for s in got["snapshots"] if s.kind == "diagnostic"]
    assert snap.step == 3 and snap.incident == incident
    p = snap.payload
    assert set(p) >= {"grad_norm_hist", "layer_grad_var", "head_grad_cov", "batch", "last_samples",
                      "metric_window", "config", "finding"}
    hist = p["grad_norm_hist"]
    assert hist["steps"] == [1, 2, 3] and sum(hist["counts"]) == 3 and len(hist["edges"]) == len(hist["counts"]) + 1
    heat = p["layer_grad_var"]
    assert heat["layers"] == ["embedding", "block_0", "block_1", "head"]
    assert len(heat["values"]) == 3 and all(len(row) == len(heat["layers"]) for row in heat["values"])
    assert all(v is not None and v >= 0 for row in heat["values"] for v in row)
    cov = p["head_grad_cov"]
    assert len(cov["labels"]) == 32 and cov["labels"][0].startswith("policy[") and cov["labels"][-1].startswith("critic[")
    assert len(cov["matrix"]) == 32 and cov["rows"] == 6  # 3 steps x 2 minibatches
    assert len(p["batch"]) == 8 and {s["step"] for s in p["batch"]} == {3}
    assert all("token_kl" not in s and "logprobs" not in s for s in p["batch"])
    assert len(p["last_samples"]) == 24
    window = p["metric_window"]
    assert window["steps"] == [1, 2, 3] and "reward/mean" in window["series"] and "kl/mean" in window["series"]
    assert p["config"]["diagnostics"]["policy"]["actions"]["red"]
    assert p["finding"]["detector"] == "test_scripted"
    assert len(json.dumps(p)) < 1_000_000


def test_grpo_snapshot_has_policy_head_coordinates_only(tmp_path, model_dir):
    cfg = make_config(tmp_path, "algo=grpo", "rollout.batch_size=4", "rollout.n_samples=2", "train.steps=3",
                      script(s3="red"), "diagnostics.policy.actions.red=[snapshot]", model=model_dir)
    result = Trainer(cfg).run()
    assert result.status == "finished"
    (snap,) = store_view(cfg, result.run_id)["snapshots"]
    cov = snap.payload["head_grad_cov"]
    assert len(cov["labels"]) == 16 and all(label.startswith("policy[") for label in cov["labels"])
    assert len(cov["matrix"]) == 16 and cov["rows"] == 6
    assert snap.payload["grad_norm_hist"]["steps"] == [1, 2, 3]


def test_black_stops_and_rolls_back_to_the_last_checkpoint_before_the_incident(tmp_path, model_dir):
    # the incident starts (orange) at step 5 and turns black at 7; a periodic checkpoint at 6 was
    # taken after the incident started, so the rollback must pick step 4
    cfg = make_config(tmp_path, "train.steps=9", "checkpoint.every=2", "checkpoint.keep=10",
                      script(s5="orange", s7="black"), model=model_dir)
    trainer = Trainer(cfg)
    result = trainer.run()
    assert result.status == "stopped"
    assert result.step == trainer.step == 4
    got = store_view(cfg, result.run_id)
    (rb,) = [e for e in got["actions"] if e.payload["action"] == "rollback"]
    res = rb.payload["result"]
    assert res["ok"] and res["rolled_back"] and res["mode"] == "in-process"
    assert res["to_step"] == 4 and res["incident_first_step"] == 5 and res["checkpoint"].endswith("step_0000004")
    assert [e.payload["action"] for e in got["actions"] if e.payload["severity"] == "black"] == \
        ["alert", "snapshot", "stop", "rollback"]
    assert any(s.kind == "diagnostic" and s.step == 7 for s in got["snapshots"])
    steps_saved = sorted(c.step for c in got["checkpoints"])
    assert 6 in steps_saved and max(steps_saved) == 6  # no final checkpoint of the broken state
    latest = (Path(cfg.checkpoint.dir) / "latest").read_text(encoding="utf-8")
    assert latest.endswith("step_0000004")
    from rlcockpit.trainer.models import load_causal_lm

    healthy = load_causal_lm(Path(res["checkpoint"]) / "actor").state_dict()
    live = trainer.models.actor.state_dict()
    assert all(torch.equal(live[k], healthy[k]) for k in healthy)
    assert trainer.prompts.source.state_dict() == torch.load(Path(res["checkpoint"]) / "trainer_state.pt",
                                                       weights_only=False)["data"]


def test_black_without_an_earlier_checkpoint_stops_and_says_why(tmp_path, model_dir):
    cfg = make_config(tmp_path, "train.steps=4", script(s2="black"), "diagnostics.policy.actions.black=[rollback]",
                      model=model_dir)
    result = Trainer(cfg).run()
    assert result.status == "stopped" and result.step == 2
    (rb,) = store_view(cfg, result.run_id)["actions"]
    assert rb.payload["result"] == {"ok": True, "rolled_back": False, "incident_first_step": 2, "stopped": True,
                                    "reason": "no checkpoint of this run before step 2"}


def test_rollback_target_is_the_newest_healthy_checkpoint_before_the_incident(tmp_path):
    from rlcockpit.trainer.checkpoint import checkpoint_before

    run_dir = tmp_path / "ckpt" / "run-1"
    for step, reason in ((2, "periodic"), (4, "on_demand"), (5, "incident"), (6, "periodic"), (8, "periodic")):
        d = run_dir / f"step_{step:07d}"
        d.mkdir(parents=True)
        (d / "meta.json").write_text(json.dumps({"run_id": "run-1", "step": step, "reason": reason}))
        if step != 8:  # step 8 is half-written: no trainer state
            (d / "trainer_state.pt").write_bytes(b"state")
    (run_dir / "step_0000009.tmp").mkdir()
    root = str(tmp_path / "ckpt")
    assert checkpoint_before(root, "run-1", 6).name == "step_0000004"  # 5 was taken because of an incident
    assert checkpoint_before(root, "run-1", 10).name == "step_0000006"  # 8 is incomplete
    assert checkpoint_before(root, "run-1", 2) is None


def test_rollback_without_stop_continues_training_from_the_healthy_checkpoint(tmp_path, model_dir):
    cfg = make_config(tmp_path, "train.steps=6", "checkpoint.every=2", "checkpoint.keep=10",
                      script(s5="black"), "diagnostics.policy.actions.black=[alert,rollback]",
                      model=model_dir)
    trainer = Trainer(cfg)
    replayed: list[int] = []
    trainer.add_step_hook(lambda t, step: replayed.append(step))
    result = trainer.run()
    assert result.status == "finished" and result.step == 6
    assert replayed == [1, 2, 3, 4, 5, 5, 6]  # back to step 4, then steps 5 and 6 again
    (rb,) = [e for e in store_view(cfg, result.run_id)["actions"] if e.payload["action"] == "rollback"]
    assert rb.payload["result"]["to_step"] == 4 and rb.payload["result"]["incident_first_step"] == 5


def test_the_action_executor_can_be_wrapped_before_the_run(tmp_path, model_dir):
    """The control layer's seam: every action passes one function it can wrap (tickets, refusals)."""
    cfg = make_config(tmp_path, "train.steps=3", script(s2="red"), model=model_dir)
    trainer = Trainer(cfg)
    inner = trainer.diagnosis.executor
    asked: list[str] = []

    def with_tickets(action, ctx):
        asked.append(action.name)
        if action.name == "pause":
            return {"ticket": "T-1", "status": "rejected by approver"}
        return inner(action, ctx)

    trainer.diagnosis.executor = with_tickets
    result = trainer.run()
    assert result.status == "finished" and result.step == 3
    assert asked == ["alert", "snapshot", "checkpoint", "pause"]
    assert not events(cfg, result.run_id, "paused")
    pause = [e for e in store_view(cfg, result.run_id)["actions"] if e.payload["action"] == "pause"]
    assert pause[0].payload["result"] == {"ok": True, "ticket": "T-1", "status": "rejected by approver"}


def test_orange_saves_the_triggering_batch_and_keeps_training(tmp_path, model_dir):
    cfg = make_config(tmp_path, "train.steps=3", script(s2="orange"), model=model_dir)
    result = Trainer(cfg).run()
    assert result.status == "finished" and result.step == 3
    got = store_view(cfg, result.run_id)
    batches = [s for s in got["snapshots"] if s.kind == "batch"]
    assert len(batches) == 1 and batches[0].step == 2
    assert len(batches[0].payload["batch"]) == 8 and {s["step"] for s in batches[0].payload["batch"]} == {2}
    assert batches[0].payload["finding"]["severity"] == "orange"
    assert not [s for s in got["snapshots"] if s.kind == "diagnostic"]
    assert not events(cfg, result.run_id, "paused")


def test_policy_from_yaml_and_overrides_changes_the_actions(tmp_path, model_dir):
    from rlcockpit.config import load_config
    from rlcockpit.trainer.config import TrainConfig
    from trainer_testkit import FAST

    yaml_file = tmp_path / "run.yaml"
    yaml_file.write_text("diagnostics:\n  policy:\n    actions:\n      orange: [alert, snapshot]\n",
                         encoding="utf-8")
    cfg = load_config(TrainConfig, yaml_file, [
        f"telemetry.store=sqlite:///{tmp_path / 'runs.db'}", f"checkpoint.dir={tmp_path / 'ckpt'}",
        f"model.path={model_dir}", *FAST, "train.steps=4", script(s2="orange", s4="red"),
        "diagnostics.policy.actions.red=[alert]"])
    assert cfg.diagnostics.policy.actions_for("red") == ("alert",)
    result = Trainer(cfg).run()  # red would pause: with the override it only alerts
    assert result.status == "finished" and result.step == 4
    got = store_view(cfg, result.run_id)
    assert [(s.kind, s.step) for s in got["snapshots"]] == [("diagnostic", 2)]
    assert not events(cfg, result.run_id, "paused")
    assert not [c for c in got["checkpoints"] if c.reason == "incident"]
    red_actions = [e.payload["action"] for e in got["actions"] if e.payload["severity"] == "red"]
    assert red_actions == ["alert"]


def test_a_detector_that_raises_is_switched_off_and_training_goes_on(tmp_path, model_dir):
    cfg = make_config(tmp_path, "train.steps=3", "diagnostics.detectors.test_scripted.raise_at=2",
                      model=model_dir)
    trainer = Trainer(cfg)
    result = trainer.run()
    assert result.status == "finished" and result.step == 3
    (err,) = events(cfg, result.run_id, "detector_error")
    assert err.step == 2 and err.payload["detector"] == "test_scripted" and "detector bug" in err.payload["error"]
    assert trainer.diagnosis.engine.status["test_scripted"] == "error"
    assert trainer.diagnosis.engine.status["nonfinite"] != "error"


def test_diagnostics_can_be_switched_off(tmp_path, model_dir):
    cfg = make_config(tmp_path, "train.steps=2", "diagnostics.enabled=false", script(s1="red"),
                      model=model_dir)
    trainer = Trainer(cfg)
    result = trainer.run()
    assert result.status == "finished" and trainer.updater.gradstats is None
    assert store_view(cfg, result.run_id)["findings"] == []


# --------------------------------------------------------------------------- notifications


@dataclass
class Hook:
    status: int = 200
    bodies: list = field(default_factory=list)
    auth: list = field(default_factory=list)


@pytest.fixture
def hook_server():
    hook = Hook()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers["Content-Length"]))
            hook.bodies.append(json.loads(body))
            hook.auth.append(self.headers.get("Authorization"))
            self.send_response(hook.status)
            self.end_headers()

        def log_message(self, *args):
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield hook, server.server_address[1]
    server.shutdown()
    server.server_close()


def finding(severity: str, step: int = 1) -> FindingRecord:
    return FindingRecord(step=step, detector="kl_tiers", severity=severity, message=f"KL {severity}",
                         evidence={"value": float("nan")}, incident="inc-1")


def test_webhook_delivers_findings_at_or_above_its_severity(hook_server):
    hook, port = hook_server
    url = f"http://alice:s3cret@127.0.0.1:{port}/hook?token=abc"
    notifier = WebhookNotifier(WebhookConfig(url=url, min_severity="orange"), run_id="r1", backoff_s=0.01)
    t0 = time.perf_counter()
    sent = [notifier.notify(finding(s, i)) for i, s in enumerate(("yellow", "orange", "red", "black"))]
    queued_s = time.perf_counter() - t0
    notifier.close(timeout=10)
    assert sent == [False, True, True, True]
    assert queued_s < 0.5  # queued, not sent inline: training never waits on the network
    assert notifier.delivered == 3 and notifier.failed == 0
    assert [b["finding"]["severity"] for b in hook.bodies] == ["orange", "red", "black"]
    assert hook.bodies[0]["run_id"] == "r1" and hook.bodies[0]["finding"]["evidence"]["value"] is None
    assert hook.auth[0].startswith("Basic ")


def test_failing_webhook_is_retried_then_given_up_without_secrets_in_the_log(hook_server, caplog):
    hook, port = hook_server
    hook.status = 500
    url = f"http://alice:s3cret@127.0.0.1:{port}/hook?token=abc"
    notifier = WebhookNotifier(WebhookConfig(url=url, retries=2), backoff_s=0.01)
    with caplog.at_level(logging.WARNING, logger="rlcockpit.diagnostics.notify"):
        assert notifier.notify(finding("red"))
        notifier.close(timeout=10)
    assert len(hook.bodies) == 3  # first attempt + 2 retries
    assert notifier.delivered == 0 and notifier.failed == 1
    text = caplog.text
    assert "giving up" in text and f"127.0.0.1:{port}/hook" in text and "HTTP 500" in text
    assert "s3cret" not in text and "token=abc" not in text and "alice" not in text


def test_console_line_is_coloured_by_severity_and_can_be_turned_off():
    out = io.StringIO()
    Notifier(PolicyConfig(), console_file=out).notify(finding("red", 12))
    assert "RED" in out.getvalue() and "step 12" in out.getvalue() and "kl_tiers" in out.getvalue()
    quiet = io.StringIO()
    sent = Notifier(PolicyConfig(console=False), console_file=quiet).notify(finding("red"))
    assert sent == [] and quiet.getvalue() == ""


# --------------------------------------------------------------------------- gradient ring buffer


def test_layer_entry_variance_equals_torch_var_over_all_entries():
    from rlcockpit.trainer.gradstats import layer_entry_var

    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.randn(5))]
    for p in params:
        p.grad = torch.randn_like(p) * 3 + 1
    naive = torch.cat([p.grad.reshape(-1) for p in params]).double().var(unbiased=False)
    assert layer_entry_var(params) == pytest.approx(float(naive))
    assert layer_entry_var([torch.nn.Parameter(torch.zeros(2))]) is None  # no gradient yet


def test_gradstats_keeps_the_last_100_steps_and_pairs_head_coordinates_per_minibatch():
    from rlcockpit.trainer.gradstats import GradStats
    from rlcockpit.trainer.optim import StepGrads

    policy = torch.nn.Parameter(torch.zeros(50))
    value = torch.nn.Parameter(torch.zeros(8))
    stats = GradStats({"embedding": [policy], "head": [value]}, policy, value, seed=3, coords=16)
    assert stats.head_labels()[:1] == [f"policy[{int(stats.policy.idx[0])}]"] and len(stats.head_labels()) == 24
    for step in range(1, 121):
        stats.begin_step()
        for mb in range(2):
            policy.grad = torch.full((50,), float(step + mb))
            value.grad = torch.full((8,), -float(step))
            stats.after_actor(StepGrads(total=float(step), layers={}))
            stats.after_critic(StepGrads(total=1.0))
        stats.after_actor(StepGrads(total=math.nan, skipped=True))  # a skipped step is not measured
        stats.end_step(step)
    w = stats.window()
    assert w["steps"] == list(range(21, 121)) and w["grad_norm"][-1] == 120.0
    assert w["layers"] == ["embedding", "head"] and w["layer_var"][-1] == [0.0, 0.0]
    assert len(w["head_rows"]) == 64 and len(w["head_rows"][-1]) == 24
    assert w["head_rows"][-1][:16] == [121.0] * 16 and w["head_rows"][-1][16:] == [-120.0] * 8


# --------------------------------------------------------------------------- rlcockpit snapshot show


def test_snapshot_show_lists_renders_and_prints_json(tmp_path, capsys):
    import rlcockpit
    from rlcockpit.cli import main
    from rlcockpit.diagnostics.snapshots import batch_payload, diagnostic_payload
    from rlcockpit.records import SampleRecord

    uri = f"sqlite:///{tmp_path / 'runs.db'}"
    samples = [SampleRecord(step=4, sample_id=i, prompt="2+2?", response=f"answer {i}", reward=0.5 * i,
                            category="math") for i in range(3)]
    grads = {"steps": [2, 3, 4], "grad_norm": [1.0, 1.5, 9.0], "layers": ["embedding", "head"],
             "layer_var": [[1e-4, 1e-5], [2e-4, 1e-5], [5e-3, 2e-5]], "head_labels": ["policy[0]", "critic[0]"],
             "head_rows": [[0.1, 0.2], [0.3, 0.5], [0.2, 0.1]]}
    red = FindingRecord(step=4, detector="kl_tiers", severity="red", message="KL 3x target", incident="inc-9")
    with rlcockpit.init(project="p", store=uri) as run:
        run.snapshot(3, "batch", batch_payload(red, samples), incident="inc-9")
        run.snapshot(4, "diagnostic", diagnostic_payload(red, grads, samples, samples,
                                                         {"steps": [2, 3, 4], "series": {"kl/mean": [1, 2, 9]}},
                                                         {"seed": 0}), incident="inc-9")
        run_id = run.run_id
    assert main(["snapshot", "show", "--store", uri, "--run", run_id, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(s["kind"], s["step"], s["incident"]) for s in listed] == [("batch", 3, "inc-9"), ("diagnostic", 4, "inc-9")]
    diag_id = listed[1]["id"]
    assert main(["snapshot", "show", "--store", uri, str(diag_id)]) == 0  # newest run by default
    out = capsys.readouterr().out
    for part in ("RED kl_tiers", "actor gradient norm, last 3 steps", "per-layer gradient variance",
                 "embedding", "head-gradient covariance", "policy[0] × critic[0]", "kl/mean",
                 "triggering batch (3 samples", "answer 2"):
        assert part in out, part
    assert main(["snapshot", "show", "--store", uri, "--run", run_id, str(diag_id), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["payload"]["grad_norm_hist"]["steps"] == [2, 3, 4] and shown["kind"] == "diagnostic"
    assert main(["snapshot", "show", "--store", uri, "--run", run_id, "999"]) == 2
    assert "snapshot 999" in capsys.readouterr().err
