"""Metrics from TensorBoard event files (``events.out.tfevents.*``).

Read with TensorBoard's own ``EventAccumulator`` (no TensorFlow needed), which also drops events
orphaned by a restart from an earlier checkpoint. Scalar summaries (``add_scalar`` of
``torch.utils.tensorboard`` / tensorboardX, TensorFlow 1) and scalar tensors (TensorFlow 2
``tf.summary.scalar``) are read; images, histograms and text are not. TensorBoard stores scalars as
float32, so imported values carry float32 precision. Tags are renamed through the alias table
after the usual logger prefixes (``train/`` from the Hugging Face Trainer and OpenRLHF) are
recognised; the wall time of each point is kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlcockpit.integrations.importers._base import ParsedImport, add_foreign_steps, fail

FORMAT = "tensorboard"
MARKER = "tfevents"


def sniff(path: Path) -> bool:
    return MARKER in path.name


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
        for step, value, wall in _tensor_points(acc, tag):
            rows.setdefault(step, {})[tag] = (value, wall)
    return rows


def read_file(path: Path, source: str | None, *,
              key_map: Mapping[str, str] | None = None) -> ParsedImport:
    parsed = ParsedImport()
    rows = _rows(_accumulator(path))
    if not rows:
        raise fail(path, "", "holds no scalar events (empty, corrupt or not an event file)",
                   "Pass event files written by add_scalar / tf.summary.scalar")
    used = add_foreign_steps(parsed, rows, source, key_map)
    parsed.files.append({"path": str(path.resolve()), "format": FORMAT, "source": used,
                         "steps": len(rows)})
    return parsed
