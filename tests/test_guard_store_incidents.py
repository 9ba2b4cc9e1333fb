"""Incident messages through the database outbox and `GuardReplica.deliver` with the real
slack-sdk and a fake Slack: one message per state change however often the guard
evaluates, a new leader threads under the old leader's message and never resends it,
Slack outages and 429s are retried with backoff in order (the round stops at the first
retryable failure), permanent errors drop only that message, and the service counts each
round in its Slack metrics."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from fakes.slack_server import FakeSlack
from fakes.synthetic import flood_stream
from prometheus_client import CollectorRegistry
from pydantic import SecretStr
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session
from test_guard_store import T0, start_rollout, trip, tripping_guard

from slaguard.audit.models import Incident
from slaguard.fleet import load_fleet
from slaguard.guard.config import BreakerConfig, GuardConfig
from slaguard.guard.events import IncidentEvent, IncidentState
from slaguard.guard.incident_store import GUARD_KEY, OUTBOX_KEY, UPDATES_KEY, IncidentStore
from slaguard.guard.leader import SoloLease
from slaguard.guard.manual import ManualAction
from slaguard.guard.persist import EventPersister
from slaguard.guard.runtime import GuardReplica
from slaguard.guard.store import GuardStore
from slaguard.guard.verdicts import Severity
from slaguard.notify.file import FileNotifier
from slaguard.notify.slack_web import SlackWebNotifier
from slaguard.scheduler.state import FleetState
from slaguard.service.modes import ReplicaModes
from slaguard.telemetry.metrics import SlaguardMetrics

TOKEN = "xoxb-test-token-do-not-log"


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        yield fake


def replica(
    engine: Engine, slack: FakeSlack, name: str, now_s: float, config: GuardConfig | None = None
) -> GuardReplica:
    """A leading replica with its own Slack client (its own, empty, thread memory)."""
    notifier = SlackWebNotifier(
        SecretStr(TOKEN), "C0GUARD", base_url=slack.base_url, max_retries=0, timeout_s=5
    )
    leader = GuardReplica(engine, SoloLease(), notifier, replica_id=name, config=config)
    report = leader.sync(now_s)
    assert report.leader and report.gained and report.adopted is not None
    return leader


def incident_row(engine: Engine, incident_id: str | None = None) -> Incident:
    """The only incident row, or the one with audit id `incident_id`."""
    query = select(Incident)
    if incident_id is not None:
        query = query.where(Incident.id == int(incident_id))
    with Session(engine) as session:
        return session.scalars(query).one()


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


def test_outage_stops_the_round_retries_with_backoff_and_keeps_the_order(
    audit_engine: Engine, slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    opened = open_incident(audit_engine)
    store = IncidentStore(audit_engine)
    store.append(update(opened, T0 + 16, "also: tier l40s"), T0 + 16, None)
    with audit_engine.begin() as conn:
        other = store.open(
            replace(opened, subject="tier:l40s", summary="tier l40s slow"), T0 + 17, None, conn
        )
    leader = replica(audit_engine, slack, "a", T0 + 20)
    slack.down()
    sent = leader.deliver(T0 + 20)  # the other incident's message is not even tried
    assert [(m.event.revision, r.ok, r.retryable) for m, r in sent] == [(0, False, True)]
    assert incident_row(audit_engine, opened.incident_id).notification_state == "retrying:r0"
    assert incident_row(audit_engine, other.incident_id).notification_state == "pending:r0"
    assert leader.deliver(T0 + 21.9) == []  # paused: 2 s backoff
    sent = leader.deliver(T0 + 22.0)  # still down: 4 s now
    assert [r.ok for _, r in sent] == [False]
    assert [r.status for r in slack.requests] == [500, 500]
    slack.up()
    assert leader.deliver(T0 + 25.9) == []
    sent = leader.deliver(T0 + 26.0)  # both incidents' openings, in audit id order
    assert [(m.event.incident_id, m.event.revision, r.ok) for m, r in sent] == [
        (opened.incident_id, 0, True),
        (other.incident_id, 0, True),
    ]
    sent = leader.deliver(T0 + 26.1)  # the update, strictly after its opening
    assert [(m.event.revision, m.event.summary, r.ok) for m, r in sent] == [
        (1, "also: tier l40s", True)
    ]
    posts = [p.body for p in slack.posts()]
    assert [p["text"].split()[:2] for p in posts] == [
        ["[opened]", opened.incident_id],
        ["[opened]", other.incident_id],
        ["[updated]", opened.incident_id],
    ]
    assert posts[2]["thread_ts"] == incident_row(audit_engine, opened.incident_id).slack_ts
    assert "thread_ts" not in posts[1] and "reply_broadcast" not in posts[2]
    row = incident_row(audit_engine, opened.incident_id)
    assert row.notification_state == "delivered:r1" and row.evidence[OUTBOX_KEY] == []
    assert [u["summary"] for u in row.evidence[UPDATES_KEY]] == ["also: tier l40s"]  # kept
    assert "retried later" in caplog.text and TOKEN not in caplog.text


def test_backoff_doubles_up_to_five_minutes_and_yields_to_a_longer_retry_after(
    audit_engine: Engine, slack: FakeSlack
) -> None:
    open_incident(audit_engine)
    leader = replica(audit_engine, slack, "a", T0 + 20)
    slack.down()
    now, waits = T0 + 20, []
    for _ in range(10):
        [(_, result)] = leader.deliver(now)
        assert not result.ok and result.retryable
        next_s = float(incident_row(audit_engine).evidence[OUTBOX_KEY][0]["next_attempt_s"])
        assert leader.deliver(next_s - 0.01) == []  # nothing is tried before that time
        waits.append(next_s - now)
        now = next_s
    assert waits == [2, 4, 8, 16, 32, 64, 128, 256, 300, 300]
    store = IncidentStore(audit_engine)
    [msg] = store.due(now)
    assert msg.attempts == 10
    assert store.failed(msg, now, "ratelimited", retry_after_s=900.0) == now + 900.0


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


def test_a_flood_episode_is_one_thread_however_often_the_guard_evaluates(
    audit_engine: Engine, slack: FakeSlack
) -> None:
    start_rollout(GuardStore(audit_engine), stage_pct=10)
    config = GuardConfig(breaker=BreakerConfig(cooldown_s=120.0))
    leader = replica(audit_engine, slack, "a", T0 + 0.5, config)
    samples = iter(flood_stream())  # one prompt is 30 % of the traffic from 300 s to 400 s
    pending = next(samples, None)
    for sec in range(1, 900):  # 899 evaluations, each followed by a delivery round
        while pending is not None and pending.at_s <= sec:
            leader.observe(replace(pending, at_s=T0 + pending.at_s))
            pending = next(samples, None)
        leader.evaluate(T0 + sec)
        leader.deliver(T0 + sec)
    outcome = leader.command(ManualAction.RESUME, T0 + 900, actor="ana", reason="flood over")
    assert outcome.result.changed
    leader.deliver(T0 + 900)
    posts = [p.body for p in slack.posts()]
    assert [p["text"].split()[:2] for p in posts] == [
        ["[opened]", str(outcome.incident_id)],
        ["[updated]", str(outcome.incident_id)],
        ["[resolved]", str(outcome.incident_id)],
    ]
    row = incident_row(audit_engine)
    assert "thread_ts" not in posts[0]
    assert posts[1]["thread_ts"] == posts[2]["thread_ts"] == row.slack_ts
    assert row.notification_state == "delivered:r2" and row.evidence[GUARD_KEY]["sent"] == 3


def test_the_services_delivery_rounds_feed_the_slack_metrics(
    audit_engine: Engine, slack: FakeSlack
) -> None:
    open_incident(audit_engine)
    registry = CollectorRegistry()
    modes = ReplicaModes(
        replica(audit_engine, slack, "a", T0 + 20),
        FleetState(load_fleet()),
        SlaguardMetrics(registry),
    )

    def count(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    async def evaluate(now_s: float) -> None:
        await modes.evaluate(now_s)
        await modes.wait_for_delivery()

    slack.fail_next(500)
    asyncio.run(evaluate(T0 + 20))
    assert count("slaguard_slack_delivery_failures_total", reason="server_error") == 1.0
    assert count("slaguard_slack_deliveries_total") == 0.0
    asyncio.run(evaluate(T0 + 21))  # paused until T0 + 22: no attempt, nothing counted
    asyncio.run(evaluate(T0 + 22))
    assert count("slaguard_slack_delivery_failures_total", reason="server_error") == 1.0
    assert count("slaguard_slack_deliveries_total") == 1.0
    assert len(slack.requests) == 2


def test_a_rate_limited_delivery_does_not_hold_up_the_detectors(
    audit_engine: Engine, slack: FakeSlack
) -> None:
    """slack-sdk sleeps out a 429's Retry-After in the sending thread; the delivery ran
    inside the detectors' job, which stopped evaluating for that long, and the retry time
    was counted from before the sleep, so it was already due when the round ended."""
    open_incident(audit_engine)
    notifier = SlackWebNotifier(
        SecretStr(TOKEN), "C0GUARD", base_url=slack.base_url, max_retries=1, timeout_s=5
    )
    leader = GuardReplica(audit_engine, SoloLease(), notifier, replica_id="a")
    assert leader.sync(T0 + 20).leader
    modes = ReplicaModes(leader, FleetState(load_fleet()), SlaguardMetrics(CollectorRegistry()))
    slack.fail_next(429, times=2)

    async def run() -> None:
        await modes.evaluate(T0 + 20)  # starts a round: the client sleeps Retry-After (1 s)
        evaluated = leader.stats.evaluations
        await modes.evaluate(T0 + 21)
        assert leader.stats.evaluations == evaluated + 1 and modes.delivering
        await modes.wait_for_delivery()

    asyncio.run(run())
    assert [r.status for r in slack.requests] == [429, 429]
    store = IncidentStore(audit_engine)
    # 2 s backoff from the end of the round (about T0 + 21), not from its start
    assert store.due(T0 + 22.5) == [] and len(store.due(T0 + 24.0)) == 1


def test_a_notify_file_is_not_counted_as_slack_and_its_failure_is_logged(
    audit_engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every notifier's results fed `slaguard_slack_*`: a notify file that could not be
    written paged as Slack failing, and file deliveries could hide a failing Slack."""
    open_incident(audit_engine)
    blocked = tmp_path / "incidents.jsonl"
    blocked.mkdir()  # a directory where the file should be: every append fails
    leader = GuardReplica(audit_engine, SoloLease(), FileNotifier(blocked), replica_id="a")
    assert leader.sync(T0 + 20).leader
    registry = CollectorRegistry()
    modes = ReplicaModes(leader, FleetState(load_fleet()), SlaguardMetrics(registry))

    async def evaluate(now_s: float) -> None:
        await modes.evaluate(now_s)
        await modes.wait_for_delivery()

    with caplog.at_level(logging.WARNING, logger="slaguard.guard.outbox_sender"):
        asyncio.run(evaluate(T0 + 20))
    assert leader.stats.send_failures == 1
    assert f"message retried later: {blocked}: Is a directory" in caplog.text
    blocked.rmdir()
    asyncio.run(evaluate(T0 + 40))
    assert leader.stats.sent == 1 and blocked.is_file()
    failures = [
        registry.get_sample_value("slaguard_slack_delivery_failures_total", {"reason": r})
        for r in ("ratelimited", "server_error", "connection", "rejected")
    ]
    assert failures == [0.0] * 4
    assert registry.get_sample_value("slaguard_slack_deliveries_total") == 0.0
