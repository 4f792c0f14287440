"""Importers: foreign training logs -> an ordinary rlcockpit run (DESIGN.md §5).

Two stages, so a malformed file never leaves a half-imported run behind:

1. :func:`read_paths` reads and checks *every* file (no store is opened yet) and returns one
   :class:`ParsedImport`; any problem raises :class:`ImportFormatError` naming the file and line.
2. :func:`write_import` writes the run through the :class:`StoreWriter` protocol: the run row, then
   the metric points and samples in step-ordered batches, then status ``finished``.

Formats (one module each): ``trl-completions``, ``verl-rollout``, ``jsonl-logger``,
``tensorboard``, ``rlcockpit`` (rlcockpit's own exports), the console logs ``console-dicts``
(TRL / HF Trainer, ms-swift, OpenRLHF), ``deepspeed-chat``, ``console-kv`` (MiniMind, verl),
``console-table`` (notebook tables) and ``nemo-rl-console`` (NeMo-RL's GRPO trainer), and
``wandb-csv`` and ``trackio``. Without ``fmt`` the format is detected per file (:mod:`._detect`).
A folder stands for the files of these formats inside it; its other files (a model's
config.json...) are left out and listed in ``ParsedImport.ignored_files``. After reading, the
run's own clock is resolved (:mod:`._timing`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlcockpit import __version__
from rlcockpit.errors import ConfigError, ImportFormatError, NotFoundError, StoreError
from rlcockpit.integrations.aliases import SOURCES
from rlcockpit.integrations.follow_text import Overlap
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
from rlcockpit.integrations.importers._base import (
    SEQUENCE_KL_FORMULA,
    ParsedImport,
    SampleNumbering,
    derive_sequence_kl,
    fail,
)
from rlcockpit.integrations.importers._detect import (
    CONSOLE_FORMATS,
    FILE_SUFFIXES,
    FORMATS,
    detect_format,
)
from rlcockpit.integrations.importers._detect import is_candidate as _is_candidate
from rlcockpit.integrations.importers._detect import natural_key as _natural_key
from rlcockpit.integrations.importers._timing import resolve_timing
from rlcockpit.integrations.keymap import check_key_map
from rlcockpit.records import Batch, RunInfo
from rlcockpit.store.base import RunReader, StoreWriter

BATCH_RECORDS = 20_000  # records per write transaction: bounded memory in SQLite, few commits

__all__ = ["CONSOLE_FORMATS", "FORMATS", "ParsedImport", "detect_format", "ensure_new_run_id", "expand_paths",
           "import_summary", "new_run_id", "read_paths", "write_import"]


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
                raise fail(path, "", f"holds no {', '.join(FILE_SUFFIXES)} or tfevents files",
                           "Point at the files (or the folder) your trainer wrote")
            out += [(p, False) for p in found]
        elif path.is_file():
            out.append((path, True))
        else:
            raise fail(path, "", "does not exist", "Check the path")
    return out


def _check_tensorboard_dirs(files: list[tuple[Path, str]]) -> None:
    dirs = sorted({str(p.parent) for p, f in files if f == "tensorboard"})
    if len(dirs) > 1:
        raise ImportFormatError(
            f"TensorBoard event files come from {len(dirs)} folders ({', '.join(dirs)}); each "
            "folder is one TensorBoard run. Import one run folder at a time.",
            details={"folders": dirs},
        )


@dataclass(frozen=True)
class ReadOptions:
    """What the command line says about reading the files (see :func:`read_paths`)."""

    source: str | None = None
    key_map: Mapping[str, str] = field(default_factory=dict)
    step_key: str | None = None
    source_run: str | None = None


_TEXT_READERS = {"jsonl-logger": jsonl_logger.read_file, "console-dicts": console_dicts.read_file,
                 "deepspeed-chat": deepspeed_chat.read_file, "console-kv": console_kv.read_file,
                 "console-table": console_table.read_file,
                 "nemo-rl-console": console_nemo.read_file,
                 "wandb-csv": wandb_csv.read_file}


def _reader(fmt: str, numbering: SampleNumbering, options: ReadOptions
            ) -> Callable[[Path], ParsedImport]:
    source, key_map = options.source, options.key_map
    if fmt == "trl-completions":
        return lambda p: trl_completions.read_file(p, source, numbering)
    if fmt == "verl-rollout":
        return lambda p: verl_rollout.read_file(p, source, numbering)
    if fmt in _TEXT_READERS:
        return lambda p: _TEXT_READERS[fmt](p, source, key_map=key_map, step_key=options.step_key)
    if fmt == "tensorboard":
        return lambda p: tensorboard.read_file(p, source, key_map=key_map)
    if fmt == "trackio":
        return lambda p: trackio_db.read_file(p, source, key_map=key_map, run_name=options.source_run)
    return lambda p: rlcockpit_files.read_file(p, source)


def read_paths(paths: Sequence[str | Path], fmt: str | None = None,
               source: str | None = None, *, key_map: Mapping[str, str] | None = None,
               step_key: str | None = None, source_run: str | None = None,
               now: float | None = None) -> ParsedImport:
    """Read and check every file; nothing is written.

    ``source`` forces the alias table used for metric keys (one of
    :data:`rlcockpit.integrations.aliases.SOURCES`), else it is detected. ``key_map`` is the
    user's own map (foreign key -> catalog name, see :mod:`rlcockpit.integrations.keymap`; it
    wins over the alias table); ``step_key`` names the step of flat JSON logs that keep it under
    another key; ``source_run`` picks one run of a multi-run file (a Trackio database).
    Afterwards ``kl/mean`` is derived where only per-token KL and lengths were logged
    (:func:`~rlcockpit.integrations.importers._base.derive_sequence_kl`) and the run's own clock
    is resolved (:mod:`._timing`; ``now`` is the import moment, a synthetic clock ends there).
    """
    if fmt is not None and fmt not in FORMATS:
        raise ConfigError(f"unknown import format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if source is not None and source not in SOURCES:
        raise ConfigError(f"unknown source {source!r}; choose one of {', '.join(SOURCES)}")
    key_map = check_key_map(key_map or {})
    files, ignored = _choose_files(expand_paths(paths), fmt, step_key)
    _check_tensorboard_dirs(files)
    if source_run is not None and not any(f == "trackio" for _, f in files):
        raise ConfigError("--source-run chooses a run inside a Trackio project database; none of "
                          "the files is one (leave --source-run out)")
    parsed = ParsedImport(ignored_files=ignored, key_map=dict(key_map), step_key=step_key)
    numbering = SampleNumbering()
    options = ReadOptions(source, key_map, step_key, source_run)
    overlap = Overlap()  # TRL's completion tables repeat the rows of the one before
    for path, file_format in _table_order(files):
        read = _reader(file_format, numbering, options)(path)
        if file_format == "trl-completions":
            read.samples[:] = overlap.new_rows(path.parent, read.samples)
        parsed.merge(read)
    if overlap.repeated:
        parsed.notes.append(
            f"{overlap.repeated} completion rows repeated from the table before were left out "
            "(TRL's completion buffer is never cleared): each completion is stored once, at the "
            "step it first appeared")
    _check_sample_ids(parsed)
    derive_sequence_kl(parsed)
    resolve_timing(parsed, time.time() if now is None else now)
    return parsed


def _table_order(files: list[tuple[Path, str]]) -> list[tuple[Path, str]]:
    """``files`` with TRL's completion tables in step order (natural order of their names, as a
    folder is read: ``completions_9`` before ``completions_10``), after the other files."""
    tables = [f for f in files if f[1] == "trl-completions"]
    others = [f for f in files if f[1] != "trl-completions"]
    return others + sorted(tables, key=lambda f: _natural_key(f[0]))


def _choose_files(candidates: list[tuple[Path, bool]], fmt: str | None, step_key: str | None = None
                  ) -> tuple[list[tuple[Path, str]], dict[str, str]]:
    """(file, format) to read, and the files of a folder that are left out, with the reason.

    A file named on the command line must be of ``fmt`` (or of a detectable format). A file found
    in a folder is read only when its detected format is ``fmt`` (or any format without ``fmt``):
    a TRL output folder also holds config.json and tokenizer files, which are not logs.
    """
    files, ignored = [], {}
    for path, explicit in candidates:
        if explicit:
            files.append((path, fmt or detect_format(path, step_key)))
            continue
        try:
            detected = detect_format(path, step_key)
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
    """One sample per (step, sample id): the same sample read from two files (OpenRLHF's console
    ``Sample:`` line and its TensorBoard ``generated_samples`` text) is kept once; two different
    samples under one id are an error."""
    seen: dict[tuple[int, int], tuple[str, str]] = {}
    kept = []
    for sample in parsed.samples:
        key, text = (sample.step, sample.sample_id), (sample.prompt, sample.response)
        if key in seen:
            if seen[key] == text:
                continue
            raise ImportFormatError(
                f"two samples share step {sample.step} and sample id {sample.sample_id}; the "
                "same export was probably passed twice. Pass each file once.",
                details={"step": sample.step, "sample_id": sample.sample_id})
        seen[key] = text
        kept.append(sample)
    parsed.samples[:] = kept


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
        "key_map": dict(sorted(parsed.key_map.items())),
        "logged_keys": dict(sorted(parsed.logged_keys.items())),
        "step_key": parsed.step_key,
        "derived": {name: {"steps": count, "formula": DERIVED_FORMULAS.get(name, "")}
                    for name, count in sorted(parsed.derived.items())},
        "notes": list(parsed.notes),
        "timing": dict(parsed.timing),
        "imported_at": time.time(),
        "rlcockpit_version": __version__,
    }}


DERIVED_FORMULAS = {"kl/mean": SEQUENCE_KL_FORMULA}


def import_summary(run_id: str, parsed: ParsedImport) -> list[str]:
    """The lines `rlcockpit import` prints: counts, what was mapped, derived, skipped, ignored."""
    names = {n for _, n in parsed.metrics}
    foreign = sorted(n for n in names if n.startswith("import/"))
    lines = [f"imported run {run_id}: {len(parsed.steps)} steps, {len(names)} metrics "
             f"({len(names) - len(foreign)} catalog, {len(foreign)} under import/), "
             f"{len(parsed.samples)} samples from {len(parsed.files)} files "
             f"[{', '.join(sorted(parsed.sources))}]"]
    if parsed.key_map:
        lines.append("  mapped by --map: " + ", ".join(f"{k} -> {v}" for k, v in
                                                       sorted(parsed.key_map.items())))
    if parsed.step_key:
        lines.append(f"  step read from {parsed.step_key!r}")
    for name, count in sorted(parsed.derived.items()):
        lines.append(f"  derived {name} on {count} steps: {DERIVED_FORMULAS.get(name, name)} "
                     f"(per-sequence KL from per-token KL; never over a logged {name})")
    if parsed.skipped:
        lines.append(f"  skipped non-numeric values: {dict(sorted(parsed.skipped.items()))}")
    for path, reason in parsed.ignored_files.items():
        lines.append(f"  ignored {path}: {reason.removeprefix(path + ': ')}")
    if parsed.unstored_sample_keys:
        lines.append("  sample fields with no place in a sample record (listed in the run config): "
                     + ", ".join(sorted(parsed.unstored_sample_keys)))
    lines += [f"  {note}" for note in parsed.notes]
    lines.append("  " + timing_line(parsed.timing))
    return lines


def timing_line(timing: Mapping[str, Any]) -> str:
    """How the run's wall times were found (``import.timing`` of the run config)."""
    if not timing:
        return ("time: the log carries no wall times or durations; the run is stamped with the "
                "import moment (plot it by step)")
    span = timing["ended_at"] - timing["started_at"]
    origin = ("a synthetic start chosen so the run ends at the import moment" if timing["synthetic"]
              else "the logged times")
    return f"time: {span:.0f} s of training from {timing['source']}, on {origin}"


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


def ensure_new_run_id(reader: RunReader, run_id: str) -> None:
    try:
        reader.get_run(run_id)
    except NotFoundError:
        return
    raise ConfigError(f"run id {run_id!r} already exists in this store; pass another --run-id "
                      "or leave it out to get a fresh one")


def write_import(writer: StoreWriter, parsed: ParsedImport, *, project: str, name: str,
                 run_id: str) -> RunInfo:
    """Write ``parsed`` as one finished run, with the run's own start and end when the log
    carries time (``parsed.timing``), else the import moment. Any failure mid-way (a store
    error, a value the store refuses) marks the run ``failed`` and is raised."""
    timing = parsed.timing
    started = timing.get("started_at", time.time())
    run = RunInfo(run_id=run_id, project=project, name=name, status="running", started_at=started,
                  config=import_config(parsed))
    writer.create_run(run)
    steps = parsed.steps
    try:
        for batch in _batches(parsed):
            writer.write_batch(run_id, batch)
    except (StoreError, OverflowError, ValueError) as exc:
        writer.set_run_status(run_id, "failed", ended_at=time.time())
        if isinstance(exc, StoreError):
            raise
        raise StoreError(f"the store refused a value of run {run_id} ({exc}); the run is marked "
                         "failed", details={"run_id": run_id}) from exc
    ended = timing.get("ended_at", time.time())
    writer.heartbeat(run_id, ended, steps[-1] if steps else None)
    writer.set_run_status(run_id, "finished", ended_at=ended)
    return RunInfo(run_id=run_id, project=project, name=name, status="finished", started_at=started,
                   ended_at=ended, config=run.config, last_step=steps[-1] if steps else None)
