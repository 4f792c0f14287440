"""Findings to Alertmanager (docs/ops.md): a real Alertmanager (Debian's, on loopback) with the
shipped example config receives them through API v2, groups, inhibits and silences them by the
labels rlcockpit sets, and gives them back through its own API."""

from __future__ import annotations

import time
import urllib.parse
from datetime import UTC, datetime, timedelta

import pytest

from ops_testkit import DEPLOY, get_json, post_json, start_alertmanager, wait_for
from rlcockpit.integrations.alertmanager import AlertmanagerSink, alert_for
from rlcockpit.records import FindingRecord

CONFIG = DEPLOY / "alertmanager" / "alertmanager.yml"


def finding(detector: str, severity: str, *, status: str = "raised", step: int = 12) -> FindingRecord:
    return FindingRecord(step=step, detector=detector, severity=severity, status=status,
                         message=f"{detector} says {severity}", incident="inc-7",
                         evidence={"signal": "kl/mean", "value": 3.1}, patterns=("kl_explosion",),
                         wall_time=time.time())


def test_the_alert_of_a_finding_carries_grouping_inhibition_and_silence_labels() -> None:
    alert = alert_for(finding("kl_tiers", "red"), run_id="r1", project="p",
                      cockpit_url="http://127.0.0.1:8765/", now=1000.0)
    assert alert["labels"] == {"alertname": "RLFinding", "source": "rlcockpit", "severity": "red",
                               "detector": "kl_tiers", "run": "r1", "project": "p",
                               "incident": "inc-7", "rl_phase": "score", "rl_component": "reference"}
    assert alert["annotations"]["step"] == "12" and alert["annotations"]["patterns"] == "kl_explosion"
    assert alert["generatorURL"] == "http://127.0.0.1:8765/#/runs/r1/alerts"
    assert alert["endsAt"] == "1970-01-01T01:16:40.000000Z"  # now + resolve_after_s (1 h)
    resolved = alert_for(finding("kl_tiers", "red", status="resolved"), run_id="r1", now=1000.0)
    assert resolved["endsAt"] == "1970-01-01T00:16:40.000000Z"


def test_bad_settings_fail_fast() -> None:
    from rlcockpit.errors import ConfigError

    with pytest.raises(ConfigError, match="http"):
        AlertmanagerSink("localhost:9093")
    with pytest.raises(ConfigError, match="min_severity"):
        AlertmanagerSink("http://127.0.0.1:9093", min_severity="purple")


def test_an_unreachable_alertmanager_is_counted_not_raised() -> None:
    sink = AlertmanagerSink("http://127.0.0.1:9", run_id="r", retries=1, backoff_s=0.01, timeout_s=0.5)
    assert sink(finding("kl_tiers", "red")) is True
    sink.close()
    assert (sink.delivered, sink.failed) == (0, 1)


@pytest.mark.slow  # starts Debian's Alertmanager (make test installs it)
def test_findings_arrive_in_a_real_alertmanager_grouped_inhibited_and_silenced(tmp_path) -> None:
    am = start_alertmanager(tmp_path, CONFIG)
    try:
        sink = AlertmanagerSink(am.url, run_id=lambda: "run-x", project="proj", min_severity="yellow",
                                cockpit_url="http://127.0.0.1:8765")
        assert sink(finding("kl_tiers", "red"))
        assert sink(finding("kl_trend", "yellow"))  # same run and incident: inhibited by the red one
        assert not sink(finding("kl_trend", "info"))  # below min_severity: not sent
        sink.close()
        assert (sink.delivered, sink.failed, sink.dropped) == (2, 0, 0)

        def both_and_inhibited() -> list | None:
            # Alertmanager marks an alert inhibited asynchronously after it is ingested: on a loaded
            # machine the yellow one can be listed "active" for a moment before its inhibitor is
            # applied, so wait for the settled state (a rule that never inhibits still times out)
            found = _alerts(am, 'run="run-x"')
            states = {a["labels"]["detector"]: a["status"]["state"] for a in found}
            return found if len(found) == 2 and states.get("kl_trend") == "suppressed" else None

        alerts = wait_for(both_and_inhibited, what="two alerts, the yellow one inhibited by the red one")
        by = {a["labels"]["detector"]: a for a in alerts}
        red, yellow = by["kl_tiers"], by["kl_trend"]
        assert red["labels"]["severity"] == "red" and red["labels"]["incident"] == "inc-7"
        assert red["labels"]["rl_component"] == "reference" and red["labels"]["project"] == "proj"
        assert red["annotations"]["summary"] == "kl_tiers says red"
        assert red["generatorURL"] == "http://127.0.0.1:8765/#/runs/run-x/alerts"
        assert red["status"]["state"] == "active"
        assert [r["name"] for r in red["receivers"]] == ["oncall-all"]  # red routes to on-call
        assert yellow["status"]["state"] == "suppressed" and yellow["status"]["inhibitedBy"]
        groups = get_json(am.url + "/api/v2/alerts/groups")
        assert any(g["labels"] == {"alertname": "RLFinding", "incident": "inc-7", "run": "run-x"}
                   for g in groups)  # grouped by run, incident, alertname

        now = datetime.now(UTC)
        silence = post_json(am.url + "/api/v2/silences", {
            "matchers": [{"name": "run", "value": "run-x", "isRegex": False},
                         {"name": "detector", "value": "kl_tiers", "isRegex": False}],
            "startsAt": now.isoformat(), "endsAt": (now + timedelta(hours=1)).isoformat(),
            "createdBy": "test", "comment": "known: KL tiers during warm-up"})
        red = wait_for(lambda: [a for a in _alerts(am, 'detector="kl_tiers"')
                                if a["status"]["silencedBy"]], what="the silence")[0]
        assert red["status"]["silencedBy"] == [silence["silenceID"]]

        resolve = AlertmanagerSink(am.url, run_id="run-x", project="proj")  # same labels
        resolve(finding("kl_tiers", "red", status="resolved"))
        resolve.close()
        # Alertmanager lists no resolved alert: the red one is gone, the yellow one stays
        wait_for(lambda: not _alerts(am, 'detector="kl_tiers"'), what="the resolution")
        assert [a["labels"]["detector"] for a in _alerts(am, 'run="run-x"')] == ["kl_trend"]
    finally:
        am.stop()


def _alerts(am, matcher: str, **params: str) -> list[dict]:
    query = urllib.parse.urlencode({"filter": matcher, **params})
    return get_json(f"{am.url}/api/v2/alerts?{query}")



@pytest.mark.slow  # starts Debian's Alertmanager (make test installs it)
def test_the_server_forwards_new_findings_of_any_run(tmp_path) -> None:
    """`rlcockpit serve --alertmanager-url`: findings written to the store by any producer reach
    Alertmanager; the history present at start is not re-sent."""
    import rlcockpit
    from rlcockpit.integrations.alertmanager import StoreForwarder
    from rlcockpit.store import open_store

    uri = f"sqlite:///{tmp_path / 'f.db'}"
    with rlcockpit.init(project="trl", name="old", store=uri, run_id="old") as run:
        run.finding(step=1, detector="entropy", severity="red", message="before the server started")
    am = start_alertmanager(tmp_path, CONFIG)
    store = open_store(uri)
    forwarder = StoreForwarder(store.reader(), AlertmanagerSink(am.url), poll_s=3600)
    try:
        with rlcockpit.init(project="trl", name="old", store=uri, run_id="old", resume=True) as run:
            run.finding(step=2, detector="entropy", severity="orange", message="collapse", incident="inc-1")
        with rlcockpit.init(project="verl", name="new", store=uri, run_id="new") as run:
            run.finding(step=5, detector="kl_tiers", severity="black", message="KL 12x")
        assert forwarder.poll() == 2 and forwarder.poll() == 0
        forwarder.sink.close()
        alerts = wait_for(lambda: (lambda a: a if len(a) == 2 else None)(get_json(am.url + "/api/v2/alerts")),
                          what="two forwarded alerts")
        got = sorted((a["labels"]["run"], a["labels"]["project"], a["labels"]["severity"]) for a in alerts)
        assert got == [("new", "verl", "black"), ("old", "trl", "orange")]
    finally:
        forwarder._stop.set()
        am.stop()
