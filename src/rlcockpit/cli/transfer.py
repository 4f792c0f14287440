"""``rlcockpit export`` and ``rlcockpit import``: move runs in and out of a store.

The integrations modules imported here are light (stdlib); pyarrow, tensorboard and the SQLite
store load inside the commands, so ``rlcockpit --help`` stays fast. Errors are :class:`~rlcockpit.errors.RlcockpitError`s: the CLI root prints the message
and exits with code 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rlcockpit.errors import ConfigError
from rlcockpit.integrations.aliases import SOURCES as IMPORT_SOURCES
from rlcockpit.integrations.export import FORMATS as EXPORT_FORMATS
from rlcockpit.integrations.export import WHATS as EXPORT_WHATS
from rlcockpit.integrations.importers import FORMATS as IMPORT_FORMATS

# not followed live (console-dicts is: OpenRLHF's "Global step" lines, printed Trainer dicts)
CONSOLE_AND_DATABASE_FORMATS = ("deepspeed-chat", "console-table", "nemo-rl-console", "wandb-csv", "trackio")

EXPORT_EPILOG = """examples:
  rlcockpit export --store sqlite:///rlcockpit.db --run RUN --what metrics --format jsonl
  rlcockpit export --store runs.db --run RUN --what samples --format parquet --out samples.parquet

Metrics JSONL has one line per step, {"step": N, "metrics": {catalog name: value}}; NaN and
+/-inf are written as the strings "NaN", "Infinity", "-Infinity" (strict JSON)."""

IMPORT_EPILOG = """examples:
  rlcockpit import --store runs.db --format trl-completions out/completions/
  rlcockpit import --store runs.db --format verl-rollout rollouts/ --name grpo-7b
  rlcockpit import --store runs.db metrics.jsonl rollouts/        (formats detected per file)
  rlcockpit import --store runs.db --format tensorboard runs/May01_12-00-00_host/
  rlcockpit import --store runs.db train_log.jsonl --map Reward=reward/mean --map KL_ref=kl/token_mean
  rlcockpit import --store runs.db fragments.jsonl --step-key episode --map-file my_trainer.yaml
  rlcockpit import --store runs.db train.log          (console: TRL dicts, OpenRLHF, DeepSpeed-Chat, MiniMind)
  rlcockpit import --store runs.db history.csv        (a W&B run history exported as CSV)
  rlcockpit import --store runs.db my-project.db --source-run brave-sunset-0   (Trackio)
  rlcockpit import --store runs.db --follow verl_logs/ rollouts/   (live, while verl writes them)

Metric keys are renamed to catalog names through the alias table (docs/import_export.md), or
your own --map / --map-file for a custom trainer (it wins over the table); keys without either
are kept as import/<source>/<key>. Where only per-token KL and mean lengths were logged, the
per-sequence KL kl/mean = kl/token_mean x response/length_mean is derived (never over a logged
kl/mean) and the summary says so. A console log without steps is numbered by row order, and the
summary says that too. The run keeps the log's own clock (logged wall times, elapsed seconds or
per-step durations). Every file is read and checked before anything is written: a malformed file
(a damaged TensorBoard record, a step beyond int64, 100k nested brackets...) stops the import with
exit code 2 and no run is created."""


def register(subparsers: argparse._SubParsersAction) -> None:
    _register_export(subparsers)
    _register_import(subparsers)


def _register_export(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "export", help="export a run's metrics, samples, findings or events (JSONL or Parquet)",
        description="Export one kind of a stored run's records as JSON Lines or Parquet.",
        epilog=EXPORT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", required=True, help="store URI, e.g. sqlite:///rlcockpit.db")
    p.add_argument("--run", required=True, help="run id (see `rlcockpit runs`)")
    p.add_argument("--what", required=True, choices=EXPORT_WHATS, help="which records to export")
    p.add_argument("--format", dest="fmt", default="jsonl", choices=EXPORT_FORMATS,
                   help="jsonl (default) or parquet")
    p.add_argument("--out", type=Path, default=None,
                   help="output file (default for jsonl: standard output; required for parquet)")
    p.set_defaults(func=cmd_export)


def _register_import(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "import", help="import TRL / verl / OpenRLHF / DeepSpeed-Chat / W&B / Trackio / TensorBoard "
                       "logs or console output as a run",
        description="Import foreign training logs (or an rlcockpit export) into a store as one "
                    "finished run; with --follow, as a live run while the trainer writes them.",
        epilog=IMPORT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="+", metavar="PATH", help="files or folders to import")
    p.add_argument("--store", required=True, help="store URI, e.g. sqlite:///rlcockpit.db")
    p.add_argument("--format", dest="fmt", default=None, choices=IMPORT_FORMATS,
                   help="format of every PATH (default: detected per file)")
    p.add_argument("--source", default=None, choices=IMPORT_SOURCES,
                   help="alias table for metric keys (default: detected from the keys)")
    p.add_argument("--project", default="imported", help="project of the new run (default: imported)")
    p.add_argument("--name", default=None, help="name of the new run (default: the first PATH's name)")
    p.add_argument("--run-id", default=None, help="id of the new run (default: a fresh imp-... id)")
    add_mapping_arguments(p)
    f = p.add_argument_group("follow mode (docs/integrations.md)")
    f.add_argument("--follow", action="store_true",
                   help="keep reading what the trainer appends, into a live run (dashboard, live stream "
                        "and detectors see each step as it lands) until Ctrl-C / SIGTERM or --idle-exit; "
                        "run it again to continue where it stopped")
    f.add_argument("--poll-interval", type=float, default=0.25, metavar="SECONDS",
                   help="with --follow: how often the files are looked at (default 0.25)")
    f.add_argument("--idle-exit", type=float, default=None, metavar="SECONDS",
                   help="with --follow: stop, marking the run finished, after this long without new records")
    f.add_argument("--state", default=None, metavar="FILE",
                   help="with --follow: where the follow state (run id, file offsets) is kept (default: "
                        "next to the store, <store>.follow/<hash of the paths>.json)")
    f.add_argument("--no-diagnostics", action="store_true",
                   help="with --follow: do not run the detectors on the followed steps")
    f.add_argument("--force", action="store_true",
                   help="with --follow: take over the run's lease even while another follower holds it "
                        "(only for one you know is dead; the other stops following)")
    p.set_defaults(func=cmd_import)


def add_mapping_arguments(p: argparse.ArgumentParser) -> None:
    """--map, --map-file, --step-key and --source-run (shared with `rlcockpit doctor --import`)."""
    p.add_argument("--map", dest="key_map", action="append", default=[],
                   metavar="FOREIGN_KEY=CATALOG_NAME",
                   help="store a foreign key under a catalog name, e.g. KL_ref=kl/token_mean "
                        "(repeatable; wins over the alias table)")
    p.add_argument("--map-file", default=None, metavar="FILE",
                   help="YAML (or .json) mapping of foreign keys to catalog names (--map entries win)")
    p.add_argument("--step-key", default=None, metavar="KEY",
                   help="the key that holds the step in flat JSON logs, W&B CSV or console lines "
                        "(e.g. episode)")
    p.add_argument("--source-run", default=None, metavar="NAME",
                   help="the run to read from a file that holds several (a Trackio project database)")


def key_map_from_args(args: argparse.Namespace) -> dict[str, str]:
    """The checked user map of --map / --map-file (an unknown catalog name fails here)."""
    from rlcockpit.integrations.keymap import build_key_map

    return build_key_map(args.key_map, args.map_file)


def cmd_export(args: argparse.Namespace) -> int:
    from rlcockpit.integrations.export import export_run
    from rlcockpit.store import open_store

    store = open_store(args.store, create=False)
    reader = store.reader()
    try:
        count = export_run(reader, args.run, what=args.what, fmt=args.fmt, out=args.out,
                           stdout=sys.stdout)
    except BrokenPipeError:
        # `rlcockpit export ... | head`: the reader left; stop quietly like other Unix tools
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:
        reader.close()
        store.close()
    if args.out is not None:
        print(f"exported {count} {args.what} {'lines' if args.fmt == 'jsonl' else 'rows'} "
              f"of run {args.run} to {args.out}", file=sys.stderr)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from rlcockpit.integrations.importers import (
        ensure_new_run_id,
        new_run_id,
        read_paths,
        write_import,
    )
    from rlcockpit.store import open_store

    if args.follow and args.fmt in CONSOLE_AND_DATABASE_FORMATS:
        raise ConfigError(f"--follow does not read {args.fmt} files; import them when the run ends")
    if args.follow and args.source_run:
        raise ConfigError("--source-run reads a Trackio database, which --follow does not follow")
    if args.follow:
        return cmd_follow(args)
    if args.state or args.idle_exit is not None or args.no_diagnostics:
        raise ConfigError("--state, --idle-exit and --no-diagnostics work with --follow only; add --follow")
    parsed = read_paths(args.paths, fmt=args.fmt, source=args.source,  # validate before writing
                        key_map=key_map_from_args(args), step_key=args.step_key,
                        source_run=args.source_run)
    store = open_store(args.store)
    writer, reader = store.writer(), store.reader()
    try:
        run_id = args.run_id or new_run_id()
        ensure_new_run_id(reader, run_id)
        first = Path(args.paths[0]).resolve()
        name = args.name or (first.stem if first.is_file() else first.name)
        run = write_import(writer, parsed, project=args.project, name=name, run_id=run_id)
    finally:
        reader.close()
        writer.close()
        store.close()
    _print_summary(run.run_id, parsed)
    return 0


def cmd_follow(args: argparse.Namespace) -> int:
    """`rlcockpit import --follow`: SIGTERM and Ctrl-C stop it cleanly (run ``stopped``; the state
    is saved, so running the same command again continues the run)."""
    import signal
    import threading

    from rlcockpit.integrations.follow import FollowOptions, start_follow

    options = FollowOptions(poll_interval_s=args.poll_interval, idle_exit_s=args.idle_exit,
                            diagnostics=not args.no_diagnostics)
    follower = start_follow(args.paths, store=args.store, fmt=args.fmt, source=args.source,
                            key_map=key_map_from_args(args), step_key=args.step_key, project=args.project,
                            name=args.name, run_id=args.run_id, state_path=args.state, options=options,
                            force=args.force)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"following {len(follower.roots)} path(s) into run {follower.run.run_id} "
          f"(Ctrl-C to stop; run the same command again to continue)", flush=True)
    status = "stopped"
    try:
        status = follower.follow(stop)
    except KeyboardInterrupt:
        status = "stopped"
    finally:
        follower.close(status)
    print(f"run {follower.run.run_id} {status}: {follower.records} records followed"
          + (f", {follower.bad} malformed records skipped" if follower.bad else ""), flush=True)
    return 0


def _print_summary(run_id: str, parsed) -> None:
    from rlcockpit.integrations.importers import import_summary

    print("\n".join(import_summary(run_id, parsed)))
