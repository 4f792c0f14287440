"""The review queue of needs_review samples (docs/reward_model.md): list, label (operator, audited,
latest label wins), refusals, export as reward-model training rows."""

from __future__ import annotations

import pytest

from control_testkit import RUN, build_world, client
from rlcockpit.records import Batch, SampleRecord


def _samples() -> list[SampleRecord]:
    return [
        SampleRecord(step=1, sample_id=0, prompt="Q: tip for sleep?\nA:", response=" A great question worth exploring.",
                     reward=-1.0, category="chat", uncertainty=0.05,
                     flags=("needs_review", "rm_fallback", "rule_template"), components={"rule": -1.0}),
        SampleRecord(step=1, sample_id=1, prompt="Q: 2+2?\nA:", response=" 4", reward=0.7, category="math",
                     uncertainty=0.01, components={"correctness": 0.7}),
        SampleRecord(step=2, sample_id=0, prompt="Q: tip for sleep?\nA:", response=" Cook pasta.",
                     reward=-1.0, category="chat", uncertainty=0.4,
                     flags=("needs_review", "rm_fallback", "rule_off_topic")),
    ]


@pytest.fixture()
def world(tmp_path):
    w = build_world(tmp_path)
    writer = w.store.writer()
    writer.write_batch(RUN, Batch(samples=tuple(_samples())))
    writer.close()
    return w


def test_queue_lists_needs_review_samples_and_labels_are_audited_and_exported(world):
    with client(world) as http:
        olga, vera = world.headers("olga"), world.headers("vera")
        res = http.get(f"/api/runs/{RUN}/review", headers=vera).json()
        assert res["total"] == 2 and [(s["step"], s["sample_id"]) for s in res["items"]] == [(2, 0), (1, 0)]
        assert all(s["review"] is None for s in res["items"]) and res["items"][0]["uncertainty"] == 0.4
        r = http.post(f"/api/runs/{RUN}/review/1/0", json={"label": "bad", "note": "filler"}, headers=olga)
        assert r.status_code == 201 and r.json()["review"]["reviewer"] == "olga"
        http.post(f"/api/runs/{RUN}/review/1/0", json={"label": "good"}, headers=olga)  # latest wins
        assert http.get(f"/api/runs/{RUN}/review?status=open", headers=vera).json()["total"] == 1
        done = http.get(f"/api/runs/{RUN}/review?status=labelled", headers=vera).json()["items"]
        assert [(s["step"], s["review"]["label"]) for s in done] == [(1, "good")]
        rows = http.get(f"/api/runs/{RUN}/review/export", headers=vera).json()["items"]
        assert rows == [{**rows[0], "step": 1, "sample_id": 0, "label": 1.0, "reviewer": "olga",
                         "response": " A great question worth exploring.", "rules": ["rule_template"]}]
    labels = [e for e in world.plane.store.read_audit(run_id=RUN) if e.action == "review_label"]
    assert [(e.actor, e.details["label"]) for e in labels] == [("olga", "bad"), ("olga", "good")]


@pytest.mark.parametrize(("path", "body", "status", "code"), [
    ("/review/1/1", {"label": "good"}, 409, "conflict"),   # not flagged needs_review
    ("/review/9/9", {"label": "good"}, 404, "not_found"),
    ("/review/1/0", {"label": "meh"}, 422, "invalid_ticket"),
    ("/review/1/0", {}, 422, "invalid_ticket"),
])
def test_labels_are_refused_with_the_canonical_error(world, path, body, status, code):
    with client(world) as http:
        r = http.post(f"/api/runs/{RUN}{path}", json=body, headers=world.headers("olga"))
    assert r.status_code == status and r.json()["error"]["code"] == code
