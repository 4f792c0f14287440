"""Incidents: findings grouped by the engine, summarised with the first-moving signal.

Pure functions over stored :class:`FindingRecord` lists, so the server, ``rlcockpit doctor`` and
the UI all tell the same story: "KL moved 6 steps before clip fraction and grad norm".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from rlcockpit.diagnostics.base import severity_rank
from rlcockpit.records import FindingRecord


@dataclass(frozen=True)
class Incident:
    incident: str
    severity: str  # the worst tier reached
    first_step: int
    last_step: int
    detectors: tuple[str, ...]  # in the order their signals started moving
    patterns: tuple[str, ...]
    summary: str
    summary_zh: str
    resolved: bool
    findings: tuple[FindingRecord, ...] = field(default=(), repr=False)


def group(findings: Iterable[FindingRecord]) -> list[Incident]:
    """One Incident per incident id (findings without one stand alone), newest first."""
    by_id: dict[str, list[FindingRecord]] = {}
    for i, f in enumerate(findings):
        by_id.setdefault(f.incident or f"finding-{f.finding_id or i}", []).append(f)
    out = [_incident(key, items) for key, items in by_id.items()]
    return sorted(out, key=lambda inc: (inc.first_step, inc.incident), reverse=True)


def _incident(key: str, items: list[FindingRecord]) -> Incident:
    onsets: dict[str, tuple[int, str]] = {}
    open_keys: dict[tuple[str, str], bool] = {}
    for f in items:
        ident = (f.detector, str(f.evidence.get("key", "")))
        open_keys[ident] = f.status != "resolved"
        if f.status == "resolved":
            continue
        onset = _int(f.evidence.get("onset_step"), f.step)
        signal = str(f.evidence.get("signal") or f.detector)
        if f.detector not in onsets or onset < onsets[f.detector][0]:
            onsets[f.detector] = (onset, signal)
    order = sorted(onsets.items(), key=lambda kv: (kv[1][0], kv[0]))
    patterns = tuple(dict.fromkeys(p for f in items for p in f.patterns))
    worst = max((f.severity for f in items), key=severity_rank)
    en, zh = first_mover(order, items)
    return Incident(incident=key, severity=worst, first_step=min(f.step for f in items),
                    last_step=max(f.step for f in items), detectors=tuple(d for d, _ in order),
                    patterns=patterns, summary=en, summary_zh=zh,
                    resolved=not any(open_keys.values()), findings=tuple(items))


def first_mover(order: list[tuple[str, tuple[int, str]]], items: list[FindingRecord]
                ) -> tuple[str, str]:
    """English and Chinese one-liners naming the signal that moved first."""
    if not order:
        return (items[0].message, str(items[0].evidence.get("message_zh") or items[0].message))
    first_step, first = order[0][1]
    signals = list(dict.fromkeys(sig for _, (_, sig) in order))
    if len(signals) == 1:
        msg = next((f.message for f in items if f.detector == order[0][0]), items[0].message)
        return (f"{first}: {msg}", f"{first}：{msg}")
    later = [(s, sig) for _, (s, sig) in order[1:] if sig != first]
    gap = min(s for s, _ in later) - first_step
    names = list(dict.fromkeys(sig for _, sig in later))
    en_names = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    zh_names = "、".join(names)
    if gap <= 0:
        return (f"{first} moved together with {en_names}", f"{first} 与 {zh_names} 同时出现异常")
    steps = "step" if gap == 1 else "steps"
    return (f"{first} moved {gap} {steps} before {en_names}",
            f"{first} 比 {zh_names} 早 {gap} 步出现异常")


def _int(value: object, default: int) -> int:
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return default
