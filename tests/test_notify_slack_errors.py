"""Slack errors other than HTTP statuses (real slack-sdk, fake Slack): a token with a second
line, a webhook URL with a space and a 429 whose Retry-After is an HTTP-date escaped the
notifiers, were logged with the secret in them and resent at every evaluation. Each is
now a failed delivery with no secret in it, backed off by the outbox."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from fakes.incidents import incident
from fakes.slack_server import FakeSlack
from prometheus_client import CollectorRegistry
from pydantic import SecretStr
from sqlalchemy import Engine
from test_guard_store import T0
from test_guard_store_incidents import incident_row, open_incident

from slaguard.fleet import load_fleet
from slaguard.guard.incident_store import OUTBOX_KEY
from slaguard.guard.leader import SoloLease
from slaguard.guard.runtime import GuardReplica
from slaguard.notify.base import Notifier
from slaguard.notify.slack_web import SlackWebNotifier
from slaguard.notify.slack_webhook import SlackWebhookNotifier
from slaguard.scheduler.state import FleetState
from slaguard.service.modes import ReplicaModes
from slaguard.telemetry.metrics import SlaguardMetrics

SECRET = "xoxb-2f9c-SECRET"
TWO_LINES = f"{SECRET}\n# prod bot"


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        yield fake


def _web(slack: FakeSlack, token: str = SECRET) -> SlackWebNotifier:
    return SlackWebNotifier(SecretStr(token), "C0GUARD", base_url=slack.base_url, timeout_s=5)


def _http_date(from_now: timedelta) -> str:
    return format_datetime(datetime.now(UTC) + from_now, usegmt=True)


def test_a_token_with_a_second_line_is_a_failed_attempt_that_never_quotes_it(
    slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    result = _web(slack, TWO_LINES).send(incident())
    assert not result.ok and result.retryable
    assert result.detail.startswith("chat.postMessage failed: ValueError: Invalid header value")
    assert "SECRET" not in result.detail and "prod bot" not in result.detail
    assert "Invalid header value" in caplog.text  # slack-sdk logs it, masked
    assert "SECRET" not in caplog.text and "prod bot" not in caplog.text
    assert slack.requests == []


def test_a_webhook_url_with_a_space_is_a_failed_attempt_that_never_quotes_it(
    slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    hook = SlackWebhookNotifier(SecretStr(f"{slack.url}/services/T000/B000/sec ret"))
    result = hook.send(incident())
    assert not result.ok and result.retryable
    assert result.detail.startswith("webhook failed: InvalidURL")
    assert "sec ret" not in result.detail and "B000" not in result.detail
    assert "control characters" in caplog.text  # slack-sdk logs it, masked
    assert "sec ret" not in caplog.text and "B000" not in caplog.text


@pytest.mark.parametrize("kind", ["web", "webhook"])
def test_an_http_date_retry_after_is_honoured(kind: str, slack: FakeSlack) -> None:
    notifier: Notifier = (
        _web(slack) if kind == "web" else SlackWebhookNotifier(SecretStr(slack.webhook_url))
    )
    slack.retry_after = _http_date(timedelta(seconds=-5))  # already past: retried at once
    slack.fail_next(429)
    assert notifier.send(incident()).ok
    slack.retry_after = _http_date(timedelta(hours=1))  # too long to sleep in the client
    slack.fail_next(429)
    late = notifier.send(incident())
    assert not late.ok and late.retryable and late.status_code == 429
    assert late.retry_after_s is not None and 3590 <= late.retry_after_s <= 3600
    slack.retry_after = _http_date(timedelta(days=30))  # clamped to an hour
    slack.fail_next(429)
    assert notifier.send(incident()).retry_after_s == 3600.0
    assert [r.status for r in slack.requests] == [429, 200, 429, 429]


def _service(engine: Engine, notifier: Notifier) -> ReplicaModes:
    leader = GuardReplica(engine, SoloLease(), notifier, replica_id="a")
    assert leader.sync(T0 + 20).leader
    return ReplicaModes(leader, FleetState(load_fleet()), SlaguardMetrics(CollectorRegistry()))


def _evaluate_each_second(modes: ReplicaModes, seconds: int) -> None:
    async def run() -> None:
        for k in range(seconds):
            await modes.evaluate(T0 + 20 + k)
            await modes.wait_for_delivery()

    asyncio.run(run())


def test_the_service_backs_off_a_broken_token_and_logs_no_secret(
    audit_engine: Engine, slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    """The error escaped the delivery round, was logged with the token twice a second and
    the message was tried again at every evaluation."""
    open_incident(audit_engine)
    modes = _service(audit_engine, _web(slack, TWO_LINES))
    _evaluate_each_second(modes, 10)
    [head] = incident_row(audit_engine).evidence[OUTBOX_KEY]
    assert head["attempts"] == 3  # at T0+20, +22 and +26 (2 s, then 4 s backoff)
    assert "Invalid header value" in head["error"] and "SECRET" not in head["error"]
    assert "delivery round failed" not in caplog.text and "SECRET" not in caplog.text


def test_the_service_waits_out_an_http_date_retry_after(
    audit_engine: Engine, slack: FakeSlack
) -> None:
    """A 429 with an HTTP-date raised ValueError in slack-sdk: 10 POSTs in 10 s."""
    open_incident(audit_engine)
    modes = _service(audit_engine, SlackWebhookNotifier(SecretStr(slack.webhook_url)))
    slack.retry_after = _http_date(timedelta(minutes=10))
    slack.fail_next(429, times=10)
    _evaluate_each_second(modes, 10)
    assert [r.status for r in slack.requests] == [429]
    [head] = incident_row(audit_engine).evidence[OUTBOX_KEY]
    assert head["next_attempt_s"] >= T0 + 20 + 590
