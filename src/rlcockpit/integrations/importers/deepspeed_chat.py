"""Metrics from the console log of DeepSpeed-Chat step 3 (RLHF PPO).

``applications/DeepSpeed-Chat/training/step3_rlhf_finetuning/main.py`` prints one block per
generation batch that it trains on, in two generations of wording:

* 2023 (issues #444, #586)::

      epoch: 0|step: 259|ppo_ep: 1|act_loss: 0.0253|cri_loss: 0.2144|unsuper_loss: 0.0
      average reward score: 0.2055

* later::

      Epoch: 0 | Step: 259 | PPO Epoch: 1 | Actor Loss: 0.0253 | Critic Loss: 0.2144 | Unsupervised Loss: 0.0
      End-to-End => Latency: 2.55s, TFLOPs: 3.29, Samples/sec: 1.57, Time/seq 0.64s, ...
      Average reward score: 0.2055 | EMA reward score: 0.1987

The reward line belongs to the step line before it; ``End-to-End => Latency`` (printed by
``print_throughput_step3`` for the step just trained) becomes ``e2e_latency_s``. The
``|E2E latency=...`` lines come from DeepSpeed's hybrid engine at the start of the *next*
generation, so they are skipped with the rest of the console (``Generation =>``, warnings...).

``step`` restarts at 0 every epoch (``enumerate`` over the prompt dataloader): a later epoch's
steps are shifted past the previous epoch's last step so the step axis keeps increasing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlcockpit.integrations.importers._base import ParsedImport, add_foreign_steps, fail
from rlcockpit.integrations.importers._text import head_lines, kv_pairs, parse_number, text_lines

FORMAT = "deepspeed-chat"
SOURCE = "deepspeed-chat"
_STEP_LINE = re.compile(r"(?:^|\s|\])(epoch: *\d+ *\| *step: *\d+ *\|)|(Epoch: *\d+ *\| *Step: *\d+ *\|)")
_REWARD_LINE = re.compile(r"(?:^|\s|\])(average reward score: *\S+)", re.IGNORECASE)
_E2E = re.compile(r"End-to-End => Latency: *([0-9.]+)s")
E2E_KEY = "e2e_latency_s"
_STEP_KEYS = ("step", "Step")
_EPOCH_KEYS = ("epoch", "Epoch")


def sniff(path: Path) -> bool:
    return any(_STEP_LINE.search(line) for line in head_lines(path, 2000))


def _numbers(text: str, path: Path, where: str) -> dict[str, float]:
    out = {}
    for key, raw in kv_pairs(text):
        number = parse_number(raw)
        if number is None:
            raise fail(path, where, f"{key!r} is {raw!r}, not a number",
                       "Pass the step-3 console log unchanged")
        out[key] = number[0]
    return out


class _Blocks:
    """Step lines and the lines that belong to them, with the per-epoch step shift."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: dict[int, dict[str, tuple[float, float]]] = {}
        self.current: int | None = None
        self.epoch, self.offset, self.epoch_max = None, 0, -1
        self.noise = self.orphans = 0

    def step_line(self, text: str, where: str) -> None:
        values = _numbers(text[_STEP_LINE.search(text).start():].strip(), self.path, where)
        epoch = next((values[k] for k in _EPOCH_KEYS if k in values), 0.0)
        step = int(next(values[k] for k in _STEP_KEYS if k in values))
        if self.epoch is not None and epoch != self.epoch:
            self.offset = self.epoch_max + 1
        self.epoch = epoch
        step += self.offset
        self.epoch_max = max(self.epoch_max, step)
        self.current = step
        row = self.rows.setdefault(step, {})
        for key, value in values.items():
            if key not in _STEP_KEYS:
                row[key] = (value, 0.0)

    def attach(self, values: Mapping[str, float]) -> None:
        if self.current is None:
            self.orphans += 1
            return
        row = self.rows[self.current]
        for key, value in values.items():
            row[key] = (value, 0.0)

    def line(self, number: int, text: str) -> None:
        where = f"line {number}"
        if _STEP_LINE.search(text):
            self.step_line(text, where)
        elif (reward := _REWARD_LINE.search(text)) is not None:
            self.attach(_numbers(text[reward.start(1):], self.path, where))
        elif (e2e := _E2E.search(text)) is not None:
            self.attach({E2E_KEY: float(e2e.group(1))})
        else:
            self.noise += 1


def read_file(path: Path, source: str | None, *, key_map: Mapping[str, str] | None = None,
              step_key: str | None = None) -> ParsedImport:
    blocks = _Blocks(path)
    for number, text in text_lines(path):
        blocks.line(number, text)
    if not blocks.rows:
        raise fail(path, "", "holds no DeepSpeed-Chat step lines ('epoch: E|step: S|...')",
                   "Pass the console output of step3_rlhf_finetuning/main.py")
    parsed = ParsedImport()
    used = add_foreign_steps(parsed, blocks.rows, source or SOURCE, key_map)
    entry: dict[str, Any] = {"path": str(path.resolve()), "format": FORMAT, "source": used,
                             "steps": len(blocks.rows), "lines_ignored": blocks.noise}
    if blocks.offset:
        parsed.notes.append(f"{path.name}: DeepSpeed-Chat restarts `step` every epoch; later "
                            "epochs' steps were shifted past the previous epoch's last step")
    if blocks.orphans:
        parsed.notes.append(f"{path.name}: {blocks.orphans} reward / latency lines before the "
                            "first step line were ignored")
    if blocks.noise:
        parsed.notes.append(f"{path.name}: {blocks.noise} other console lines were ignored")
    parsed.files.append(entry)
    return parsed
