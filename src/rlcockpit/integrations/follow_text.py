"""Samples follow mode finds outside the JSON formats, and the rows TRL writes twice.

- OpenRLHF's one sample per step (``ppo_trainer.py`` ``train_step``: ``sample0`` = the first
  experience's decoded sequence — prompt and response together — and its reward). Its TensorBoard
  logger writes it as the text tag ``train/generated_samples``
  (``f"Sample:\\\\n{text}\\\\n\\\\nReward: {reward:.4f}"``: literal backslash-n, as
  ``openrlhf/utils/logging_utils.py`` ``TensorboardLogger.log_train`` formats it) and its console
  prints ``Sample: ['<text>', <reward>]`` before the step's ``✨ Global step N`` line.
  Such a sample has no separate prompt: the whole sequence is its response. It is the step's
  sample 0 wherever it was read, so a run followed through both its console and its TensorBoard
  folder stores it once.
- TRL's ``completions_<step>.parquet`` tables (``log_completions=True``): ``GRPOTrainer.log``
  writes the last ``generation_batch_size`` completions it holds (``deque(maxlen=...)``, never
  cleared), so a table repeats the rows of the one before when no new generation came in between
  (``steps_per_generation`` > 1, or logging more often than generating), under the new step.
  :class:`Overlap` keeps the rows that are new: the longest tail of the previous table's rows
  (prompt, completion, every reward, advantage) that the new table starts with is left out.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlcockpit.records import SampleRecord

SAMPLES_TAG = "generated_samples"
_TEXT = re.compile(r"^Sample:(?:\\n|\n)(?P<text>.*)(?:\\n|\n)(?:\\n|\n)Reward: (?P<reward>\S+)\s*$", re.DOTALL)
_CONSOLE = re.compile(r"(?:^|\]\s)Sample: (?P<list>\[.*\])\s*$")
KEPT_ROWS = 4096  # row keys kept per folder (the largest generation batch a table repeats)


def sample_of(step: int, text: str, reward: float) -> SampleRecord:
    """OpenRLHF's one sample of ``step`` (sample 0, whichever file it was read from)."""
    return SampleRecord(step=step, sample_id=0, prompt="", response=text, reward=reward)


def text_samples(event: Any) -> list[SampleRecord]:
    """The samples of a TensorBoard event's ``train/generated_samples`` text summaries (torch's
    ``add_text`` names the value ``<tag>/text_summary``)."""
    if not event.HasField("summary"):
        return []
    out = []
    for value in event.summary.value:
        if SAMPLES_TAG in value.tag and value.HasField("tensor"):
            out.extend(text_value_samples(int(event.step), value.tensor.string_val))
    return out


def text_value_samples(step: int, strings: Sequence[bytes]) -> list[SampleRecord]:
    """The samples in the strings of one ``generated_samples`` text value at ``step``."""
    out = []
    for raw in strings:
        match = _TEXT.match(raw.decode("utf-8", errors="replace"))
        reward = _float(match.group("reward")) if match else None
        if match and reward is not None:
            out.append(sample_of(step, match.group("text").replace("\\n", "\n"), reward))
    return out


def console_sample(line: str) -> tuple[str, float] | None:
    """(text, reward) of an OpenRLHF ``Sample: ['<text>', <reward>]`` console line, else None."""
    match = _CONSOLE.search(line)
    if not match:
        return None
    try:
        value = ast.literal_eval(match.group("list"))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str)):
        return None
    reward = _float(value[1])
    return None if reward is None else (value[0], reward)


def _float(raw: Any) -> float | None:
    try:
        return float(raw)
    except (TypeError, ValueError, OverflowError):
        return None


def _row_key(sample: SampleRecord) -> str:
    parts = [sample.prompt, sample.response, repr(sample.advantage), *sorted(f"{k}={v!r}" for k, v in
                                                                            sample.components.items())]
    return hashlib.sha1("\x1f".join(parts).encode("utf-8", errors="replace")).hexdigest()[:16]


class Overlap:
    """The row keys of the last completions table read per folder (saved with the follow state)."""

    def __init__(self, state: dict[str, Sequence[str]] | None = None) -> None:
        self.last: dict[str, list[str]] = {k: list(v) for k, v in (state or {}).items()}
        self.repeated = 0  # rows left out as repeats

    def state(self) -> dict[str, list[str]]:
        return {k: v[-KEPT_ROWS:] for k, v in self.last.items()}

    def new_rows(self, folder: Path, samples: list[SampleRecord]) -> list[SampleRecord]:
        """The samples of a table that its predecessor in ``folder`` did not already hold."""
        keys = [_row_key(s) for s in samples]
        before = self.last.get(str(folder), [])
        overlap = next((n for n in range(min(len(before), len(keys)), 0, -1) if before[-n:] == keys[:n]), 0)
        self.last[str(folder)] = keys[-KEPT_ROWS:]
        self.repeated += overlap
        return samples[overlap:]
