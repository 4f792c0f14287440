"""The metric catalog: every DESIGN.md §4 name is defined, templates match concrete names, and
docs/metrics.md is exactly the generated reference (so an undocumented metric cannot slip in)."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rlcockpit.metrics.catalog import (
    CATALOG,
    GROUPS,
    TRENDS,
    MetricSpec,
    catalog_markdown,
    is_catalog_name,
    spec_for,
)

DOCS = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"

# DESIGN.md §4, table by table (the canonical names; keep in step with DESIGN.md).
DESIGN_NAMES = [
    "reward/mean", "reward/std", "reward/min", "reward/max", "reward/raw/mean",
    "reward/<component>/mean", "reward/category/<category>/mean", "reward/uncertainty/mean",
    "reward/gated_frac", "reward/fallback_frac", "reward/frac_zero_std_groups",
    "kl/mean", "kl/token_mean", "kl/token_max", "kl/token_p99", "kl/coef", "kl/cycle_delta",
    "policy/entropy", "policy/approx_kl", "policy/clip_frac", "policy/ratio_mean",
    "policy/ratio_max", "policy/loss", "policy/clip_eps",
    "value/loss", "value/mean", "value/std", "value/explained_var", "value/clip_frac",
    "advantage/mean", "advantage/std", "advantage/abs_median", "returns/mean",
    "response/length_mean", "response/length_std", "response/length_max",
    "response/truncated_frac", "response/repetition_rate", "response/ppl",
    "grad/norm/actor", "grad/norm/critic", "grad/norm/layer/<name>", "update/ratio/actor",
    "update/ratio/critic",
    "optim/lr/actor", "optim/lr/critic",
    "time/<phase>_s", "perf/tokens_per_s", "perf/samples_per_s", "sys/rss_gb", "sys/gpu_mem_gb",
    "sys/gpu_util", "cost/usd_per_step",
    "eval/reward/mean", "eval/reward/category/<category>/mean", "eval/accuracy/<category>",
    "dist/grad_norm/rank/<r>", "dist/param_hash_mismatch",
]

# Added by the metrics brief: live parameters logged each step, drop counters, normalisation.
EXTRA_NAMES = [
    "telemetry/dropped_total", "reward/nonfinite_total", "response/eos_frac",
    "policy/entropy_coef", "value/clip_range", "reward/scale", "rollout/temperature",
    "rollout/top_p", "rollout/max_new_tokens", "ppo/epochs", "grad/clip/actor",
    "grad/clip/embedding", "grad/clip/critic", "kl/target", "reward/normalized/mean",
    "advantage/whitened_std",
]


def test_docs_metrics_md_is_the_generated_catalog():
    expected = catalog_markdown()
    actual = DOCS.read_text(encoding="utf-8") if DOCS.exists() else ""
    assert actual == expected, (
        "docs/metrics.md is out of date; regenerate it with "
        "`.venv/bin/python -m rlcockpit.metrics.catalog > docs/metrics.md`"
    )


@pytest.mark.parametrize("name", DESIGN_NAMES + EXTRA_NAMES)
def test_every_required_name_is_in_the_catalog_and_the_docs(name):
    assert name in CATALOG
    assert f"`{name}`" in catalog_markdown()


def test_every_spec_is_complete():
    for name, spec in CATALOG.items():
        assert spec.name == name
        assert spec.trend in TRENDS and spec.group in GROUPS
        assert spec.unit.strip()
        assert re.fullmatch(r"[a-z0-9_]+(/([a-z0-9_]|<[a-z_]+>)+)+", name), name
        assert len(spec.help) >= 50, f"{name}: help should say what, how and what healthy is"
        if spec.trend != "none":
            assert "healthy" in spec.help.lower(), f"{name}: say what healthy looks like"


@pytest.mark.parametrize(("concrete", "template"), [
    ("reward/helpfulness/mean", "reward/<component>/mean"),
    ("reward/category/math/mean", "reward/category/<category>/mean"),
    ("grad/norm/layer/transformer.h.0.attn", "grad/norm/layer/<name>"),
    ("grad/norm/layer/blocks/3", "grad/norm/layer/<name>"),
    ("time/rollout_s", "time/<phase>_s"),
    ("eval/reward/category/safety/mean", "eval/reward/category/<category>/mean"),
    ("eval/accuracy/math", "eval/accuracy/<category>"),
    ("dist/grad_norm/rank/12", "dist/grad_norm/rank/<r>"),
])
def test_spec_for_matches_templates(concrete, template):
    spec = spec_for(concrete)
    assert spec is not None and spec.name == template
    assert is_catalog_name(concrete)


@pytest.mark.parametrize("name", [
    "dist/grad_norm/rank/x", "reward/category/math", "time/rollout", "unknown/metric", "kl",
    "reward/mean/extra", "Reward/mean", "",
])
def test_spec_for_rejects_names_outside_the_catalog(name):
    assert spec_for(name) is None and not is_catalog_name(name)


def test_exact_names_win_over_templates():
    assert spec_for("reward/raw/mean").name == "reward/raw/mean"
    assert spec_for("reward/uncertainty/mean").group == "reward"
    assert spec_for("reward/<component>/mean").name == "reward/<component>/mean"


def test_metric_spec_is_frozen_and_validated():
    spec = CATALOG["kl/mean"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.trend = "up"  # type: ignore[misc]
    with pytest.raises(ValueError, match="trend"):
        MetricSpec("x/y", "u", "help", "sideways", "kl")
    with pytest.raises(ValueError, match="group"):
        MetricSpec("x/y", "u", "help", "up", "misc")
    with pytest.raises(ValueError, match="lowercase"):
        MetricSpec("X/y", "u", "help", "up", "kl")


def test_markdown_lists_every_name_once_under_its_group():
    text = catalog_markdown()
    rows = re.findall(r"^\| `([^`]+)` \|", text, flags=re.MULTILINE)
    assert sorted(rows) == sorted(CATALOG)
    for group in GROUPS:
        assert f"\n## {group}\n" in text


def test_module_entry_point_prints_the_catalog_without_torch_or_numpy():
    code = (
        "import sys, runpy; runpy.run_module('rlcockpit.metrics.catalog', run_name='__main__');"
        "sys.stderr.write(str(sorted(m for m in ('torch', 'numpy') if m in sys.modules)))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    assert proc.stdout == catalog_markdown()
    assert proc.stderr.strip().endswith("[]")
