"""Metrics from a table of steps, as notebooks show them and people paste them into issues.

The Hugging Face ``Trainer`` in a notebook (TRL, Unsloth) shows its log as an HTML table whose
first column is ``Step`` and whose other columns are the logged keys (``Training Loss``,
``reward``, ``reward_std``, ``kl``, ``rewards / <fn>``...). Copied out of the notebook it becomes
tab-separated text; pasted into a GitHub issue it is usually a Markdown table::

    | Step | Training Loss | reward | reward_std | completion_length | kl |
    |------|---------------|--------|------------|-------------------|----|
    | 1    | 0.000000      | 0.125  | 0.250      | 180.5             | 0.0 |

A table is a header line with a step column (``Step``, ``step``, ``global_step``, or the
``--step-key`` column) and at least two other columns, then one row per step with the same number
of cells; a Markdown separator row is skipped. Cells are split on ``|`` (Markdown), tabs, or runs of
two or more spaces (a table printed with aligned columns). ``Training Loss`` / ``Validation Loss``
are the Trainer's names for ``loss`` / ``eval_loss`` and are read as those keys; the other column
names go through the alias table as logged. Non-numeric cells (``No log``) are skipped and counted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlcockpit.integrations.importers._base import ParsedImport, add_foreign_steps, as_step, fail
from rlcockpit.integrations.importers._text import head_lines, parse_number, text_lines

FORMAT = "console-table"
STEP_COLUMNS = ("step", "global_step", "global step")
TRAINER_NAMES = {"training loss": "loss", "validation loss": "eval_loss"}
MIN_COLUMNS = 3  # the step and two metrics
_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def cells(line: str) -> list[str]:
    """The cells of one table line: Markdown pipes, tabs, or runs of 2+ spaces."""
    text = line.strip()
    if text.startswith("|") or text.count("|") >= 2:
        return [c.strip() for c in text.strip("|").split("|")]
    if "\t" in text:
        return [c.strip() for c in text.split("\t")]
    return [c.strip() for c in re.split(r"\s{2,}", text)]


def _header(line: str, step_key: str | None) -> tuple[list[str], int] | None:
    """(column names, index of the step column) when ``line`` is a table header."""
    names = cells(line)
    if len(names) < MIN_COLUMNS or any(not n for n in names):
        return None
    wanted = (step_key.lower(),) if step_key else STEP_COLUMNS
    found = [i for i, n in enumerate(names) if n.lower() in wanted]
    if not found or any(parse_number(n) is not None for n in names):
        return None
    return [TRAINER_NAMES.get(n.lower(), n) for n in names], found[0]


def _tables(lines: list[tuple[int, str]], step_key: str | None):
    """(line number, header, step index, cells) of every data row under a header."""
    header: tuple[list[str], int] | None = None
    for number, text in lines:
        if not text.strip():
            continue
        if _SEPARATOR.match(text):
            continue
        got = _header(text, step_key)
        if got is not None:
            header = got
            continue
        row = cells(text)
        if header is not None and len(row) == len(header[0]):
            yield number, header[0], header[1], row
        else:
            yield number, None, -1, row


def sniff(path: Path, step_key: str | None = None) -> bool:
    lines = list(enumerate(head_lines(path), 1))
    return any(names is not None and parse_number(row[step]) is not None
               for _, names, step, row in _tables(lines, step_key))


def read_file(path: Path, source: str | None, *, key_map: Mapping[str, str] | None = None,
              step_key: str | None = None) -> ParsedImport:
    parsed = ParsedImport()
    rows: dict[int, dict[str, tuple[float, float]]] = {}
    noise = records = skipped = 0
    for number, names, step_at, row in _tables(list(text_lines(path)), step_key):
        head = parse_number(row[step_at]) if names is not None else None
        if names is None or head is None or head[1]:
            noise += 1
            continue
        step = as_step(row[step_at].split(".")[0], path, f"line {number}")
        values = {}
        for i, (name, cell) in enumerate(zip(names, row, strict=True)):
            if i == step_at:
                continue
            got = parse_number(cell)
            if got is None or got[1]:
                skipped += 1
            else:
                values[name] = (got[0], 0.0)
        rows.setdefault(step, {}).update(values)
        records += 1
    if not records:
        raise fail(path, "", "holds no table with a Step column and rows of numbers",
                   "Pass the table as the notebook shows it (a header line with Step, then one "
                   "row per step), or name the step column with --step-key")
    if skipped:
        parsed.skipped["text values"] = skipped
    used = add_foreign_steps(parsed, rows, source, key_map)
    entry: dict[str, Any] = {"path": str(path.resolve()), "format": FORMAT, "source": used,
                             "records": records, "steps": len(rows), "lines_ignored": noise}
    if noise:
        parsed.notes.append(f"{path.name}: {noise} lines outside the table were ignored")
    parsed.files.append(entry)
    return parsed
