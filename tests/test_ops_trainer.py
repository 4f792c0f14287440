"""The ops stack on a training process (docs/ops.md): JSON log lines and their Loki push, traces
(a span per phase per step, a sampled prompt chain), and a real tiny-world run wired by the cli
that serves its own /metrics and writes JSON lines.

Debian ships no Grafana Loki and no OTLP collector: the Loki push is checked against a local HTTP
endpoint that records what Loki's push API would receive, and the spans with the OpenTelemetry
SDK's in-memory exporter."""

from __future__ import annotations

import json
import logging
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rlcockpit.integrations.logs import JsonFormatter, LokiHandler, TrainerLogLines
from rlcockpit.integrations.tracing import TrainerTracer
from rlcockpit.records import FindingRecord
from server_testkit import free_port


class LokiRecorder:
    """Loki's push endpoint as far as a client sees it: POST /loki/api/v1/push -> 204."""

    def __init__(self) -> None:
        self.pushes: list[dict] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path == "/loki/api/v1/push":
                    recorder.pushes.append(json.loads(body))
                self.send_response(204 if self.path == "/loki/api/v1/push" else 404)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def lines(self) -> list[tuple[dict, dict]]:
        return [(s["stream"], json.loads(v[1])) for p in self.pushes for s in p["streams"] for v in s["values"]]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _record(msg: str, level: int = logging.INFO, **extra) -> logging.LogRecord:
    record = logging.LogRecord("rlcockpit.trainer.ops", level, __file__, 1, msg, None, None)
    record.__dict__.update(extra)
    return record


def test_json_lines_carry_the_rl_fields() -> None:
    line = json.loads(JsonFormatter().format(_record("phase ROLLOUT finished", rl_phase="rollout",
                                                     rl_component="actor", run="r1", step=3)))
    assert line["msg"] == "phase ROLLOUT finished" and line["level"] == "info"
    assert {k: line[k] for k in ("rl_phase", "rl_component", "rl_status", "run", "step")} == \
        {"rl_phase": "rollout", "rl_component": "actor", "rl_status": "ok", "run": "r1", "step": 3}
    warn = json.loads(JsonFormatter().format(logging.LogRecord("rlcockpit.server.x", logging.WARNING,
                                                               __file__, 1, "slow", None, None)))
    assert (warn["rl_component"], warn["rl_status"]) == ("server", "abnormal")


def test_loki_push_streams_are_labelled_by_the_low_cardinality_fields() -> None:
    loki = LokiRecorder()
    try:
        handler = LokiHandler(loki.url, flush_s=60)
        handler.emit(_record("phase SCORE finished", rl_phase="score", rl_component="reward_model",
                             run="r1", step=4))
        handler.emit(_record("RED kl_tiers: KL 3x", logging.ERROR, rl_phase="score",
                             rl_component="reference", rl_status="abnormal", run="r1", step=4))
        handler.close()  # flushes
        lines = loki.lines()
    finally:
        loki.close()
    assert handler.pushed == 2 and handler.failed == 0
    streams = [s for s, _ in lines]
    assert streams[0] == {"job": "rlcockpit", "level": "info", "run": "r1", "rl_phase": "score",
                          "rl_component": "reward_model", "rl_status": "ok"}
    assert streams[1]["rl_status"] == "abnormal" and streams[1]["level"] == "error"
    assert all("step" not in s for s in streams)  # the step stays in the line, never a label
    assert lines[1][1]["step"] == 4


def test_an_unreachable_loki_is_counted_not_raised() -> None:
    handler = LokiHandler(f"http://127.0.0.1:{free_port()}", flush_s=60, timeout_s=0.5)
    handler.emit(_record("x"))
    handler.close()
    assert (handler.pushed, handler.failed) == (0, 1)


def test_a_span_per_phase_per_step_and_a_sampled_prompt_chain() -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    tracer = TrainerTracer("run-1", exporter=memory, prompt_every=2)
    for step in (1, 2):
        for phase in ("ROLLOUT", "SCORE", "ADVANTAGE", "UPDATE", "DIAGNOSE", "HOTFIX"):
            tracer.on_phase(phase, step, 0.01, True)
    tracer.on_phase("CHECKPOINT", 3, 0.01, False)
    tracer.close()
    spans = memory.get_finished_spans()
    steps = {s.attributes["rl.step"]: s for s in spans if s.name == "step"}
    assert sorted(steps) == [1, 2, 3]
    for step, parent in steps.items():
        children = [s.name for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id
                    and s.name.isupper()]
        expected = ["CHECKPOINT"] if step == 3 else ["ROLLOUT", "SCORE", "ADVANTAGE", "UPDATE", "DIAGNOSE", "HOTFIX"]
        assert children == expected
        assert all(s.context.trace_id == parent.context.trace_id for s in spans
                   if s.attributes.get("rl.step") == step)
    (chain,) = [s for s in spans if s.name == "prompt"]
    assert chain.attributes["rl.step"] == 2 and chain.parent.span_id == steps[2].context.span_id
    links = [s.name for s in spans if s.parent is not None and s.parent.span_id == chain.context.span_id]
    assert links == ["prompt.rollout", "prompt.reward", "prompt.advantage", "prompt.update"]
    failed = next(s for s in spans if s.name == "CHECKPOINT")
    assert failed.status.status_code.name == "ERROR"


def test_trainer_log_lines_for_a_finding() -> None:
    seen = []

    class Capture(logging.Handler):
        def emit(self, record):
            seen.append(json.loads(JsonFormatter().format(record)))

    logger = logging.getLogger("test.ops.lines")
    logger.addHandler(Capture())
    logger.setLevel(logging.INFO)
    lines = TrainerLogLines(lambda: "r9", logger)
    lines.on_finding(FindingRecord(step=5, detector="entropy", severity="red", message="collapse",
                                   incident="inc-1"))
    lines.on_phase("UPDATE", 5, 0.5, True)
    assert seen[0]["rl_status"] == "abnormal" and seen[0]["level"] == "error"
    assert (seen[0]["rl_component"], seen[0]["severity"], seen[0]["step"]) == ("actor", "red", 5)
    assert (seen[1]["rl_phase"], seen[1]["duration_s"]) == ("update", 0.5)


@pytest.mark.slow
def test_a_real_run_serves_metrics_and_writes_json_lines(tmp_path, capfd) -> None:
    from rlcockpit.cli._support.ops import close_all, wire_trainer
    from rlcockpit.trainer.trainer import Trainer
    from trainer_testkit import make_config

    port = free_port()
    loki = LokiRecorder()
    cfg = make_config(tmp_path, "train.steps=2", "rollout.batch_size=4", "ppo.minibatch_size=4",
                      f"ops.prometheus_port={port}", "ops.log_format=json", f"ops.loki_url={loki.url}",
                      "telemetry.log_samples=false")
    trainer = Trainer(cfg)
    closers = wire_trainer(trainer, cfg)
    scraped: dict[int, str] = {}

    def scrape(step: int, metrics: dict) -> None:
        scraped[step] = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()

    trainer.add_observer(scrape)
    try:
        result = trainer.run()
    finally:
        close_all(closers)
        loki.close()
    run = result.run_id
    assert result.status == "finished"
    # the step-2 scrape holds step 1's metrics (this step's observers run after ours) and phases
    from prometheus_client.parser import text_string_to_metric_families

    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(scraped[2]) for s in fam.samples}
    key = (("rank", "0"), ("rl_component", "reward_model"), ("rl_phase", "score"), ("run", run))
    assert ("rlcockpit_reward_mean", key) in samples
    assert samples[("rlcockpit_phase_duration_seconds_count",
                    (("rank", "0"), ("rl_phase", "rollout"), ("run", run)))] >= 1
    tokens = (("rank", "0"), ("rl_component", "trainer"), ("rl_phase", "step"), ("run", run))
    assert samples[("rlcockpit_cost_tokens_generated", tokens)] > 0
    lines = [json.loads(x) for x in capfd.readouterr().err.splitlines() if x.startswith("{")]
    ours = [x for x in lines if x["logger"] == "rlcockpit.trainer.ops"]
    phases = [(x["rl_phase"], x["step"]) for x in ours if x["msg"].startswith("phase ")]
    assert ("rollout", 1) in phases and ("update", 2) in phases
    assert {x["run"] for x in ours} == {run}
    assert {s.get("rl_phase") for s, _ in loki.lines()} >= {"rollout", "score", "update", "step"}
