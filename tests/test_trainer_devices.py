"""Devices, precision and memory (trainer/devices.py, trainer/memory.py) on the CPU, through the same
code path a GPU takes: bf16 end to end, fp16's loss scaler, micro-batches equal to one pass, OOM
recovery from a simulated torch.OutOfMemoryError, gradient checkpointing's saved activations."""

from __future__ import annotations

import math

import pytest
import torch

from rlcockpit.errors import ConfigError
from rlcockpit.trainer.devices import Placement, grad_scaler, resolve_device
from rlcockpit.trainer.memory import MicroBatches, fit_micro_batch, sample_bytes
from rlcockpit.trainer.trainer import Trainer
from trainer_testkit import events, make_config, make_model_dir, series

pytestmark = pytest.mark.slow  # trains real (tiny) models


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("llama") / "m", "llama")


def test_bf16_trains_end_to_end_on_the_cpu_with_fp32_master_weights(tmp_path, llama_dir):
    cfg = make_config(tmp_path, "train.steps=2", "model.dtype=bf16", "model.threads=1", model=llama_dir)
    trainer = Trainer(cfg)
    result = trainer.run()
    assert (result.status, result.step) == ("finished", 2)
    m = trainer.models
    assert {p.dtype for p in m.actor.parameters()} == {torch.float32}  # master weights
    assert {p.dtype for p in m.reference.parameters()} == {torch.bfloat16}  # frozen: half the memory
    critic_dtypes = {p.dtype for p in m.critic.parameters()}
    assert critic_dtypes == {torch.float32}
    got = series(cfg, result.run_id)
    for name in ("policy/loss", "value/loss", "kl/mean", "grad/norm/actor", "response/ppl"):
        assert all(math.isfinite(v) for _, v in got[name]), name
    (size,) = events(cfg, result.run_id, "model_size")
    assert size.payload["dtype"] == "bf16" and size.payload["device"] == "cpu"
    assert not any(k.startswith("sys/gpu_mem") for k in got)  # CUDA only


def test_bf16_autocast_logprobs_stay_close_to_fp32(llama_dir):
    from rlcockpit.metrics.rl import logprobs_from_logits
    from rlcockpit.trainer.models import load_causal_lm
    from rlcockpit.trainer.rollout import generate, left_pad, response_logits

    model = load_causal_lm(llama_dir)
    ids, mask = left_pad([[5, 6, 7], [8, 9, 10, 11]], pad_id=0)
    bf16 = Placement(torch.device("cpu"), torch.device("cpu"), torch.bfloat16)
    batch = generate(model, ids, mask, max_new_tokens=6, temperature=1.0, top_p=1.0, eos_id=1, pad_id=0,
                     generator=bf16.generator(0), place=bf16)
    assert batch.logprobs.dtype == torch.float32 and batch.response_ids.device.type == "cpu"
    with torch.no_grad():
        logits = response_logits(model, batch, 1.0, bf16)
        assert logits.dtype == torch.float32  # softmax, losses and KL in fp32 whatever the compute dtype
        fp32 = logprobs_from_logits(response_logits(model, batch, 1.0), batch.response_ids)
        half = logprobs_from_logits(logits, batch.response_ids)
    valid = batch.response_mask != 0
    torch.testing.assert_close(half[valid], fp32[valid], atol=0.05, rtol=0)
    torch.testing.assert_close(batch.logprobs[valid], half[valid], atol=0.02, rtol=0)


def test_a_missing_gpu_is_refused_at_setup_and_auto_falls_back_to_the_cpu():
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(ConfigError, match="model.device='cuda' but torch sees no CUDA device"):
        resolve_device("cuda")
    with pytest.raises(ConfigError, match="must be"):
        from rlcockpit.trainer.model_config import ModelConfig

        ModelConfig(device="gpu0")


def test_fp16_loss_scaler_unscales_before_clipping_and_skips_an_overflow():
    from rlcockpit.trainer.config import OptimConfig
    from rlcockpit.trainer.optim import GuardedOptimizer

    torch.manual_seed(0)
    fp16 = Placement(torch.device("cpu"), torch.device("cpu"), torch.float16)
    assert grad_scaler(Placement.cpu()) is None and grad_scaler(fp16) is not None
    x = torch.randn(8, 4)

    def loss_of(model):
        with torch.autocast("cpu", dtype=torch.float16):
            return model(x).float().pow(2).mean()

    plain, scaled = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
    scaled.load_state_dict(plain.state_dict())
    a = GuardedOptimizer(plain, OptimConfig(), lr=1e-2, split_embedding=False)
    b = GuardedOptimizer(scaled, OptimConfig(), lr=1e-2, split_embedding=False, scaler=grad_scaler(fp16))
    b.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    ga, gb = a.step(loss_of(plain), 1e6, 0.0), b.step(loss_of(scaled), 1e6, 0.0)
    assert not gb.skipped and gb.total == pytest.approx(ga.total, rel=1e-3)  # the norm of the true gradient
    for p, q in zip(plain.parameters(), scaled.parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=1e-4, rtol=0)
    before = [p.detach().clone() for p in scaled.parameters()]
    b.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**127)  # scaled gradients overflow to inf
    over = b.step(loss_of(scaled) * 1e10, 1e6, 0.0)
    assert over.skipped and b.skipped_total == 1 and b.scaler.get_scale() < 2.0**127
    assert all(torch.equal(p, q) for p, q in zip(before, scaled.parameters(), strict=True))


def test_micro_batches_accumulate_to_the_same_update_as_one_pass(tmp_path, llama_dir):
    runs = []
    for micro in (0, 1):
        (tmp_path / f"m{micro}").mkdir()
        cfg = make_config(tmp_path / f"m{micro}", "train.steps=1", f"model.micro_batch_size={micro}",
                          "model.threads=1", model=llama_dir)
        trainer = Trainer(cfg)
        trainer.run()
        runs.append((trainer.last_metrics, trainer.models.actor.state_dict()))
    (m0, w0), (m1, w1) = runs
    for name in ("policy/loss", "policy/clip_frac", "policy/entropy", "value/loss", "grad/norm/actor",
                 "grad/norm/critic"):
        assert m1[name] == pytest.approx(m0[name], rel=1e-4, abs=1e-6), name
    assert m1["policy/ratio_max"] == pytest.approx(m0["policy/ratio_max"], rel=1e-5)
    for key in w0:
        torch.testing.assert_close(w1[key], w0[key], atol=1e-6, rtol=1e-4)


def test_out_of_memory_halves_the_micro_batch_retries_and_is_recorded(tmp_path, llama_dir):
    cfg = make_config(tmp_path, "train.steps=1", "model.threads=1", model=llama_dir)  # minibatches of 4
    trainer = Trainer(cfg)
    calls = {"raised": 0}

    def too_big(module, args, kwargs):  # the real forward of the real UPDATE, refused above 2 samples
        ids = kwargs.get("input_ids")
        if torch.is_grad_enabled() and ids is not None and ids.shape[0] > 2:
            calls["raised"] += 1
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated)")

    def install(t, step):
        t.models.actor.register_forward_pre_hook(too_big, with_kwargs=True)

    trainer.add_step_hook(install)
    result = trainer.run()
    assert result.status == "finished" and calls["raised"] == 1
    (retry,) = events(cfg, result.run_id, "oom_retry")
    assert retry.payload["phase"] == "UPDATE" and retry.payload["micro_batch_from"] == 4
    assert retry.payload["micro_batch_to"] == 2 and "out of memory" in retry.payload["error"]
    assert trainer.updater.micro.cap == 2 and trainer.updater.micro.last_size == 2


def test_micro_batches_give_up_at_one_sample_and_drop_partial_work():
    micro = MicroBatches(0, torch.device("cpu"))
    resets = []

    def body(idx):
        raise torch.OutOfMemoryError("simulated")

    with pytest.raises(torch.OutOfMemoryError):
        micro.run(torch.arange(4), body, phase="SCORE", step=3, seq_len=8, response_len=4,
                  reset=lambda: resets.append(1))
    assert [e["micro_batch_to"] for e in micro.take_events()] == [2, 1] and resets == [1, 1]


def test_micro_batch_fit_from_free_memory():
    args = dict(seq_len=1024, response_len=512, hidden=896, layers=24, vocab=151_936, dtype_bytes=2)
    full, ckpt = sample_bytes(**args, checkpointing=False), sample_bytes(**args, checkpointing=True)
    assert ckpt < full
    assert fit_micro_batch(1e12, full, 64) == 64 and fit_micro_batch(0.0, full, 64) == 1
    fit = fit_micro_batch(4e9, full, 64)
    assert fit & (fit - 1) == 0 and fit * full <= 4e9 * 0.6 < 2 * fit * full  # the largest power of two


def test_gradient_checkpointing_keeps_fewer_activations_for_the_same_gradients(llama_dir):
    from rlcockpit.trainer.memory import disable_dropout, enable_gradient_checkpointing
    from rlcockpit.trainer.models import load_causal_lm

    ids = torch.randint(2, 500, (4, 48), generator=torch.Generator().manual_seed(0))

    def saved_bytes_and_grads(checkpointing):
        model = disable_dropout(load_causal_lm(llama_dir))
        if checkpointing:
            assert enable_gradient_checkpointing(model)
        model.train()
        saved = []

        def pack(t):
            saved.append(t.numel() * t.element_size())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = model(input_ids=ids).logits.float().logsumexp(-1).mean()
        loss.backward()
        return sum(saved), {n: p.grad for n, p in model.named_parameters()}

    full, g_full = saved_bytes_and_grads(False)
    ckpt, g_ckpt = saved_bytes_and_grads(True)
    assert ckpt < 0.8 * full
    for name, grad in g_full.items():
        torch.testing.assert_close(g_ckpt[name], grad, atol=1e-6, rtol=1e-5)
