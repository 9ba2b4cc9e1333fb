"""slack-sdk retry handlers (the defaults only retry connection errors) and Retry-After.

slack-sdk's own 429 handler reads Retry-After with `int()`: an HTTP-date, which HTTP allows,
raised `ValueError` out of the client and the message was resent at every evaluation.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    ServerErrorRetryHandler,
)
from slack_sdk.http_retry.builtin_interval_calculators import BackoffRetryIntervalCalculator
from slack_sdk.http_retry.handler import RetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState

MAX_RETRY_AFTER_S = 3600.0
"""A longer (or far-future) Retry-After is read as this: one odd answer cannot stop the
deliveries for days."""

CLIENT_WAIT_S = 30.0
"""A 429 asking for a longer wait is not slept out in the client: the outbox waits instead,
without holding a thread (a sleeping thread also holds up the service's shutdown)."""


def retry_after_s(headers: Mapping[str, object], now: datetime | None = None) -> float | None:
    """The Retry-After header in seconds (delta-seconds or an HTTP-date, clamped to
    0..MAX_RETRY_AFTER_S); None when absent or unreadable."""
    raw = next((v for k, v in headers.items() if str(k).lower() == "retry-after"), None)
    if isinstance(raw, Sequence) and not isinstance(raw, str):
        raw = raw[0] if raw else None
    if not isinstance(raw, str):
        return None
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:  # "-0000": UTC with no zone said (RFC 5322)
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


class RateLimitRetryHandler(RetryHandler):
    """429: sleeps out a short Retry-After (seconds or an HTTP-date; 1 s when unreadable)
    and tries again; a longer one is left to the outbox."""

    def _can_retry(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        return (
            response is not None
            and response.status_code == 429
            and _wait(response) <= CLIENT_WAIT_S
        )

    def prepare_for_next_attempt(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> None:
        state.next_attempt_requested = True
        time.sleep(_wait(response) if response is not None else 1.0)
        state.increment_current_attempt()


def _wait(response: HttpResponse) -> float:
    wait = retry_after_s(response.headers)
    return 1.0 if wait is None else wait


def slack_retry_handlers(max_retries: int = 1, server_backoff_s: float = 0.5) -> list[RetryHandler]:
    """Connection errors, 429 (sleeps a short Retry-After) and 500/503 (exponential backoff).

    Retries are few on purpose: a message that still fails stays in its incident's database
    outbox, and `GuardReplica.deliver` tries it again later without holding a thread.
    """
    backoff = BackoffRetryIntervalCalculator(backoff_factor=server_backoff_s)
    return [
        ConnectionErrorRetryHandler(max_retry_count=max_retries, interval_calculator=backoff),
        RateLimitRetryHandler(max_retry_count=max_retries),
        ServerErrorRetryHandler(max_retry_count=max_retries, interval_calculator=backoff),
    ]
