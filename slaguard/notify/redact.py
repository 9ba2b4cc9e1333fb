"""Keep a notifier's secrets (bot token, webhook URL) out of its results and log lines.

The HTTP stack quotes them in its errors in other forms than the one configured: the token
inside a header's bytes repr (`Invalid header value b'Bearer xoxb-...'`), the webhook's path
alone (`InvalidURL`). Each secret is masked as given and as a repr escapes it, and anything
shaped like a Slack token is masked too.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import urlsplit

from slaguard.notify.base import DeliveryResult

MASK = "**********"
_SLACK_TOKEN = re.compile(r"\b(?:xox[a-z]|xapp)-[^\s'\"\\]+")


class Redactor:
    """Masks the given secrets (and Slack-token-shaped text) in a string."""

    def __init__(self, *secrets: str) -> None:
        forms = {f for s in secrets if s for f in (s, repr(s)[1:-1], repr(s.encode())[2:-1])}
        self._forms = sorted(forms, key=len, reverse=True)

    @classmethod
    def for_url(cls, url: str) -> Redactor:
        """A webhook URL and its path (the path is the secret part)."""
        try:
            path = urlsplit(url).path
        except ValueError:
            path = ""
        return cls(url, *([path] if len(path) > 1 else []))

    def __call__(self, text: str) -> str:
        for form in self._forms:
            text = text.replace(form, MASK)
        return _SLACK_TOKEN.sub(MASK, text)


def failed(action: str, exc: Exception, redact: Redactor) -> DeliveryResult:
    """Any error of an attempt as a retryable failure (the outbox backs it off), its
    message masked: an escaping error was retried at every evaluation, logged with the
    secret in it."""
    return DeliveryResult(
        False, f"{action} failed: {type(exc).__name__}: {redact(str(exc))}"[:300], retryable=True
    )


class _RedactFilter(logging.Filter):
    def __init__(self, redact: Redactor) -> None:
        super().__init__()
        self.redact = redact

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        masked = self.redact(text)
        if masked != text:
            record.msg, record.args = masked, None
        return True


SDK_ATTEMPT_ERRORS = (
    "Failed to decode Slack API response:",
    "Failed to send a request to Slack API server:",
)
"""What slack-sdk logs at ERROR for one failed attempt (an HTTP 500 with a non-JSON body,
a connection refused): the failure is retried (by the client, then by the outbox) and
slaguard logs it itself, with the same text (`incident N message retried later: ...`)."""


class _AttemptErrorsAtDebug(logging.Filter):
    """slack-sdk's own line for a failed attempt (`SDK_ATTEMPT_ERRORS`) at DEBUG: an ERROR
    per retried attempt (`Failed to decode Slack API response: Received a response in a
    non-JSON format: oops`) beside slaguard's own line looked like a second failure."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__()
        self.logger = logger

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno <= logging.DEBUG or not record.getMessage().startswith(
            SDK_ATTEMPT_ERRORS
        ):
            return True
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return self.logger.isEnabledFor(logging.DEBUG)


def redacting_logger(name: str, redact: Redactor) -> logging.Logger:
    """A logger for a slack-sdk client, masking what the client logs (it logs the webhook
    URL when it retries, and the error that quotes the token at ERROR), its per-attempt
    errors at DEBUG (`SDK_ATTEMPT_ERRORS`): `slaguard.notify.<notifier>.sdk`."""
    logger = logging.getLogger(f"slaguard.notify.{name}.sdk")
    logger.filters = [
        f for f in logger.filters if not isinstance(f, _RedactFilter | _AttemptErrorsAtDebug)
    ]
    logger.addFilter(_AttemptErrorsAtDebug(logger))
    logger.addFilter(_RedactFilter(redact))
    return logger
