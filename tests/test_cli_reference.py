"""Every command answers --help and is documented in docs/cli.md (generated from the parser)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rlcockpit.cli import COMMAND_MODULES, build_parser
from rlcockpit.cli._support.reference import _walk, cli_markdown

ROOT = Path(__file__).resolve().parents[1]
EXPECTED = {"train", "demo", "world", "runs", "export", "import"}


def test_every_command_module_is_installed():
    parser = build_parser()
    names = {path[1] for path, _ in _walk(parser, ["rlcockpit"]) if len(path) == 2}
    assert names >= EXPECTED, f"missing commands: {EXPECTED - names} (modules {COMMAND_MODULES})"


def test_every_module_of_the_cli_package_is_a_command_module():
    """A module directly under rlcockpit.cli registers commands; helpers live in cli/_support."""
    package = ROOT / "src" / "rlcockpit" / "cli"
    modules = {p.stem for p in package.glob("*.py")} - {"__init__"}
    assert modules == set(COMMAND_MODULES), (
        f"not in COMMAND_MODULES: {sorted(modules - set(COMMAND_MODULES))}; "
        f"no such module: {sorted(set(COMMAND_MODULES) - modules)} (helpers belong in cli/_support/)")


def test_docs_cli_md_is_current():
    doc = ROOT / "docs" / "cli.md"
    assert doc.read_text(encoding="utf-8") == cli_markdown(), (
        "docs/cli.md is out of date: run `python -m rlcockpit.cli._support.reference > docs/cli.md`")


@pytest.mark.parametrize("path", sorted({" ".join(p[1:]) for p, _ in _walk(build_parser(), ["x"])} - {""}))
def test_help_of_every_command_exits_zero(path):
    proc = subprocess.run([sys.executable, "-m", "rlcockpit", *path.split(), "--help"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "usage:" in proc.stdout
