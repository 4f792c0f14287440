"""The control plane on the tiny world: seed 000 §2's example ticket (clip epsilon 0.2 -> 0.1)
applied mid-run through the HTTP API, its measured effect, and what the control plane costs.

    .venv/bin/python benchmarks/control_effect.py [--steps 30] [--at 15] [--effect-steps 10]
        [--param clip_eps --value 0.1] [--threads 1]

Prints the ticket's effect (KS test of the validation rewards before / after, mean and variance
change, KL and entropy windows), the cost of applying it (validation pass + checkpoint) and the
HTTP latency of a request with a cold and a warm token; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--at", type=int, default=15, help="the step during which the ticket is approved")
    p.add_argument("--effect-steps", type=int, default=10)
    p.add_argument("--param", default="clip_eps")
    p.add_argument("--value", type=float, default=0.1)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    import torch
    from fastapi.testclient import TestClient

    from rlcockpit.config import load_config
    from rlcockpit.control import ControlPlane
    from rlcockpit.server.app import create_app
    from rlcockpit.server.auth import Access
    from rlcockpit.server.settings import ServerSettings
    from rlcockpit.store import open_store
    from rlcockpit.trainer.config import TrainConfig
    from rlcockpit.trainer.trainer import Trainer

    torch.set_num_threads(args.threads)
    tmp = Path(tempfile.mkdtemp(prefix="control-effect-"))
    uri = f"sqlite:///{tmp / 'runs.db'}"
    root = Path(__file__).resolve().parents[1]
    cfg = load_config(TrainConfig, root / "examples" / "ppo_tiny.yaml", [
        f"telemetry.store={uri}", f"checkpoint.dir={tmp / 'ckpt'}", f"train.steps={args.steps}",
        "checkpoint.every=0", "eval.every=1000", f"control.effect_steps={args.effect_steps}",
        f"model.threads={args.threads}", "diagnostics.enabled=false"])
    store = open_store(uri)
    plane = ControlPlane.over(store.control(), store.reader())
    tokens = {n: plane.users.add(n, r)[1] for n, r in (("olga", "operator"), ("alex", "approver"))}
    http = TestClient(create_app(ServerSettings(store=uri), store, access=Access(plane), control=plane),
                      base_url="http://127.0.0.1")
    trainer = Trainer(cfg, control_store=store.control())
    timings: dict[str, float] = {}

    def hook(t, step):
        if step != args.at:
            return
        run = t.telemetry.run_id
        auth = {n: {"Authorization": f"Bearer {tok}"} for n, tok in tokens.items()}
        t0 = time.perf_counter()
        tid = http.post(f"/api/runs/{run}/tickets", headers=auth["olga"], json={
            "param": args.param, "value": args.value, "reason": "seed 000 §2 example"}).json()["ticket"]["ticket_id"]
        timings["request_cold_ms"] = 1000 * (time.perf_counter() - t0)
        t0 = time.perf_counter()
        http.post(f"/api/tickets/{tid}/approve", headers=auth["alex"], json={"comment": "ok"})
        timings["approve_cold_ms"] = 1000 * (time.perf_counter() - t0)
        warm = []
        for _ in range(20):
            t0 = time.perf_counter()
            http.get(f"/api/tickets/{tid}", headers=auth["olga"])
            warm.append(1000 * (time.perf_counter() - t0))
        timings["read_warm_ms_median"] = statistics.median(warm)

    trainer.add_step_hook(hook)
    t0 = time.perf_counter()
    thread = threading.Thread(target=trainer.run)
    thread.start()
    thread.join()
    wall = time.perf_counter() - t0
    ticket = plane.store.list_tickets()[0]
    e = ticket.effect or {}
    s = ticket.boundary_step
    phases = plane.runs.read_phases(ticket.run_id)  # the validation pass and checkpoint at the boundary
    apply_cost = sum(r.duration_s or 0.0 for r in phases
                     if r.step == s and r.phase in ("EVAL", "CHECKPOINT") and r.status == "finished")
    result = {
        "param": args.param, "value": args.value, "previous": ticket.previous, "status": ticket.status,
        "boundary_step": s, "applied_step": ticket.applied_step, "effect_steps": args.effect_steps,
        "validation_prompts": e.get("n_before"), "ks_statistic": e.get("ks_statistic"), "ks_pvalue": e.get("ks_pvalue"),
        "reward_mean_before": e.get("reward_mean_before"), "reward_mean_after": e.get("reward_mean_after"),
        "reward_var_change": e.get("reward_var_change"),
        "kl_mean_before": e.get("windows", {}).get("kl/mean", {}).get("before"),
        "kl_mean_after": e.get("windows", {}).get("kl/mean", {}).get("after"),
        "entropy_before": e.get("windows", {}).get("policy/entropy", {}).get("before"),
        "entropy_after": e.get("windows", {}).get("policy/entropy", {}).get("after"),
        "apply_cost_s": apply_cost, "run_wall_s": wall, **timings,
    }
    for k, v in result.items():
        print(f"{k:>22}: {v}")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
