"""Shared test setup. Tests run in parallel (pytest -n 2) on a 2-core machine: keep each worker's
torch to one thread so two workers do not oversubscribe the CPU."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


# The edit loop's tier (`make test-fast`: -m "not slow"): these modules train real models, start
# browsers, TRL trainers, the chDB store or whole subprocess pipelines -- seconds to minutes each.
# Everything else (pure math, detectors, the store contract on SQLite, server API, CLI) stays in the
# fast tier. `make test` runs both.
SLOW_MODULES = frozenset({
    "test_benchmarks_detection_smoke", "test_benchmarks_real_runs_smoke", "test_benchmarks_smoke",
    "test_benchmarks_trainer_smoke", "test_control_cli", "test_control_e2e", "test_control_trainer",
    "test_demo_flow", "test_demo_server", "test_faults", "test_follow", "test_heartbeat",
    "test_loop_control", "test_server_benchmark", "test_server_schemathesis", "test_store_clickhouse",
    "test_telemetry_kill", "test_trainer_diagnostics", "test_trainer_live", "test_trainer_models",
    "test_trainer_resume", "test_trainer_rewards", "test_trainer_smoke", "test_trl", "test_world_sft",
    "test_trainer_lease", "test_run_lease", "test_trl_reference", "test_verl_backend", "test_follow_survives", "test_wrap",
    "test_world_cli", "test_ops_trainer", "test_reward_model_run", "test_trainer_distributed",
})
SLOW_BACKENDS = frozenset({"chdb"})  # the store contract runs on SQLite in the fast tier


def pytest_collection_modifyitems(config, items):
    import pytest

    for item in items:
        path = item.path
        callspec = getattr(item, "callspec", None)
        backend = callspec.params.get("store") if callspec else None
        if path.parent.name == "e2e" or path.stem in SLOW_MODULES or backend in SLOW_BACKENDS:
            item.add_marker(pytest.mark.slow)
