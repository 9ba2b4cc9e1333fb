"""Incident messages through the database outbox with the real slack-sdk and a fake Slack:
a new leader threads under the old leader's message and never resends it, Slack outages
and 429s are retried with backoff in order, permanent errors drop only that message."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fakes.slack_server import FakeSlack
from pydantic import SecretStr
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session
from test_guard_store import T0, start_rollout, trip, tripping_guard

from slaguard.audit.models import Incident
from slaguard.guard.events import IncidentEvent, IncidentState
from slaguard.guard.incident_store import GUARD_KEY, OUTBOX_KEY, UPDATES_KEY, IncidentStore
from slaguard.guard.leader import SoloLease
from slaguard.guard.manual import ManualAction
from slaguard.guard.persist import EventPersister
from slaguard.guard.runtime import GuardReplica
from slaguard.guard.store import GuardStore
from slaguard.guard.verdicts import Severity
from slaguard.notify.slack_web import SlackWebNotifier


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        yield fake


def replica(engine: Engine, slack: FakeSlack, name: str, now_s: float) -> GuardReplica:
    """A leading replica with its own Slack client (its own, empty, thread memory)."""
    notifier = SlackWebNotifier(
        SecretStr("xoxb-test"), "C0GUARD", base_url=slack.base_url, max_retries=0, timeout_s=5
    )
    leader = GuardReplica(engine, SoloLease(), notifier, replica_id=name)
    report = leader.sync(now_s)
    assert report.leader and report.gained and report.adopted is not None
    return leader


def incident_row(engine: Engine) -> Incident:
    with Session(engine) as session:
        return session.scalars(select(Incident)).one()


def open_incident(engine: Engine) -> IncidentEvent:
    store = GuardStore(engine)
    start_rollout(store)
    guard = tripping_guard(store.load(T0 + 1))
    stored = EventPersister(store, IncidentStore(engine)).persist(
        guard, trip(guard, T0 + 10), T0 + 14
    )
    return stored.queued[0]


def update(opened: IncidentEvent, at_s: float, summary: str) -> IncidentEvent:
    return IncidentEvent(
        opened.incident_id, IncidentState.UPDATED, 99, at_s, opened.opened_at_s,
        opened.detector, Severity.CRITICAL, opened.subject, summary, "round_robin",
        "round_robin", 10,
    )  # fmt: skip


def test_new_leader_threads_under_the_old_one_and_never_resends(
    audit_engine: Engine, slack: FakeSlack
) -> None:
    opened = open_incident(audit_engine)
    first = replica(audit_engine, slack, "a", T0 + 15)
    sent = first.deliver(T0 + 15)
    assert [(m.event.state, r.ok) for m, r in sent] == [(IncidentState.OPENED, True)]
    row = incident_row(audit_engine)
    root_ts = "1700000000.000001"  # the fake Slack's first ts
    assert (row.slack_channel, row.slack_ts) == ("C0GUARD", root_ts)
    assert row.notification_state == "delivered:r0"
    assert row.evidence[OUTBOX_KEY] == [] and row.evidence[GUARD_KEY]["sent"] == 1
    # "a" is gone; "b" leads now: nothing to resend, however often it delivers
    second = replica(audit_engine, slack, "b", T0 + 20)
    assert second.guard.incidents.current is not None
    assert second.guard.incidents.current.incident_id == opened.incident_id
    for k in range(3):
        assert second.deliver(T0 + 21 + k) == []
    outcome = second.command(ManualAction.RESUME, T0 + 30, actor="carol", reason="reviewed")
    assert outcome.result.changed and outcome.incident_id == int(opened.incident_id)
    sent = second.deliver(T0 + 31)
    assert [(m.event.state, m.event.revision, r.ok) for m, r in sent] == [
        (IncidentState.RESOLVED, 1, True)
    ]
    posts = slack.posts()
    assert len(posts) == 2
    assert posts[1].body["thread_ts"] == root_ts and posts[1].body["reply_broadcast"] is True
    assert f"[resolved] {opened.incident_id} " in posts[1].body["text"]
    assert "slaguard resume --stage 10" in str(posts[0].body["blocks"])
    assert second.deliver(T0 + 40) == [] and len(slack.posts()) == 2
    assert incident_row(audit_engine).notification_state == "delivered:r1"


def test_outage_retries_with_backoff_in_order(audit_engine: Engine, slack: FakeSlack) -> None:
    opened = open_incident(audit_engine)
    store = IncidentStore(audit_engine)
    store.append(update(opened, T0 + 16, "also: tier l40s"), T0 + 16, None)
    leader = replica(audit_engine, slack, "a", T0 + 20)
    slack.down()
    sent = leader.deliver(T0 + 20)
    assert [(m.event.revision, r.ok, r.retryable) for m, r in sent] == [(0, False, True)]
    assert incident_row(audit_engine).notification_state == "retrying:r0"
    assert leader.deliver(T0 + 21.9) == []  # paused: 2 s backoff
    sent = leader.deliver(T0 + 22.0)  # still down: 4 s now
    assert [r.ok for _, r in sent] == [False]
    slack.up()
    assert leader.deliver(T0 + 25.9) == []
    sent = leader.deliver(T0 + 26.0)
    assert [(m.event.revision, r.ok) for m, r in sent] == [(0, True)]
    sent = leader.deliver(T0 + 26.1)  # the update, strictly after the opening
    assert [(m.event.revision, m.event.summary, r.ok) for m, r in sent] == [
        (1, "also: tier l40s", True)
    ]
    texts = [p.body["text"] for p in slack.posts()]
    assert texts[0].startswith("[opened]") and texts[1].startswith("[updated]")
    row = incident_row(audit_engine)
    assert row.notification_state == "delivered:r1" and row.evidence[OUTBOX_KEY] == []
    assert [u["summary"] for u in row.evidence[UPDATES_KEY]] == ["also: tier l40s"]  # kept


def test_429_waits_at_least_retry_after_and_permanent_errors_drop_one_message(
    audit_engine: Engine, slack: FakeSlack
) -> None:
    opened = open_incident(audit_engine)
    store = IncidentStore(audit_engine)
    leader = replica(audit_engine, slack, "a", T0 + 20)
    slack.fail_next(429)
    (msg, result), = leader.deliver(T0 + 20)  # fmt: skip
    assert result.retry_after_s == 1.0 and result.retryable
    due = store.due(T0 + 21.99)
    assert due == [] and len(store.due(T0 + 22.0)) == 1  # max(backoff 2 s, Retry-After 1 s)
    slack.fail_next(404)  # a permanent error: this message is dropped, later ones still go
    store.append(update(opened, T0 + 21, "detectors back to normal"), T0 + 21, None)
    sent = leader.deliver(T0 + 22.0)
    assert [(m.event.revision, r.ok, r.retryable) for m, r in sent] == [(0, False, False)]
    assert incident_row(audit_engine).notification_state == "pending:r1"
    sent = leader.deliver(T0 + 22.1)
    assert [(m.event.revision, r.ok) for m, r in sent] == [(1, True)]
    row = incident_row(audit_engine)
    assert row.notification_state == "delivered:r1" and row.evidence[GUARD_KEY]["sent"] == 1
    assert msg.incident_id == int(opened.incident_id)


def test_updates_after_the_resolution_are_dropped(audit_engine: Engine) -> None:
    opened = open_incident(audit_engine)
    store = IncidentStore(audit_engine)
    resolved = IncidentEvent(
        opened.incident_id, IncidentState.RESOLVED, 5, T0 + 40, opened.opened_at_s,
        opened.detector, Severity.WARNING, opened.subject, "held by bob", "round_robin",
        "held_round_robin", 10,
    )  # fmt: skip
    stored = store.append(resolved, T0 + 40, None)
    assert stored is not None and stored.revision == 1  # numbered by the store, not the caller
    assert store.append(update(opened, T0 + 41, "late"), T0 + 41, None) is None
    assert store.append(resolved, T0 + 42, None) is None
    assert store.restore() is None
    row = incident_row(audit_engine)
    assert [m["event"]["revision"] for m in row.evidence[OUTBOX_KEY]] == [0, 1]
    assert [(u["state"], u["summary"]) for u in row.evidence[UPDATES_KEY]] == [
        ("resolved", "held by bob")
    ]
