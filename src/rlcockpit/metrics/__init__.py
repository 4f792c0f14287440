"""Pure RL math and the metric catalog — the only place metric names are defined.

- :mod:`rlcockpit.metrics.catalog` (stdlib): ``MetricSpec``, ``CATALOG``, ``spec_for``.
- :mod:`rlcockpit.metrics.stats` (numpy): repetition, lengths, KS test, histograms, EMA.
- :mod:`rlcockpit.metrics.rl` (torch): masked reductions, KL estimators, entropy, GAE, GRPO groups.
- :mod:`rlcockpit.metrics.evaluation` (numpy): the validation metrics ``eval/*``.

Importing this package imports nothing else: each module loads on first use
(``rlcockpit.metrics.rl`` or attribute access such as ``rlcockpit.metrics.gae``), so the catalog
never pulls in torch or numpy.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY_MODULES = {
    "catalog": "rlcockpit.metrics.catalog",
    "evaluation": "rlcockpit.metrics.evaluation",
    "ks": "rlcockpit.metrics.ks",
    "rl": "rlcockpit.metrics.rl",
    "stats": "rlcockpit.metrics.stats",
}
_CATALOG_NAMES = (
    "CATALOG", "TRENDS", "MetricSpec", "catalog_markdown", "is_catalog_name", "spec_for",
)
_RL_NAMES = (
    "fill_masked", "masked_sum", "masked_mean", "masked_var", "masked_whiten", "masked_max",
    "masked_quantile",
    "logprobs_from_logits", "entropy_from_logits", "kl_per_token", "gae", "group_normalize",
    "clip_fraction", "explained_variance", "approx_kl", "sequence_sum", "sequence_lengths",
    "perplexity",
)
_STATS_NAMES = (
    "repetition_rate", "distinct_ngram_frac", "length_stats", "ks_2samp", "quantile",
    "percentile", "ema", "histogram",
)
_LAZY = {**{n: "rlcockpit.metrics.catalog" for n in _CATALOG_NAMES},
         "eval_metrics": "rlcockpit.metrics.evaluation",
         **{n: "rlcockpit.metrics.rl" for n in _RL_NAMES},
         **{n: "rlcockpit.metrics.stats" for n in _STATS_NAMES}}


def __getattr__(name: str) -> Any:
    if name in _LAZY_MODULES:
        return importlib.import_module(_LAZY_MODULES[name])
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rlcockpit.metrics' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = sorted(_LAZY)
