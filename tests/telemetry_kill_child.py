"""Child process of tests/test_telemetry_kill.py: logs steps (20 metrics + 8 samples each) in a
loop until it is killed, printing "<step> <unix time>" after each step is logged."""

from __future__ import annotations

import sys
import time

import rlcockpit

N_METRICS = 20
N_SAMPLES = 8


def main() -> None:
    store, flush_interval_s = sys.argv[1], float(sys.argv[2])
    run = rlcockpit.init(store=store, run_id="victim", flush_interval_s=flush_interval_s)
    step = 0
    while True:
        run.log(step, {f"m/{k}": float(step + k) for k in range(N_METRICS)})
        run.log_samples(step, [{"sample_id": i, "prompt": "p" * 200, "response": "r" * 600,
                                "reward": 0.1 * i} for i in range(N_SAMPLES)])
        run.commit(step)
        print(f"{step} {time.time():.6f}", flush=True)
        step += 1
        time.sleep(0.005)


if __name__ == "__main__":
    main()
