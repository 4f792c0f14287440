"""A stand-in for verl writing its logs while it trains (tests/test_follow.py, benchmarks/follow.py).

    python follow_writer.py LOGS_DIR ROLLOUT_DIR STEPS SECONDS_PER_STEP [NAN_STEP]

Per step: a rollout file ``<step>.jsonl`` with 4 samples (two prompts, GRPO-style groups), then one
file-logger line ``{"step": N, "data": {...}}`` appended to ``metrics.jsonl`` in two halves with a
pause in between (a reader sees a partly written last line). ``data.t_written`` is the wall time
the line was completed; at NAN_STEP the policy loss is NaN (the nonfinite detector's input).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main() -> None:
    logs, rollouts, steps, dt = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    nan_step = int(sys.argv[5]) if len(sys.argv) > 5 else -1
    with (logs / "metrics.jsonl").open("a", encoding="utf-8") as log:
        for step in range(steps):
            with (rollouts / f"{step}.jsonl").open("w", encoding="utf-8") as out:
                for i in range(4):
                    out.write(json.dumps({"input": f"question {i % 2}", "output": f"answer {i}",
                                          "score": 0.1 * i + 0.01 * step, "step": step, "acc": float(i % 2)}) + "\n")
            data = {"actor/pg_loss": "NaN" if step == nan_step else 0.1, "critic/score/mean": 0.01 * step,
                    "actor/entropy": 2.0 - 0.01 * step, "actor/ppo_kl": 0.001, "response_length/mean": 20.0}
            head = json.dumps({"step": step, "data": data})[:-2]  # without the closing "}}"
            log.write(head)  # a partly written line: not JSON yet
            log.flush()
            time.sleep(dt / 2)
            log.write(f', "t_written": {time.time()!r}}}}}\n')
            log.flush()
            time.sleep(dt / 2)


if __name__ == "__main__":
    main()
