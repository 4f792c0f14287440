"""Samples from TRL's completion tables (``GRPOConfig(log_completions=True)``).

TRL's ``GRPOTrainer.log`` (``trl/trainer/grpo_trainer.py``) builds one table per logging step and
writes it with ``DataFrame.to_parquet`` to ``<output_dir>/completions/completions_<step:05d>.parquet``
(newer releases: ``completions/<mode>/``). The table is one dict splatted into columns::

    {"step": [...], "prompt": [...], "completion": [...],
     **rewards,   # one column per reward function, named after the function
     **extra,     # whatever the user logged with log_extra (newer releases)
     "advantage": [...]}            # (+ "mode": train/eval in newer releases)

There is no column for the total reward: TRL sums the reward functions (``reward_weights``,
default 1.0 each). rlcockpit stores every numeric column as a reward component and the sample's
reward as their sum with weight 1.0 — a reward function that did not apply to a sample (``None``
in TRL, NaN in the file) is left out of both. The file cannot tell reward columns from numeric
``log_extra`` columns; docs/import_export.md says so. Prompts and completions in chat form (a list
of ``{"role", "content"}``) are stored as ``role: content`` lines.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from rlcockpit.integrations.importers._base import (
    ParsedImport,
    SampleNumbering,
    as_step,
    fail,
    message_text,
    prompt_id,
)
from rlcockpit.records import SampleRecord

FORMAT = "trl-completions"
SOURCE = "trl-grpo"
TEXT_COLUMNS = ("prompt", "completion")
NOT_REWARDS = {"step", "prompt", "completion", "advantage", "mode", "image", "images",
               "__index_level_0__"}


def _read_table(path: Path) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise fail(path, "", f"is not a readable Parquet file ({exc})",
                   "Pass the completions_<step>.parquet files TRL writes") from exc


def sniff_table(table: Any) -> bool:
    return all(c in table.column_names for c in TEXT_COLUMNS)


def _reward_columns(table: Any, parsed: ParsedImport) -> list[str]:
    import pyarrow as pa

    out = []
    for field in table.schema:
        if field.name in NOT_REWARDS:
            continue
        kind = field.type
        if pa.types.is_floating(kind) or pa.types.is_integer(kind) or pa.types.is_boolean(kind):
            out.append(field.name)
        else:
            parsed.unstored_sample_keys.add(field.name)
    return out


def _reward(components: dict[str, float]) -> float:
    return math.fsum(components.values()) if components else math.nan


def _row_sample(row: dict[str, Any], rewards: list[str], numbering: SampleNumbering,
                step: int, path: Path, where: str) -> SampleRecord:
    prompt, response = message_text(row["prompt"]), message_text(row["completion"])
    if prompt is None or response is None:
        raise fail(path, where, "has a prompt or completion that is neither text nor a chat",
                   "TRL writes strings or lists of {role, content} messages")
    components = {c: float(row[c]) for c in rewards if row[c] is not None and not math.isnan(row[c])}
    advantage = row.get("advantage")
    sample_id, group_id = numbering.next(step, prompt)
    return SampleRecord(
        step=step, sample_id=sample_id, prompt=prompt, response=response,
        reward=_reward(components), prompt_id=prompt_id(prompt), group_id=group_id,
        components=components, advantage=None if advantage is None else float(advantage),
        flags=("eval",) if row.get("mode") == "eval" else (),
    )


def _file_step(path: Path) -> int | None:
    match = re.search(r"(\d+)$", path.stem)
    return int(match.group(1)) if match else None


def read_file(path: Path, source: str | None, numbering: SampleNumbering | None = None) -> ParsedImport:
    parsed = ParsedImport()
    numbering = numbering or SampleNumbering()
    table = _read_table(path)
    if not sniff_table(table):
        raise fail(path, "", f"has columns {table.column_names}, not TRL's prompt/completion",
                   "Pass the completions_<step>.parquet files GRPOTrainer writes with log_completions=True")
    rewards = _reward_columns(table, parsed)
    default_step = _file_step(path)
    for index, row in enumerate(table.to_pylist()):
        where = f"row {index}"
        raw_step = row.get("step", default_step)
        if raw_step is None:
            raise fail(path, where, "has no step column and no step in the file name",
                       "Keep TRL's completions_<step>.parquet names")
        step = as_step(raw_step, path, where)
        parsed.samples.append(_row_sample(row, rewards, numbering, step, path, where))
    if not parsed.samples:
        raise fail(path, "", "holds no rows", "Pass a non-empty TRL completions table")
    parsed.sources.add(SOURCE)
    parsed.files.append({"path": str(path.resolve()), "format": FORMAT, "source": SOURCE,
                         "samples": len(parsed.samples), "reward_columns": rewards})
    return parsed
