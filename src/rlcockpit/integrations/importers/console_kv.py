"""Metrics from console lines of ``Key: value`` pairs, as custom training loops print them.

MiniMind (``trainer/train_grpo.py``, ``train_ppo.py``: ``Logger(f'Epoch:[{epoch + 1}/{epochs}]
({step}/{iters}), Reward: ..., KL_ref: ..., ...')``) prints::

    Epoch:[1/1](100/9751), Reward: -2.3041, KL_ref: -0.0010, Adv Std: 0.9258, Adv Mean: 0.0000, ...

verl's console logger (``trainer.logger=['console']``, ``verl/utils/logger/aggregate_logger.py``
``concat_dict_to_str``) prints one line per step, values with 3 decimals, often behind Ray's
``(TaskRunner pid=N)`` / ``(main_task pid=N)`` prefix::

    step:12 - actor/entropy:0.512 - actor/pg_loss:-0.012 - critic/score/mean:0.250 - ...

Pairs are separated by ``,`` or ``|`` (verl's: `` - `` after ``step:N``). The step is the ``(N/total)`` counter, else a ``Step:`` /
``step:`` / ``iteration:`` pair (``N`` or ``N/total``, cosmos-rl prints ``Step: 826/4725``); lines
without a step are ignored and counted. A value may carry a unit (``Iteration time: 20.1s``,
``epoch_time: 12.0min``): the number is kept and the unit joins the key (``Iteration time (s)``),
so no unit is silently converted. Text values are skipped and counted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlcockpit.integrations.importers._base import ParsedImport, add_foreign_steps, as_step, fail
from rlcockpit.integrations.importers._text import head_lines, kv_pairs, parse_number, text_lines

FORMAT = "console-kv"
_COUNTER = re.compile(r"\((\d+)/(\d+)\)")
_VERL = re.compile(r"(?:^|[\s)\]])step:(\d+)((?:\s+-\s+[^\s:]+:\S+)+)\s*$")
_VERL_PAIR = re.compile(r"\s+-\s+([^\s:]+):(\S+)")
STEP_NAMES = ("step", "global step", "global_step", "iteration", "iter")
MIN_PAIRS = 2


def record(line: str, step_key: str | None, path: Path, where: str
            ) -> tuple[int, dict[str, float], int] | None:
    """(step, numeric values, skipped text values) of one line, or None when it is no record."""
    verl = _VERL.search(line) if not step_key else None
    if verl:
        return _verl_record(verl, path, where)
    pairs = kv_pairs(line)
    names = (step_key.lower(),) if step_key else STEP_NAMES
    step, values, skipped = None, {}, 0
    for key, raw in pairs:
        head, counter = raw.split("/")[0].strip(), _COUNTER.search(raw)
        if key.lower() in names and step is None and head.isdigit():
            step = as_step(head, path, where)
            continue
        if counter and step is None and not step_key:
            step = as_step(counter.group(1), path, where)
            continue
        number = parse_number(raw)
        if number is None:
            skipped += 1
        else:
            values[f"{key} ({number[1]})" if number[1] else key] = number[0]
    if step is None or len(values) < MIN_PAIRS:
        return None
    return step, values, skipped


def _verl_record(match: re.Match[str], path: Path, where: str
                 ) -> tuple[int, dict[str, float], int] | None:
    values, skipped = {}, 0
    for key, raw in _VERL_PAIR.findall(match.group(2)):
        number = parse_number(raw)
        if number is None or number[1]:
            skipped += 1
        else:
            values[key] = number[0]
    if len(values) < MIN_PAIRS:
        return None
    return as_step(match.group(1), path, where), values, skipped


def sniff(path: Path, step_key: str | None = None) -> bool:
    return any(record(line, step_key, path, "") is not None for line in head_lines(path))


def read_file(path: Path, source: str | None, *, key_map: Mapping[str, str] | None = None,
              step_key: str | None = None) -> ParsedImport:
    parsed = ParsedImport()
    rows: dict[int, dict[str, tuple[float, float]]] = {}
    noise = records = 0
    for number, text in text_lines(path):
        found = record(text, step_key, path, f"line {number}")
        if found is None:
            noise += 1
            continue
        step, values, skipped = found
        parsed.skipped["text values"] += skipped
        rows.setdefault(step, {}).update({k: (v, 0.0) for k, v in values.items()})
        records += 1
    if not records:
        raise fail(path, "", "holds no 'Key: value' lines with a step",
                   "Pass a console log whose lines carry a (N/total) counter or a Step: pair "
                   "(or name the step with --step-key)")
    if not parsed.skipped["text values"]:
        del parsed.skipped["text values"]
    used = add_foreign_steps(parsed, rows, source, key_map)
    entry: dict[str, Any] = {"path": str(path.resolve()), "format": FORMAT, "source": used,
                             "records": records, "steps": len(rows), "lines_ignored": noise}
    if noise:
        parsed.notes.append(f"{path.name}: {noise} lines without a step and 'Key: value' pairs "
                            "were ignored")
    parsed.files.append(entry)
    return parsed
