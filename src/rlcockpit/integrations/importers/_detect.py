"""Which importer reads a file: its name, its first bytes, its first record or its first lines.

Order (the first that matches wins): ``tensorboard`` (``tfevents`` in the name), Parquet
(rlcockpit export or TRL completions), a ``.json`` Trainer state, a ``.csv`` W&B run history, a
SQLite Trackio project database, a JSON Lines file (rlcockpit export, verl rollout, file logger),
then console text: NeMo-RL's step blocks, DeepSpeed-Chat step-3 lines, printed dicts,
``Key: value`` lines, tables.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rlcockpit.integrations.importers import (
    console_dicts,
    console_kv,
    console_nemo,
    console_table,
    deepspeed_chat,
    jsonl_logger,
    rlcockpit_files,
    tensorboard,
    trackio_db,
    trl_completions,
    verl_rollout,
    wandb_csv,
)
from rlcockpit.integrations.importers._base import fail, first_object, iter_jsonl

FORMATS = ("trl-completions", "verl-rollout", "jsonl-logger", "tensorboard", "rlcockpit",
           "console-dicts", "deepspeed-chat", "console-kv", "console-table", "nemo-rl-console",
           "wandb-csv", "trackio")
CONSOLE_FORMATS = ("console-dicts", "deepspeed-chat", "console-kv", "console-table", "nemo-rl-console")
FILE_SUFFIXES = (".parquet", ".jsonl", ".json", ".log", ".txt", ".out", ".csv", ".db", ".sqlite")
JSON_SUFFIXES = (".jsonl", ".json")


def natural_key(path: Path) -> tuple[Any, ...]:
    """Order ``2.jsonl`` before ``10.jsonl`` (verl names rollout files by step)."""
    parts = re.split(r"(\d+)", path.name)
    return (str(path.parent), [int(p) if p.isdigit() else p for p in parts])


def is_candidate(path: Path) -> bool:
    return path.suffix in FILE_SUFFIXES or tensorboard.MARKER in path.name


def detect_format(path: Path, step_key: str | None = None) -> str:
    """The format of one file, from its name and first record; raises when nothing matches.
    ``step_key`` (``--step-key``) lets a flat log whose step has another name be recognised."""
    if tensorboard.sniff(path):
        return "tensorboard"
    if path.suffix == ".parquet":
        return _detect_parquet(path)
    if path.suffix == ".json" and jsonl_logger.sniff(path):  # a Trainer state, not JSON Lines
        return "jsonl-logger"
    if path.suffix == ".csv":
        if wandb_csv.sniff(path, step_key):
            return "wandb-csv"
        raise fail(path, "", f"is a CSV file without a {step_key or wandb_csv.STEP_COLUMN} column",
                   "Export the run history from W&B (run.history().to_csv()), or name the step "
                   "column with --step-key")
    if trackio_db.sniff(path):
        return "trackio"
    if path.suffix in JSON_SUFFIXES:  # JSON Lines: never guessed as console text
        _check_first_line(path)
        # flat metric dicts without any step (a Trainer's console dicts saved as JSON Lines, as
        # people paste them from issues) are numbered by row order, as console-dicts does
        detected = _detect_json_lines(path, step_key) or (
            "console-dicts" if console_dicts.sniff(path, step_key)
            and not _counter_keys(first_object(path)) else None)
    else:
        detected = _detect_json_lines(path, step_key) or _detect_console(path, step_key)
    if detected is None:
        raise fail(path, "", "matches no known format (looked at its name, first record and first "
                   "lines)", f"Pass --format, one of {', '.join(FORMATS)} (a flat JSON log whose "
                   "step is under another key: --step-key KEY; records without any step: "
                   "--format console-dicts numbers them by row order)")
    return detected


_COUNTER = re.compile(r"(^|[_/ ])(steps?|episodes?|iter|iters|iterations?)$", re.IGNORECASE)


def _counter_keys(obj: dict | None) -> list[str]:
    """Keys that look like a step counter (``episode``, ``iteration``...): a log that has one is
    not numbered by row order — the user names it with --step-key."""
    return [k for k in (obj or {}) if _COUNTER.search(str(k))]


def _detect_json_lines(path: Path, step_key: str | None) -> str | None:
    if first_object(path) is None:
        return None
    if rlcockpit_files.sniff(path):
        return "rlcockpit"
    if verl_rollout.sniff(path):
        return "verl-rollout"
    if jsonl_logger.sniff(path, step_key):
        return "jsonl-logger"
    return None


def _detect_console(path: Path, step_key: str | None) -> str | None:
    # first: a step header with a result block is unambiguous, while NeMo-RL's start-up (config
    # dump, Ray / vLLM lines) may hold lines that the looser console sniffers below would take
    if console_nemo.sniff(path):
        return "nemo-rl-console"
    if deepspeed_chat.sniff(path):
        return "deepspeed-chat"
    if console_dicts.sniff(path, step_key):
        return "console-dicts"
    if console_kv.sniff(path, step_key):
        return "console-kv"
    if console_table.sniff(path, step_key):
        return "console-table"
    return None


def _check_first_line(path: Path) -> None:
    """Name the actual problem when a JSON Lines file cannot even be sniffed."""
    for number, _ in iter_jsonl(path):  # raises for a bad first line, with its number
        if number:
            return
    raise fail(path, "", "is empty", "Pass a file with at least one record")


def _detect_parquet(path: Path) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if rlcockpit_files.sniff(path):
        return "rlcockpit"
    try:
        names = pq.read_schema(path).names
    except (pa.ArrowException, OSError) as exc:
        raise fail(path, "", f"is not a readable Parquet file ({exc})",
                   "Pass a Parquet file written by TRL or by rlcockpit export") from exc
    if all(c in names for c in trl_completions.TEXT_COLUMNS):
        return "trl-completions"
    raise fail(path, "", f"is a Parquet file with columns {names}, which no importer knows",
               f"Pass --format, one of {', '.join(FORMATS)}")
