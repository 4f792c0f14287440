"""Recorded healthy tiny-world samples for detector tests (tests/fixtures/streams/*.samples.jsonl.gz).

Exported from /work/streams/healthy.db with ``rlcockpit export --what samples`` and trimmed to the
fields the sample detectors read (no per-token arrays): step, sample_id, prompt_id, group_id,
category, prompt, response, reward, components, length, truncated.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

from rlcockpit.records import SampleRecord

FIXTURES = Path(__file__).parent / "fixtures" / "streams"
HEALTHY_RUNS = ("healthy_ppo_s0", "healthy_grpo_s1", "healthy_ppo_s2")


def load_samples(name: str) -> dict[int, list[SampleRecord]]:
    """The recorded samples of run ``name`` grouped by step."""
    path = FIXTURES / f"{name}.samples.jsonl.gz"
    by_step: dict[int, list[SampleRecord]] = defaultdict(list)
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            by_step[int(row["step"])].append(SampleRecord(**row))
    return dict(by_step)
