"""The telemetry SDK: what a training script calls (DESIGN.md §2).

    import rlcockpit
    with rlcockpit.init(project="demo", name="ppo-1", store="sqlite:///rlcockpit.db") as run:
        for step in range(100):
            run.log(step, {"reward/mean": 0.4})
            run.commit(step)

Logging never blocks and never raises into the training loop: one queue item per call, a
background thread writes whole steps in one transaction, and whatever cannot be written is
counted (``run.dropped_total``, the metric ``telemetry/dropped_total`` and the event
``telemetry_dropped``). See docs/telemetry.md.
"""

from rlcockpit.telemetry.lease import LeaseOptions
from rlcockpit.telemetry.policy import TokenArrayPolicy, WriterOptions
from rlcockpit.telemetry.run import DEFAULT_STORE, Run, init, new_run_id
from rlcockpit.telemetry.writer import DROPPED_EVENT, DROPPED_METRIC

__all__ = [
    "DEFAULT_STORE",
    "DROPPED_EVENT",
    "DROPPED_METRIC",
    "LeaseOptions",
    "Run",
    "TokenArrayPolicy",
    "WriterOptions",
    "init",
    "new_run_id",
]
