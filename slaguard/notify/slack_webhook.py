"""Slack incoming-webhook notifier. Webhooks cannot thread: each update is a new message.

`WebhookClient.send` never raises on HTTP errors: it returns the status code, so the
status is checked here (429 and 5xx are retried later, other codes are permanent).
"""

from __future__ import annotations

import logging
from urllib.error import URLError

from pydantic import SecretStr
from slack_sdk.webhook import WebhookClient

from slaguard.guard.events import IncidentEvent
from slaguard.notify.base import DeliveryResult, retryable_status
from slaguard.notify.messaging import MessageLinks, build_message
from slaguard.notify.retry import slack_retry_handlers


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
        self._client = WebhookClient(
            url.get_secret_value(),
            timeout=timeout_s,
            retry_handlers=slack_retry_handlers(max_retries, server_backoff_s),
            logger=_redacting_logger(url.get_secret_value()),
        )

    def __repr__(self) -> str:
        return "SlackWebhookNotifier(url=**********)"

    def send(self, event: IncidentEvent) -> DeliveryResult:
        """Post the message and check the status code."""
        message = build_message(event, self.links)
        try:
            response = self._client.send(text=message.text, blocks=message.blocks)
        except (URLError, OSError) as exc:
            return DeliveryResult(False, f"webhook failed: {type(exc).__name__}", retryable=True)
        status = response.status_code
        if status == 200:
            return DeliveryResult(True, "posted", status_code=status)
        retry_after = response.headers.get("Retry-After") or response.headers.get("retry-after")
        return DeliveryResult(
            False,
            f"webhook failed: HTTP {status} {response.body[:100]}".strip(),
            retryable=retryable_status(status),
            status_code=status,
            retry_after_s=float(retry_after[0] if isinstance(retry_after, list) else retry_after)
            if retry_after
            else None,
        )


class _RedactUrl(logging.Filter):
    """slack-sdk logs the webhook URL (a secret) when it retries, at INFO."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if self.url in text:
            record.msg, record.args = text.replace(self.url, "<webhook url>"), None
        return True


def _redacting_logger(url: str) -> logging.Logger:
    """slack-sdk's webhook logger, with the URL masked in everything it logs."""
    logger = logging.getLogger("slaguard.notify.slack_webhook.sdk")
    logger.filters = [f for f in logger.filters if not isinstance(f, _RedactUrl)]
    logger.addFilter(_RedactUrl(url))
    return logger
