"""Metrics from TensorBoard event files (``events.out.tfevents.*``).

Read with TensorBoard's own ``EventAccumulator`` (no TensorFlow needed), which also drops events
orphaned by a restart from an earlier checkpoint. Scalar summaries (``add_scalar`` of
``torch.utils.tensorboard`` / tensorboardX, TensorFlow 1) and scalar tensors (TensorFlow 2
``tf.summary.scalar``) are read, and OpenRLHF's ``train/generated_samples`` text becomes its step's
sample (as in follow mode, integrations/follow_text.py); images, histograms and other text are not. TensorBoard stores scalars as
float32, so imported values carry float32 precision. Tags are renamed through the alias table
after the usual logger prefixes (``train/`` from the Hugging Face Trainer and OpenRLHF) are
recognised; the wall time of each point is kept.

Every record's framing is checked first (:func:`check_records`): a record is an 8-byte length, the
masked CRC-32C of the length, the data and the masked CRC-32C of the data (TFRecord). A bad CRC,
an impossible length or a truncated record fails the import, naming the file and the byte
offset: TensorBoard's own reader stops silently at the first bad record, which would import the
steps before it as if they were the whole run.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlcockpit.integrations.follow_text import SAMPLES_TAG, text_value_samples
from rlcockpit.integrations.importers._base import ParsedImport, add_foreign_steps, fail

FORMAT = "tensorboard"
MARKER = "tfevents"


def sniff(path: Path) -> bool:
    return MARKER in path.name


def _check_crc(path: Path, offset: int, what: str, data: bytes, stored: bytes) -> None:
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    if struct.unpack("<I", stored)[0] != masked_crc32c(data):
        raise fail(path, f"byte offset {offset}", f"fails the CRC check of its {what}",
                   "The event file is damaged; copy it again from the training machine "
                   "(nothing was imported)")


def check_records(path: Path) -> int:
    """The number of records of an event file; raises at the first damaged one."""
    try:
        size = path.stat().st_size
        handle = path.open("rb")
    except OSError as exc:
        raise fail(path, "", f"cannot be read ({exc.strerror})", "Check the path and permissions") from exc
    count, offset = 0, 0
    with handle:
        while offset < size:
            header = handle.read(12)
            if len(header) < 12:
                raise fail(path, f"byte offset {offset}", f"ends inside a record header "
                           f"({len(header)} of 12 bytes)", "The file was cut short (a copy or "
                           "a crash while writing); nothing was imported")
            _check_crc(path, offset, "length", header[:8], header[8:])
            length = struct.unpack("<Q", header[:8])[0]
            if length > size - offset - 16:
                raise fail(path, f"byte offset {offset}", f"declares a record of {length} bytes "
                           f"but only {max(size - offset - 16, 0)} follow", "The file was cut short; "
                           "nothing was imported")
            data, stored = handle.read(length), handle.read(4)
            _check_crc(path, offset, "data", data, stored)
            offset += 16 + length
            count += 1
    return count


def _accumulator(path: Path) -> Any:
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(str(path), size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    try:
        acc.Reload()
    except Exception as exc:  # TensorBoard raises its own DataLoss/proto errors on corrupt files
        raise fail(path, "", f"is not a readable TensorBoard event file ({type(exc).__name__}: {exc})",
                   "Pass the events.out.tfevents.* files of one run") from exc
    return acc


def _tensor_points(acc: Any, tag: str) -> list[tuple[int, float, float]]:
    from tensorboard.util import tensor_util

    out = []
    for event in acc.Tensors(tag):
        array = tensor_util.make_ndarray(event.tensor_proto)
        if array.size == 1 and array.dtype.kind in "fiub":
            out.append((event.step, float(array.reshape(())), event.wall_time))
    return out


def _rows(acc: Any) -> dict[int, dict[str, tuple[float, float]]]:
    rows: dict[int, dict[str, tuple[float, float]]] = {}
    tags = acc.Tags()
    for tag in tags.get("scalars", []):
        for event in acc.Scalars(tag):
            rows.setdefault(event.step, {})[tag] = (float(event.value), event.wall_time)
    for tag in tags.get("tensors", []):
        if SAMPLES_TAG in tag:
            continue
        for step, value, wall in _tensor_points(acc, tag):
            rows.setdefault(step, {})[tag] = (value, wall)
    return rows


def _samples(acc: Any) -> list:
    """OpenRLHF's one sample a step, from its ``train/generated_samples`` text tag."""
    out = []
    for tag in acc.Tags().get("tensors", []):
        if SAMPLES_TAG in tag:
            for event in acc.Tensors(tag):
                out.extend(text_value_samples(int(event.step), event.tensor_proto.string_val))
    return out


def read_file(path: Path, source: str | None, *,
              key_map: Mapping[str, str] | None = None) -> ParsedImport:
    parsed = ParsedImport()
    check_records(path)
    acc = _accumulator(path)
    rows = _rows(acc)
    if not rows:
        raise fail(path, "", "holds no scalar events (empty, corrupt or not an event file)",
                   "Pass event files written by add_scalar / tf.summary.scalar")
    used = add_foreign_steps(parsed, rows, source, key_map)
    parsed.samples.extend(_samples(acc))
    parsed.files.append({"path": str(path.resolve()), "format": FORMAT, "source": used,
                         "steps": len(rows), "samples": len(parsed.samples)})
    return parsed
