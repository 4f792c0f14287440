"""``rlcockpit library``: search and read the failure library (docs/library.md), in English or
Chinese. Results print in the query's language; ``--json`` gives machine-readable output."""

from __future__ import annotations

import argparse
import json

LANG_CHOICES = ("en", "zh")
LABELS = {
    "en": {"symptoms": "symptoms", "causes": "causes", "diagnosis": "quick diagnosis",
           "fixes": "fixes", "detectors": "detectors", "seed": "source", "score": "score",
           "more": "full entry", "none": "no failure pattern matches"},
    "zh": {"symptoms": "症状", "causes": "可能原因", "diagnosis": "快速诊断", "fixes": "解决方案",
           "detectors": "检测器", "seed": "出处", "score": "得分", "more": "完整条目",
           "none": "没有匹配的故障模式"},
}

EPILOG = """examples:
  rlcockpit library search "KL 突增怎么办"
  rlcockpit library search "responses getting longer and longer" --k 3
  rlcockpit library show kl_explosion --lang zh
  rlcockpit library list --json

Search is BM25 over words and character n-grams (no model, offline); the query language is
detected from the text (any Chinese character -> zh) unless --lang is given."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "library", help="search the failure library (symptoms, causes, diagnosis, fixes; en / zh)",
        description="The failure library: every known failure pattern of RL post-training with "
                    "its symptoms, causes, quick diagnosis and fixes, in English and Chinese.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="library_command", metavar="LIBRARY_COMMAND", required=True)
    s = sub.add_parser("search", help="find the patterns matching a question or symptom",
                       description="Find the failure patterns best matching a free-text query "
                                   "in English or Chinese.")
    s.add_argument("query", help='what you see, e.g. "KL keeps rising" or "熵掉得很快"')
    s.add_argument("--k", type=int, default=5, help="how many results (default 5)")
    s.add_argument("--lang", choices=LANG_CHOICES, default=None,
                   help="language of the query and the output (default: detected)")
    s.add_argument("--json", action="store_true", help="print JSON instead of text")
    s.set_defaults(func=cmd_search)
    sh = sub.add_parser("show", help="print one pattern in full",
                        description="Print one failure pattern: symptoms, causes, quick "
                                    "diagnosis, fixes, detectors and source section.")
    sh.add_argument("id", help="pattern id (see `rlcockpit library list`)")
    sh.add_argument("--lang", choices=LANG_CHOICES, default="en", help="language (default en)")
    sh.add_argument("--json", action="store_true", help="print JSON (both languages)")
    sh.set_defaults(func=cmd_show)
    ls = sub.add_parser("list", help="list every pattern id with its title",
                        description="List every failure pattern: id, title, detectors, source.")
    ls.add_argument("--lang", choices=LANG_CHOICES, default="en", help="language (default en)")
    ls.add_argument("--json", action="store_true", help="print one JSON array")
    ls.set_defaults(func=cmd_list)


def _library():
    from rlcockpit.diagnostics.library import load_library

    return load_library()


def _section(text, label: str, items, style: str) -> None:
    text.append(f"   {label}:\n", style=style)
    for item in items:
        text.append(f"     - {item}\n")


def cmd_search(args: argparse.Namespace) -> int:
    from rlcockpit.errors import ConfigError

    if args.k < 1:
        raise ConfigError(f"--k {args.k} must be >= 1 (how many results to show)")
    hits = _library().search(args.query, k=args.k, lang=args.lang)
    lang = hits[0].lang if hits else (args.lang or _detect(args.query))
    if args.json:
        rows = [{"score": h.score, **h.pattern.to_dict(lang)} for h in hits]
        print(json.dumps({"query": args.query, "lang": lang, "hits": rows}, ensure_ascii=False,
                         indent=2))
        return 0
    from rich.console import Console
    from rich.text import Text

    labels = LABELS[lang]
    out = Text()
    if not hits:
        out.append(f"{labels['none']}: {args.query!r} (rlcockpit library list)\n")
    for rank, hit in enumerate(hits, 1):
        p = hit.pattern
        out.append(f"{rank}. {p.title[lang]}", style="bold")
        out.append(f"  [{p.id}]  {labels['score']} {hit.score:.2f}\n", style="dim")
        _section(out, labels["symptoms"], p.symptoms[lang], "yellow")
        _section(out, labels["diagnosis"], p.diagnosis[lang], "cyan")
        _section(out, labels["fixes"], p.fixes[lang], "green")
        out.append(f"   {labels['more']}: rlcockpit library show {p.id} --lang {lang}\n\n",
                   style="dim")
    out.rstrip()
    Console(soft_wrap=True).print(out)
    return 0


def _detect(query: str) -> str:
    from rlcockpit.diagnostics.library.search import detect_lang

    return detect_lang(query)


def cmd_show(args: argparse.Namespace) -> int:
    pattern = _library().get(args.id)
    if args.json:
        print(json.dumps(pattern.to_dict(), ensure_ascii=False, indent=2))
        return 0
    from rich.console import Console
    from rich.text import Text

    lang, labels = args.lang, LABELS[args.lang]
    out = Text()
    out.append(f"{pattern.title[lang]}", style="bold")
    out.append(f"  [{pattern.id}]\n", style="dim")
    for name, style in (("symptoms", "yellow"), ("causes", "magenta"), ("diagnosis", "cyan"),
                        ("fixes", "green")):
        _section(out, labels[name], getattr(pattern, name)[lang], style)
    out.append(f"   {labels['detectors']}: {', '.join(pattern.detectors) or '-'}\n")
    out.append(f"   {labels['seed']}: {pattern.seed}\n")
    out.rstrip()
    Console(soft_wrap=True).print(out)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    library = _library()
    if args.json:
        rows = [{"id": p.id, "title": dict(p.title), "detectors": list(p.detectors),
                 "seed": p.seed} for p in library]
        print(json.dumps(rows, ensure_ascii=False, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"failure library ({len(library)} patterns)")
    for column in ("id", "title", "detectors", "seed"):
        table.add_column(column, no_wrap=column == "id")
    for p in library:
        table.add_row(p.id, p.title[args.lang], ", ".join(p.detectors) or "-", p.seed)
    Console().print(table)
    return 0
