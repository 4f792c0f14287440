"""Incidents: findings grouped by the engine, summarised with the first-moving signal.

Pure functions over stored :class:`FindingRecord` lists, so the server, ``rlcockpit doctor`` and
the UI all tell the same story: "KL moved 6 steps before clip fraction and grad norm". Live-parameter
changes noted before the incident's first finding (the findings' ``recent_changes`` evidence) are
added as context, never as the cause: "… (after actor_lr 5e-05 → 0.005 at step 99)".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from rlcockpit.diagnostics.base import int_or, severity_rank
from rlcockpit.records import FindingRecord

CONTEXT_PARAMS_MAX = 3  # parameters a summary names; the rest are counted


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
    ranks: dict[str, int] = {}  # the severity of the finding that named each detector's signal
    open_keys: dict[tuple[str, str], bool] = {}
    for f in items:
        ident = (f.detector, str(f.evidence.get("key", "")))
        open_keys[ident] = f.status != "resolved"
        if f.status == "resolved":
            continue
        onset = int_or(f.evidence.get("onset_step"), f.step)
        signal = str(f.evidence.get("signal") or f.detector)
        rank = severity_rank(f.severity)
        known = onsets.get(f.detector)
        # the earliest onset; at the same onset, the signal of the more severe finding
        if known is None or onset < known[0] or (onset == known[0] and rank > ranks[f.detector]):
            onsets[f.detector], ranks[f.detector] = (onset, signal), rank
    order = sorted(onsets.items(), key=lambda kv: (kv[1][0], kv[0]))
    patterns = tuple(dict.fromkeys(p for f in items for p in f.patterns))
    worst = max((f.severity for f in items), key=severity_rank)
    en, zh = first_mover(order, items)
    first_step = min(f.step for f in items)
    ctx_en, ctx_zh = change_context(changes_before(items, first_step))
    return Incident(incident=key, severity=worst, first_step=first_step,
                    last_step=max(f.step for f in items), detectors=tuple(d for d, _ in order),
                    patterns=patterns, summary=en + ctx_en, summary_zh=zh + ctx_zh,
                    resolved=not any(open_keys.values()), findings=tuple(items))


def first_mover(order: list[tuple[str, tuple[int, str]]], items: list[FindingRecord]
                ) -> tuple[str, str]:
    """English and Chinese one-liners naming the signal that moved first."""
    if not order:
        return (items[0].message, str(items[0].evidence.get("message_zh") or items[0].message))
    first_step, first = order[0][1]
    signals = list(dict.fromkeys(sig for _, (_, sig) in order))
    if len(signals) == 1:
        head = next((f for f in items if f.detector == order[0][0]), items[0])
        msg_zh = str(head.evidence.get("message_zh") or head.message)  # Chinese when the detector wrote it
        return (f"{first}: {head.message}", f"{first}：{msg_zh}")
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


def changes_before(items: Iterable[FindingRecord], first_step: int) -> list[dict]:
    """The ``recent_changes`` of the findings made before ``first_step``, once each, oldest first."""
    seen: dict[str, dict] = {}
    for f in items:
        changes = f.evidence.get("recent_changes")
        for c in changes if isinstance(changes, list) else ():
            if isinstance(c, Mapping) and int_or(c.get("step"), first_step) < first_step:
                seen.setdefault(repr(sorted(c.items())), dict(c))
    return sorted(seen.values(), key=lambda c: int_or(c.get("step"), 0))


def change_context(changes: list[dict]) -> tuple[str, str]:
    """" (after actor_lr 5e-05 → 0.005 at step 99)" and its Chinese; per parameter the first value
    before and the last after, with the step (or the steps of a ramp); empty without changes."""
    spans: dict[str, list] = {}  # name -> [before, after, first step, last step]
    for c in changes:
        step = int_or(c.get("step"), 0)
        for name, diff in (c.get("changes") or {}).items():
            diff = diff if isinstance(diff, Mapping) else {"after": diff}
            span = spans.setdefault(name, [diff.get("before"), None, step, step])
            span[1], span[3] = diff.get("after"), step
    if not spans:
        return "", ""
    en, zh = [], []
    for name, (before, after, first, last) in list(spans.items())[:CONTEXT_PARAMS_MAX]:
        move = f"{name} {_value(before)} → {_value(after)}"
        en.append(f"{move} at step {first}" if first == last else f"{move} over steps {first}–{last}")
        zh.append(f"第 {first} 步 {move}" if first == last else f"第 {first}–{last} 步 {move}")
    more = len(spans) - CONTEXT_PARAMS_MAX
    if more > 0:
        en.append(f"and {more} more")
        zh.append(f"另有 {more} 项")
    return f" (after {', '.join(en)})", f"（在{'，'.join(zh)} 之后）"


def _value(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "?" if v is None else str(v)


