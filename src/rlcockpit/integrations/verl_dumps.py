"""verl's generation dumps, read whole, once each: the samples of the rlcockpit verl backend.

verl writes ``<trainer.rollout_data_dir>/<step>.jsonl`` (training rollouts) and
``<trainer.validation_data_dir>/<step>.jsonl`` (validation generations) on ONE background thread
(``RayPPOTrainer._dump_generations``: a ``ThreadPoolExecutor(max_workers=1)``, so files are written
in the order they were submitted, each opened with ``"w"`` and written in one go). A file may be
half written while the driver logs its step, so a file is read only when it is whole:

- once a dump file of a later step exists in either folder (the single writer finished this one
  before it opened that one), or
- at the end of the run (:meth:`DumpReader.read`, ``final=True``; verl drains its dump thread
  before ``fit`` returns).

Files present before the run started (an earlier process's dumps: a resumed run) are not read
unless they are rewritten (a resumed verl run overwrites the steps after its checkpoint: the
samples are written again under the same keys, never twice). Each row becomes a
:class:`~rlcockpit.records.SampleRecord` as ``rlcockpit import --format verl-rollout`` reads it:
``input``/``output``/``score`` → prompt, response, reward; every numeric extra key (verl's
``reward_extra_infos_dict``: ``acc``, ``format``...) a reward component. Validation samples carry
the flag ``validation`` and sample ids from :data:`VALIDATION_ID_BASE` on (a validation at step N
and the rollout of step N share the step).

``reward_extra_infos``: an optional callable ``row -> {name: value}`` that adds sub-scores to each
row (verl's v1 trainer writes only ``input, output, gts, score, step, uid`` in its training
dumps: such a hook recomputes the reward function's parts from ``output`` and ``gts``).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from rlcockpit.errors import ImportFormatError
from rlcockpit.integrations.importers import verl_rollout
from rlcockpit.integrations.importers._base import ParsedImport, SampleNumbering
from rlcockpit.records import SampleRecord

log = logging.getLogger("rlcockpit.integrations.verl")
VALIDATION_ID_BASE = 1_000_000  # validation sample ids: apart from the same step's rollout samples
VALIDATION_FLAG = "validation"
Extras = Callable[[Mapping[str, Any]], Mapping[str, Any]]


def _identity(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _step_of(path: Path) -> int | None:
    return int(path.stem) if path.suffix == ".jsonl" and path.stem.isdigit() else None


class DumpReader:
    """The rollout and validation dump folders of one run (either may be None)."""

    def __init__(self, rollout_dir: str | os.PathLike | None, validation_dir: str | os.PathLike | None,
                 reward_extra_infos: Extras | None = None) -> None:
        self.folders = {kind: Path(d) for kind, d in (("rollout", rollout_dir), ("validation", validation_dir)) if d}
        self.reward_extra_infos = reward_extra_infos
        self.unstored_keys: set[str] = set()
        self.bad = 0  # lines skipped (not a verl dump row)
        self._done: dict[Path, tuple[int, int, int] | None] = {}  # path -> identity when read
        for path, _, _ in self._files():  # an earlier process's dumps: not this run's to read
            self._done[path] = _identity(path)

    @property
    def enabled(self) -> bool:
        return bool(self.folders)

    def _files(self) -> list[tuple[Path, str, int]]:
        out = []
        for kind, folder in self.folders.items():
            try:
                entries = list(os.scandir(folder))
            except OSError:  # not created yet: verl makes it at the first dump
                continue
            for entry in entries:
                path = Path(entry.path)
                step = _step_of(path)
                if step is not None and entry.is_file():
                    out.append((path, kind, step))
        return sorted(out, key=lambda f: (f[2], f[1]))

    def read(self, final: bool = False) -> dict[int, list[SampleRecord]]:
        """The samples of every dump file that became whole since the last read, by step."""
        files = self._files()
        newest = max((step for _, _, step in files), default=None)
        out: dict[int, list[SampleRecord]] = {}
        for path, kind, step in files:
            identity = _identity(path)
            if identity is None or self._done.get(path) == identity:
                continue
            if not final and step >= newest:
                continue  # the newest file may be half written: wait for a later one, or the end
            for sample in self._read_file(path, kind, step):
                out.setdefault(sample.step, []).append(sample)
            self._done[path] = identity
        return out

    def _read_file(self, path: Path, kind: str, step: int) -> list[SampleRecord]:
        numbering, parsed, out = SampleNumbering(), ParsedImport(), []
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError as exc:
            log.warning("rlcockpit verl: cannot read %s: %s", path, exc)
            return []
        for number, text in enumerate(lines, start=1):
            if not text.strip():
                continue
            try:
                row = json.loads(text)
                if not isinstance(row, dict):
                    raise ValueError("not a JSON object")
                out.append(self._sample(row, step, kind, numbering, parsed, path, number))
            except (ValueError, TypeError, OverflowError, ImportFormatError) as exc:
                self.bad += 1
                log.warning("rlcockpit verl: skipped %s line %d: %s", path, number, getattr(exc, "message", exc))
        self.unstored_keys |= parsed.unstored_sample_keys
        return out

    def _sample(self, row: dict[str, Any], step: int, kind: str, numbering: SampleNumbering,
                parsed: ParsedImport, path: Path, number: int) -> SampleRecord:
        if self.reward_extra_infos is not None:
            try:
                extra = dict(self.reward_extra_infos(row) or {})
            except Exception as exc:  # the user's hook: fail soft, the row keeps what verl wrote
                log.warning("rlcockpit verl: reward_extra_infos failed on %s line %d: %s", path, number, exc)
                extra = {}
            row = {**row, **{k: v for k, v in extra.items() if k not in verl_rollout.REQUIRED}}
        row_step = row.get("step", step)
        sample = verl_rollout._sample(row, int(row_step), numbering, parsed, path, f"line {number}")
        if kind == "validation":
            sample = replace(sample, sample_id=VALIDATION_ID_BASE + sample.sample_id, flags=(VALIDATION_FLAG,))
        return sample
