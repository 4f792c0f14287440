"""The tiny GPT-2 builder of the tiny world."""

from __future__ import annotations

import pytest
import torch

from rlcockpit.errors import ConfigError
from rlcockpit.world.model import TinyModelConfig, build_model, count_parameters
from rlcockpit.world.tokenizer import load_tokenizer


def test_parameter_count_is_between_one_and_five_million():
    n = count_parameters(build_model())
    assert 1_000_000 <= n <= 5_000_000
    # float32 weights must fit the 5 MiB budget of the committed checkpoint
    assert n * 4 < 5 * 1024 * 1024 - 200_000


def test_model_matches_the_tokenizer():
    tok = load_tokenizer()
    model = build_model()
    assert model.config.vocab_size == len(tok)
    assert model.config.pad_token_id == tok.pad_token_id
    assert model.config.eos_token_id == tok.eos_token_id


def test_seeded_init_is_reproducible_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a = build_model(seed=7)
    assert torch.equal(torch.rand(3), expected)
    b = build_model(seed=7)
    c = build_model(seed=8)
    pa, pb, pc = (m.transformer.wte.weight for m in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)


def test_forward_and_generate_run(tmp_path):
    tok = load_tokenizer()
    model = build_model(seed=0).eval()
    batch = tok(["Q: What is 12 + 30?\nA:", "问：法国的首都是哪里？\n答："], padding=True,
                return_tensors="pt")
    out = model.generate(**batch, max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
    assert out.shape == (2, batch["input_ids"].shape[1] + 4)


def test_invalid_shape_is_rejected_with_a_fix():
    with pytest.raises(ConfigError, match="multiple of n_head=4"):
        TinyModelConfig(n_embd=130)
    with pytest.raises(ConfigError, match="n_layer=0"):
        TinyModelConfig(n_layer=0)
