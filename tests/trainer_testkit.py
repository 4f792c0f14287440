"""Helpers shared by the trainer tests: tiny random HF models built in the test, fast configs, store
reads. Real components only (real torch models, real SQLite files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# tiny budgets: a step takes a fraction of a second on one CPU thread
FAST = ["rollout.batch_size=8", "ppo.minibatch_size=4", "rollout.max_new_tokens=10", "ppo.epochs=1",
        "eval.every=0", "checkpoint.every=0", "optim.warmup_steps=0"]


def make_model_dir(path: Path, kind: str = "gpt2", seed: int = 0) -> Path:
    """A randomly initialised tiny causal LM + the tiny world's tokenizer, saved as an HF directory."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    from rlcockpit.world.tokenizer import load_tokenizer

    tok = load_tokenizer()
    common = dict(vocab_size=len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                  bos_token_id=tok.eos_token_id)
    torch.manual_seed(seed)
    if kind == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(n_positions=128, n_embd=32, n_layer=2, n_head=2, **common))
    elif kind == "llama":
        model = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=2,
                                             max_position_embeddings=256, tie_word_embeddings=False, **common))
    else:
        raise ValueError(kind)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def make_config(tmp_path: Path, *overrides: str, model: Path | None = None) -> Any:
    from rlcockpit.config import load_config
    from rlcockpit.trainer.config import TrainConfig

    base = [f"telemetry.store=sqlite:///{tmp_path / 'runs.db'}", f"checkpoint.dir={tmp_path / 'ckpt'}"]
    if model is not None:
        base.append(f"model.path={model}")
    return load_config(TrainConfig, None, [*base, *FAST, *overrides])


def reader(uri_or_cfg: Any) -> Any:
    from rlcockpit.store import open_store

    uri = uri_or_cfg if isinstance(uri_or_cfg, str) else uri_or_cfg.telemetry.store
    return open_store(uri).reader()


def series(uri_or_cfg: Any, run_id: str, names: list[str] | None = None, **kw: Any) -> dict[str, list]:
    """{metric name: [(step, value), ...]}."""
    r = reader(uri_or_cfg)
    try:
        names = names if names is not None else r.metric_names(run_id)
        return {n: list(zip(s.steps, s.values, strict=True)) for n, s in r.read_series(run_id, names, **kw).items()}
    finally:
        r.close()


def events(uri_or_cfg: Any, run_id: str, kind: str) -> list:
    r = reader(uri_or_cfg)
    try:
        return r.read_events(run_id, kinds=[kind])
    finally:
        r.close()
