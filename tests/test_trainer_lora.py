"""LoRA through peft (trainer/adapters.py): only the adapters train, the reference is the base model
with no second copy, checkpoints hold the adapters, resume and rollback load them."""

from __future__ import annotations

import json

import pytest
import torch

from rlcockpit.trainer.models import load_causal_lm
from rlcockpit.trainer.trainer import Trainer
from trainer_testkit import events, make_config, make_model_dir, reader

pytestmark = pytest.mark.slow  # trains real (tiny) models

LORA = ["model.lora.r=4", "model.lora.alpha=8", "model.threads=1", "optim.actor_lr=0.01", "optim.critic_lr=0.01"]


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("llama") / "m", "llama")


def test_lora_trains_only_adapters_and_the_reference_is_the_untouched_base(tmp_path, llama_dir):
    cfg = make_config(tmp_path, "train.steps=2", "model.dtype=bf16", *LORA, model=llama_dir)
    trainer = Trainer(cfg)
    result = trainer.run()
    assert result.status == "finished"
    actor, ref, critic = trainer.models.actor, trainer.models.reference, trainer.models.critic
    trainable = [n for n, p in actor.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert list(ref.parameters()) == []  # no second copy of the weights
    assert {p.dtype for n, p in actor.named_parameters() if "lora_" not in n} == {torch.bfloat16}
    assert {p.dtype for n, p in actor.named_parameters() if "lora_" in n} == {torch.float32}
    critic_trainable = {n for n, p in critic.named_parameters() if p.requires_grad}
    assert {"value_head.weight", "value_head.bias"} <= critic_trainable
    assert all("lora_" in n or n.startswith("value_head") for n in critic_trainable)

    base = load_causal_lm(llama_dir)
    x = torch.tensor([[5, 6, 7, 8, 9, 10]])
    with torch.no_grad():
        expected = base(input_ids=x).logits
        got_ref = ref(input_ids=x, attention_mask=torch.ones_like(x)).logits.float()
        got_actor = actor(input_ids=x).logits.float()
    # the reference: the base weights (stored in bf16 here), adapters off; the actor has moved
    torch.testing.assert_close(got_ref, expected, atol=0.05, rtol=0.05)
    assert (got_actor - got_ref).abs().max() > 1e-3

    (size,) = events(cfg, result.run_id, "model_size")
    assert size.payload["actor_trainable_params"] < size.payload["actor_params"] / 5
    r = reader(cfg)
    try:
        (run,) = r.list_runs()
        stored = r.get_run(run.run_id).config
    finally:
        r.close()
    assert stored["model"]["lora"]["r"] == 4  # the run config marks LoRA

    snap = trainer.updater.gradstats.window()
    assert set(snap["layers"]) == {"block_0", "block_1"}  # the adapters of each block (the LM head is frozen)
    assert snap["head_rows"] and len(snap["head_rows"][0]) == len(snap["head_labels"])


def test_a_lora_checkpoint_holds_adapters_and_resumes_and_rolls_back(tmp_path, llama_dir):
    cfg = make_config(tmp_path, "train.steps=2", *LORA, model=llama_dir)
    trainer = Trainer(cfg)
    result = trainer.run()
    actor_dir = tmp_path / "ckpt" / result.run_id / "step_0000002" / "actor"
    assert (actor_dir / "adapter_model.safetensors").is_file() and not (actor_dir / "model.safetensors").exists()
    assert json.loads((actor_dir / "adapter_config.json").read_text())["r"] == 4
    saved = {n: p.detach().clone() for n, p in trainer.models.actor.named_parameters() if "lora_" in n}

    resumed_cfg = make_config(tmp_path, "train.steps=3", *LORA, model=llama_dir)
    resumed = Trainer(resumed_cfg, resume_from=actor_dir.parent)
    resumed.init()
    loaded = {n: p.detach() for n, p in resumed.models.actor.named_parameters() if "lora_" in n}
    assert loaded.keys() == saved.keys()
    assert all(torch.equal(loaded[n], saved[n]) for n in saved)
    assert all(p.requires_grad for n, p in resumed.models.actor.named_parameters() if "lora_" in n)

    with torch.no_grad():  # spoil the adapters, then roll back in-process to the checkpoint
        for p in resumed.models.actor.parameters():
            if p.requires_grad:
                p.add_(1.0)
    assert resumed.rollback_to(actor_dir.parent) == 2
    assert all(torch.equal(p.detach(), saved[n]) for n, p in resumed.models.actor.named_parameters()
               if "lora_" in n)
    resumed.telemetry.close(status="finished")
