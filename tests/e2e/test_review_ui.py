"""The review queue in the browser (docs/reward_model.md): an operator opens a run's Review tab,
sees the samples the rule fallback flagged needs_review, labels one bad with a note; the label is
an audit entry and the sample moves from the open queue to the labelled one."""

from __future__ import annotations

import pytest

from conftest import wait_for
from server_testkit import serve_store

pytestmark = pytest.mark.timeout(180)
RUN = "rm-run"


@pytest.fixture
def cockpit(tmp_path):
    from rlcockpit.control import ControlPlane
    from rlcockpit.records import Batch, RunInfo, SampleRecord
    from rlcockpit.store import open_store

    uri = f"sqlite:///{tmp_path / 'runs.db'}"
    store = open_store(uri)
    writer = store.writer()
    writer.create_run(RunInfo(run_id=RUN, project="p", name=RUN, status="finished"))
    samples = [
        SampleRecord(step=3, sample_id=0, prompt="Q: Give me a tip for sleep.\nA:",
                     response=" That is a great question worth exploring.", reward=-1.0, category="chat",
                     uncertainty=0.04, flags=("needs_review", "rm_fallback", "rule_template")),
        SampleRecord(step=3, sample_id=1, prompt="Q: What is 2 + 2?\nA:", response=" 2 + 2 = \\boxed{4}",
                     reward=0.6, category="math", uncertainty=0.02),
    ]
    writer.write_batch(RUN, Batch(samples=tuple(samples)))
    writer.close()
    plane = ControlPlane.over(store.control(), store.reader())
    token = plane.users.add("olga", "operator")[1]
    server = serve_store(uri, store, plane=plane)
    yield server, plane, token
    server.stop()


def test_an_operator_labels_a_needs_review_sample_in_the_review_tab(cockpit, page):
    server, plane, token = cockpit
    page.add_init_script(f"localStorage.setItem('rlcockpit.token', {token!r});")
    page.goto(f"{server.url}/#/run/{RUN}/review")
    item = page.locator(".review-item")
    item.first.wait_for()
    assert item.count() == 1  # only the needs_review sample
    assert "great question" in item.first.inner_text() and "rule_template" in item.first.inner_text()
    item.first.locator(".review-note").fill("empty filler")
    item.first.locator(".review-bad").click()
    page.locator(".state-empty").wait_for()  # the open queue is empty now
    labels = wait_for(lambda: [e for e in plane.store.read_audit(run_id=RUN) if e.action == "review_label"],
                      what="the review_label audit entry")
    assert [(e.actor, e.details["label"], e.details["note"]) for e in labels] == [("olga", "bad", "empty filler")]
    page.goto(f"{server.url}/#/run/{RUN}/review?status=labelled")
    page.locator(".review-done").first.wait_for()
    assert "labelled bad by olga" in page.locator(".review-done").first.inner_text()
