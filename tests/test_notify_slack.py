"""The Slack notifiers (real slack-sdk) against a local fake Slack: threads, 429/500 retries
in the client, permanent errors, webhook status codes. Delivery through the database outbox
(order, backoff, dedup, metrics) is tested in test_guard_store_incidents.py."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from fakes.incidents import incident
from fakes.recording_server import Answer
from fakes.slack_server import FakeSlack
from pydantic import SecretStr

from slaguard.guard.events import IncidentEvent, IncidentState
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
    notifier = _web(slack)
    assert [notifier.send(event).ok for event in _lifecycle()] == [True, True, True]
    posts = slack.posts()
    assert len(posts) == 3
    root, update, resolved = (p.body for p in posts)
    assert root["channel"] == "C0GUARD" and "thread_ts" not in root
    assert root["blocks"][0]["type"] == "header" and root["text"].startswith("[opened] inc-300-1")
    root_ts = "1700000000.000001"
    assert update["thread_ts"] == root_ts and "reply_broadcast" not in update
    assert resolved["thread_ts"] == root_ts and resolved["reply_broadcast"] is True
    assert posts[0].headers["Authorization"] == f"Bearer {TOKEN}"


def test_429_is_retried_after_retry_after(slack: FakeSlack) -> None:
    slack.fail_next(429)
    result = _web(slack).send(incident())
    assert result.ok
    assert [r.status for r in slack.requests] == [429, 200]


def test_500_is_retried_by_the_server_error_handler(slack: FakeSlack) -> None:
    slack.fail_next(500)
    assert _web(slack).send(incident()).ok
    assert [r.status for r in slack.requests] == [500, 200]


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
    result = _web(slack).send(incident())
    assert not result.ok and not result.retryable and result.status_code == 403
    assert [r.status for r in slack.requests] == [403]


def test_webhook_checks_status_codes_instead_of_raising(
    slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    hook = SlackWebhookNotifier(SecretStr(slack.webhook_url), max_retries=1, server_backoff_s=0.01)
    assert hook.send(incident()).ok
    slack.fail_next(500, times=2)
    failed = hook.send(incident(IncidentState.UPDATED, 1))
    assert not failed.ok and failed.retryable and failed.status_code == 500
    slack.fail_next(404)
    gone = hook.send(incident(IncidentState.UPDATED, 1))
    assert not gone.ok and not gone.retryable and gone.status_code == 404
    assert [r.status for r in slack.requests] == [200, 500, 500, 404]
    # slack-sdk logged the URL, a secret, on each retry at INFO
    assert "retry" in caplog.text and slack.webhook_url not in caplog.text
    assert slack.requests[0].body["blocks"][0]["type"] == "header"


class PlainTextSlack(FakeSlack):
    """A Slack whose 500s have a plain-text body, as a proxy in front of it answers."""

    def respond(self, path: str, body: dict[str, Any], status: int) -> Answer:
        if status == 500:
            return 500, {"Content-Type": "text/plain"}, "oops"
        return super().respond(path, body, status)


def _sdk_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("slaguard.notify.") and r.levelno >= logging.WARNING
    ]


def test_a_retried_500_with_a_non_json_body_is_not_logged_at_error_by_slack_sdk(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """slack-sdk logged `ERROR Failed to decode Slack API response: Received a response
    in a non-JSON format: oops` for each such failure, though it is retried and slaguard
    says so in its own line (with the same text)."""
    caplog.set_level(logging.INFO)
    with PlainTextSlack() as slack:
        slack.fail_next(500, times=2)
        failed = _web(slack).send(incident())
        assert [r.status for r in slack.requests] == [500, 500]
    assert not failed.ok and failed.retryable and failed.status_code == 500
    assert "non-JSON format: oops" in failed.detail  # what slaguard's own line says
    assert _sdk_errors(caplog) == [], caplog.text
    caplog.clear()
    caplog.set_level(logging.DEBUG)  # asked for: there, at DEBUG
    with PlainTextSlack() as slack:
        slack.fail_next(500, times=2)
        assert not _web(slack).send(incident()).ok
    decoded = [r for r in caplog.records if "Failed to decode Slack API response" in r.message]
    assert [r.levelname for r in decoded] == ["DEBUG"], caplog.text


def test_a_refused_connection_is_not_logged_at_error_by_slack_sdk(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    web = SlackWebNotifier(
        SecretStr(TOKEN), "C0GUARD", base_url="http://127.0.0.1:9/api/", server_backoff_s=0.01
    )
    failed = web.send(incident())
    assert not failed.ok and failed.retryable and "Connection refused" in failed.detail
    assert _sdk_errors(caplog) == [], caplog.text
