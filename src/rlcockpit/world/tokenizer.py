"""The tiny world's tokenizer: a small byte-level BPE trained on the shipped corpus.

Byte level means any text (Chinese included) encodes losslessly: unseen characters fall back to
byte tokens. Digits are split one per token so the model does arithmetic digit by digit, and the
vocabulary is small (1024), which keeps the embedding small and the sequences short -- prompts
are at most ~32 tokens, so CPU rollouts are fast.

``<|pad|>`` pads, ``<|endoftext|>`` ends every response (eos) and doubles as bos. Padding is on the
left, because batched generation with a causal LM continues from the last prompt token.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from rlcockpit.errors import NotFoundError
from rlcockpit.world import DATA_DIR

if TYPE_CHECKING:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

PAD_TOKEN = "<|pad|>"
EOS_TOKEN = "<|endoftext|>"
SPECIAL_TOKENS = (PAD_TOKEN, EOS_TOKEN)
VOCAB_SIZE = 1024
TOKENIZER_FILE = DATA_DIR / "tokenizer.json"
MAX_LENGTH = 128  # n_positions of the tiny model


def train_tokenizer(texts: Iterable[str], vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    """Train the byte-level BPE on ``texts`` (deterministic for the same texts in the same order)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    return tok


def wrap(tok: Tokenizer) -> PreTrainedTokenizerFast:
    """Wrap a raw ``tokenizers.Tokenizer`` as a transformers fast tokenizer with our special tokens."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        bos_token=EOS_TOKEN,
        padding_side="left",
        model_max_length=MAX_LENGTH,
        clean_up_tokenization_spaces=False,
    )


def load_tokenizer(path: Path | str | None = None) -> PreTrainedTokenizerFast:
    """The shipped tokenizer (``data/tokenizer.json``), or the ``tokenizer.json`` at ``path``.

    ``path`` may be the file or a directory holding it (e.g. a checkpoint directory).
    """
    from tokenizers import Tokenizer

    file = Path(path) if path is not None else TOKENIZER_FILE
    if file.is_dir():
        file = file / "tokenizer.json"
    if not file.is_file():
        raise NotFoundError(f"tokenizer file {file} does not exist; run `rlcockpit world build-data`",
                            details={"path": str(file)})
    return wrap(Tokenizer.from_file(str(file)))


# ChatML, as Qwen2 instruct models write it: each turn is <|im_start|>role\ncontent<|im_end|>\n
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def chat_tokenizer(path: Path | str | None = None, max_length: int = 4096) -> PreTrainedTokenizerFast:
    """The tiny world's tokenizer as an instruct model's: ChatML turn markers added as special tokens,
    a chat template, ``<|im_end|>`` as EOS (the end of an assistant turn), ``<|endoftext|>`` as pad,
    left padding. Real architectures (Llama, Qwen2, GPT-2) built with random weights in the tests and
    benchmarks/gpu_smoke.py use it, so chat templates and EOS handling run offline."""
    tok = load_tokenizer(path)
    tok.add_special_tokens({"additional_special_tokens": [IM_START, IM_END]})
    tok.eos_token, tok.pad_token = IM_END, EOS_TOKEN
    tok.chat_template = CHATML_TEMPLATE
    tok.model_max_length = max_length
    return tok


__all__ = ["CHATML_TEMPLATE", "EOS_TOKEN", "IM_END", "IM_START", "PAD_TOKEN", "TOKENIZER_FILE", "VOCAB_SIZE",
           "chat_tokenizer", "load_tokenizer", "train_tokenizer", "wrap"]
