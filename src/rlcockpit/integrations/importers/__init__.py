"""Importers: foreign training logs -> an ordinary rlcockpit run (DESIGN.md §5).

Two stages, so a malformed file never leaves a half-imported run behind:

1. :func:`read_paths` reads and checks *every* file (no store is opened yet) and returns one
   :class:`ParsedImport`; any problem raises :class:`ImportFormatError` naming the file and line.
2. :func:`write_import` writes the run through the :class:`StoreWriter` protocol: the run row, then
   the metric points and samples in step-ordered batches, then status ``finished``.

Formats (one module each): ``trl-completions``, ``verl-rollout``, ``jsonl-logger``,
``tensorboard`` and ``rlcockpit`` (rlcockpit's own exports). Without ``fmt`` the format is
detected per file. A folder stands for the files of these formats inside it; its other files (a
model's config.json...) are left out and listed in ``ParsedImport.ignored_files``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rlcockpit import __version__
from rlcockpit.errors import ConfigError, ImportFormatError, NotFoundError, StoreError
from rlcockpit.integrations.aliases import SOURCES
from rlcockpit.integrations.importers import (
    jsonl_logger,
    rlcockpit_files,
    tensorboard,
    trl_completions,
    verl_rollout,
)
from rlcockpit.integrations.importers._base import ParsedImport, SampleNumbering, fail, iter_jsonl
from rlcockpit.records import Batch, RunInfo
from rlcockpit.store.base import StoreReader, StoreWriter

FORMATS = ("trl-completions", "verl-rollout", "jsonl-logger", "tensorboard", "rlcockpit")
FILE_SUFFIXES = (".parquet", ".jsonl", ".json")
BATCH_RECORDS = 20_000  # records per write transaction: bounded memory in SQLite, few commits

__all__ = ["FORMATS", "ParsedImport", "detect_format", "ensure_new_run_id", "expand_paths",
           "new_run_id", "read_paths", "write_import"]


def _natural_key(path: Path) -> tuple[Any, ...]:
    """Order ``2.jsonl`` before ``10.jsonl`` (verl names rollout files by step)."""
    parts = re.split(r"(\d+)", path.name)
    return (str(path.parent), [int(p) if p.isdigit() else p for p in parts])


def _is_candidate(path: Path) -> bool:
    return path.suffix in FILE_SUFFIXES or tensorboard.MARKER in path.name


def expand_paths(paths: Sequence[str | Path]) -> list[tuple[Path, bool]]:
    """(file, named explicitly) for the paths of the command line; a directory stands for the
    candidate files inside it (by suffix), in natural order."""
    out: list[tuple[Path, bool]] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted((p for p in path.rglob("*") if p.is_file() and _is_candidate(p)),
                           key=_natural_key)
            if not found:
                raise fail(path, "", "holds no .parquet, .jsonl, .json or tfevents files",
                           "Point at the files (or the folder) your trainer wrote")
            out += [(p, False) for p in found]
        elif path.is_file():
            out.append((path, True))
        else:
            raise fail(path, "", "does not exist", "Check the path")
    return out


def detect_format(path: Path) -> str:
    """The format of one file, from its name and first record; raises when nothing matches."""
    if tensorboard.sniff(path):
        return "tensorboard"
    if path.suffix == ".parquet":
        return _detect_parquet(path)
    if path.suffix == ".json" and jsonl_logger.sniff(path):  # a Trainer state, not JSON Lines
        return "jsonl-logger"
    _check_first_line(path)
    if rlcockpit_files.sniff(path):
        return "rlcockpit"
    if verl_rollout.sniff(path):
        return "verl-rollout"
    if jsonl_logger.sniff(path):
        return "jsonl-logger"
    raise fail(path, "", "matches no known format (looked at its name and first line)",
               f"Pass --format, one of {', '.join(FORMATS)}")


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


def _check_tensorboard_dirs(files: list[tuple[Path, str]]) -> None:
    dirs = sorted({str(p.parent) for p, f in files if f == "tensorboard"})
    if len(dirs) > 1:
        raise ImportFormatError(
            f"TensorBoard event files come from {len(dirs)} folders ({', '.join(dirs)}); each "
            "folder is one TensorBoard run. Import one run folder at a time.",
            details={"folders": dirs},
        )


def _reader(fmt: str, numbering: SampleNumbering) -> Callable[[Path, str | None], ParsedImport]:
    if fmt == "trl-completions":
        return lambda p, s: trl_completions.read_file(p, s, numbering)
    if fmt == "verl-rollout":
        return lambda p, s: verl_rollout.read_file(p, s, numbering)
    return {"jsonl-logger": jsonl_logger.read_file, "tensorboard": tensorboard.read_file,
            "rlcockpit": rlcockpit_files.read_file}[fmt]


def read_paths(paths: Sequence[str | Path], fmt: str | None = None,
               source: str | None = None) -> ParsedImport:
    """Read and check every file; nothing is written. ``source`` forces the alias table used for
    metric keys (one of :data:`rlcockpit.integrations.aliases.SOURCES`), else it is detected."""
    if fmt is not None and fmt not in FORMATS:
        raise ConfigError(f"unknown import format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if source is not None and source not in SOURCES:
        raise ConfigError(f"unknown source {source!r}; choose one of {', '.join(SOURCES)}")
    files, ignored = _choose_files(expand_paths(paths), fmt)
    _check_tensorboard_dirs(files)
    parsed, numbering = ParsedImport(ignored_files=ignored), SampleNumbering()
    for path, file_format in files:
        parsed.merge(_reader(file_format, numbering)(path, source))
    _check_sample_ids(parsed)
    return parsed


def _choose_files(candidates: list[tuple[Path, bool]], fmt: str | None
                  ) -> tuple[list[tuple[Path, str]], dict[str, str]]:
    """(file, format) to read, and the files of a folder that are left out, with the reason.

    A file named on the command line must be of ``fmt`` (or of a detectable format). A file found
    in a folder is read only when its detected format is ``fmt`` (or any format without ``fmt``):
    a TRL output folder also holds config.json and tokenizer files, which are not logs.
    """
    files, ignored = [], {}
    for path, explicit in candidates:
        if explicit:
            files.append((path, fmt or detect_format(path)))
            continue
        try:
            detected = detect_format(path)
        except ImportFormatError as exc:
            ignored[str(path)] = exc.message
            continue
        if fmt is None or detected == fmt:
            files.append((path, detected))
        else:
            ignored[str(path)] = f"{path}: is {detected}, not {fmt}"
    if not files:
        raise ImportFormatError(
            "none of the files found is a training log this importer reads: "
            + "; ".join(ignored.values()), details={"ignored": ignored})
    return files, ignored


def _check_sample_ids(parsed: ParsedImport) -> None:
    seen: set[tuple[int, int]] = set()
    for sample in parsed.samples:
        key = (sample.step, sample.sample_id)
        if key in seen:
            raise ImportFormatError(
                f"two samples share step {sample.step} and sample id {sample.sample_id}; the "
                "same export was probably passed twice. Pass each file once.",
                details={"step": sample.step, "sample_id": sample.sample_id})
        seen.add(key)


def new_run_id() -> str:
    """The telemetry's run id with an ``imp-`` prefix, e.g. ``imp-20250101-120000-3fa2c1``."""
    from rlcockpit.telemetry import new_run_id as telemetry_run_id

    return f"imp-{telemetry_run_id()}"


def import_config(parsed: ParsedImport) -> dict[str, Any]:
    """What the run's config records about where it came from."""
    return {"import": {
        "formats": sorted({f["format"] for f in parsed.files}),
        "sources": sorted(parsed.sources),
        "files": parsed.files,
        "skipped_values": dict(sorted(parsed.skipped.items())),
        "unstored_sample_keys": sorted(parsed.unstored_sample_keys),
        "ignored_files": parsed.ignored_files,
        "imported_at": time.time(),
        "rlcockpit_version": __version__,
    }}


def _batches(parsed: ParsedImport) -> list[Batch]:
    """Step-ordered batches of at most ~BATCH_RECORDS records; a step never spans two batches."""
    by_step: dict[int, tuple[list, list]] = {}
    for point in parsed.metric_points():
        by_step.setdefault(point.step, ([], []))[0].append(point)
    for sample in sorted(parsed.samples, key=lambda s: (s.step, s.sample_id)):
        by_step.setdefault(sample.step, ([], []))[1].append(sample)
    batches, metrics, samples = [], [], []
    for step in sorted(by_step):
        metrics += by_step[step][0]
        samples += by_step[step][1]
        if len(metrics) + len(samples) >= BATCH_RECORDS:
            batches.append(Batch(metrics=metrics, samples=samples))
            metrics, samples = [], []
    if metrics or samples:
        batches.append(Batch(metrics=metrics, samples=samples))
    return batches


def ensure_new_run_id(reader: StoreReader, run_id: str) -> None:
    try:
        reader.get_run(run_id)
    except NotFoundError:
        return
    raise ConfigError(f"run id {run_id!r} already exists in this store; pass another --run-id "
                      "or leave it out to get a fresh one")


def write_import(writer: StoreWriter, parsed: ParsedImport, *, project: str, name: str,
                 run_id: str) -> RunInfo:
    """Write ``parsed`` as one finished run. A store failure mid-way marks the run ``failed``."""
    started = time.time()
    run = RunInfo(run_id=run_id, project=project, name=name, status="running", started_at=started,
                  config=import_config(parsed))
    writer.create_run(run)
    steps = parsed.steps
    try:
        for batch in _batches(parsed):
            writer.write_batch(run_id, batch)
    except StoreError:
        writer.set_run_status(run_id, "failed", ended_at=time.time())
        raise
    ended = time.time()
    writer.heartbeat(run_id, ended, steps[-1] if steps else None)
    writer.set_run_status(run_id, "finished", ended_at=ended)
    return RunInfo(run_id=run_id, project=project, name=name, status="finished", started_at=started,
                   ended_at=ended, config=run.config, last_step=steps[-1] if steps else None)
