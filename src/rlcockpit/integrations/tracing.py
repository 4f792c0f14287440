"""OpenTelemetry traces of a training run (seed 000 §6: "a trace per prompt from rollout to
update"), docs/ops.md.

- One **step span** per training step, with one child **phase span** per phase that ran
  (``ROLLOUT``, ``SCORE``, ``ADVANTAGE``, ``UPDATE``, ``EVAL``, ``DIAGNOSE``, ``HOTFIX``,
  ``CHECKPOINT``), attributes ``rl.run``, ``rl.step``, ``rl.phase``, ``rl.status``.
- Every ``prompt_every`` steps, one **prompt chain** under the step span: ``prompt.rollout`` ->
  ``prompt.reward`` (SCORE: reward function, reference and critic forwards) -> ``prompt.advantage``
  -> ``prompt.update``. The trainer works on whole batches, so each link carries the time of its
  batched phase (``rl.batched=true``): the chain shows where one prompt's step time goes, not a
  per-prompt measurement.
- Export: OTLP over HTTP (``ops.otlp_endpoint``) with a batching processor, so the training loop
  never waits on the network; tests pass the SDK's in-memory exporter instead.

Spans are built when a phase *ends* (the trainer's phase listener), with their real start and end
times. The phase timings stay in the store as before (``phases`` table, ``time/<phase>_s``).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any

log = logging.getLogger("rlcockpit.integrations.tracing")
CHAIN = {"ROLLOUT": "prompt.rollout", "SCORE": "prompt.reward", "ADVANTAGE": "prompt.advantage",
         "UPDATE": "prompt.update"}


_STOP = object()


class TrainerTracer:
    """Fed by the trainer's phase listener (``on_phase``: a timestamp and a queue put on the
    training thread; the spans are built on a background thread); ``close()`` drains the queue,
    ends the last step span and flushes the exporter."""

    def __init__(self, run_id: Any, *, endpoint: str = "", exporter: Any = None,
                 prompt_every: int = 10, service: str = "rlcockpit-trainer") -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        if exporter is None:
            if not endpoint.startswith(("http://", "https://")):
                from rlcockpit.errors import ConfigError

                raise ConfigError(f"OTLP endpoint {endpoint!r} is not http(s); give e.g. "
                                  "http://127.0.0.1:4318/v1/traces",
                                  details={"key": "ops.otlp_endpoint", "value": endpoint})
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            processor: Any = BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint))
        else:
            processor = SimpleSpanProcessor(exporter)
        self.provider = TracerProvider(resource=Resource.create({"service.name": service}))
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer("rlcockpit.trainer")
        self._run_id = run_id if callable(run_id) else (lambda: run_id)
        self.prompt_every = prompt_every
        self.errors = 0
        self._step: int | None = None
        self._step_span: Any = None
        self._step_end = 0
        self._chain_parent: Any = None
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="rlcockpit-tracing", daemon=True)
        self._thread.start()

    def on_phase(self, phase: str, step: int, seconds: float, ok: bool) -> None:
        self._queue.put((phase, step, seconds, ok, time.time_ns()))

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            try:
                self._phase(*item)
            except Exception as exc:  # fail soft: tracing never stops training
                self.errors += 1
                if self.errors == 1:
                    log.warning("tracing: %s (counted, training goes on)", exc)

    def _phase(self, phase: str, step: int, seconds: float, ok: bool, end: int) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import Status, StatusCode

        start = end - int(seconds * 1e9)
        if step != self._step:
            self._end_step()
            self._step = step
            self._step_span = self.tracer.start_span(
                "step", start_time=start, attributes={"rl.run": self._run_id(), "rl.step": step})
            self._chain_parent = None
            if self.prompt_every and step > 0 and step % self.prompt_every == 0:
                ctx = trace.set_span_in_context(self._step_span)
                self._chain_parent = self.tracer.start_span(
                    "prompt", context=ctx, start_time=start,
                    attributes={"rl.run": self._run_id(), "rl.step": step, "rl.sample_id": 0,
                                "rl.batched": True})
        ctx = trace.set_span_in_context(self._step_span)
        attributes = {"rl.run": self._run_id(), "rl.step": step, "rl.phase": phase.lower(),
                      "rl.status": "ok" if ok else "failed"}
        span = self.tracer.start_span(phase, context=ctx, start_time=start, attributes=attributes)
        if not ok:
            span.set_status(Status(StatusCode.ERROR, f"phase {phase} failed"))
        span.end(end_time=end)
        if self._chain_parent is not None and phase in CHAIN:
            link = self.tracer.start_span(CHAIN[phase], context=trace.set_span_in_context(self._chain_parent),
                                          start_time=start, attributes={**attributes, "rl.batched": True})
            link.end(end_time=end)
            if phase == "UPDATE":
                self._chain_parent.end(end_time=end)
                self._chain_parent = None
        self._step_end = end

    def _end_step(self) -> None:
        if self._chain_parent is not None:
            self._chain_parent.end(end_time=self._step_end)
            self._chain_parent = None
        if self._step_span is not None:
            self._step_span.end(end_time=self._step_end)
            self._step_span = None

    def close(self) -> None:
        self._queue.put(_STOP)
        self._thread.join(timeout=10)
        self._end_step()
        self.provider.shutdown()  # flushes the batching processor
