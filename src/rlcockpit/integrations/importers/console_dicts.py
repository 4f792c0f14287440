"""Metrics from a console log of printed dicts, one logging call per line.

Shapes read (anywhere in a line, after a logger's prefix):

* the Hugging Face ``Trainer`` console (TRL, ms-swift): ``PrinterCallback`` /
  ``ProgressCallback.on_log`` print ``str(logs)``, e.g.
  ``{'loss': 0.0, 'grad_norm': 0.79, 'reward': 0.5, 'kl': nan, 'epoch': 0.01}``. These dicts
  have **no step**: the row order is the step (1, 2, 3...), unless the dict holds ``step``,
  ``global_step`` or ms-swift's ``global_step/max_steps`` (``'12/500'``). An evaluation dict
  (every key ``eval_*``) belongs to the step logged before it; the end-of-training summary
  (``train_runtime``...) is left out.
* OpenRLHF's ``logger.info(f"✨ Global step {global_step}: {log_status}")``
  (``openrlhf/trainer/ppo_trainer.py`` ``fit``), also ``✨ Global step N [replay]: {...}``.
* the same dicts written as JSON objects one per line without a step (a ``log_history`` dumped
  line by line).

OpenRLHF's ``Sample: ['<text>', <reward>]`` line (printed before its step's ``✨ Global step``
line) becomes that step's sample, as in follow mode (integrations/follow_text.py).

Values may be Python's bare ``nan``/``inf``/``-inf``, numpy / torch scalar reprs or text (text is
skipped and counted, except ms-swift's ``elapsed_time`` clock). Lines that hold no dict — progress
bars, warnings, tracebacks — are ignored and counted in the import summary.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlcockpit.integrations.follow_text import console_sample, sample_of
from rlcockpit.integrations.importers._base import (
    ParsedImport,
    add_foreign_steps,
    as_step,
    fail,
    metric_value,
    try_loads_json,
)
from rlcockpit.integrations.importers._text import (
    dict_span,
    head_lines,
    parse_number,
    parse_pydict,
    text_lines,
)
from rlcockpit.integrations.importers._timing import ClockReading, pop_clock, settle_clock
from rlcockpit.records import decode_float

FORMAT = "console-dicts"
_GLOBAL_STEP = re.compile(r"Global step (\d+)(?: \[[^\]]*\])?:\s*(\{.*\})")
STEP_KEYS = ("step", "global_step", "global_step/max_steps", "train/global_step")
SUMMARY_KEY = "train_runtime"  # transformers' end-of-training summary dict
ROW_ORDER = "row order"


def _record(line: str, step_key: str | None) -> tuple[int | None, dict[str, Any]] | None:
    """(step or None, values) of one console line, or None when it holds no dict."""
    match = _GLOBAL_STEP.search(line)
    if match:
        values = parse_pydict(match.group(2))
        return None if values is None else (int(match.group(1)), values)
    span = dict_span(line)
    if span is None or not _record_prefix(line[:line.find("{")]):
        return None
    values = try_loads_json(span) if span.startswith('{"') else None
    values = values if isinstance(values, dict) else parse_pydict(span)
    return None if not values else (None, values)


def _record_prefix(prefix: str) -> bool:
    """A printed dict stands alone on its line or after a logger's bracketed prefix (``...] ``,
    ``... | ``); a ``{`` inside a sentence (transformers' "values have been modified to match
    model-specific defaults: {'top_k': 20}") is no record."""
    prefix = prefix.rstrip()
    return not prefix or prefix.endswith(("]", "|"))


def _value(raw: Any) -> Any:
    """Numbers printed as text (``'0.6931'``) count as numbers; other text stays text."""
    if isinstance(raw, str):
        number = parse_number(raw)
        if number is not None and not number[1]:
            return number[0]
    return raw


def _numeric(values: Mapping[str, Any]) -> int:
    return sum(decode_float(_value(v)) is not None for v in values.values() if not isinstance(v, bool))


def sniff(path: Path, step_key: str | None = None) -> bool:
    """True when the first lines hold a printed dict with at least two numbers."""
    for line in head_lines(path):
        record = _record(line, step_key)
        if record is not None and _numeric(record[1]) >= 2:
            return True
    return False


def _is_eval(values: Mapping[str, Any]) -> bool:
    keys = [k for k in values if k != "epoch"]
    return bool(keys) and all(k.startswith("eval_") for k in keys)


def _step_of(values: dict[str, Any], step_key: str | None, path: Path, where: str) -> int | None:
    keys = (step_key,) if step_key else STEP_KEYS
    found = next((k for k in keys if k in values), None)
    return None if found is None else as_step(values.pop(found), path, where)


class _Reader:
    """Walks the lines of one file, numbering rows without a step by their order."""

    def __init__(self, path: Path, step_key: str | None) -> None:
        self.path, self.step_key = path, step_key
        self.parsed = ParsedImport()
        self.rows: dict[int, dict[str, tuple[float, float]]] = {}
        self.clock: dict[int, ClockReading] = {}
        self.last_step = 0
        self.seen: set[str] = set()  # every key of the records, for source detection
        self.noise = self.records = self.by_order = self.summaries = 0
        self.sample: tuple[str, float] | None = None  # an OpenRLHF Sample line waiting for its step

    def line(self, number: int, text: str) -> None:
        record = _record(text, self.step_key)
        if record is None:
            sample = console_sample(text)
            if sample is None:
                self.noise += 1
            else:
                self.sample = sample
            return
        step, values = record
        if SUMMARY_KEY in values:
            self.summaries += 1
            return
        where = f"line {number}"
        step = step if step is not None else _step_of(values, self.step_key, self.path, where)
        self.seen.update(k for k in STEP_KEYS if k in text)
        if step is None:
            step = self.last_step if _is_eval(values) and self.last_step else self.last_step + 1
            self.by_order += 1
        self.last_step = step
        self.add(step, values, where)
        if self.sample is not None:
            self.parsed.samples.append(sample_of(step, *self.sample))
            self.sample = None

    def add(self, step: int, values: dict[str, Any], where: str) -> None:
        self.seen.update(values)
        reading = pop_clock(values)
        if reading is not None:
            self.clock[step] = reading
        row = self.rows.setdefault(step, {})
        for key, raw in values.items():
            value = metric_value(_value(raw), self.path, where, key)
            if value is None:
                self.parsed.skipped[key] += 1
            else:
                row[key] = (value, 0.0)
        self.records += 1


def read_file(path: Path, source: str | None, *, key_map: Mapping[str, str] | None = None,
              step_key: str | None = None) -> ParsedImport:
    reader = _Reader(path, step_key)
    for number, text in text_lines(path):
        reader.line(number, text)
    if not reader.records:
        raise fail(path, "", f"holds no printed metric dicts ({reader.noise} other lines)",
                   "Pass the console log of a Trainer / OpenRLHF run, or the trainer's own log file")
    parsed = reader.parsed
    settle_clock(reader.clock, reader.rows, parsed)
    used = add_foreign_steps(parsed, reader.rows, source, key_map, seen=reader.seen)
    entry: dict[str, Any] = {"path": str(path.resolve()), "format": FORMAT, "source": used,
                             "records": reader.records, "steps": len(reader.rows),
                             "lines_ignored": reader.noise}
    if reader.by_order:
        entry["step_from"] = ROW_ORDER
        parsed.notes.append(f"{path.name}: {reader.by_order} records have no step; the step is "
                            "their row order (1, 2, 3...), not the trainer's global step")
    if reader.noise:
        parsed.notes.append(f"{path.name}: {reader.noise} lines that hold no metric dict "
                            "(progress bars, warnings...) were ignored")
    if reader.summaries:
        parsed.notes.append(f"{path.name}: the end-of-training summary ({SUMMARY_KEY}...) was left out")
    parsed.files.append(entry)
    return parsed
