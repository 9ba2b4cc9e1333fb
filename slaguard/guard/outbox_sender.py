"""The leader's sending side of the incident outbox: each incident's due messages go to
the notifier in order, and a retryable failure pauses the outbox until that message's
retry time. Database errors are counted and logged, never raised."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import MutableMapping

from sqlalchemy.exc import SQLAlchemyError

from slaguard.audit.engine import error_line
from slaguard.failure_log import FailureLog
from slaguard.guard.incident_store import IncidentStore, QueuedMessage
from slaguard.guard.replica_stats import ReplicaStats
from slaguard.notify.base import DeliveryResult, Notifier

log = logging.getLogger(__name__)


class OutboxSender:
    """Hands the database outbox's due messages to one notifier."""

    def __init__(self, incidents: IncidentStore, notifier: Notifier, stats: ReplicaStats) -> None:
        self.incidents = incidents
        self.notifier = notifier
        self.stats = stats
        self._failures = FailureLog(log, "incident outbox")
        self._paused_until_s = -math.inf

    def deliver(self, now_s: float) -> list[tuple[QueuedMessage, DeliveryResult]]:
        """Send each incident's oldest due message, in order; after a retryable failure
        nothing is sent until that message's retry time."""
        if now_s < self._paused_until_s:
            return []
        done: list[tuple[QueuedMessage, DeliveryResult]] = []
        try:
            for msg in self.incidents.due(now_s):
                self._prime_thread(msg)
                sending = time.monotonic()
                result = self.notifier.send(msg.event)
                # The client may have slept out a Retry-After: retry times count from the
                # end of the send (in whole seconds, so a quick send leaves now_s as given).
                now_s += math.floor(time.monotonic() - sending)
                done.append((msg, result))
                if result.ok:
                    self.stats.sent += 1
                    channel = getattr(self.notifier, "channel", None)
                    self.incidents.delivered(
                        msg,
                        slack_channel=channel if isinstance(channel, str) else None,
                        slack_ts=result.thread_ts,
                    )
                    continue
                self.stats.send_failures += 1
                next_s = self.incidents.failed(
                    msg,
                    now_s,
                    result.detail,
                    retry_after_s=result.retry_after_s,
                    permanent=not result.retryable,
                )
                if result.retryable:
                    log.warning("incident %s message retried later: %s", msg.incident_id,
                                result.detail)  # fmt: skip
                    self._paused_until_s = next_s
                    break
                log.error("incident %s message dropped: %s", msg.incident_id, result.detail)
        except SQLAlchemyError as exc:
            self.stats.persist_errors += 1
            message = self.stats.note_error(error_line(exc, with_type=True), now_s)
            self._failures.failed(message, now_s)
        else:
            self._failures.succeeded(now_s)
        return done

    def _prime_thread(self, msg: QueuedMessage) -> None:
        """Thread a reply under the incident's first message, whoever posted it."""
        threads = getattr(self.notifier, "threads", None)
        if msg.slack_ts and isinstance(threads, MutableMapping):
            threads[msg.event.incident_id] = msg.slack_ts
