"""``rlcockpit world ...``: the offline tiny world -- data, SFT warm start, evaluation.

Sub-commands: ``data`` (counts and examples), ``build-data`` (regenerate the shipped JSONL and
tokenizer), ``sft`` (train the warm start), ``rm`` (train the reward model), ``eval`` (sampled
accuracy per category).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "world", help="The offline tiny world: prompt data, SFT warm start, evaluation.",
        description="The tiny world that `make demo` trains on a CPU: a tiny GPT-2, a prompt set "
                    "with four categories (math, knowledge, safety, chat) and rule rewards.",
    )
    parser.set_defaults(func=lambda args: _help(parser))
    sub = parser.add_subparsers(dest="world_command", metavar="WORLD_COMMAND")
    _register_data(sub)
    _register_build(sub)
    _register_sft(sub)
    _register_rm(sub)
    _register_eval(sub)


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 1


def _register_data(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="Show prompt counts per category and split, with examples.",
                       description="Counts of the shipped prompts per category and split, the "
                                   "demonstration habits, and a few example prompts.")
    p.add_argument("--examples", type=int, default=1, metavar="N",
                   help="example prompts to show per category (default: 1)")
    p.set_defaults(func=cmd_data)


def _register_build(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("build-data", help="Regenerate the shipped JSONL files and tokenizer.",
                       description="Deterministically regenerate prompts_train.jsonl, "
                                   "prompts_validation.jsonl, sft_train.jsonl and tokenizer.json "
                                   "from the tables in world/data and a seed.")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="output directory (default: the package's world/data)")
    p.add_argument("--seed", type=int, default=0, help="data seed (default: 0, the shipped one)")
    p.set_defaults(func=cmd_build_data)


def _register_sft(sub: argparse._SubParsersAction) -> None:
    from rlcockpit.world.sft import SFTConfig

    defaults = SFTConfig()
    p = sub.add_parser("sft", help="Train the SFT warm start of the tiny model.",
                       description="Train the tiny GPT-2 from a seeded init on the shipped "
                                   "demonstrations and save a Hugging Face checkpoint directory. "
                                   "Same seed and thread count give identical weights.")
    p.add_argument("--out", type=Path, default=Path("runs/sft-tiny"), metavar="DIR",
                   help="checkpoint directory to write (default: runs/sft-tiny)")
    p.add_argument("--seed", type=int, default=defaults.seed, help="seed (default: %(default)s)")
    p.add_argument("--steps", type=int, default=defaults.steps,
                   help="optimiser steps (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=defaults.batch_size,
                   help="demonstrations per step (default: %(default)s)")
    p.add_argument("--lr", type=float, default=defaults.lr,
                   help="peak learning rate (default: %(default)s)")
    p.add_argument("--threads", type=int, default=defaults.threads,
                   help="torch CPU threads (default: %(default)s)")
    p.add_argument("--no-eval", action="store_true",
                   help="skip the validation evaluation after training")
    p.set_defaults(func=cmd_sft)


def _register_rm(sub: argparse._SubParsersAction) -> None:
    from rlcockpit.world.rm import RMTrainConfig

    defaults = RMTrainConfig()
    p = sub.add_parser("rm", help="Train the multi-head reward model of the tiny world.",
                       description="Train the reward model (heads: helpfulness, correctness, "
                                   "harmlessness) on preference pairs built from the world's rule "
                                   "rewards with noisy labels, plus the fusion LSTM, and save a "
                                   "checkpoint directory for reward.rm.path (docs/reward_model.md). "
                                   "Same seed and thread count give identical weights.")
    p.add_argument("--out", type=Path, default=Path("runs/rm-tiny"), metavar="DIR",
                   help="checkpoint directory to write (default: runs/rm-tiny)")
    p.add_argument("--seed", type=int, default=defaults.seed, help="seed (default: %(default)s)")
    p.add_argument("--steps", type=int, default=defaults.steps,
                   help="optimiser steps (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=defaults.batch_size,
                   help="preference pairs per step (default: %(default)s)")
    p.add_argument("--lr", type=float, default=defaults.lr,
                   help="learning rate (default: %(default)s)")
    p.add_argument("--label-temperature", type=float, default=defaults.label_temperature,
                   help="Bradley-Terry temperature of the label noise (default: %(default)s)")
    p.add_argument("--label-flip", type=float, default=defaults.label_flip,
                   help="extra share of flipped labels (default: %(default)s)")
    p.add_argument("--filler-bias", type=float, default=defaults.filler_bias,
                   help="share of filler pairs labelled for the filler: 1.0 builds the seed's "
                        "hackable reward model (default: %(default)s)")
    p.add_argument("--threads", type=int, default=defaults.threads,
                   help="torch CPU threads (default: %(default)s)")
    p.set_defaults(func=cmd_rm)


def _register_eval(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="Sample responses and report reward and accuracy per category.",
                       description="Sample one response per prompt with a fixed seed, score it "
                                   "with the rule rewards and print a table per category.")
    p.add_argument("--model", type=Path, default=None, metavar="DIR",
                   help="Hugging Face model directory (default: the shipped SFT checkpoint)")
    p.add_argument("--split", choices=("train", "validation"), default="validation",
                   help="prompt split (default: validation)")
    p.add_argument("--temperature", type=float, default=1.0,
                   help="sampling temperature, 0 for greedy (default: 1.0)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling (default: 1.0)")
    p.add_argument("--max-new-tokens", type=int, default=24, help="response budget (default: 24)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default: 0)")
    p.add_argument("--show", type=int, default=0, metavar="N",
                   help="also print N sampled responses per category")
    p.set_defaults(func=cmd_eval)


# --------------------------------------------------------------------------- commands


def cmd_data(args: argparse.Namespace) -> int:
    import collections

    from rich.console import Console
    from rich.table import Table

    from rlcockpit.world.prompts import CATEGORIES, SPLITS, load_prompts
    from rlcockpit.world.sft import load_demonstrations

    console = Console()
    splits = {s: load_prompts(s) for s in SPLITS}
    demos = load_demonstrations()
    table = Table(title="tiny world prompts")
    for col in ("category", *SPLITS, "demonstrations", "demonstration habits"):
        table.add_column(col, justify="left" if col in ("category", "demonstration habits") else "right")
    for cat in CATEGORIES:
        counts = [sum(p.category == cat for p in splits[s]) for s in SPLITS]
        habits = collections.Counter(d["habit"] for d in demos if d["category"] == cat)
        habit_text = ", ".join(f"{h} {n}" for h, n in habits.most_common())
        n_demos = sum(habits.values())
        table.add_row(cat, *map(str, counts), str(n_demos), habit_text)
    table.add_row("total", *(str(len(splits[s])) for s in SPLITS), str(len(demos)), "")
    console.print(table)
    for cat in CATEGORIES:
        for p in [p for p in splits["train"] if p.category == cat][: args.examples]:
            console.print(f"[bold]{p.prompt_id}[/bold] {p.prompt!r} -> answer {p.meta['answer']!r}")
    return 0


def cmd_build_data(args: argparse.Namespace) -> int:
    from rich.console import Console

    from rlcockpit.world.build import BuildConfig, build

    paths = build(args.out, BuildConfig(seed=args.seed))
    console = Console()
    for path in paths.values():
        console.print(f"wrote {path} ({path.stat().st_size:,} bytes)", highlight=False)
    return 0


def cmd_sft(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from rlcockpit.world.sft import SFTConfig, save_checkpoint, train_sft

    cfg = SFTConfig(seed=args.seed, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                    threads=args.threads)
    console = Console()
    columns = (TextColumn("SFT"), BarColumn(), MofNCompleteColumn(),
               TextColumn("loss {task.fields[loss]:.3f}"), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("sft", total=cfg.steps, loss=float("nan"))
        result = train_sft(cfg, on_step=lambda s, loss: progress.update(task, advance=1, loss=loss))
    out = save_checkpoint(result.model, result.tokenizer, args.out)
    console.print(f"saved {out} after {cfg.steps} steps in {result.wall_time_s:.1f} s "
                  f"(final loss {result.losses[-1]:.3f})", highlight=False)
    if not args.no_eval:
        _print_eval(console, result.model, result.tokenizer, "validation", temperature=1.0,
                    top_p=1.0, max_new_tokens=24, seed=0, show=0)
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from rlcockpit.world.rm import RMTrainConfig, save_rm, train_rm

    cfg = RMTrainConfig(seed=args.seed, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                        label_temperature=args.label_temperature, label_flip=args.label_flip,
                        filler_bias=args.filler_bias, threads=args.threads)
    console = Console()
    columns = (TextColumn("RM"), BarColumn(), MofNCompleteColumn(),
               TextColumn("loss {task.fields[loss]:.3f}"), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("rm", total=cfg.steps, loss=float("nan"))
        result = train_rm(cfg, on_step=lambda s, loss: progress.update(task, advance=1, loss=loss))
    out = save_rm(result, cfg, args.out)
    console.print(f"saved {out} after {cfg.steps} steps in {result.wall_time_s:.1f} s "
                  f"(final loss {result.losses[-1]:.3f})", highlight=False)
    for key, value in result.stats.items():
        console.print(f"  {key}: {value:.4g}", highlight=False)
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from rich.console import Console
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlcockpit.errors import NotFoundError
    from rlcockpit.world import SFT_CHECKPOINT

    model_dir = args.model or SFT_CHECKPOINT
    if not (Path(model_dir) / "config.json").is_file():
        raise NotFoundError(f"--model {model_dir} is not a Hugging Face model directory (no "
                            "config.json); train one with `rlcockpit world sft --out DIR`",
                            details={"path": str(model_dir)})
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    _print_eval(Console(), model, tokenizer, args.split, temperature=args.temperature,
                top_p=args.top_p, max_new_tokens=args.max_new_tokens, seed=args.seed,
                show=args.show)
    return 0


def _print_eval(console, model, tokenizer, split: str, *, show: int, **kwargs) -> None:
    from rich.table import Table

    from rlcockpit.world.evaluate import evaluate_detailed
    from rlcockpit.world.prompts import load_prompts

    report = evaluate_detailed(model, tokenizer, load_prompts(split), **kwargs)
    title = (f"{split}: temperature {kwargs['temperature']}, top-p {kwargs['top_p']}, "
             f"seed {kwargs['seed']}")
    table = Table(title=title)
    for col in ("category", "n", "reward mean", "accuracy", "flags (share of samples)"):
        table.add_column(col, justify="left" if col in ("category", "flags (share of samples)") else "right")
    for c in report.categories:
        flags = ", ".join(f"{f} {v:.0%}" for f, v in c.flag_rates.items() if v > 0)
        table.add_row(c.category, str(c.count), f"{c.reward_mean:+.3f}", f"{c.accuracy:.1%}", flags)
    table.add_row("all", str(len(report.samples)), f"{report.reward_mean:+.3f}", "", "")
    console.print(table)
    for c in report.categories:
        for s in [s for s in report.samples if s.prompt.category == c.category][:show]:
            console.print(f"{s.prompt.prompt!r} -> {s.response!r}  reward {s.reward:+.2f}",
                          highlight=False)
