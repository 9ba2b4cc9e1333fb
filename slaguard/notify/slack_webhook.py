"""Slack incoming-webhook notifier. Webhooks cannot thread: each update is a new message.

`WebhookClient.send` never raises on HTTP errors: it returns the status code, so the
status is checked here (429 and 5xx are retried later, other codes are permanent).
"""

from __future__ import annotations

from pydantic import SecretStr
from slack_sdk.webhook import WebhookClient

from slaguard.guard.events import IncidentEvent
from slaguard.notify.base import DeliveryResult, retryable_status
from slaguard.notify.messaging import MessageLinks, build_message
from slaguard.notify.redact import Redactor, failed, redacting_logger
from slaguard.notify.retry import retry_after_s, slack_retry_handlers


class SlackWebhookNotifier:
    """Posts incident messages to one incoming webhook (the URL is a secret)."""

    name = "slack_webhook"

    def __init__(
        self,
        url: SecretStr,
        links: MessageLinks | None = None,
        max_retries: int = 1,
        server_backoff_s: float = 0.5,
        timeout_s: int = 10,
    ) -> None:
        self.links = links or MessageLinks()
        self._redact = Redactor.for_url(url.get_secret_value())
        self._client = WebhookClient(
            url.get_secret_value(),
            timeout=timeout_s,
            retry_handlers=slack_retry_handlers(max_retries, server_backoff_s),
            logger=redacting_logger(self.name, self._redact),
        )

    def __repr__(self) -> str:
        return "SlackWebhookNotifier(url=**********)"

    def send(self, event: IncidentEvent) -> DeliveryResult:
        """Post the message and check the status code; every error is a failed result,
        never an exception."""
        message = build_message(event, self.links)
        try:
            response = self._client.send(text=message.text, blocks=message.blocks)
        except Exception as exc:
            return failed("webhook", exc, self._redact)
        status = response.status_code
        if status == 200:
            return DeliveryResult(True, "posted", status_code=status)
        return DeliveryResult(
            False,
            f"webhook failed: HTTP {status} {self._redact(response.body[:100])}".strip(),
            retryable=retryable_status(status),
            status_code=status,
            retry_after_s=retry_after_s(response.headers),
        )
