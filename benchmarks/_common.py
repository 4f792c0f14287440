"""Shared helpers of the benchmarks: payloads, timing, interleaving, output.

Every benchmark prints human-readable tables first and, as its LAST stdout line, one JSON object
with its headline numbers, so scripts and CI can read the result with ``tail -n 1``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# 30 scalars per step, all catalog names (DESIGN.md §4), so every tracker logs the same keys.
SCALAR_NAMES: tuple[str, ...] = (
    "reward/mean", "reward/std", "reward/min", "reward/max", "reward/raw/mean",
    "reward/helpfulness/mean", "reward/truthfulness/mean", "reward/harmlessness/mean",
    "reward/uncertainty/mean", "reward/gated_frac",
    "kl/mean", "kl/token_mean", "kl/token_max", "kl/coef",
    "policy/entropy", "policy/approx_kl", "policy/clip_frac", "policy/ratio_mean", "policy/loss",
    "value/loss", "value/mean", "value/explained_var",
    "advantage/mean", "advantage/std",
    "response/length_mean", "response/length_max", "response/truncated_frac",
    "grad/norm/actor", "grad/norm/critic", "optim/lr/actor",
)
CATEGORIES: tuple[str, ...] = ("math", "knowledge", "safety", "chat")
COMPONENTS: tuple[str, ...] = ("helpfulness", "truthfulness", "harmlessness")
HIST_VALUES = 4096
SAMPLES_PER_STEP = 64
TOKEN_ARRAY_LEN = 128
PROMPT_BYTES = 256
RESPONSE_BYTES = 768

_WORDS = ["policy", "reward", "model", "value", "token", "prompt", "answer", "step", "batch", "gradient", "entropy", "clip", "ratio", "sample", "response", "critic", "actor", "update", "rollout", "score", "advantage", "normalise", "the", "a", "of", "to", "is", "and", "in", "that", "for", "with", "as", "on", "be", "by", "this", "which", "it", "an", "are", "from", "at", "or"]


@dataclass(frozen=True)
class StepPayload:
    """What one training step logs: the reference payload shared by every variant."""

    scalars: dict[str, float]
    hist_values: np.ndarray
    samples: list[dict[str, Any]]


def _text(rng: np.random.Generator, n_bytes: int) -> str:
    words = rng.choice(_WORDS, size=n_bytes // 4 + 8)
    return " ".join(words)[:n_bytes]


def make_sample(rng: np.random.Generator, sample_id: int, token_arrays: bool) -> dict[str, Any]:
    """One sample with SampleRecord field names (~256 B prompt, ~768 B response, reward + 3)."""
    components = {c: float(rng.uniform(-1, 1)) for c in COMPONENTS}
    sample: dict[str, Any] = {
        "sample_id": sample_id,
        "prompt_id": f"p{int(rng.integers(0, 10_000)):05d}",
        "group_id": sample_id // 8,
        "category": CATEGORIES[sample_id % len(CATEGORIES)],
        "prompt": _text(rng, PROMPT_BYTES),
        "response": _text(rng, RESPONSE_BYTES),
        "reward": float(sum(components.values()) / len(components)),
        "components": components,
        "length": int(rng.integers(16, TOKEN_ARRAY_LEN)),
    }
    if token_arrays:
        sample["logprobs"] = rng.normal(-2.0, 1.0, TOKEN_ARRAY_LEN).tolist()
        sample["token_kl"] = np.abs(rng.normal(0.0, 0.05, TOKEN_ARRAY_LEN)).tolist()
    return sample


def make_payload(seed: int, *, token_arrays: bool = False,
                 n_samples: int = SAMPLES_PER_STEP) -> StepPayload:
    rng = np.random.default_rng(seed)
    scalars = {name: float(v) for name, v in zip(SCALAR_NAMES, rng.normal(size=len(SCALAR_NAMES)),
                                                 strict=True)}
    return StepPayload(
        scalars=scalars,
        hist_values=rng.normal(size=HIST_VALUES),
        samples=[make_sample(rng, i, token_arrays) for i in range(n_samples)],
    )


def make_payloads(n: int, *, token_arrays: bool = False) -> list[StepPayload]:
    """A small pool of distinct payloads; steps cycle through it (built before any timing)."""
    return [make_payload(seed, token_arrays=token_arrays) for seed in range(n)]


# --- timing -------------------------------------------------------------------------------------

def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]); NaN for an empty input."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[rank - 1]


def summarize_ms(seconds: Sequence[float]) -> dict[str, float]:
    """Median / p95 / mean in milliseconds of a list of durations in seconds."""
    if not seconds:
        return {"median_ms": math.nan, "p95_ms": math.nan, "mean_ms": math.nan, "n": 0}
    ms = [s * 1e3 for s in seconds]
    return {"median_ms": statistics.median(ms), "p95_ms": percentile(ms, 95),
            "mean_ms": statistics.fmean(ms), "n": len(ms)}


def time_call(fn: Callable[[], Any], runs: int, warmup: int = 1) -> tuple[list[float], Any]:
    """Run ``fn`` ``warmup`` times (discarded) then ``runs`` times; durations in seconds."""
    result = None
    for _ in range(warmup):
        result = fn()
    durations = []
    for _ in range(runs):
        t0 = time.perf_counter()
        result = fn()
        durations.append(time.perf_counter() - t0)
    return durations, result


def round_robin(names: Sequence[str], rounds: int) -> Iterator[tuple[int, str]]:
    """Interleave variants: every round runs each once, the start rotating by one per round so no
    variant always runs first (after a warm machine or right behind a heavy neighbour)."""
    for r in range(rounds):
        k = r % max(1, len(names))
        for name in list(names[k:]) + list(names[:k]):
            yield r, name


# --- environment --------------------------------------------------------------------------------

def module_available(name: str) -> bool:
    """True when ``name`` can be imported; an empty directory (a namespace package, as a
    sub-package is before its code lands) does not count."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    return spec is not None and spec.origin is not None


def package_version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send everything written to fd 1 (also by child processes started inside, e.g. the W&B
    service) to stderr, so the benchmark's own stdout stays: tables, then one JSON line."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


# --- targets and output -------------------------------------------------------------------------

def target(value: float | None, op: str, limit: float) -> str:
    """'pass' / 'fail' for ``value op limit``; 'n/a' when the value could not be measured."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    ok = value <= limit if op == "<=" else value >= limit
    return "pass" if ok else "fail"


def json_safe(obj: Any) -> Any:
    """Round floats for a readable line; NaN/inf become null (strict JSON)."""
    if isinstance(obj, float):
        return round(obj, 4) if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def print_json_last_line(obj: dict[str, Any]) -> None:
    """The machine-readable result: one JSON object on the last line of stdout."""
    sys.stdout.flush()
    sys.stdout.write(json.dumps(json_safe(obj), allow_nan=False, sort_keys=False) + "\n")
    sys.stdout.flush()


def free_port() -> int:
    """A loopback port nobody listens on right now (for a server the benchmark starts)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def machine_info() -> dict[str, Any]:
    """Context for the numbers: cores and load (other jobs on a shared machine slow everything)."""
    return {"cpus": os.cpu_count(), "loadavg_1m": round(os.getloadavg()[0], 2),
            "python": sys.version.split()[0]}


def fmt(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:,.{digits}f}"


def load_example(filename: str):
    """An example script of examples/ imported as a module (its functions, without running main)."""
    path = Path(__file__).resolve().parents[1] / "examples" / filename
    spec = importlib.util.spec_from_file_location(f"example_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
