"""The real slack-sdk against a local fake Slack: threads, dedup, 429/500 retries, outbox."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from fakes.incidents import incident
from fakes.slack_server import FakeSlack
from pydantic import SecretStr

from slaguard.guard.events import IncidentEvent, IncidentState
from slaguard.notify.dispatcher import IncidentDispatcher
from slaguard.notify.slack_web import SlackWebNotifier
from slaguard.notify.slack_webhook import SlackWebhookNotifier

TOKEN = "xoxb-test-token-do-not-log"


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        yield fake


def _web(slack: FakeSlack, max_retries: int = 1) -> SlackWebNotifier:
    return SlackWebNotifier(
        SecretStr(TOKEN),
        "C0GUARD",
        base_url=slack.base_url,
        max_retries=max_retries,
        server_backoff_s=0.01,
        timeout_s=5,
    )


def _lifecycle() -> list[IncidentEvent]:
    return [incident(), incident(IncidentState.UPDATED, 1), incident(IncidentState.RESOLVED, 2)]


def test_updates_and_resolution_are_thread_replies(slack: FakeSlack) -> None:
    dispatcher = IncidentDispatcher(_web(slack))
    for event in _lifecycle():
        dispatcher.submit(event, 0.0)
    for _ in range(3):
        assert all(r.ok for r in dispatcher.deliver_pending(0.0))
    posts = slack.posts()
    assert len(posts) == 3
    root, update, resolved = (p.body for p in posts)
    assert root["channel"] == "C0GUARD" and "thread_ts" not in root
    assert root["blocks"][0]["type"] == "header" and root["text"].startswith("[opened] inc-300-1")
    root_ts = "1700000000.000001"
    assert update["thread_ts"] == root_ts and "reply_broadcast" not in update
    assert resolved["thread_ts"] == root_ts and resolved["reply_broadcast"] is True
    assert posts[0].headers["Authorization"] == f"Bearer {TOKEN}"


def test_one_message_per_state_change_however_often_it_is_submitted(slack: FakeSlack) -> None:
    dispatcher = IncidentDispatcher(_web(slack))
    for now in range(20):  # 20 evaluations, 5 replicas each re-submitting the same events
        for _ in range(5):
            for event in _lifecycle()[: 1 + now // 10]:
                dispatcher.submit(event, float(now))
        dispatcher.deliver_pending(float(now))
    assert [p.body["text"].split()[0] for p in slack.posts()] == ["[opened]", "[updated]"]


def test_429_is_retried_after_retry_after(slack: FakeSlack) -> None:
    slack.fail_next(429)
    result = _web(slack).send(incident())
    assert result.ok
    assert [r.status for r in slack.requests] == [429, 200]


def test_500_is_retried_by_the_server_error_handler(slack: FakeSlack) -> None:
    slack.fail_next(500)
    assert _web(slack).send(incident()).ok
    assert [r.status for r in slack.requests] == [500, 200]


def test_outage_keeps_messages_in_the_outbox_and_delivers_in_order_later(
    slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    notifier = _web(slack)
    dispatcher = IncidentDispatcher(notifier)
    slack.down()
    for event in _lifecycle()[:2]:
        dispatcher.submit(event, 0.0)
    other = incident(incident_id="inc-400-2")
    dispatcher.submit(other, 0.0)
    [result] = dispatcher.deliver_pending(0.0)  # the round stops at the first retryable failure
    assert not result.ok and result.retryable and result.status_code == 500
    assert len(dispatcher.outbox) == 3 and slack.posts() == []
    assert dispatcher.deliver_pending(1.0) == []  # paused until the failed message's retry time
    slack.up()
    assert [r.ok for r in dispatcher.deliver_pending(2.0)] == [True, True]
    assert [r.ok for r in dispatcher.deliver_pending(2.0)] == [True]
    texts = [p.body["text"].split()[:2] for p in slack.posts()]
    assert texts == [
        ["[opened]", "inc-300-1"],
        ["[opened]", "inc-400-2"],
        ["[updated]", "inc-300-1"],
    ]
    assert slack.posts()[2].body["thread_ts"] == notifier.threads["inc-300-1"]
    assert TOKEN not in caplog.text


def test_update_threads_under_the_root_even_after_an_outage(slack: FakeSlack) -> None:
    notifier = _web(slack, max_retries=0)
    assert notifier.send(incident()).ok
    root_ts = notifier.threads["inc-300-1"]
    slack.fail_next(503)
    assert not notifier.send(incident(IncidentState.UPDATED, 1)).ok
    assert notifier.send(incident(IncidentState.UPDATED, 1)).ok
    assert slack.posts()[-1].body["thread_ts"] == root_ts


def test_permanent_errors_are_not_retried(slack: FakeSlack) -> None:
    slack.fail_next(403)
    dispatcher = IncidentDispatcher(_web(slack))
    dispatcher.submit(incident(), 0.0)
    [result] = dispatcher.deliver_pending(0.0)
    assert not result.ok and not result.retryable and len(dispatcher.outbox) == 0
    assert dispatcher.outbox.dropped == 1


def test_webhook_checks_status_codes_instead_of_raising(slack: FakeSlack) -> None:
    hook = SlackWebhookNotifier(SecretStr(slack.webhook_url), max_retries=1, server_backoff_s=0.01)
    assert hook.send(incident()).ok
    slack.fail_next(500, times=2)
    failed = hook.send(incident(IncidentState.UPDATED, 1))
    assert not failed.ok and failed.retryable and failed.status_code == 500
    slack.fail_next(404)
    gone = hook.send(incident(IncidentState.UPDATED, 1))
    assert not gone.ok and not gone.retryable and gone.status_code == 404
    assert [r.status for r in slack.requests] == [200, 500, 500, 404]
    assert slack.requests[0].body["blocks"][0]["type"] == "header"


def test_a_guard_flood_episode_becomes_one_thread(slack: FakeSlack) -> None:
    from fakes.drive import run_seconds
    from fakes.synthetic import flood_stream

    from slaguard.guard.config import BreakerConfig, GuardConfig
    from slaguard.guard.guard import Guard
    from slaguard.guard.modes import ModeState
    from slaguard.scheduler.rollout import FleetMode, ModeKind

    guard = Guard(
        GuardConfig(breaker=BreakerConfig(cooldown_s=120.0)),
        state=ModeState(mode=FleetMode(ModeKind.ROLLOUT, 10)),
    )
    notifier = _web(slack)
    dispatcher = IncidentDispatcher(notifier)
    for sec, events in run_seconds(guard, flood_stream(), 1, 900, guard.evaluate):
        for event in events:
            if isinstance(event, IncidentEvent):
                dispatcher.submit(event, float(sec))
        dispatcher.deliver_pending(float(sec))
    _, resume_events = guard.resume(900.0, actor="ana", reason="flood over")
    for event in resume_events:
        if isinstance(event, IncidentEvent):
            dispatcher.submit(event, 900.0)
    dispatcher.deliver_pending(900.0)
    posts = [p.body for p in slack.posts()]
    assert [p["text"].split()[0] for p in posts] == ["[opened]", "[updated]", "[resolved]"]
    assert (
        posts[1]["thread_ts"]
        == posts[2]["thread_ts"]
        == notifier.threads[guard_incident_id(posts[0])]
    )


def guard_incident_id(post: dict[str, object]) -> str:
    return str(post["text"]).split()[1]


def test_delivery_rounds_feed_the_slack_metrics(slack: FakeSlack) -> None:
    from prometheus_client import CollectorRegistry

    from slaguard.telemetry.metrics import SlaguardMetrics

    registry = CollectorRegistry()
    metrics = SlaguardMetrics(registry)
    dispatcher = IncidentDispatcher(_web(slack, max_retries=0))
    slack.fail_next(500, times=1)
    dispatcher.submit(incident(), 0.0)
    metrics.count_slack_results(dispatcher.deliver_pending(0.0))
    assert (
        registry.get_sample_value(
            "slaguard_slack_delivery_failures_total", {"reason": "server_error"}
        )
        == 1.0
    )
    metrics.count_slack_results(dispatcher.deliver_pending(60.0))
    assert registry.get_sample_value("slaguard_slack_deliveries_total") == 1.0
