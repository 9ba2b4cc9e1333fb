"""The outbox: messages wait here until delivered, deduplicated, retried with backoff.

Pure (no I/O, no clock): the dispatcher passes `now_s`. Messages of one incident go out in
order (an update never overtakes its "opened"); a key already queued or delivered is
dropped, so one state change yields one message whatever the number of evaluations.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from slaguard.guard.events import IncidentEvent


@dataclass(slots=True)
class OutboxItem:
    """A message waiting for delivery."""

    event: IncidentEvent
    enqueued_at_s: float
    next_attempt_s: float
    attempts: int = 0
    last_error: str = ""

    @property
    def key(self) -> str:
        """The deduplication key (`incident:revision:state`)."""
        return self.event.dedup_key


class Outbox:
    """Ordered, bounded queue of pending messages plus a bounded memory of delivered keys."""

    def __init__(
        self,
        base_backoff_s: float = 2.0,
        max_backoff_s: float = 300.0,
        max_items: int = 1000,
        remember_keys: int = 10_000,
    ) -> None:
        self.base_backoff_s = base_backoff_s
        self.max_backoff_s = max_backoff_s
        self.max_items = max_items
        self.remember_keys = remember_keys
        self._pending: OrderedDict[str, OutboxItem] = OrderedDict()
        self._done: OrderedDict[str, None] = OrderedDict()
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._pending)

    def enqueue(self, event: IncidentEvent, now_s: float) -> bool:
        """Queue the event's message; False when it is a duplicate (or the queue is full)."""
        key = event.dedup_key
        if key in self._pending or key in self._done:
            return False
        if len(self._pending) >= self.max_items:
            self.dropped += 1
            return False
        self._pending[key] = OutboxItem(event, now_s, now_s)
        return True

    def due(self, now_s: float) -> list[OutboxItem]:
        """Items to try now: per incident only the oldest pending one, if its time has come."""
        heads: dict[str, OutboxItem] = {}
        for item in self._pending.values():
            heads.setdefault(item.event.incident_id, item)
        return [item for item in heads.values() if item.next_attempt_s <= now_s]

    def delivered(self, key: str) -> None:
        """Forget a delivered item, remembering its key for deduplication."""
        self._pending.pop(key, None)
        self._done[key] = None
        while len(self._done) > self.remember_keys:
            self._done.popitem(last=False)

    def failed(
        self, key: str, now_s: float, error: str, retry_after_s: float | None = None
    ) -> None:
        """Schedule a retry with exponential backoff (at least the server's Retry-After)."""
        item = self._pending[key]
        item.attempts += 1
        item.last_error = error
        backoff = min(self.base_backoff_s * 2 ** (item.attempts - 1), self.max_backoff_s)
        item.next_attempt_s = now_s + max(backoff, retry_after_s or 0.0)

    def abandon(self, key: str) -> None:
        """Drop a message that can never be delivered (permanent failure)."""
        if self._pending.pop(key, None) is not None:
            self.dropped += 1
            self._done[key] = None

    def pending(self) -> list[OutboxItem]:
        """All waiting items, oldest first."""
        return list(self._pending.values())
