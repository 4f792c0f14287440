"""Metrics from the console of NeMo-RL's GRPO trainer (``nemo_rl/algorithms/grpo.py``).

``grpo_train`` (and ``async_grpo_train``) print a header per step and, at its end, blocks of
bulleted values (``validate`` prints its own blocks, within the step it runs in)::

    ========================= Step 3/100 =========================
    ▶ Preparing batch...
    ...
    📊 Validation Results:
        • Accuracy: 0.4375
        • Average response length: 312.4 tokens
        • Samples processed: 64

      ⏱️  Validation Timing:
        • Total validation time: 20.31s

    📊 Training Results:
      • Loss: 0.0123
      • Generation KL Error: 0.0008
      • Avg Reward: 0.4219
      • Mean Generation Length: 287.5000

    ⏱️  Timing:
      • Total step time: 45.67s
      • generation: 20.12s (44.1%)
      • policy_training: 12.34s (27.0%)

    🔍 Performance Metrics:
      • Mean Total Tokens per Sample: 412.50
      • Throughputs (per GPU):
        - E2E (Samples/sec/gpu): 0.35

The printed labels are read as the keys NeMo-RL logs the same values under (``Avg Reward`` is
``np.mean(rewards)``, logged as ``train/reward``; ``Loss`` is ``metrics['loss']``; a timing line
``k: v s`` is ``timing/train/k``), so they reach catalog names through the ``nemo-rl`` alias
table. A label this module does not know is kept as printed (its unit joins it: ``Avg Trajectory
Age (steps)``) and lands under ``import/nemo-rl/``. The step is the header's ``N``
(``current_step + 1``); ``current_step`` restarts at every ``Epoch E/M`` header, so a header
that goes back after an epoch header continues after the last step (NeMo-RL's ``total_steps +
1``, the step it logs). Validation blocks before the first step header are the initial
validation, logged at step 0. Ray / vLLM log lines between the blocks are ignored and counted.

NeMo-RL's other trainers (``sft.py``, ``dpo.py``, ``rm.py``, ``distillation.py``) print the same
header and blocks; their bullets are read alike (DPO's and RM's print their metric keys as labels).
The format is not followed live (``import --follow``): import the log when the run ends.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from rlcockpit.errors import ImportFormatError
from rlcockpit.integrations.importers._base import ParsedImport, add_foreign_steps, as_step, fail
from rlcockpit.integrations.importers._text import is_text_file, parse_number, text_lines

FORMAT = "nemo-rl-console"
SOURCE = "nemo-rl"
SNIFF_LINES = 20_000  # NeMo-RL prints its whole config and the cluster's start-up before step 1

_STEP = re.compile(r"^=+ Step (\d+)/(\d+) =+$")
_EPOCH = re.compile(r"^=+ Epoch (\d+)/(\d+) =+$")
_SECTIONS = {  # header (emoji variation selector optional) -> section
    "train": re.compile(r"^📊 Training Results:$"),
    "timing": re.compile(r"^⏱\ufe0f?\s*Timing:$"),
    "perf": re.compile(r"^🔍 Performance Metrics:$"),
    "val": re.compile(r"^📊 Validation Results:$"),
    "val_timing": re.compile(r"^⏱\ufe0f?\s*Validation Timing:$"),
}
_BULLET = re.compile(r"^([•-])\s*(.+?):\s*(.*)$")
_TAIL = re.compile(r"\s*\([^()]*\)\s*$")  # "5.10s (41.2%)", "12.3 TFLOPS (1.5 TFLOPS per rank)"
_ENDS_SECTION = ("▶", "=")  # the next phase of a step ("▶ Preparing batch...") or a header

# printed label -> (key NeMo-RL logs the value under, unit as printed), per block
LABELS: dict[str, dict[str, tuple[str, str]]] = {
    "train": {
        "Loss": ("loss", ""),
        "Draft Loss": ("draft_loss", ""),
        "Generation KL Error": ("gen_kl_error", ""),
        "Avg Reward": ("reward", ""),
        "Avg Total Reward": ("reward", ""),  # dynamic sampling: `reward` is the total reward
        "Avg Filtered Reward": ("filtered_reward", ""),
        "Mean Generation Length": ("mean_gen_tokens_per_sample", ""),
    },
    "timing": {"Total step time": ("timing/train/total_step_time", "s")},
    "val": {
        "Accuracy": ("validation/accuracy", ""),
        "Average response length": ("validation/avg_length", "tokens"),
    },
    "val_timing": {"Total validation time": ("timing/validation/total_validation_time", "s")},
    "perf": {"Mean Total Tokens per Sample": ("mean_total_tokens_per_sample", "")},
}
# `utils.py` `print_performance_metrics`: the throughput lines under a "Throughputs" bullet
THROUGHPUTS = {
    "E2E (Samples/sec/gpu)": "samples_per_sec_per_gpu",
    "E2E (Tokens/sec/gpu)": "tokens_per_sec_per_gpu",
    "Policy Training (Tokens/sec/gpu)": "policy_training_tokens_per_sec_per_gpu",
    "Policy and Reference Logprobs (Tokens/sec/gpu)":
        "policy_and_reference_logprobs_tokens_per_sec_per_gpu",
    "Training Worker Group (Tokens/sec/gpu)": "training_worker_group_tokens_per_sec_per_gpu",
    "Generation Worker Group (Tokens/sec/gpu)": "generation_tokens_per_sec_per_gpu",
    "E2E (Samples/sec)": "samples_per_sec",
    "E2E (Tokens/sec)": "tokens_per_sec",
    "Training Worker Group (Tokens/sec)": "training_worker_group_tokens_per_sec",
    "Generation Worker Group (Tokens/sec)": "generation_tokens_per_sec",
}


def _section(text: str) -> str | None:
    return next((name for name, regex in _SECTIONS.items() if regex.match(text)), None)


def _value(raw: str) -> tuple[float, str] | None:
    """(number, unit) of a printed value; a trailing ``(...)`` (a share of the step) is dropped."""
    return parse_number(_TAIL.sub("", raw))


def _key(section: str, label: str, unit: str, parent: str) -> str:
    """The key a bullet's value is stored under before renaming (see the module docstring)."""
    known = None if parent else LABELS.get(section, {}).get(label)
    if known is not None and known[1] == unit:
        return known[0]
    if section == "timing" and unit == "s" and known is None and not parent:
        return f"timing/train/{label}"  # every phase of NeMo-RL's step timer, as logged
    if section == "perf" and parent.startswith("Throughputs") and label in THROUGHPUTS:
        return f"performance/{THROUGHPUTS[label]}"
    name = f"{parent}/{label}" if parent else label
    return f"{name} ({unit})" if unit else name


class _Reader:
    """Walks the lines of one console log, step header by step header."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: dict[int, dict[str, tuple[float, float]]] = {}
        self.step: int | None = None  # the logged step (total_steps + 1) of the current block
        self.offset = 0  # steps of the epochs before this one
        self.new_epoch = False
        self.section: str | None = None
        self.parent = self.sub = ""  # the bullets a "-" line belongs to (Throughputs ...)
        self.headers = self.records = self.noise = self.skipped = self.unplaced = self.shifted = 0

    def line(self, number: int, text: str) -> None:
        header = _STEP.match(text)
        if header:
            self._step(as_step(header.group(1), self.path, f"line {number}"))
            return
        if _EPOCH.match(text):
            self.new_epoch, self.section = True, None
            return
        section = _section(text)
        if section is not None:
            self.section, self.parent, self.sub = section, "", ""
            return
        bullet = _BULLET.match(text) if self.section else None
        if bullet is None:
            if text.startswith(_ENDS_SECTION):
                self.section = None
            self.noise += 1
            return
        self._bullet(*bullet.groups())

    def _step(self, shown: int) -> None:
        self.headers += 1
        self.section = None
        if self.new_epoch and self.step is not None and self.offset + shown <= self.step:
            self.offset = self.step  # current_step restarted with the epoch: continue the count
            self.shifted += 1
        self.new_epoch = False
        self.step = self.offset + shown

    def _bullet(self, mark: str, label: str, raw: str) -> None:
        label = label.strip()
        if mark == "•":
            self.parent = self.sub = ""
        if not raw:  # "• Throughputs (per GPU):" opens the "-" lines under it
            if mark == "•":
                self.parent = label
            else:
                self.sub = label
            return
        value = _value(raw)
        if value is None:  # the worker load bars and timelines of the performance block
            self.skipped += 1
            return
        step = self.step
        if step is None:
            if self.section not in ("val", "val_timing"):  # a block whose header was cut off
                self.unplaced += 1
                return
            step = 0  # the initial validation (`val_at_start`), logged at step 0
        parent = "/".join(p for p in (self.parent, self.sub) if p) if mark == "-" else ""
        key = _key(self.section or "", label, value[1], parent)
        self.rows.setdefault(step, {})[key] = (value[0], 0.0)
        self.records += 1


def _scan(path: Path, limit: int | None = None) -> Iterator[tuple[int, str]]:
    for count, (number, text) in enumerate(text_lines(path), start=1):
        yield number, text
        if limit is not None and count >= limit:
            return


def sniff(path: Path, step_key: str | None = None) -> bool:
    """True when a step header is followed by one of the trainer's result blocks (the first
    :data:`SNIFF_LINES` lines are read: the config and the cluster start-up come first)."""
    if not is_text_file(path):
        return False
    header = False
    try:
        for _, text in _scan(path, SNIFF_LINES):
            if _STEP.match(text):
                header = True
            elif header and _section(text) in ("train", "timing"):
                return True
    except ImportFormatError:  # a sniffer answers "not this format", it never raises
        return False
    return False


def read_file(path: Path, source: str | None, *, key_map: Mapping[str, str] | None = None,
              step_key: str | None = None) -> ParsedImport:
    reader = _Reader(path)
    for number, text in _scan(path):
        reader.line(number, text)
    if not reader.records:
        raise fail(path, "", "holds no NeMo-RL step blocks ('=== Step N/M ===' followed by "
                   "'📊 Training Results:' / '⏱️  Timing:' bullets)",
                   "Pass the console output of NeMo-RL's GRPO trainer (its stdout, as a Slurm or "
                   "Ray job log keeps it)")
    parsed = ParsedImport()
    if reader.skipped:
        parsed.skipped["text values"] = reader.skipped
    used = add_foreign_steps(parsed, reader.rows, source or SOURCE, key_map)
    entry: dict[str, Any] = {"path": str(path.resolve()), "format": FORMAT, "source": used,
                             "records": reader.records, "steps": len(reader.rows),
                             "step_headers": reader.headers, "lines_ignored": reader.noise}
    if reader.noise:
        parsed.notes.append(f"{path.name}: {reader.noise} lines outside the step blocks (start-up, "
                            "Ray / vLLM output, progress lines) were ignored")
    if reader.unplaced:
        parsed.notes.append(f"{path.name}: {reader.unplaced} values printed before the first "
                            "'Step N/M' header were left out (their step is unknown)")
    if reader.shifted:
        parsed.notes.append(f"{path.name}: the step header restarts at every epoch; steps after "
                            f"{reader.shifted} epoch boundaries continue the count (NeMo-RL's "
                            "total_steps, the step it logs)")
    parsed.files.append(entry)
    return parsed
