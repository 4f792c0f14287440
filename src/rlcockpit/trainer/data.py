"""Prompts: the tiny world's prompt set or a JSONL file, tokenised once, served in a seeded order.

The order of each pass over the prompts is a permutation drawn from ``(seed, epoch)``, so the data
cursor of a checkpoint is just ``(epoch, position)`` and a resumed run sees the same prompts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlcockpit.errors import ConfigError


@dataclass(frozen=True)
class PromptItem:
    prompt_id: str
    category: str
    prompt: str
    meta: Mapping[str, Any] = field(default_factory=dict)
    token_ids: tuple[int, ...] = ()


def load_prompt_items(source: str, split: str, key: str = "data.source") -> list[PromptItem]:
    """``"tiny"`` -> the tiny world's split; otherwise a JSONL path (the split is ignored)."""
    if source == "tiny":
        from rlcockpit.world.prompts import load_prompts

        return [PromptItem(p.prompt_id, p.category, p.prompt, dict(p.meta)) for p in load_prompts(split)]
    return read_jsonl_prompts(Path(source).expanduser(), key)


def read_jsonl_prompts(path: Path, key: str = "data.source") -> list[PromptItem]:
    if not path.is_file():
        raise ConfigError(f"{key}={str(path)!r}: no such file; use 'tiny' or a JSONL file of prompts",
                          details={"key": key, "value": str(path)})
    items = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{key}={str(path)!r} line {lineno} is not JSON: {exc.msg}",
                              details={"key": key, "line": lineno}) from None
        if not isinstance(row, dict) or not (isinstance(row.get("prompt"), str) or _is_chat(row.get("messages"))):
            raise ConfigError(f'{key}={str(path)!r} line {lineno} needs a "prompt" string or chat "messages" '
                              '([{"role": "user", "content": "..."}, ...])', details={"key": key, "line": lineno})
        items.append(_item_from_row(row, lineno))
    if not items:
        raise ConfigError(f"{key}={str(path)!r} holds no prompts", details={"key": key})
    return items


def _is_chat(messages: Any) -> bool:
    return isinstance(messages, list) and bool(messages) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in messages)


def _item_from_row(row: dict[str, Any], lineno: int) -> PromptItem:
    """A chat row keeps its ``messages`` in meta; its prompt text is rendered by :func:`tokenize_items`."""
    category = str(row.get("category", "default"))
    meta = dict(row.get("meta") or {})
    meta.update({k: v for k, v in row.items() if k not in ("prompt", "prompt_id", "meta")})
    meta.setdefault("category", category)
    prompt = row["prompt"] if isinstance(row.get("prompt"), str) else ""
    return PromptItem(str(row.get("prompt_id", f"line-{lineno}")), category, prompt, meta)


def tokenize_items(items: Sequence[PromptItem], tokenizer: Any, max_tokens: int) -> tuple[list[PromptItem], int]:
    """Attach token ids; prompts longer than ``max_tokens`` are dropped (returns the kept ones and the count
    dropped). Token ids are what the model sees, so the tokenizer's own special-token rules apply.
    Chat rows (``meta["messages"]``) are rendered with the tokenizer's chat template, the assistant's
    generation prompt added; the rendered text becomes the prompt (what the reward function sees)
    and is encoded without adding special tokens again (the template writes them)."""
    texts = [_render_chat(tokenizer, it.meta["messages"]) if "messages" in it.meta else it.prompt for it in items]
    plain = [i for i, it in enumerate(items) if "messages" not in it.meta]
    chat = [i for i, it in enumerate(items) if "messages" in it.meta]
    encoded: list[list[int]] = [[] for _ in items]
    for idx, special in ((plain, True), (chat, False)):
        if idx:
            ids = tokenizer([texts[i] for i in idx], add_special_tokens=special)["input_ids"]
            for i, row in zip(idx, ids, strict=True):
                encoded[i] = row
    kept = [PromptItem(it.prompt_id, it.category, text, it.meta, tuple(ids))
            for it, text, ids in zip(items, texts, encoded, strict=True) if 0 < len(ids) <= max_tokens]
    return kept, len(items) - len(kept)


def _render_chat(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError('data.source has chat "messages" but the model\'s tokenizer has no chat template; '
                          "save one with the tokenizer (tokenizer.chat_template = ...) or write plain \"prompt\" "
                          "lines", details={"key": "data.source"})
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


class PromptSource:
    """Serves ``batch_size`` prompts per step, reshuffled every pass, with a resumable cursor."""

    def __init__(self, items: Sequence[PromptItem], batch_size: int, seed: int, shuffle: bool) -> None:
        if not items:
            raise ConfigError("no prompts to train on", details={"key": "data.source"})
        self.items = list(items)
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0
        self.position = 0
        self._order = self._order_for(0)

    def _order_for(self, epoch: int) -> np.ndarray:
        n = len(self.items)
        if not self.shuffle:
            return np.arange(n)
        return np.random.default_rng([self.seed, epoch]).permutation(n)

    def next_batch(self) -> list[PromptItem]:
        out = []
        while len(out) < self.batch_size:
            if self.position >= len(self.items):
                self.epoch += 1
                self.position = 0
                self._order = self._order_for(self.epoch)
            out.append(self.items[int(self._order[self.position])])
            self.position += 1
        return out

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position, "n_items": len(self.items)}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        if int(state["n_items"]) != len(self.items):
            raise ConfigError(f"the checkpoint's data cursor is for {state['n_items']} prompts but the data source "
                              f"now has {len(self.items)}; resume with the same data.source",
                              details={"key": "data.source"})
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])
        self._order = self._order_for(self.epoch)
