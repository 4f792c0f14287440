"""Reading what a trainer printed to its console: lines, Python dict reprs, ``Key: value`` pairs.

Console logs are text meant for people: progress bars, warnings and colour codes sit between
the records, and numbers are printed the way Python prints them (bare ``nan`` and ``inf``, numpy
scalars as ``np.float64(0.5)``). Nothing here evaluates code: a dict repr is read by
``ast.literal_eval`` after a token substitution done outside quoted strings, and refused when it
nests deeper than :data:`~rlcockpit.integrations.importers._base.MAX_DEPTH`.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from rlcockpit.errors import ImportFormatError
from rlcockpit.integrations.importers._base import MAX_DEPTH, fail, nesting_depth

MAX_LINE = 1_000_000  # characters; a longer "line" is not a console record
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_STRING = re.compile(r"""('(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")""")
# numpy / torch scalars as their reprs print them: np.float64(0.5), tensor(0.5, device='cuda:0')
_WRAPPED = re.compile(r"\b(?:np\.|numpy\.)?(?:float|int|uint|bool_?)(?:8|16|32|64|128)?\(\s*([^(),]+?)\s*\)"
                      r"|\btensor\(\s*([^(),]+?)\s*(?:,[^()]*)?\)")
_NONFINITE_TOKEN = re.compile(r"-\s*inf\b|\binf\b|\bnan\b|\bNaN\b|-\s*Infinity\b|\bInfinity\b")
_PLACEHOLDER = {"nan": "__rlc_nan__", "inf": "__rlc_inf__", "-inf": "__rlc_-inf__"}
_FROM_PLACEHOLDER = {"__rlc_nan__": math.nan, "__rlc_inf__": math.inf, "__rlc_-inf__": -math.inf}
_NUMBER = re.compile(r"^\s*([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|inf(?:inity)?|nan))"
                     r"\s*([A-Za-z%][A-Za-z%/]*)?\s*$", re.IGNORECASE)
_KEY_TAIL = re.compile(r"([A-Za-z_][\w .()/@%\-]*)$")
_DURATION = re.compile(r"^\s*(?:(\d+)d\s*)?(?:(\d+)h\s*)?(?:(\d+)m\s*)?(?:(\d+(?:\.\d+)?)s)?\s*$")
# Python's str(timedelta): "0:01:02", "1 day, 2:03:04.5" (LLaMA-Factory's trainer_log.jsonl)
_CLOCK = re.compile(r"^\s*(?:(\d+) days?, )?(\d+):([0-5]\d):([0-5]\d(?:\.\d+)?)\s*$")


def text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of a console log: UTF-8 (undecodable bytes replaced), colour codes
    removed, a carriage return (a progress bar redrawing itself) ends a line too."""
    try:
        with path.open(encoding="utf-8", errors="replace", newline="") as handle:
            for number, raw in enumerate(handle, start=1):
                for text in clean_line(raw):
                    yield number, text
    except OSError as exc:
        raise fail(path, "", f"cannot be read ({exc.strerror})", "Check the path and permissions") from exc


def clean_line(raw: str) -> list[str]:
    """The texts of one raw console line: colour codes removed, split at carriage returns (a
    progress bar redrawing itself), blank parts left out."""
    parts = (_ANSI.sub("", part).strip() for part in raw.replace("\r\n", "\n").split("\r"))
    return [text for text in parts if text]


def is_text_file(path: Path, probe: int = 4096) -> bool:
    """True when the file's first bytes look like text (no NUL byte): binary files are no logs."""
    try:
        with path.open("rb") as handle:
            head = handle.read(probe)
    except OSError:
        return False
    return b"\x00" not in head


def head_lines(path: Path, limit: int = 400) -> list[str]:
    """The first ``limit`` non-blank lines (for sniffing); [] when the file is not readable text."""
    if not is_text_file(path):
        return []
    out: list[str] = []
    try:
        for _, line in text_lines(path):
            out.append(line[:MAX_LINE])
            if len(out) >= limit:
                break
    except ImportFormatError:  # a sniffer answers "not this format", it never raises
        return []
    return out


def _substitute(chunk: str) -> str:
    def token(match: re.Match[str]) -> str:
        word = match.group(0).replace(" ", "").lower().replace("infinity", "inf")
        return repr(_PLACEHOLDER[word])

    return _NONFINITE_TOKEN.sub(token, chunk)


def dict_span(line: str) -> str | None:
    """The ``{...}`` part of a line (first ``{`` to last ``}``), or None."""
    start, end = line.find("{"), line.rfind("}")
    return line[start:end + 1] if 0 <= start < end else None


def parse_pydict(text: str) -> dict[str, Any] | None:
    """A dict printed by Python (``str(logs)``), read safely; None when ``text`` is not one.

    Bare ``nan``/``inf``/``-inf`` (and ``NaN``/``Infinity``) become floats, numpy and torch
    scalar reprs their number; nested dicts are flattened with ``/``.
    """
    if len(text) > MAX_LINE or nesting_depth(text) > MAX_DEPTH:
        return None
    text = _WRAPPED.sub(lambda m: m.group(1) or m.group(2), text)
    parts = _STRING.split(text)  # odd indices are quoted strings: left exactly as printed
    safe = "".join(part if i % 2 else _substitute(part) for i, part in enumerate(parts))
    try:
        value = ast.literal_eval(safe)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        return None
    return flatten(value)


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}/"))
        elif isinstance(value, str) and value in _FROM_PLACEHOLDER:
            out[name] = _FROM_PLACEHOLDER[value]
        else:
            out[name] = value
    return out


def parse_number(text: str) -> tuple[float, str] | None:
    """``"0.25"`` -> (0.25, ""), ``"2.55s"`` -> (2.55, "s"), ``"inf"`` -> (inf, ""); else None."""
    match = _NUMBER.match(text)
    if not match:
        return None
    try:
        value = float(match.group(1))
    except (ValueError, OverflowError):
        return None
    if math.isinf(value) and "inf" not in match.group(1).lower():
        return None  # 1e400: beyond the float range, not an infinity that was printed
    return value, match.group(2) or ""


def parse_duration(text: str) -> float | None:
    """Seconds of ms-swift's ``format_time`` text (``"5m 18s"``, ``"2d 0h 18m 21s"``) or of Python's
    ``str(timedelta)`` (``"0:01:02"``, ``"1 day, 2:03:04"``, LLaMA-Factory); else None."""
    clock = _CLOCK.match(text)
    if clock:
        days, hours, minutes, seconds = (float(g) if g else 0.0 for g in clock.groups())
        return ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    match = _DURATION.match(text)
    if not match or not any(match.groups()):
        return None
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def kv_pairs(line: str) -> list[tuple[str, str]]:
    """``Key: value`` pairs of a console line, separated by ``,`` or ``|``: MiniMind's
    ``Epoch:[1/1](5/100), Reward: 0.5, KL_ref: 0.01`` or DeepSpeed-Chat's ``act_loss: 0.1|...``."""
    pairs = []
    for part in re.split(r"\s*\|\s*|,\s+|,(?=\s*[A-Za-z_])", line):
        before, sep, value = part.partition(":")
        key = _KEY_TAIL.search(before)  # after a logger's prefix: "[cosmos] 2025-05-01 - Step"
        if sep and key and len(key.group(1).strip()) <= 80:
            pairs.append((key.group(1).strip(), value.strip()))
    return pairs
