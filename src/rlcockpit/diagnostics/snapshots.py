"""Diagnostic snapshots: the evidence kept when a red or black finding fires (pure builders).

Seed 000 §2 (second layer, "诊断快照"): the gradient-norm histogram of the last 100 steps, the
per-layer gradient-variance heatmap, the covariance of the critic-head and policy-head gradients;
DESIGN.md §6 adds the triggering batch and the last 50 samples. Payload of kind ``"diagnostic"``::

    {"finding": {...}, "grad_norm_hist": {"edges", "counts", "steps"},
     "layer_grad_var": {"layers", "steps", "values", "measure"},
     "head_grad_cov": {"labels", "matrix", "rows"},
     "batch": [sample, ...], "last_samples": [sample, ...],
     "metric_window": {"steps", "series": {name: [value | null, ...]}}, "config": {...}}

A ``"batch"`` snapshot (orange: save the batch) holds ``finding`` and ``batch`` only. Samples carry
no per-token arrays; texts are cut and, if the payload still exceeds :data:`MAX_BYTES`, samples are
dropped (oldest first) until it fits — ``truncated`` then says what was cut. The gradient window
comes from the trainer (``rlcockpit.trainer.gradstats``) as plain lists; numpy only here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from rlcockpit.records import FindingRecord, SampleRecord, to_dict

MAX_BYTES = 1_000_000
MAX_TEXT = 2000
HIST_BINS = 20


def grad_norm_hist(steps: Sequence[int], norms: Sequence[float], bins: int = HIST_BINS) -> dict[str, Any]:
    """Histogram of the actor gradient norm over the window (non-finite values counted apart)."""
    arr = np.asarray(norms, dtype=np.float64)
    finite = arr[np.isfinite(arr)]
    if finite.size == 0:
        return {"edges": [], "counts": [], "steps": list(steps), "nonfinite": int(arr.size)}
    bins = min(bins, finite.size) if finite.min() < finite.max() else 1  # no empty bins on short windows
    counts, edges = np.histogram(finite, bins=bins)
    return {"edges": edges.tolist(), "counts": counts.tolist(), "steps": [int(s) for s in steps],
            "values": clean(arr.tolist()), "nonfinite": int(arr.size - finite.size)}


def layer_grad_var(steps: Sequence[int], layers: Sequence[str],
                   values: Sequence[Sequence[float | None]]) -> dict[str, Any]:
    """Heatmap rows = steps, columns = layers; ``measure`` says what a cell is."""
    return {"layers": list(layers), "steps": [int(s) for s in steps], "values": clean(values),
            "measure": "variance of the layer's gradient entries (applied gradient, after clipping), "
                       "mean over the step's minibatches"}


def head_grad_cov(labels: Sequence[str], rows: Sequence[Sequence[float]]) -> dict[str, Any]:
    """Covariance of the sampled head-gradient coordinates over the recent minibatches."""
    if len(rows) < 2 or not labels:
        return {"labels": list(labels), "matrix": [], "rows": len(rows)}
    x = np.asarray(rows, dtype=np.float64)
    cov = np.atleast_2d(np.cov(x, rowvar=False))
    return {"labels": list(labels), "matrix": clean(cov.tolist()), "rows": len(rows)}


def sample_dict(sample: SampleRecord, max_text: int = MAX_TEXT) -> dict[str, Any]:
    """A sample without its per-token arrays, texts cut to ``max_text`` characters."""
    out = to_dict(sample.without_token_arrays())
    for key in ("tokens", "logprobs", "ref_logprobs", "token_kl"):
        out.pop(key, None)
    for key in ("prompt", "response"):
        if len(out[key]) > max_text:
            out[key] = out[key][:max_text] + "…"
    return out


def metric_window(history: Iterable[tuple[int, Mapping[str, float]]], reads: Iterable[str]
                  ) -> dict[str, Any]:
    """The last steps of the metrics the firing detectors read (a trailing "/" = every name under)."""
    history = list(history)
    wanted = tuple(reads)
    names = sorted({n for _, m in history for n in m
                    if any(n == r or (r.endswith("/") and n.startswith(r)) for r in wanted)})
    series = {n: clean([m.get(n) for _, m in history]) for n in names}
    return {"steps": [int(s) for s, _ in history], "series": series}


def batch_payload(finding: FindingRecord, samples: Sequence[SampleRecord]) -> dict[str, Any]:
    """Kind ``"batch"``: the triggering step's samples (orange: save the batch)."""
    return fit({"finding": clean(to_dict(finding)), "batch": [sample_dict(s) for s in samples]})


def diagnostic_payload(finding: FindingRecord, grads: Mapping[str, Any] | None,
                       batch: Sequence[SampleRecord], last_samples: Sequence[SampleRecord],
                       metrics: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    """Kind ``"diagnostic"``: every part of the red / black snapshot. ``grads`` is the trainer's
    gradient window (``steps``, ``grad_norm``, ``layers``, ``layer_var``, ``head_labels``,
    ``head_rows``); None when the gradients are not available (e.g. an offline replay)."""
    g = dict(grads or {})
    steps = g.get("steps", [])
    payload = {
        "finding": clean(to_dict(finding)),
        "grad_norm_hist": grad_norm_hist(steps, g.get("grad_norm", [])),
        "layer_grad_var": layer_grad_var(steps, g.get("layers", []), g.get("layer_var", [])),
        "head_grad_cov": head_grad_cov(g.get("head_labels", []), g.get("head_rows", [])),
        "batch": [sample_dict(s) for s in batch],
        "last_samples": [sample_dict(s) for s in last_samples],
        "metric_window": dict(metrics),
        "config": clean(dict(config)),
    }
    return fit(payload)


def size_of(payload: Mapping[str, Any]) -> int:
    return len(json.dumps(payload, default=str).encode("utf-8"))


def fit(payload: dict[str, Any], max_bytes: int = MAX_BYTES) -> dict[str, Any]:
    """Shrink a payload under ``max_bytes``: shorter texts first, then fewer samples."""
    if size_of(payload) <= max_bytes:
        return payload
    cut: dict[str, Any] = {"max_bytes": max_bytes}
    for limit in (500, 200):
        for key in ("batch", "last_samples"):
            payload[key] = [_shorten(s, limit) for s in payload.get(key, [])]
        cut["text_chars"] = limit
        if size_of(payload) <= max_bytes:
            payload["truncated"] = cut
            return payload
    for key in ("last_samples", "batch"):
        items = payload.get(key, [])
        while items and size_of(payload) > max_bytes:
            dropped = max(1, len(items) // 4)
            del items[:dropped]
            cut[f"{key}_dropped"] = cut.get(f"{key}_dropped", 0) + dropped
    payload["truncated"] = cut
    return payload


def _shorten(sample: dict[str, Any], limit: int) -> dict[str, Any]:
    out = dict(sample)
    for key in ("prompt", "response"):
        if isinstance(out.get(key), str) and len(out[key]) > limit:
            out[key] = out[key][:limit] + "…"
    return out


def clean(v: Any) -> Any:
    """JSON-safe: non-finite floats become None (JSON has no NaN), numpy scalars plain numbers."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, Mapping):
        return {str(k): clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [clean(x) for x in v]
    if isinstance(v, np.generic):
        return clean(v.item())
    return v
