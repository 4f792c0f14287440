"""Search by any name (issue 29): the key a trainer logged is kept for every metric an import
renamed, and the server sends it (``logged_keys`` of ``GET /api/runs/{run}`` and of
``GET /api/metric_names``, docs/server.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fastapi.testclient import TestClient

from rlcockpit.integrations.logged_keys import logged_keys
from rlcockpit.server.app import create_app
from rlcockpit.server.settings import ServerSettings
from server_testkit import LOCAL

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def imported_store(tmp_path: Path) -> str:
    """verl's file-logger metrics imported as run ``imp``, next to a run logged through the SDK."""
    import rlcockpit

    uri = f"sqlite:///{tmp_path / 's.db'}"
    with rlcockpit.init(project="p", name="native", store=uri, run_id="native") as run:
        run.log(1, {"policy/entropy": 1.0, "kl/mean": 0.1})
        run.commit(1)
    result = subprocess.run([sys.executable, "-m", "rlcockpit", "import", "--store", uri, "--run-id", "imp",
                             "--format", "jsonl-logger", str(FIXTURES / "verl_metrics.jsonl")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return uri


def test_an_import_records_and_the_server_sends_the_keys_as_logged(tmp_path):
    uri = imported_store(tmp_path)
    with TestClient(create_app(ServerSettings(store=uri)), base_url=LOCAL) as c:
        run = c.get("/api/runs/imp").json()
        keys = run["logged_keys"]
        assert keys["policy/loss"] == "actor/pg_loss" and keys["policy/entropy"] == "actor/entropy"
        assert keys["reward/mean"] == "critic/score/mean"
        assert keys["eval/reward/category/openai_gsm8k/mean"] == "val-core/openai/gsm8k/reward/mean@1"
        assert keys["import/verl/critic/rewards/mean"] == "critic/rewards/mean"  # kept foreign: its key
        assert set(keys) <= set(run["metric_names"])
        assert run["run"]["config"]["import"]["logged_keys"]["policy/loss"] == "actor/pg_loss"
        assert c.get("/api/runs/native").json()["logged_keys"] == {}  # the SDK keeps the names logged

        listing = c.get("/api/metric_names").json()["items"]
        by_run = {item["run_id"]: item for item in listing}
        assert set(by_run) == {"imp", "native"}
        assert by_run["imp"]["logged_keys"] == keys and by_run["imp"]["metric_names"] == run["metric_names"]
        assert by_run["native"]["metric_names"] == ["kl/mean", "policy/entropy"]
        assert [i["run_id"] for i in c.get("/api/metric_names?runs=native").json()["items"]] == ["native"]
        assert c.get("/api/metric_names?runs=nope").json()["items"] == []


def test_older_imports_get_their_keys_from_the_alias_tables_read_backwards():
    old = {"import": {"sources": ["trl-grpo"], "key_map": {"my_kl": "kl/token_mean"}}}
    names = ["reward/helpfulness/mean", "policy/entropy", "kl/token_mean", "import/trl-grpo/foo/bar", "x/y"]
    assert logged_keys(names, old) == {"reward/helpfulness/mean": "rewards/helpfulness/mean",
                                       "policy/entropy": "entropy", "kl/token_mean": "my_kl",
                                       "import/trl-grpo/foo/bar": "foo/bar"}
    assert logged_keys(["policy/entropy", "time/rollout_s"], {"import": {"sources": ["verl"]}}) == {
        "policy/entropy": "actor/entropy", "time/rollout_s": "timing_s/gen"}


def test_a_recorded_map_is_the_whole_truth_and_sdk_runs_have_none():
    recorded = {"import": {"sources": ["verl"], "logged_keys": {"policy/loss": "actor/pg_loss"}}}
    assert logged_keys(["policy/loss", "policy/entropy"], recorded) == {"policy/loss": "actor/pg_loss"}
    assert logged_keys(["policy/entropy", "import/verl/a"], {}) == {"import/verl/a": "a"}
    assert logged_keys(["policy/entropy"], None) == {}
    assert logged_keys(["policy/entropy"], {"import": "not a mapping"}) == {}
