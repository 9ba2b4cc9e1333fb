"""Per-target continuous batching with prompt-length split (reference scheduler, section 3).

Each target ticks every 100 ms on its own. Requests are split into prompt-length buckets
(short < 2K, medium 2K-32K, long > 32K tokens) so long prompts stop hurting short ones'
TTFT; each bucket batches separately with its own size threshold and preemption rule.
On a tick: finished requests have already left (`finish`), free slots are refilled at
once, and a full bucket preempts its lowest-priority running request for a waiting one
that outranks it by the bucket's rank gap. The global correction scales thresholds through
`factor`; when the global loop stops, the factor decays back to 1 and batching goes on.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from slaguard.fleet.request import Request
from slaguard.scheduler.config import BatchingConfig

BUCKETS: tuple[str, ...] = ("short", "medium", "long")

KvHook = Callable[[Request], bool]
"""Asks the KV pool to admit (or, for release, to free) a request; True on success."""


def bucket_of(prompt_tokens: int, cfg: BatchingConfig) -> str:
    """Prompt-length bucket (Corollary 3 splits by prompt length, not decode length)."""
    if prompt_tokens < cfg.short_below_tokens:
        return "short"
    if prompt_tokens <= cfg.long_above_tokens:
        return "medium"
    return "long"


@dataclass(slots=True)
class TickResult:
    """What one tick changed: requests admitted to a batch, and ones preempted out."""

    admitted: list[Request] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)


@dataclass(slots=True)
class _Bucket:
    max_batch: int
    preempt: bool
    rank_gap: int
    waiting: list[tuple[int, float, int, Request]] = field(default_factory=list)
    running: dict[str, Request] = field(default_factory=dict)


class Batcher:
    """One target's batching loop; pure: the caller supplies time and KV admission."""

    def __init__(self, cfg: BatchingConfig, capacity_scale: float = 1.0) -> None:
        self.cfg = cfg
        self.factor = 1.0
        self._factor_set_at: float | None = None
        self._seq = itertools.count()
        self.queued = 0
        """Requests waiting in any bucket (kept as a counter: read every 100 ms)."""
        self.running = 0
        """Requests admitted to a batch."""
        self.buckets = {
            name: _Bucket(
                max(1, round(b.max_batch * capacity_scale)), b.preempt, b.preempt_min_rank_gap
            )
            for name, b in cfg.buckets.items()
        }

    def submit(self, request: Request, now_s: float) -> None:
        """Queue a routed request in its bucket: priority first, then arrival order."""
        b = self.buckets[bucket_of(request.prompt_tokens, self.cfg)]
        heapq.heappush(b.waiting, (request.priority.rank, now_s, next(self._seq), request))
        self.queued += 1

    def finish(self, request_id: str) -> Request | None:
        """A request completed or failed: its slot frees for the next tick."""
        for b in self.buckets.values():
            req = b.running.pop(request_id, None)
            if req is not None:
                self.running -= 1
                return req
        return None

    def clear(self) -> list[Request]:
        """Drop everything (the target failed); returns the running and waiting requests."""
        lost = self.running_requests()
        for b in self.buckets.values():
            lost += [entry[3] for entry in b.waiting]
            b.waiting.clear()
            b.running.clear()
        self.queued = self.running = 0
        return lost

    def set_factor(self, factor: float, now_s: float) -> None:
        """Global correction: < 1 speeds up (smaller batches, better TTFT), > 1 slows down."""
        self.factor = factor
        self._factor_set_at = now_s

    def threshold(self, bucket: str) -> int:
        return max(1, round(self.buckets[bucket].max_batch * self.factor))

    def running_requests(self) -> list[Request]:
        return [r for b in self.buckets.values() for r in b.running.values()]

    def tick(self, now_s: float, admit: KvHook, release: KvHook, ttl_s: float = 5.0) -> TickResult:
        """Refill free slots and preempt where the bucket's rule allows.

        `admit(request)` asks the KV pool for room (a refused request stays queued);
        `release(request)` frees a preempted request's KV before its replacement is admitted.
        """
        if self._factor_set_at is not None and now_s - self._factor_set_at > ttl_s:
            self.factor, self._factor_set_at = 1.0, None
        result = TickResult()
        if not self.queued:
            return result
        for name, b in self.buckets.items():
            if not b.waiting:
                continue
            limit = self.threshold(name)
            while b.waiting and len(b.running) < limit:
                if not self.cfg.refill_immediately and b.running:
                    break
                if not admit(b.waiting[0][3]):
                    break
                req = heapq.heappop(b.waiting)[3]
                b.running[req.request_id] = req
                self.queued -= 1
                self.running += 1
                result.admitted.append(req)
            if b.preempt and b.waiting and len(b.running) >= limit:
                self._preempt(b, now_s, admit, release, result)
        return result

    def _preempt(
        self, b: _Bucket, now_s: float, admit: KvHook, release: KvHook, result: TickResult
    ) -> None:
        head = b.waiting[0][3]
        victim = max(b.running.values(), key=lambda r: (r.priority.rank, r.arrival_s))
        if victim.priority.rank - head.priority.rank < b.rank_gap:
            return
        release(victim)
        if not admit(head):
            admit(victim)
            return
        del b.running[victim.request_id]
        result.preempted.append(victim)
        heapq.heappop(b.waiting)
        b.running[head.request_id] = head
        result.admitted.append(head)
        heapq.heappush(b.waiting, (victim.priority.rank, now_s, next(self._seq), victim))
