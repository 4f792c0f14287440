"""TRL GRPO runs without a reference model (beta = 0, TRL's default) and with sync_ref_model: the
callback reads both from the trainer, the KL detectors say "no reference" instead of "skipped",
and the sync period reaches kl_zero as kl/ref_sync_every."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from rlcockpit.diagnostics.coverage import NO_REFERENCE_STATUS
from rlcockpit.integrations.trl import watch
from rlcockpit.store import open_store

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(300)


def _example():
    spec = importlib.util.spec_from_file_location("trl_grpo_example", ROOT / "examples" / "trl_grpo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXAMPLE = _example()


def _trainer(tmp_path: Path, **config):
    """The example's GRPO trainer (tiny world SFT model, one reward function per component), 3 steps."""
    import json

    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from rlcockpit.world import SFT_CHECKPOINT
    from rlcockpit.world.prompts import load_prompts

    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(SFT_CHECKPOINT)
    rows = [{"prompt": p.prompt, "category": p.category, "meta_json": json.dumps(p.meta)}
            for p in load_prompts("train")]
    args = GRPOConfig(output_dir=str(tmp_path / "out"), report_to="none", save_strategy="no", logging_steps=1,
                      use_cpu=True, bf16=False, seed=0, disable_tqdm=True, dataloader_num_workers=0,
                      learning_rate=1e-4, per_device_train_batch_size=4, num_generations=2,
                      max_completion_length=8, max_steps=3, **config)
    return GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(SFT_CHECKPOINT),
                       reward_funcs=[EXAMPLE.world_reward(c) for c in EXAMPLE.COMPONENTS], args=args,
                       train_dataset=Dataset.from_list(rows), processing_class=tokenizer)


def test_a_default_grpo_run_has_no_reference_and_the_kl_detectors_say_so(tmp_path):
    uri = f"sqlite:///{tmp_path / 'trl.db'}"
    trainer = _trainer(tmp_path)  # TRL's default beta is 0: no reference model is loaded
    assert trainer.beta == 0.0 and trainer.ref_model is None
    cockpit = watch(trainer, store=uri)
    trainer.train()
    for name in ("kl_zero", "kl_tiers", "kl_trend", "kl_token_spike"):
        assert cockpit.engine.status[name] == NO_REFERENCE_STATUS, name
    reader = open_store(uri).reader()
    run = reader.get_run(cockpit.run.run_id)
    assert run.config["trl"]["reference"] == {"reference_model": False, "sync_ref_model": False,
                                              "ref_model_sync_steps": 512, "ref_model_mixup_alpha": 0.6}
    names = set(reader.summary(run.run_id).metric_names)
    assert "kl/coef" in names and not names & {"kl/mean", "kl/token_mean", "kl/ref_sync_every"}
    assert reader.read_series(run.run_id, ["kl/coef"])["kl/coef"].values == (0.0, 0.0, 0.0)


def test_sync_ref_model_is_read_from_the_args_and_logged_as_the_sync_period(tmp_path):
    uri = f"sqlite:///{tmp_path / 'trl.db'}"
    trainer = _trainer(tmp_path, beta=0.04, sync_ref_model=True, ref_model_sync_steps=2, ref_model_mixup_alpha=1.0)
    cockpit = watch(trainer, store=uri)
    trainer.train()
    reader = open_store(uri).reader()
    run_id = cockpit.run.run_id
    assert reader.read_series(run_id, ["kl/ref_sync_every"])["kl/ref_sync_every"].values == (2.0, 2.0, 2.0)
    assert reader.get_run(run_id).config["trl"]["reference"]["sync_ref_model"] is True
    assert cockpit.engine.status["kl_zero"] not in ("skipped", NO_REFERENCE_STATUS)  # judged, with the period
    assert not [f for f in reader.read_findings(run_id) if f.detector == "kl_zero"]
