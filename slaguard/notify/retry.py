"""slack-sdk retry handlers: the defaults only retry connection errors."""

from __future__ import annotations

from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
    ServerErrorRetryHandler,
)
from slack_sdk.http_retry.builtin_interval_calculators import BackoffRetryIntervalCalculator
from slack_sdk.http_retry.handler import RetryHandler


def slack_retry_handlers(max_retries: int = 1, server_backoff_s: float = 0.5) -> list[RetryHandler]:
    """Connection errors, 429 (sleeps Retry-After) and 500/503 (exponential backoff).

    Retries are few on purpose: a message that still fails stays in its incident's database
    outbox, and `GuardReplica.deliver` tries it again later without holding a thread.
    """
    backoff = BackoffRetryIntervalCalculator(backoff_factor=server_backoff_s)
    return [
        ConnectionErrorRetryHandler(max_retry_count=max_retries, interval_calculator=backoff),
        RateLimitErrorRetryHandler(max_retry_count=max_retries),
        ServerErrorRetryHandler(max_retry_count=max_retries, interval_calculator=backoff),
    ]
