"""The notifier seam: one method, one result type (Flagger-style)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from slaguard.guard.events import IncidentEvent


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    """What happened to one message.

    `retryable`: worth trying again later (429, 5xx, connection errors); a permanent
    failure (bad token, unknown channel) is not. `retry_after_s`: the server's hint.
    """

    ok: bool
    detail: str
    retryable: bool = False
    status_code: int | None = None
    thread_ts: str | None = None
    retry_after_s: float | None = None


class Notifier(Protocol):
    """Sends one incident state change as one message."""

    name: str

    def send(self, event: IncidentEvent) -> DeliveryResult:
        """Deliver the message for `event` (may block on the network: call off-path)."""
        ...


SLACK_NOTIFIERS = frozenset({"slack_web", "slack_webhook"})
"""The notifiers whose results the `slaguard_slack_*` metrics count: a notify file or the
console failing is not Slack failing (the guard logs each failed message)."""


def retryable_status(status: int | None) -> bool:
    """429 and server errors are worth retrying; other statuses are permanent."""
    return status is not None and (status == 429 or status >= 500)
