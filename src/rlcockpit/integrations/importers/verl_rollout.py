"""Samples from verl's rollout dump (``trainer.rollout_data_dir``).

verl's ``RayPPOTrainer._dump_generations`` (``verl/trainer/ppo/ray_trainer.py``) writes one file per
step, ``<rollout_data_dir>/<step>.jsonl``, one line per sample::

    {"input": prompt text, "output": response text, "gts": ground truth (newer verl),
     "score": sequence score, "step": N, <reward_extra_infos_dict keys...>}

``input``/``output``/``score``/``step`` become the sample's prompt, response, reward and step;
every extra numeric (or boolean) key becomes a reward component (e.g. ``acc``). Text extras such as
``gts`` or ``pred`` have no place in a SampleRecord: they are listed in the run's config under
``import.unstored_sample_keys`` rather than dropped silently. Sample ids number the samples of a
step in file order; samples with the same prompt share a ``group_id`` and a ``prompt_id`` (a hash
of the prompt), matching verl's GRPO groups of ``rollout.n`` responses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlcockpit.integrations.importers._base import (
    ParsedImport,
    SampleNumbering,
    as_number,
    as_step,
    fail,
    first_object,
    iter_jsonl,
    prompt_id,
)
from rlcockpit.records import SampleRecord, decode_float

FORMAT = "verl-rollout"
REQUIRED = ("input", "output", "score")
SOURCE = "verl"


def sniff(path: Path) -> bool:
    obj = first_object(path)
    return obj is not None and all(k in obj for k in REQUIRED)


def _sample(obj: dict[str, Any], step: int, numbering: SampleNumbering, parsed: ParsedImport,
            path: Path, where: str) -> SampleRecord:
    prompt, response = obj["input"], obj["output"]
    if not isinstance(prompt, str) or not isinstance(response, str):
        raise fail(path, where, '"input" and "output" must be text',
                   "verl writes the decoded prompt and response strings there")
    components: dict[str, float] = {}
    for key, value in obj.items():
        if key in ("input", "output", "score", "step"):
            continue
        number = decode_float(value)
        if number is None:
            parsed.unstored_sample_keys.add(key)
        else:
            components[key] = number
    sample_id, group_id = numbering.next(step, prompt)
    return SampleRecord(step=step, sample_id=sample_id, prompt=prompt, response=response,
                        reward=as_number(obj["score"], path, where, '"score"'),
                        prompt_id=prompt_id(prompt), group_id=group_id, components=components)


def read_file(path: Path, source: str | None, numbering: SampleNumbering | None = None) -> ParsedImport:
    parsed = ParsedImport()
    numbering = numbering or SampleNumbering()
    default_step = int(path.stem) if path.stem.isdigit() else None
    for number, obj in iter_jsonl(path):
        where = f"line {number}"
        missing = [k for k in REQUIRED if k not in obj]
        if missing:
            raise fail(path, where, f"lacks {', '.join(missing)}",
                       'verl rollout lines hold "input", "output", "score" and "step"')
        if "step" not in obj and default_step is None:
            raise fail(path, where, 'has no "step" and the file name is not <step>.jsonl',
                       "Keep verl's file names or add the step to each line")
        step = as_step(obj.get("step", default_step), path, where)
        parsed.samples.append(_sample(obj, step, numbering, parsed, path, where))
    if not parsed.samples:
        raise fail(path, "", "holds no samples", "Pass a non-empty verl rollout JSONL file")
    parsed.sources.add(SOURCE)
    parsed.files.append({"path": str(path.resolve()), "format": FORMAT, "source": SOURCE,
                         "samples": len(parsed.samples)})
    return parsed
