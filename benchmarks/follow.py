"""Follow-mode latency: a line written by another trainer -> visible in the store and on the
dashboard's live stream (issue 11 target: a new step on the dashboard <= 2 s after it is written).

Three real processes on this machine:
  1. the writer, ``tests/follow_writer.py``: a verl-like trainer writing a rollout file and one
     file-logger line per step, the line in two halves (a partly written last line in between);
     each line carries ``t_written``, the wall time its newline was written;
  2. the follower, ``rlcockpit import --follow`` with its default poll interval (0.25 s);
  3. the server, ``rlcockpit serve`` with its default live-stream poll (0.25 s).
This script reads the store every 20 ms (a new step's ``import/verl/t_written`` value: latency to
the store) and the run's SSE stream (``event: step`` arrival: latency to the dashboard).

    python benchmarks/follow.py [--quick] [--steps N] [--step-s S]

Last stdout line: one JSON object (p50 / p95 / max per path, the target check).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from _common import free_port

ROOT = Path(__file__).resolve().parents[1]
WRITER = ROOT / "tests" / "follow_writer.py"
TARGET_S = 2.0
RUN_ID = "bench-follow"
STAMP = "import/verl/t_written"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="30 steps (a smoke run)")
    p.add_argument("--steps", type=int, default=200, help="steps the writer writes (default 200)")
    p.add_argument("--step-s", type=float, default=0.1, help="seconds between two steps (default 0.1)")
    p.add_argument("--poll-interval", type=float, default=0.25, help="the follower's poll interval")
    args = p.parse_args()
    if args.quick:
        args.steps = min(args.steps, 30)
    if args.steps < 2 or args.step_s <= 0:
        p.error("--steps must be >= 2 and --step-s > 0")
    return args


def wait_for(predicate, what: str, timeout: float = 60.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise RuntimeError(f"timed out waiting for {what}")


def watch_store(uri: str, steps: int, seen: dict[int, float], done: threading.Event) -> None:
    from rlcockpit.errors import NotFoundError
    from rlcockpit.store import open_store

    reader = open_store(uri).reader()
    while not done.is_set() and len(seen) < steps:
        try:
            series = reader.read_series(RUN_ID, [STAMP]).get(STAMP)
        except NotFoundError:
            series = None
        now = time.time()
        for step, written in zip(series.steps if series else (), series.values if series else (), strict=True):
            if step not in seen:
                seen[step] = now - written
        time.sleep(0.02)


def watch_stream(url: str, steps: int, seen: dict[int, float], done: threading.Event) -> None:
    with httpx.Client(base_url=url, timeout=None) as http, \
            http.stream("GET", f"/api/runs/{RUN_ID}/stream", params={"after_step": -1}) as resp:
        kind = None
        for line in resp.iter_lines():
            if done.is_set() or len(seen) >= steps:
                return
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: ") and kind == "step":
                data = json.loads(line[6:])
                written = data.get("metrics", {}).get(STAMP)
                if written is not None:
                    seen.setdefault(int(data["step"]), time.time() - written)


def summary(latencies: dict[int, float]) -> dict[str, float | int | None]:
    values = sorted(latencies.values())
    if not values:
        return {"steps": 0, "p50_s": None, "p95_s": None, "max_s": None}
    return {"steps": len(values), "p50_s": round(statistics.median(values), 3),
            "p95_s": round(values[min(len(values) - 1, int(0.95 * len(values)))], 3),
            "max_s": round(values[-1], 3)}


def main() -> int:
    args = parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    tmp = Path(tempfile.mkdtemp(prefix="rlcockpit-follow-bench-"))
    logs, rollouts = tmp / "logs", tmp / "rollouts"
    logs.mkdir()
    rollouts.mkdir()
    uri = f"sqlite:///{tmp / 'follow.db'}"
    port = free_port()
    procs: list[subprocess.Popen] = []
    store_seen: dict[int, float] = {}
    stream_seen: dict[int, float] = {}
    done = threading.Event()
    try:
        follower = subprocess.Popen([sys.executable, "-m", "rlcockpit", "import", "--follow", "--store", uri,
                                     "--run-id", RUN_ID, "--poll-interval", str(args.poll_interval),
                                     str(logs), str(rollouts)],
                                    env=env, stdout=sys.stderr, stderr=sys.stderr)  # progress: stderr
        procs.append(follower)
        wait_for(lambda: (tmp / "follow.db").exists(), "the store")
        server = subprocess.Popen([sys.executable, "-m", "rlcockpit", "serve", "--store", uri, "--port", str(port)],
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(server)
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _ok(f"{url}/api/runs/{RUN_ID}"), "the server and the run")
        watchers = [threading.Thread(target=watch_store, args=(uri, args.steps, store_seen, done), daemon=True),
                    threading.Thread(target=watch_stream, args=(url, args.steps, stream_seen, done), daemon=True)]
        for w in watchers:
            w.start()
        time.sleep(0.5)  # the stream is connected before the first line is written
        writer = subprocess.Popen([sys.executable, str(WRITER), str(logs), str(rollouts), str(args.steps),
                                   str(args.step_s)], env=env)
        procs.append(writer)
        writer.wait(args.steps * args.step_s * 5 + 60)
        try:
            wait_for(lambda: len(store_seen) >= args.steps and len(stream_seen) >= args.steps, "every step", 30)
        except RuntimeError:
            print(f"not every step seen: store {len(store_seen)}, stream {len(stream_seen)} of {args.steps}",
                  file=sys.stderr)
    finally:
        done.set()
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
    store, stream = summary(store_seen), summary(stream_seen)
    print(f"follow latency over {args.steps} steps written every {args.step_s} s "
          f"(follower poll {args.poll_interval} s, server stream poll 0.25 s):")
    print(f"{'path':<22}{'steps':>7}{'p50 s':>9}{'p95 s':>9}{'max s':>9}")
    for name, row in (("written -> store", store), ("written -> SSE stream", stream)):
        print(f"{name:<22}{row['steps']:>7}{row['p50_s']!s:>9}{row['p95_s']!s:>9}{row['max_s']!s:>9}")
    ok = stream["max_s"] is not None and stream["max_s"] <= TARGET_S and stream["steps"] == args.steps
    print(json.dumps({"benchmark": "follow", "steps": args.steps, "step_s": args.step_s,
                      "poll_interval_s": args.poll_interval, "store": store, "stream": stream,
                      "target_max_s": TARGET_S, "pass": ok}))
    return 0


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    sys.exit(main())
