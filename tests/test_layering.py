"""DESIGN.md §2: the layers and what each may import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    exe = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run(
        [str(exe), str(ROOT / "pyproject.toml"), "--no-cache"],  # a stale cache hid a broken contract
        cwd=ROOT / "src", capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "broken" in proc.stdout and "0 broken" in proc.stdout


def _modules_after_import(statement: str) -> set[str]:
    code = f"import sys; {statement}; print('\\n'.join(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          check=True)
    return set(proc.stdout.split())


def test_import_rlcockpit_stays_light():
    mods = _modules_after_import("import rlcockpit")
    heavy = {"torch", "fastapi", "transformers", "clickhouse_connect", "numpy", "uvicorn"}
    assert not (heavy & mods), f"import rlcockpit pulled in {sorted(heavy & mods)}"


def test_telemetry_and_cli_help_do_not_import_torch():
    mods = _modules_after_import(
        "import rlcockpit.telemetry, rlcockpit.cli; rlcockpit.cli.build_parser()")
    assert "torch" not in mods and "transformers" not in mods and "fastapi" not in mods
