"""Generate the command-line reference (docs/cli.md) from the argparse tree itself.

``python -m rlcockpit.cli._support.reference > docs/cli.md``; a test fails when the file is out
of date, so every command and option is documented.
"""

from __future__ import annotations

import argparse
import os

from rlcockpit.cli import build_parser


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    out: list[tuple[str, argparse.ArgumentParser]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            out.extend(action.choices.items())
    return out


def _walk(parser: argparse.ArgumentParser, path: list[str]):
    yield path, parser
    for name, sub in _subcommands(parser):
        yield from _walk(sub, [*path, name])


def cli_markdown() -> str:
    os.environ["COLUMNS"] = "100"  # stable wrapping of the help text
    root = build_parser()
    lines = [
        "# Command-line reference",
        "",
        "Generated from the parser by `python -m rlcockpit.cli._support.reference`; do not edit by hand.",
        "Every command exits 0 on success, 2 on a user error (bad config, bad input, unknown run)",
        "with a one-line `error: ...` message naming what to fix. `rlcockpit doctor` also exits 2",
        "when a red or black finding exists, and 3 when the store or an `--import` file cannot be",
        "read (a damaged store, a malformed log): no diagnosis was possible.",
        "",
    ]
    for path, parser in _walk(root, ["rlcockpit"]):
        title = " ".join(path)
        parser.prog = title
        lines += [f"## `{title}`", "", "```text", parser.format_help().rstrip(), "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    print(cli_markdown(), end="")
