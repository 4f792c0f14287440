"""benchmarks/gpu_smoke.py runs unchanged without a GPU (a JSON skip line, exit 0) and its whole path
— a random Qwen2 model saved and loaded, chat prompts, PPO and GRPO with telemetry and every
detector — works at a tiny size on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_smoke.py"


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})}, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])


def test_without_a_gpu_it_prints_a_skip_line_and_exits_0():
    _, out = run(env={"CUDA_VISIBLE_DEVICES": ""})
    assert out["benchmark"] == "gpu_smoke" and "no CUDA device" in out["skipped"]


@pytest.mark.slow
def test_the_tiny_cpu_path_trains_ppo_and_grpo_with_the_cockpit_on(tmp_path):
    _, out = run("--device", "cpu", "--size", "tiny", "--steps", "2", "--max-new-tokens", "8",
                 "--work", str(tmp_path))
    assert out["ok"] is True and out["params"] > 0
    for algo in ("ppo", "grpo"):
        r = out[algo]
        assert r["status"] == "finished" and r["steps"] == 2 and r["every_detector_ran"] is True
        assert r["detectors"] >= 20 and r["detector_errors"] == [] and r["oom_retries"] == 0
        assert r["s_per_step"] > 0 and r["tokens_per_s"] > 0 and 0 < r["telemetry_share"] < 1
        assert r["peak_gpu_mem_gb"] is None  # CUDA only
    assert (tmp_path / "qwen2" / "config.json").is_file() and (tmp_path / "ppo.db").is_file()
