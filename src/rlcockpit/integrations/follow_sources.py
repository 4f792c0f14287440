"""One followed file each: what was appended since the last look, in rlcockpit's names.

Every source turns new records of one file into an :class:`Update` (metrics and samples by step)
with the importers' own decoding (the alias table, ``--map``, ``--step-key``, the same sample
fields), and keeps a small JSON-able state (byte offset, alias source, sample numbering) that the
follower saves, so a restarted follower continues where it was. A malformed record is skipped and
counted (the follower must not stop because a trainer wrote one bad line); a record still being
written is left for the next look.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlcockpit.errors import ImportFormatError
from rlcockpit.integrations.aliases import UNKNOWN_SOURCE, detect_source, rename_keys
from rlcockpit.integrations.follow_text import Overlap, console_sample, sample_of, text_samples
from rlcockpit.integrations.importers import (
    console_dicts,
    console_kv,
    jsonl_logger,
    rlcockpit_files,
    trl_completions,
    verl_rollout,
)
from rlcockpit.integrations.importers._base import (
    LENGTH_MEAN,
    SEQUENCE_KL,
    TOKEN_KL,
    ParsedImport,
    SampleNumbering,
    as_number,
    as_step,
    fail,
    metric_value,
    prompt_id,
)
from rlcockpit.integrations.importers._text import clean_line
from rlcockpit.integrations.tail import LineTail, RecordTail
from rlcockpit.records import SampleRecord

log = logging.getLogger("rlcockpit.integrations.follow")
KEPT_NUMBERING_STEPS = 16  # sample numbering kept for the newest steps only (a step's rollout is recent)


@dataclass
class Update:
    metrics: dict[int, dict[str, float]] = field(default_factory=dict)
    samples: dict[int, list[SampleRecord]] = field(default_factory=dict)
    bad: int = 0  # malformed records skipped

    def add_metrics(self, step: int, values: Mapping[str, float]) -> None:
        self.metrics.setdefault(step, {}).update(values)

    def add_sample(self, sample: SampleRecord) -> None:
        self.samples.setdefault(sample.step, []).append(sample)

    def merge(self, other: Update) -> None:
        for step, values in other.metrics.items():
            self.add_metrics(step, values)
        for step, samples in other.samples.items():
            self.samples.setdefault(step, []).extend(samples)
        self.bad += other.bad

    @property
    def records(self) -> int:
        return sum(len(v) for v in self.metrics.values()) + sum(len(v) for v in self.samples.values())

    def derive_sequence_kl(self) -> None:
        """kl/mean = kl/token_mean x response/length_mean where only those were logged (as the importer)."""
        for values in self.metrics.values():
            if TOKEN_KL in values and LENGTH_MEAN in values and SEQUENCE_KL not in values:
                values[SEQUENCE_KL] = values[TOKEN_KL] * values[LENGTH_MEAN]


class Numbering(SampleNumbering):
    """:class:`SampleNumbering` whose counters survive a restart (saved with the follow state; the
    prompts of a step's groups are kept as their short hash, not their text)."""

    def next(self, step: int, prompt: str) -> tuple[int, int]:
        return super().next(step, prompt_id(prompt))

    def state(self) -> dict[str, Any]:
        keep = sorted(self._next_id)[-KEPT_NUMBERING_STEPS:]
        return {"next": {str(s): self._next_id[s] for s in keep},
                "groups": {str(s): self._groups.get(s, {}) for s in keep}}

    @classmethod
    def from_state(cls, state: Mapping[str, Any] | None) -> Numbering:
        out = cls()
        for step, n in (state or {}).get("next", {}).items():
            out._next_id[int(step)] = int(n)
        for step, groups in (state or {}).get("groups", {}).items():
            out._groups[int(step)] = dict(groups)
        return out


@dataclass(frozen=True)
class Naming:
    """How foreign keys become stored names: forced alias source, ``--map``, ``--step-key``."""

    source: str | None = None
    key_map: Mapping[str, str] = field(default_factory=dict)
    step_key: str | None = None

    def rename(self, values: Mapping[str, float], source: str) -> dict[str, float]:
        return {name: values[key] for key, name in rename_keys(values, source, self.key_map).items()}

    def source_of(self, keys: Any) -> str:
        if self.source:
            return self.source
        return detect_source([k for k in keys if k not in self.key_map]) or UNKNOWN_SOURCE


class JsonLinesSource:
    """verl's file logger / OpenRLHF / flat logs, verl rollout dumps, rlcockpit exports."""

    def __init__(self, path: Path, fmt: str, naming: Naming, state: Mapping[str, Any]) -> None:
        self.path, self.fmt, self.naming = path, fmt, naming
        self.tail = LineTail(path, state.get("offset", 0), state.get("lines", 0), inode=state.get("inode"),
                             head=state.get("head", ""))
        self.alias_source: str | None = state.get("source")
        self.kind: str | None = state.get("kind")
        self.numbering = Numbering.from_state(state.get("numbering"))

    def state(self) -> dict[str, Any]:
        return {"format": self.fmt, **self.tail.identity(), "lines": self.tail.lines,
                "source": self.alias_source, "kind": self.kind, "numbering": self.numbering.state()}

    def read(self) -> Update:
        update = Update()
        for number, text in self.tail.read():
            where = f"line {number}"
            try:
                obj = json.loads(text)
                if not isinstance(obj, dict):
                    raise fail(self.path, where, "is not a JSON object", "Each line must be one JSON object")
                self._decode(obj, where, update)
            except (ValueError, OverflowError, ImportFormatError) as exc:
                update.bad += 1
                log.warning("follow: skipped %s %s: %s", self.path, where, getattr(exc, "message", exc))
        return update

    def _decode(self, obj: dict[str, Any], where: str, update: Update) -> None:
        if self.fmt == "jsonl-logger":
            step, raw, _ = jsonl_logger._split_line(obj, self.path, where, self.naming.step_key)
            values = {}  # an integer beyond the float range fails the line (metric_value), as in `import`
            for key, value in raw.items():
                number = metric_value(value, self.path, where, key)
                if number is not None:
                    values[key] = number
            if self.alias_source is None:
                self.alias_source = self.naming.source_of(values)
            update.add_metrics(step, self.naming.rename(values, self.alias_source))
        elif self.fmt == "verl-rollout":
            default = int(self.path.stem) if self.path.stem.isdigit() else None
            step = as_step(obj.get("step", default), self.path, where)
            update.add_sample(verl_rollout._sample(obj, step, self.numbering, ParsedImport(), self.path, where))
        else:
            self.kind = self.kind or rlcockpit_files.jsonl_kind(obj)
            if self.kind == "metrics":
                step = as_step(obj.get("step"), self.path, where)
                update.add_metrics(step, {k: as_number(v, self.path, where, k) for k, v in obj["metrics"].items()})
            elif self.kind == "samples":
                update.add_sample(rlcockpit_files.sample_from_row(obj, self.path, where))
            else:
                raise fail(self.path, where, "is not a metrics or samples line", "Follow rlcockpit exports of metrics "
                           "or samples")


class ConsoleSource:
    """Console logs of printed dicts (``console-dicts``): OpenRLHF's ``✨ Global step N: {...}``
    lines (and its ``Sample: [text, reward]`` line, the step's one sample), the Hugging Face
    Trainer's printed dicts (numbered by their order when they hold no step, across restarts);
    and lines of ``Key: value`` pairs with a step (``console-kv``: verl's console logger,
    MiniMind, cosmos-rl), so ``rlcockpit wrap`` follows any of them."""

    def __init__(self, path: Path, fmt: str, naming: Naming, state: Mapping[str, Any]) -> None:
        self.path, self.fmt, self.naming = path, fmt, naming
        self.tail = LineTail(path, state.get("offset", 0), state.get("lines", 0), inode=state.get("inode"),
                             head=state.get("head", ""), json_tail=False)
        self.alias_source: str | None = state.get("source")
        self.last_step = int(state.get("last_step", 0))
        self._sample: tuple[str, float] | None = None  # printed before its step's line

    def state(self) -> dict[str, Any]:
        return {"format": self.fmt, **self.tail.identity(), "lines": self.tail.lines, "source": self.alias_source,
                "last_step": self.last_step}

    def read(self) -> Update:
        update = Update()
        reader = console_dicts._Reader(self.path, self.naming.step_key)
        reader.last_step = self.last_step
        for number, raw in self.tail.read():
            for text in clean_line(raw):
                sample = console_sample(text)
                if sample is not None:
                    self._sample = sample
                    continue
                before, noise = reader.records, reader.noise
                try:
                    reader.line(number, text)
                    if reader.records == before and reader.noise > noise:
                        self._kv_line(reader, number, text)
                except ImportFormatError as exc:
                    update.bad += 1
                    log.warning("follow: skipped %s line %d: %s", self.path, number, exc.message)
                if reader.records > before and self._sample is not None:
                    update.add_sample(sample_of(reader.last_step, *self._sample))
                    self._sample = None
        self.last_step = reader.last_step
        for step, row in sorted(reader.rows.items()):
            values = {key: value for key, (value, _) in row.items()}
            if self.alias_source is None:
                self.alias_source = self.naming.source_of([*values, *reader.seen])
            update.add_metrics(step, self.naming.rename(values, self.alias_source))
        return update


    def _kv_line(self, reader: Any, number: int, text: str) -> None:
        """A line that holds no printed dict but ``Key: value`` pairs with a step: verl's console
        (``step:N - key:value - ...``), MiniMind's or cosmos-rl's (``console-kv``)."""
        where = f"line {number}"
        found = console_kv.record(text, self.naming.step_key, self.path, where)
        if found is None:
            return
        step, values, _ = found
        reader.noise -= 1
        reader.last_step = step
        reader.add(step, dict(values), where)


class EventFileSource:
    """TensorBoard event files: scalar summaries and scalar tensors, as the importer reads them."""

    def __init__(self, path: Path, fmt: str, naming: Naming, state: Mapping[str, Any]) -> None:
        self.path, self.fmt, self.naming = path, fmt, naming
        self.tail = RecordTail(path, state.get("offset", 0), inode=state.get("inode"), head=state.get("head", ""))
        self.alias_source: str | None = state.get("source")

    def state(self) -> dict[str, Any]:
        return {"format": self.fmt, **self.tail.identity(), "source": self.alias_source}

    def read(self) -> Update:
        from tensorboard.compat.proto import event_pb2

        update, rows = Update(), {}
        try:
            records = self.tail.read()
        except ValueError as exc:
            log.warning("follow: %s", exc)
            return Update(bad=1)
        for data in records:
            try:
                event = event_pb2.Event.FromString(data)
            except Exception as exc:  # protobuf's DecodeError: a corrupt record, skipped and counted
                log.warning("follow: skipped a record of %s: %s", self.path, exc)
                update.bad += 1
                continue
            for tag, value in _scalars(event):
                rows.setdefault(int(event.step), {})[tag] = value
            for sample in text_samples(event):  # OpenRLHF's train/generated_samples
                update.add_sample(sample)
        for step, values in sorted(rows.items()):
            if self.alias_source is None:
                self.alias_source = self.naming.source_of(values)
            update.add_metrics(step, self.naming.rename(values, self.alias_source))
        return update


def _scalars(event: Any) -> list[tuple[str, float]]:
    if not event.HasField("summary"):
        return []
    out = []
    for value in event.summary.value:
        kind = value.WhichOneof("value")
        if kind == "simple_value":
            out.append((value.tag, float(value.simple_value)))
        elif kind == "tensor":
            from tensorboard.util import tensor_util

            array = tensor_util.make_ndarray(value.tensor)
            if array.size == 1 and array.dtype.kind in "fiub":
                out.append((value.tag, float(array.reshape(()))))
    return out


class WholeFileSource:
    """Files written once, whole (TRL's completions_<step>.parquet, rlcockpit Parquet exports): read
    when readable; one that stays unreadable for ``settle_s`` after its last change is skipped."""

    def __init__(self, path: Path, fmt: str, naming: Naming, state: Mapping[str, Any],
                 numbering: Numbering, settle_s: float = 10.0, overlap: Overlap | None = None) -> None:
        self.path, self.fmt, self.naming, self.numbering = path, fmt, naming, numbering
        self.done = bool(state.get("done"))
        self.settle_s = settle_s
        self.overlap = overlap  # TRL repeats the last completions of a table in the next one

    def state(self) -> dict[str, Any]:
        return {"format": self.fmt, "done": self.done}

    def read(self) -> Update:
        if self.done:
            return Update()
        reader: Callable[[], ParsedImport] = (
            (lambda: trl_completions.read_file(self.path, self.naming.source, self.numbering))
            if self.fmt == "trl-completions" else (lambda: rlcockpit_files.read_file(self.path, None)))
        try:
            parsed = reader()
        except ImportFormatError as exc:
            if time.time() - _mtime(self.path) < self.settle_s:
                return Update()  # probably still being written
            log.warning("follow: skipped %s: %s", self.path, exc.message)
            self.done = True
            return Update(bad=1)
        self.done = True
        update = Update()
        for (step, name), (value, _) in parsed.metrics.items():
            update.add_metrics(step, {name: value})
        samples = parsed.samples
        if self.fmt == "trl-completions" and self.overlap is not None:
            samples = self.overlap.new_rows(self.path.parent, samples)
        for sample in samples:
            update.add_sample(sample)
        return update


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def open_source(path: Path, fmt: str, naming: Naming, state: Mapping[str, Any], numbering: Numbering,
                overlap: Overlap | None = None) -> Any:
    if fmt == "tensorboard":
        return EventFileSource(path, fmt, naming, state)
    if fmt in ("console-dicts", "console-kv"):
        return ConsoleSource(path, fmt, naming, state)
    if path.suffix == ".parquet":
        return WholeFileSource(path, fmt, naming, state, numbering, overlap=overlap)
    if path.suffix == ".json":
        raise fail(path, "", "is a Trainer state file, rewritten whole at each checkpoint, not appended to",
                   "Follow the trainer's JSON Lines / TensorBoard log instead, or import the file when the run ends")
    return JsonLinesSource(path, fmt, naming, state)
