"""The trainer's docs cannot fall behind the code: docs/config.md is generated from the config
dataclasses, and docs/trainer.md names every metric, live parameter, phase and event kind."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from rlcockpit.metrics.catalog import CATALOG
from rlcockpit.trainer.config import PHASES, TrainConfig, config_markdown
from rlcockpit.trainer.live import LIVE_SPECS
from rlcockpit.trainer.step_metrics import LOGGED_METRICS

ROOT = Path(__file__).resolve().parent.parent
TRAINER_MD = (ROOT / "docs" / "trainer.md").read_text(encoding="utf-8")


def test_config_md_is_the_generated_text():
    current = (ROOT / "docs" / "config.md").read_text(encoding="utf-8")
    assert current == config_markdown(), "docs/config.md is stale: python -m rlcockpit.trainer.config > docs/config.md"


def test_every_config_key_is_documented_with_its_help():
    from rlcockpit.config import describe

    text = config_markdown()
    for key, _, _, help_text in describe(TrainConfig):
        assert f"`{key}`" in text
        assert help_text, f"{key} has no help text"


def test_every_logged_metric_is_a_catalog_name_and_in_trainer_md():
    assert set(LOGGED_METRICS) <= set(CATALOG)
    missing = [name for name in LOGGED_METRICS if f"`{name}`" not in TRAINER_MD]
    assert not missing, f"docs/trainer.md does not mention {missing}"
    assert "(metrics.md)" in TRAINER_MD


def test_every_live_parameter_phase_and_event_is_in_trainer_md():
    for spec in LIVE_SPECS.values():
        assert f"| `{spec.name}` |" in TRAINER_MD and f"`{spec.metric}`" in TRAINER_MD
    for phase in (*PHASES, "PAUSED"):
        assert f"`{phase}`" in TRAINER_MD
    source = "".join(p.read_text() for p in (ROOT / "src" / "rlcockpit" / "trainer").glob("*.py"))
    kinds = set(re.findall(r"\.event\([^,]+,\s*\"([a-z_]+)\"", source))
    kinds |= set(re.findall(r"\"(paused|resumed|stop_requested)\"", source))
    assert len(kinds) >= 8
    missing = [k for k in sorted(kinds) if f"`{k}`" not in TRAINER_MD]
    assert not missing, f"docs/trainer.md does not mention the event kinds {missing}"


def test_every_trainer_module_is_in_the_where_each_part_lives_table():
    table = TRAINER_MD.split("### Where each part lives", 1)[1].split("\n\n#", 1)[0]
    named = set(re.findall(r"\| `([a-z_]+\.py)` \|$", table, flags=re.M))
    package = {p.name for p in (ROOT / "src" / "rlcockpit" / "trainer").glob("*.py")} - {"__init__.py"}
    assert named == package, f"docs/trainer.md: missing {sorted(package - named)}, gone {sorted(named - package)}"


def test_train_help_lists_main_keys_and_points_to_the_docs():
    proc = subprocess.run([sys.executable, "-m", "rlcockpit", "train", "--help"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0
    for key in ("algo", "model.path", "rollout.n_samples", "kl.coef", "train.steps", "docs/config.md", "--resume"):
        assert key in proc.stdout
    demo = subprocess.run([sys.executable, "-m", "rlcockpit", "demo", "--help"], capture_output=True, text=True,
                          timeout=120)
    assert demo.returncode == 0 and "--steps" in demo.stdout and "--store" in demo.stdout
