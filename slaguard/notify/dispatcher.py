"""Dispatcher: `submit` only queues (never blocks routing); `deliver_pending` sends.

Run `deliver_pending(now_s)` from a job of its own (not the decision path). When a send
fails with a retryable error the round stops and nothing is sent until that message's
retry time: Slack is probably down, and every other message would only wait on the same
timeouts.
"""

from __future__ import annotations

import logging

from slaguard.guard.events import IncidentEvent
from slaguard.notify.base import DeliveryResult, Notifier
from slaguard.notify.outbox import Outbox

log = logging.getLogger(__name__)


class IncidentDispatcher:
    """A notifier behind an outbox."""

    def __init__(self, notifier: Notifier, outbox: Outbox | None = None) -> None:
        self.notifier = notifier
        self.outbox = outbox or Outbox()
        self.sent = 0
        self.failures = 0
        self.paused_until_s = float("-inf")

    def submit(self, event: IncidentEvent, now_s: float) -> bool:
        """Queue one incident event (False for a duplicate). No I/O."""
        return self.outbox.enqueue(event, now_s)

    def deliver_pending(self, now_s: float) -> list[DeliveryResult]:
        """Try every due message once, in order; reschedule or drop the failures."""
        results: list[DeliveryResult] = []
        if now_s < self.paused_until_s:
            return results
        for item in self.outbox.due(now_s):
            result = self.notifier.send(item.event)
            results.append(result)
            if result.ok:
                self.sent += 1
                self.outbox.delivered(item.key)
                continue
            self.failures += 1
            if not result.retryable:
                log.error("notifier %s dropped %s: %s", self.notifier.name, item.key, result.detail)
                self.outbox.abandon(item.key)
                continue
            log.warning(
                "notifier %s will retry %s: %s", self.notifier.name, item.key, result.detail
            )
            self.outbox.failed(item.key, now_s, result.detail, result.retry_after_s)
            self.paused_until_s = item.next_attempt_s
            break
        return results
