"""Recorded real metric streams of healthy tiny-world runs, for calibrating and testing detectors.

The fixtures in tests/fixtures/streams/ are exports of recorded runs (``rlcockpit train --config
examples/ppo_tiny.yaml train.steps=120 ...``, then ``rlcockpit export --store sqlite:///healthy.db
--run RUN --what metrics``; the fault runs come from ``rlcockpit faults run``), one
JSON object per step ``{"step": N, "metrics": {catalog name: value}}``, gzipped when large.
NaN and ±inf arrive as the strings "NaN" / "Infinity" / "-Infinity" and are turned back into floats.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

STREAMS = Path(__file__).parent / "fixtures" / "streams"
HEALTHY = ("healthy_ppo_s0", "healthy_grpo_s1", "healthy_ppo_s2")


def _open(name: str, kind: str):
    plain = STREAMS / f"{name}.{kind}.jsonl"
    if plain.exists():
        return plain.open(encoding="utf-8")
    packed = STREAMS / f"{name}.{kind}.jsonl.gz"
    if packed.exists():
        return gzip.open(packed, "rt", encoding="utf-8")
    raise FileNotFoundError(f"no stream {name!r} ({kind}) in {STREAMS}")


def load_stream(name: str) -> list[tuple[int, dict[str, float]]]:
    """The run's metrics as ``[(step, {name: value})]`` in step order."""
    with _open(name, "metrics") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    out = [(int(r["step"]), {k: float(v) for k, v in r["metrics"].items()}) for r in rows]
    return sorted(out, key=lambda row: row[0])


def load_samples(name: str) -> dict[int, list]:
    """The run's recorded samples as ``{step: [SampleRecord]}`` (no per-token arrays).

    Fixtures ``<name>.samples.jsonl.gz``: ``rlcockpit export --what samples`` trimmed to step,
    sample_id, prompt_id, group_id, category, prompt, response, reward, components, length,
    truncated (what the sample detectors read).
    """
    from rlcockpit.records import SampleRecord

    by_step: dict[int, list] = {}
    with _open(name, "samples") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                by_step.setdefault(int(row["step"]), []).append(SampleRecord(**row))
    return by_step
