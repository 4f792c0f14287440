"""The review queue of the reward-model track (seed 000 §3.1: "标记该样本为需人工复核").

Samples the rule fallback scored carry the flag ``needs_review``. A person (operator or above)
labels each one ``good`` or ``bad`` with an optional note; every label is an entry of the
hash-chained audit log (action ``review_label``), so who labelled what and when is tamper-evident
and nothing needs a new table. The latest label of a sample wins. :meth:`ReviewQueue.export`
turns the labels into reward-model training rows (prompt, response, label +1 / -1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlcockpit.control.errors import ConflictError, TicketError
from rlcockpit.control.users import Principal
from rlcockpit.records import AuditEntry, SampleRecord
from rlcockpit.store.base import ControlStore, SampleQuery, StoreReader

REVIEW_FLAG = "needs_review"
REVIEW_ACTION = "review_label"
LABELS = {"good": 1.0, "bad": -1.0}
MAX_NOTE = 2000
PAGE = 5000  # samples read per store query


@dataclass(frozen=True)
class ReviewLabel:
    step: int
    sample_id: int
    label: str
    reviewer: str
    note: str
    at: float
    seq: int | None


class ReviewQueue:
    """Labels on ``needs_review`` samples, kept in the audit log."""

    def __init__(self, store: ControlStore, runs: StoreReader) -> None:
        self.store = store
        self.runs = runs

    def label(self, who: Principal, run: str, step: int, sample_id: int, label: str,
              note: str = "") -> ReviewLabel:
        if label not in LABELS:
            raise TicketError(f"label {label!r} is not one of {', '.join(LABELS)}",
                              details={"label": label, "allowed": list(LABELS)})
        if len(note) > MAX_NOTE:
            raise TicketError(f"note is {len(note)} characters; at most {MAX_NOTE}",
                              details={"note_length": len(note)})
        sample = self.runs.get_sample(run, step, sample_id)  # NotFoundError (404) when absent
        if REVIEW_FLAG not in sample.flags:
            raise ConflictError(f"sample {step}/{sample_id} of run {run} is not flagged "
                                f"{REVIEW_FLAG}; only those are in the review queue",
                                details={"flags": list(sample.flags)})
        entry = self.store.append_audit(AuditEntry(
            actor=who.name, action=REVIEW_ACTION, run_id=run,
            details={"step": step, "sample_id": sample_id, "label": label, "note": note}))
        return _label(entry)

    def labels(self, run: str) -> dict[tuple[int, int], ReviewLabel]:
        """The latest label per (step, sample_id)."""
        out: dict[tuple[int, int], ReviewLabel] = {}
        after = 0
        while True:
            entries = self.store.read_audit(run_id=run, after_seq=after, limit=5000)
            for e in entries:
                if e.action == REVIEW_ACTION and e.outcome == "ok":
                    lab = _label(e)
                    out[(lab.step, lab.sample_id)] = lab
            if len(entries) < 5000:
                return out
            after = int(entries[-1].seq or after)

    def queue(self, run: str, *, status: str = "all", limit: int = 50, offset: int = 0
              ) -> tuple[list[tuple[SampleRecord, ReviewLabel | None]], int]:
        """``needs_review`` samples (newest first) with their label; status all | open | labelled."""
        labels = self.labels(run)
        items = [(s, labels.get((s.step, s.sample_id))) for s in self._flagged(run)]
        if status == "open":
            items = [it for it in items if it[1] is None]
        elif status == "labelled":
            items = [it for it in items if it[1] is not None]
        return items[offset:offset + limit], len(items)

    def _flagged(self, run: str) -> list[SampleRecord]:
        out: list[SampleRecord] = []
        while True:
            page = self.runs.query_samples(run, SampleQuery(
                flags=(REVIEW_FLAG,), order="step_desc", limit=PAGE, offset=len(out),
                include_token_arrays=False))
            out.extend(page.items)
            if len(page.items) < PAGE:
                return out

    def export(self, run: str) -> list[dict[str, Any]]:
        """Reward-model training rows: one per labelled sample, label +1 (good) / -1 (bad)."""
        rows = []
        for (step, sample_id), lab in sorted(self.labels(run).items()):
            s = self.runs.get_sample(run, step, sample_id)
            rows.append({"run": run, "step": step, "sample_id": sample_id, "prompt_id": s.prompt_id,
                         "category": s.category, "prompt": s.prompt, "response": s.response,
                         "label": LABELS[lab.label], "reviewer": lab.reviewer, "note": lab.note,
                         "at": lab.at, "model_reward": s.reward, "uncertainty": s.uncertainty,
                         "rules": [f for f in s.flags if f.startswith("rule_")]})
        return rows


def _label(e: AuditEntry) -> ReviewLabel:
    d = e.details
    return ReviewLabel(step=int(d["step"]), sample_id=int(d["sample_id"]), label=str(d["label"]),
                       reviewer=e.actor, note=str(d.get("note", "")), at=e.at, seq=e.seq)


def label_dict(label: ReviewLabel | None) -> dict[str, Any] | None:
    if label is None:
        return None
    return {"label": label.label, "reviewer": label.reviewer, "note": label.note, "at": label.at,
            "seq": label.seq}


__all__ = ["LABELS", "REVIEW_ACTION", "REVIEW_FLAG", "ReviewLabel", "ReviewQueue", "label_dict"]
