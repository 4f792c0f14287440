"""The ``rlcockpit`` command: the composition root, the only place that sees every config.

Each sub-command lives in its own module with a ``register(subparsers)`` function; heavy imports
(torch, fastapi) happen inside the command, so ``rlcockpit --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from rlcockpit import __version__
from rlcockpit.errors import RlcockpitError

# module name under rlcockpit.cli -> registers one or more sub-commands. Every module directly
# under rlcockpit.cli is one of these (a test checks); their helpers live in rlcockpit.cli._support.
COMMAND_MODULES = ("train", "demo", "world", "runs", "transfer", "doctor", "library", "snapshot",
                   "faults", "serve", "users", "ticket", "training_commands", "audit", "store", "cost",
                   "wrap")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlcockpit",
        description="A cockpit for RL post-training of language models (PPO, GRPO).",
    )
    parser.add_argument("--version", action="version", version=f"rlcockpit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:  # a missing module is an ImportError: every command ships
        importlib.import_module(f"rlcockpit.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    try:
        return int(args.func(args) or 0)
    except RlcockpitError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
