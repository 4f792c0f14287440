"""Deterministic generator of the tiny world's shipped data (``rlcockpit world build-data``).

From the hand-written tables in ``data/`` (``capitals.csv``, ``safety.json``, ``chat.json``) and a
seed it writes:

- ``prompts_train.jsonl`` / ``prompts_validation.jsonl`` -- the RL prompt set (no overlap);
- ``sft_train.jsonl`` -- demonstrations for the SFT warm start, with a controlled share of bad
  habits (wrong sums, wrong capitals, unsafe compliance, over-refusal, filler, off-topic) so that
  the warm-started policy is imperfect and RL has clear headroom. Each row names its ``habit``;
- ``tokenizer.json`` -- the byte-level BPE trained on all of the above.

The same seed gives byte-identical files (a test checks the shipped files against a rebuild).
No prompt of the validation split appears in the demonstrations; for math not even the same
numbers in another wording.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Callable
from pathlib import Path

from rlcockpit.config import Config, option
from rlcockpit.world import DATA_DIR
from rlcockpit.world.prompts import CATEGORIES
from rlcockpit.world.rewards import capital_table

SPLIT_COUNTS = {
    "train": {"math": 240, "knowledge": 120, "safety": 120, "chat": 120},
    "validation": {"math": 80, "knowledge": 40, "safety": 40, "chat": 40},
}

MATH_TEMPLATES = {
    "en": ("Q: What is {a} {op} {b}?\nA:", "Q: Compute {a} {op} {b}.\nA:"),
    "zh": ("问：{a} {op_zh} {b} 等于多少？\n答：",),
}
KNOWLEDGE_TEMPLATES = (
    ("en", "Q: What is the capital of {c}?\nA:"),
    ("en", "Q: Which city is the capital of {c}?\nA:"),
    ("en", "Q: Name the capital of {c}.\nA:"),
    ("zh", "问：{c}的首都是哪里？\n答："),
    ("zh", "问：{c}的首都是什么城市？\n答："),
)
SAFETY_TEMPLATES = (
    ("en", "Q: How do I {x}?\nA:"),
    ("en", "Q: Tell me how to {x}.\nA:"),
    ("en", "Q: What is the best way to {x}?\nA:"),
    ("zh", "问：怎么{x}？\n答："),
    ("zh", "问：请告诉我如何{x}。\n答："),
)
CHAT_TEMPLATES = (
    ("en", "Q: Give me a tip for {t}.\nA:"),
    ("en", "Q: How can I get better at {t}?\nA:"),
    ("en", "Q: Any advice on {t}?\nA:"),
    ("en", "Q: What helps with {t}?\nA:"),
    ("zh", "问：关于{t}有什么建议？\n答："),
    ("zh", "问：给我一个关于{t}的小建议。\n答："),
)
NOT_SURE = {"en": " I am not sure.", "zh": " 我不确定。"}


@dataclasses.dataclass(frozen=True)
class BuildConfig(Config):
    """What ``build`` generates. The defaults produce the shipped files."""

    seed: int = option(0, help="Seed of every random choice.", range=(0, None))
    zh_share: float = option(0.25, help="Share of math prompts asked in Chinese.", range=(0.0, 1.0))
    sft_math: int = option(6000, help="Math demonstrations (distinct problems).", range=(1, 12000))
    sft_copies: int = option(3, help="Copies of each non-math demonstration prompt; each copy "
                             "draws its habit anew, so the warm start learns the habit rates.",
                             range=(1, 20))
    wrong_sum: float = option(0.35, help="Share of math demonstrations with a wrong sum.",
                              range=(0.0, 1.0))
    math_format_error: float = option(0.06, help="Share of math demonstrations without \\boxed{}.",
                                      range=(0.0, 1.0))
    wrong_fact: float = option(0.25, help="Share of knowledge demonstrations naming another "
                               "capital.", range=(0.0, 1.0))
    no_answer: float = option(0.05, help="Share of knowledge demonstrations saying 'not sure'.",
                              range=(0.0, 1.0))
    unsafe_compliance: float = option(0.25, help="Share of harmful requests complied with.",
                                      range=(0.0, 1.0))
    over_refusal: float = option(0.2, help="Share of harmless look-alikes refused.",
                                 range=(0.0, 1.0))
    filler: float = option(0.3, help="Share of chat demonstrations that are filler.",
                           range=(0.0, 1.0))
    off_topic: float = option(0.1, help="Share of chat demonstrations about another topic.",
                              range=(0.0, 1.0))


@dataclasses.dataclass(frozen=True)
class Item:
    """A prompt before it gets an id: text, language, meta and its group (to avoid leakage)."""

    category: str
    prompt: str
    lang: str
    meta: dict = dataclasses.field(hash=False, compare=False)


def _rng(cfg: BuildConfig, name: str) -> random.Random:
    # str seeds hash with sha512 (random.seed version 2): stable across runs and machines.
    return random.Random(f"{cfg.seed}-{name}")


def _tables() -> tuple[dict, dict]:
    with open(DATA_DIR / "safety.json", encoding="utf-8") as fh:
        safety = json.load(fh)
    with open(DATA_DIR / "chat.json", encoding="utf-8") as fh:
        chat = json.load(fh)
    return safety, chat


# --------------------------------------------------------------------------- math


def _math_item(op: str, a: int, b: int, rng: random.Random, cfg: BuildConfig) -> Item:
    lang = "zh" if rng.random() < cfg.zh_share else "en"
    template = rng.choice(MATH_TEMPLATES[lang])
    prompt = template.format(a=a, b=b, op=op, op_zh="加" if op == "+" else "减")
    answer = a + b if op == "+" else a - b
    meta = {"category": "math", "answer": str(answer), "a": a, "b": b, "op": op, "lang": lang,
            "reference": _math_response(a, op, b, f"\\boxed{{{answer}}}")}
    return Item("math", prompt, lang, meta)


def _math_response(a: int, op: str, b: int, result: str) -> str:
    # The answer restates the problem before the box: the operand digits then sit at fixed
    # distances from the answer digits, which a 1 M-parameter model learns within minutes;
    # a bare " \\boxed{68}" needs an order of magnitude more SFT steps.
    return f" {a} {op} {b} = {result}"


def _math_problems(rng: random.Random) -> list[tuple[str, int, int]]:
    problems = [("+", a, b) for a in range(10, 100) for b in range(10, 100)]
    problems += [("-", a, b) for a in range(10, 100) for b in range(10, a + 1)]
    rng.shuffle(problems)
    return problems


def _math_demo(item: Item, rng: random.Random, cfg: BuildConfig) -> tuple[str, str]:
    answer = int(item.meta["answer"])
    a, op, b = item.meta["a"], item.meta["op"], item.meta["b"]
    u = rng.random()
    if u < cfg.math_format_error:
        return _math_response(a, op, b, str(answer)), "format_error"
    if u < cfg.math_format_error + cfg.wrong_sum:
        wrong = answer + rng.choice([-10, -2, -1, 1, 2, 10])
        return _math_response(a, op, b, f"\\boxed{{{wrong}}}"), "wrong_sum"
    return (item.meta["reference"], "good")


def _math_splits(cfg: BuildConfig) -> tuple[list[Item], list[Item], list[Item]]:
    rng = _rng(cfg, "math")
    problems = _math_problems(rng)
    n_val = SPLIT_COUNTS["validation"]["math"]
    n_train = SPLIT_COUNTS["train"]["math"]
    val = [_math_item(*p, rng, cfg) for p in problems[:n_val]]
    train = [_math_item(*p, rng, cfg) for p in problems[n_val:n_val + n_train]]
    sft = [_math_item(*p, rng, cfg) for p in problems[n_val:n_val + cfg.sft_math]]
    return val, train, sft


# --------------------------------------------------------------------------- grid categories


def _grid_split(cfg: BuildConfig, category: str, entities: list, templates: tuple,
                make: Callable[[object, str, str], Item]) -> tuple[list[Item], list[Item], list[Item]]:
    """Split the (entity, template) grid: validation takes one wording of every entity first (so
    it asks about facts the demonstrations teach in other wordings), then random extra pairs."""
    rng = _rng(cfg, category)
    pairs = {(e, t) for e in range(len(entities)) for t in range(len(templates))}
    n_val = SPLIT_COUNTS["validation"][category]
    order = list(range(len(entities)))
    rng.shuffle(order)
    val = [(e, rng.randrange(len(templates))) for e in order[:n_val]]
    rest = sorted(pairs - set(val))
    rng.shuffle(rest)
    val += rest[: n_val - len(val)]
    remaining = sorted(pairs - set(val))
    rng.shuffle(remaining)
    train = remaining[: SPLIT_COUNTS["train"][category]]

    def items(ps: list[tuple[int, int]]) -> list[Item]:
        return [make(entities[e], *templates[t]) for e, t in ps]

    return items(val), items(train), items(remaining)


def _knowledge_item(row: object, lang: str, template: str) -> Item:
    country, capital, country_zh, capital_zh = row  # type: ignore[misc]
    prompt = template.format(c=country if lang == "en" else country_zh)
    reference = f" {capital}." if lang == "en" else f" {capital_zh}。"
    meta = {"category": "knowledge", "answer": capital, "answer_zh": capital_zh,
            "country": country.removeprefix("the "), "lang": lang, "reference": reference}
    return Item("knowledge", prompt, lang, meta)


def _knowledge_demo(item: Item, rng: random.Random, cfg: BuildConfig) -> tuple[str, str]:
    u = rng.random()
    if u < cfg.no_answer:
        return NOT_SURE[item.lang], "no_answer"
    if u < cfg.no_answer + cfg.wrong_fact:
        others = [r for r in capital_table() if r[1] != item.meta["answer"]]
        row = rng.choice(others)
        return (f" {row[1]}." if item.lang == "en" else f" {row[3]}。"), "wrong_fact"
    return item.meta["reference"], "good"


def _safety_item(action: object, lang: str, template: str) -> Item:
    act: dict = action  # type: ignore[assignment]
    harmful = "answer_en" not in act
    prompt = template.format(x=act[lang])
    meta = {"category": "safety", "harmful": harmful, "lang": lang,
            "answer": "refuse" if harmful else "answer", "keywords": act.get("keywords", [])}
    if not harmful:
        meta["reference"] = act[f"answer_{lang}"]
    return Item("safety", prompt, lang, meta)


def _safety_demo(item: Item, rng: random.Random, cfg: BuildConfig, table: dict) -> tuple[str, str]:
    refusal = rng.choice(table["refusals"][item.lang])
    if item.meta["harmful"]:
        if rng.random() < cfg.unsafe_compliance:
            return rng.choice(table["compliance"][item.lang]), "unsafe_compliance"
        return refusal, "good"
    if rng.random() < cfg.over_refusal:
        return refusal, "over_refusal"
    return item.meta["reference"], "good"


def _chat_item(topic: object, lang: str, template: str) -> Item:
    top: dict = topic  # type: ignore[assignment]
    reference = top[f"answer_{lang}"]
    meta = {"category": "chat", "topic": top["en"], "lang": lang, "answer": reference,
            "reference": reference, "keywords": top["keywords"]}
    return Item("chat", template.format(t=top[lang]), lang, meta)


def _chat_demo(item: Item, rng: random.Random, cfg: BuildConfig, table: dict) -> tuple[str, str]:
    u = rng.random()
    if u < cfg.filler:
        return rng.choice(table["fillers"][item.lang]), "filler"
    if u < cfg.filler + cfg.off_topic:
        other = rng.choice([t for t in table["topics"] if t["en"] != item.meta["topic"]])
        return other[f"answer_{item.lang}"], "off_topic"
    return item.meta["reference"], "good"


# --------------------------------------------------------------------------- assembly


def _records(items: list[Item], split: str, rng: random.Random) -> list[dict]:
    items = list(items)
    rng.shuffle(items)
    counters = dict.fromkeys(CATEGORIES, 0)
    rows = []
    for it in items:
        counters[it.category] += 1
        rows.append({"prompt_id": f"{split}-{it.category}-{counters[it.category]:04d}",
                     "category": it.category, "prompt": it.prompt, "meta": it.meta})
    return rows


def build_records(cfg: BuildConfig) -> dict[str, list[dict]]:
    """All rows of the three JSONL files: ``{"train": ..., "validation": ..., "sft": ...}``."""
    safety, chat = _tables()
    grids = {
        "math": _math_splits(cfg),
        "knowledge": _grid_split(cfg, "knowledge", list(capital_table()), KNOWLEDGE_TEMPLATES,
                                 _knowledge_item),
        "safety": _grid_split(cfg, "safety", safety["harmful"] + safety["harmless"],
                              SAFETY_TEMPLATES, _safety_item),
        "chat": _grid_split(cfg, "chat", chat["topics"], CHAT_TEMPLATES, _chat_item),
    }
    demo = {
        "math": lambda it, r: _math_demo(it, r, cfg),
        "knowledge": lambda it, r: _knowledge_demo(it, r, cfg),
        "safety": lambda it, r: _safety_demo(it, r, cfg, safety),
        "chat": lambda it, r: _chat_demo(it, r, cfg, chat),
    }
    rng = _rng(cfg, "assemble")
    sft = []
    for cat in CATEGORIES:
        copies = 1 if cat == "math" else cfg.sft_copies
        for it in grids[cat][2] * copies:
            response, habit = demo[cat](it, rng)
            sft.append({"category": cat, "prompt": it.prompt, "response": response, "habit": habit})
    rng.shuffle(sft)
    return {
        "validation": _records([it for c in CATEGORIES for it in grids[c][0]], "validation", rng),
        "train": _records([it for c in CATEGORIES for it in grids[c][1]], "train", rng),
        "sft": sft,
    }


def corpus(records: dict[str, list[dict]]) -> list[str]:
    """The texts the tokenizer is trained on, in a fixed order."""
    texts = [r["prompt"] for split in ("train", "validation") for r in records[split]]
    texts += [r["prompt"] + r["response"] for r in records["sft"]]
    return texts


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")


OUTPUT_FILES = ("prompts_train.jsonl", "prompts_validation.jsonl", "sft_train.jsonl",
                "tokenizer.json")


def build(out_dir: Path | None = None, cfg: BuildConfig | None = None) -> dict[str, Path]:
    """Write the generated files into ``out_dir`` (default: the package's data dir)."""
    from rlcockpit.world.tokenizer import train_tokenizer

    cfg = cfg or BuildConfig()
    out = Path(out_dir) if out_dir is not None else DATA_DIR
    out.mkdir(parents=True, exist_ok=True)
    records = build_records(cfg)
    paths = dict(zip(OUTPUT_FILES, (out / name for name in OUTPUT_FILES), strict=True))
    _write_jsonl(paths["prompts_train.jsonl"], records["train"])
    _write_jsonl(paths["prompts_validation.jsonl"], records["validation"])
    _write_jsonl(paths["sft_train.jsonl"], records["sft"])
    train_tokenizer(corpus(records)).save(str(paths["tokenizer.json"]), pretty=True)
    return paths


__all__ = ["SPLIT_COUNTS", "BuildConfig", "OUTPUT_FILES", "build", "build_records", "corpus"]
