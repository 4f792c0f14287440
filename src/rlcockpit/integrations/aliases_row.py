"""One row of the alias tables (:mod:`rlcockpit.integrations.aliases`), and one row of the list
of foreign keys kept under ``import/`` on purpose. Standard library only."""

from __future__ import annotations

import re
from dataclasses import dataclass

# What a placeholder of a pattern row matches: one path segment, or (``{dataset}``) a data source
# name that may itself hold slashes (verl's ``openai/gsm8k``); its slashes become "_" in the target.
PLACEHOLDERS = {"component": r"[^/]+", "phase": r"[^/]+", "dataset": r".+?", "n": r"\d+"}
_PLACEHOLDER = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")


@dataclass(frozen=True)
class Alias:
    """``key`` (as the source logs it) means the catalog metric ``target``.

    A placeholder in ``key`` and ``target`` makes a pattern row, e.g. TRL's
    ``rewards/{component}/mean`` -> ``reward/{component}/mean`` or verl's ``timing_s/{phase}`` ->
    ``time/{phase}_s``.
    """

    source: str
    key: str
    target: str
    origin: str
    note: str = ""

    @property
    def is_pattern(self) -> bool:
        return bool(_PLACEHOLDER.search(self.key))

    def regex(self) -> re.Pattern[str]:
        parts = _PLACEHOLDER.split(self.key)
        return re.compile("".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>{PLACEHOLDERS[p]})"
                                  for i, p in enumerate(parts)) + r"\Z")

    def render(self, match: re.Match[str]) -> str:
        """The target with the placeholders of ``match`` filled in."""
        return _PLACEHOLDER.sub(lambda m: match[m.group(1)].replace("/", "_"), self.target)


@dataclass(frozen=True)
class Kept:
    """A foreign key that looks like a catalog metric but measures something else: it stays under
    ``import/<source>/<key>``, and ``note`` says why (listed in docs/import_export.md)."""

    source: str
    key: str
    note: str
