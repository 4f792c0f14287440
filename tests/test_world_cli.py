"""``rlcockpit world ...`` sub-commands: help texts and the cheap commands end to end."""

from __future__ import annotations

import argparse

import pytest

from rlcockpit.cli import world
from rlcockpit.world import DATA_DIR


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="rlcockpit")
    world.register(root.add_subparsers(dest="command"))
    return root


@pytest.mark.parametrize("command", ["data", "build-data", "sft", "eval"])
def test_every_world_subcommand_has_help(command, capsys):
    with pytest.raises(SystemExit) as exc:
        parser().parse_args(["world", command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert f"rlcockpit world {command}" in out


def test_sft_help_shows_the_reproducible_defaults(capsys):
    with pytest.raises(SystemExit):
        parser().parse_args(["world", "sft", "--help"])
    out = capsys.readouterr().out
    for flag in ("--out", "--seed", "--steps", "--threads"):
        assert flag in out


def test_world_without_subcommand_prints_help(capsys):
    args = parser().parse_args(["world"])
    assert args.func(args) == 1
    assert "build-data" in capsys.readouterr().out


def test_data_prints_counts_per_category(capsys):
    args = parser().parse_args(["world", "data", "--examples", "1"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    for word in ("math", "knowledge", "safety", "chat", "600", "200", "wrong_sum"):
        assert word in out


def test_build_data_writes_identical_files(tmp_path, capsys):
    args = parser().parse_args(["world", "build-data", "--out", str(tmp_path)])
    assert args.func(args) == 0
    for name in ("prompts_train.jsonl", "prompts_validation.jsonl", "sft_train.jsonl"):
        assert (tmp_path / name).read_bytes() == (DATA_DIR / name).read_bytes()
    assert "wrote" in capsys.readouterr().out
