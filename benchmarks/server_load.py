"""What 50 dashboard clients cost a training run on the same machine (issue 17, item 9).

    .venv/bin/python benchmarks/server_load.py [--clients 50] [--window-s 40] [--quick]

One tiny-world PPO run (`rlcockpit train`, one thread) trains for the whole benchmark. Its
seconds per step are measured from the store's phase records in three windows of the same run:

1. **baseline**: no server;
2. **loaded**: `rlcockpit serve` (default settings) over the run's store, and ``--clients``
   dashboard clients, each holding the live stream open and refreshing what the dashboard shows
   (curves, latest values, samples, findings, phases) every ``--refresh-s``;
3. **baseline again**, server stopped (the two baselines bracket drift: other jobs on the
   machine, the run itself getting faster or slower).

The result is ``slowdown = loaded s/step / mean(baseline s/step)`` — a ratio measured within one
run, so it does not depend on how fast this machine is. The clients run in their own process at
the lowest priority (``nice 19``): real dashboards run in browsers on other machines, and their
load generator should not be what slows the trainer. Target: slowdown <= 1.10 on a machine with
a spare core for the server. ``--pin`` gives the server one: the trainer runs on CPU 0, the server
and the clients on CPU 1 (Linux CPU affinity; the machine must be otherwise idle) — the layout of a
training node whose cockpit does not share the trainer's core. The last stdout line is one JSON
object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_info, print_json_last_line  # noqa: E402
from _trainer_runs import example_config, thread_env  # noqa: E402

TARGET_SLOWDOWN = 1.10
SERIES = "reward/*,kl/*,policy/*,value/*,response/*,grad/*"


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--window-s", type=float, default=40.0, help="length of each measured window")
    p.add_argument("--refresh-s", type=float, default=2.0, help="a client's refresh interval")
    p.add_argument("--quick", action="store_true", help="5 clients, 12 s windows (a smoke run)")
    p.add_argument("--pin", action="store_true", help="trainer on CPU 0, server and clients on CPU 1 "
                   "(a spare core for the server; needs 2 CPUs and an otherwise idle machine)")
    p.add_argument("--no-etags", action="store_true", help="clients do not send If-None-Match (a "
                   "browser does: its HTTP cache revalidates with the last ETag)")
    p.add_argument("--drive", help=argparse.SUPPRESS)  # internal: run the clients against this URL
    p.add_argument("--run", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.drive:
        return _drive(args)
    if args.quick:
        args.clients, args.window_s = 5, 12.0
    if args.pin and len(os.sched_getaffinity(0)) < 2:
        p.error("--pin needs 2 CPUs (the trainer on one, the server and its clients on the other)")
    return _bench(args)


def _on(cpus: set[int] | None):
    """preexec_fn pinning a child process to ``cpus`` (None: no pinning)."""
    if cpus is None:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


# --------------------------------------------------------------------------- the benchmark


def _bench(args: argparse.Namespace) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="server-load-"))
    uri = f"sqlite:///{tmp / 'runs.db'}"
    # the trainer's stderr goes to a file: a pipe nobody reads fills up (64 KiB of warnings) and
    # then blocks the trainer, which measured "0 steps" in the loaded window
    trainer_log = open(tmp / "trainer.err", "w")  # noqa: SIM115 (closed when the trainer ends)
    trainer = subprocess.Popen(
        [sys.executable, "-m", "rlcockpit", "train", "--config", str(example_config("ppo")), "--store", uri,
         "--quiet", "train.steps=100000", "model.threads=1", "checkpoint.every=0", "eval.every=100000"],
        cwd=tmp, env=thread_env(1), stdout=subprocess.DEVNULL, stderr=trainer_log, text=True,
        preexec_fn=_on({0} if args.pin else None))
    try:
        run_id = _wait_for_steps(uri, trainer, 3, tmp / "trainer.err")
        _log(f"trainer running (run {run_id}); baseline window {args.window_s:.0f} s")
        cpu0 = _cpu_s(trainer.pid)
        before = _window(uri, run_id, args.window_s)
        before["trainer_cpu_cores"] = round((_cpu_s(trainer.pid) - cpu0) / args.window_s, 3)
        server, url = _serve(uri, tmp, {1} if args.pin else None)
        try:
            _log(f"server at {url}; {args.clients} clients for {args.window_s:.0f} s")
            clients = subprocess.Popen(
                ["nice", "-n", "19", sys.executable, __file__, "--drive", url, "--run", run_id,
                 "--clients", str(args.clients), "--window-s", str(args.window_s + 5),
                 "--refresh-s", str(args.refresh_s), *(["--no-etags"] if args.no_etags else [])], stdout=subprocess.PIPE, text=True,
                preexec_fn=_on({1} if args.pin else None))
            time.sleep(5)  # clients connected and past their first full load
            cpu0 = {n: _cpu_s(p.pid) for n, p in (("trainer", trainer), ("server", server), ("clients", clients))}
            loaded = _window(uri, run_id, args.window_s)
            cpu = {n: round((_cpu_s(p.pid) - cpu0[n]) / args.window_s, 3)
                   for n, p in (("trainer", trainer), ("server", server), ("clients", clients))}
            traffic = json.loads(clients.communicate(timeout=120)[0].strip().splitlines()[-1])
            traffic["cpu_cores"] = cpu  # CPU seconds per second of each process in the loaded window
        finally:
            server.terminate()
            server.wait(20)
        _log(f"server stopped; baseline window {args.window_s:.0f} s")
        after = _window(uri, run_id, args.window_s)
    finally:
        trainer.terminate()
        trainer.wait(30)
        trainer_log.close()
    return _report(args, before, loaded, after, traffic)


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait_for_steps(uri: str, trainer: subprocess.Popen, steps: int, log: Path, timeout_s: float = 300.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if trainer.poll() is not None:
            raise RuntimeError(f"the trainer exited early: {log.read_text()[-2000:]}")
        starts = _rollout_starts(uri)
        if starts and len(starts[1]) >= steps:
            return starts[0]
        time.sleep(1.0)
    raise RuntimeError("the trainer logged no steps in time")


def _rollout_starts(uri: str) -> tuple[str, list[float]] | None:
    """(run id, wall times of every ROLLOUT start) read from the store; None before the run exists."""
    from rlcockpit.errors import StoreError
    from rlcockpit.store import open_store

    try:
        reader = open_store(uri, read_only=True).reader()
    except StoreError:
        return None
    try:
        runs = reader.list_runs()
        if not runs:
            return None
        phases = reader.read_phases(runs[0].run_id)
    finally:
        reader.close()
    return runs[0].run_id, sorted(p.wall_time for p in phases if p.phase == "ROLLOUT" and p.status == "started")


def _window(uri: str, run_id: str, seconds: float) -> dict:
    """Seconds per step over the steps that start within the next ``seconds``."""
    start = time.time()
    time.sleep(seconds)
    found = _rollout_starts(uri)
    starts = [t for t in (found[1] if found else []) if start <= t <= start + seconds]
    per_step = (starts[-1] - starts[0]) / (len(starts) - 1) if len(starts) >= 2 else None
    return {"s_per_step": per_step, "steps": len(starts), "window_s": seconds}


def _serve(uri: str, tmp: Path, cpus: set[int] | None = None) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "rlcockpit", "serve", "--store", uri, "--port", "0"],
                            cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"}, preexec_fn=_on(cpus))
    line = proc.stdout.readline()
    url = "http://" + line.split("http://", 1)[1].split()[0].rstrip("/")
    import httpx

    for _ in range(100):
        try:
            httpx.get(f"{url}/api/health", timeout=2)
            return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError("the server did not answer")


def _report(args: argparse.Namespace, before: dict, loaded: dict, after: dict, traffic: dict) -> dict:
    bases = [w["s_per_step"] for w in (before, after) if w["s_per_step"]]
    base = statistics.fmean(bases) if bases else None
    slowdown = loaded["s_per_step"] / base if base and loaded["s_per_step"] else None
    print(f"server load: {args.clients} dashboard clients, {args.window_s:.0f} s windows, "
          f"niceness {os.nice(0)} (clients 19)" + ("; trainer on CPU 0, server and clients on CPU 1" if args.pin else ""))
    for name, w in (("baseline before", before), ("with clients", loaded), ("baseline after", after)):
        s = w["s_per_step"]
        print(f"  {name:16s} {('-' if s is None else f'{s:.2f}'):>6s} s/step over {w['steps']} steps")
    print(f"  slowdown {('-' if slowdown is None else f'{slowdown:.3f}')}x (target <= {TARGET_SLOWDOWN}); "
          f"{traffic['requests']} requests, {traffic['errors']} errors, p50 {traffic['p50_ms']} ms, "
          f"p95 {traffic['p95_ms']} ms, {traffic['streams']} streams, {traffic['stream_messages']} messages")
    print(f"  CPU cores used with clients: {traffic.get('cpu_cores')} (trainer alone: "
          f"{before.get('trainer_cpu_cores')})")
    result = {"benchmark": "server_load", "clients": args.clients, "slowdown": slowdown,
              "baseline_s_per_step": base, "loaded_s_per_step": loaded["s_per_step"],
              "windows": {"before": before, "loaded": loaded, "after": after}, "traffic": traffic,
              "target_slowdown": TARGET_SLOWDOWN,
              "target_met": None if slowdown is None else slowdown <= TARGET_SLOWDOWN,
              "pinned": bool(args.pin),
              "niceness": os.nice(0), "machine": machine_info()}
    print_json_last_line(result)
    return result


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the clients


def _drive(args: argparse.Namespace) -> dict:
    from _load_clients import run_clients

    stats = asyncio.run(run_clients(args.drive, args.run, args.clients, args.window_s, args.refresh_s,
                                    SERIES, etags=not args.no_etags))
    latencies, server, lags = (sorted(stats.pop(k)) for k in ("latencies", "server_latencies", "lags"))
    out = {**stats, "p50_ms": _pct(latencies, 0.5), "p95_ms": _pct(latencies, 0.95),
           "server_p50_ms": _pct(server, 0.5), "server_p95_ms": _pct(server, 0.95),
           "server_timed": len(server), "client_lag_p95_ms": _pct(lags, 0.95),
           "error_rate": round(stats["errors"] / stats["requests"], 4) if stats["requests"] else None}
    print(json.dumps(out), flush=True)
    return out


def _pct(ordered: list[float], q: float) -> float | None:
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1) if ordered else None


if __name__ == "__main__":
    main()
