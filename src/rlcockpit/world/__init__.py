"""The tiny world: an offline environment that `make demo` trains on a CPU in minutes.

It holds everything a PPO / GRPO run needs and nothing is downloaded at run time (DESIGN.md §3):

- ``prompts``   -- the shipped prompt set (math, knowledge, safety, chat), train and validation.
- ``rewards``   -- rule rewards per category, plain Python (``rewards.score``).
- ``tokenizer`` -- a small byte-level BPE tokenizer trained on the shipped corpus.
- ``model``     -- a tiny GPT-2-style causal LM (about 1 M parameters).
- ``sft``       -- the supervised warm start that produced ``SFT_CHECKPOINT``.
- ``evaluate``  -- sampled evaluation with a fixed seed (reward and accuracy per category).
- ``build``     -- the deterministic generator of the shipped data files.

Importing this package (and ``prompts`` / ``rewards``) never imports torch or transformers.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
DATA_DIR = PACKAGE_DIR / "data"
SFT_CHECKPOINT = PACKAGE_DIR / "checkpoints" / "sft-tiny"

__all__ = ["DATA_DIR", "PACKAGE_DIR", "SFT_CHECKPOINT"]
