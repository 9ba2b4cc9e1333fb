"""One simulated target: its KV pool, its batcher's admitted work, and the GPU's clock.

Work advances in 100 ms windows: newly admitted prompts prefill together (one pass), then
decode steps run for the rest of the window, jumping straight to the next finishing
request instead of stepping token by token. Each decoding request is keyed by the decode
step at which it finishes (a heap), so a jump costs O(log batch), not O(batch).
Latencies come from the fitted latency model (`TargetLatency`) times the fault factor.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from slaguard.fleet.request import Request
from slaguard.scheduler.batching import Batcher
from slaguard.scheduler.kv import KvPool
from slaguard.sim.latency import TargetLatency


@dataclass(slots=True)
class Running:
    """A request after its first token: the decode step it joined and the one it ends at."""

    index: int
    start_step: int
    end_step: int
    start_context: int


@dataclass(slots=True)
class Event:
    """A request's first token (`first=True`) or completion, at simulated time `at_s`."""

    index: int
    at_s: float
    first: bool


@dataclass(slots=True)
class Replica:
    """Simulation-side state of one target; the scheduler's `Batcher` is shared with it."""

    latency: TargetLatency
    pool: KvPool
    batcher: Batcher
    busy_until: float = 0.0
    busy_s: float = 0.0
    factor: float = 1.0
    failed: bool = False
    prefill: list[tuple[Request, int, int, float]] = field(default_factory=list)
    """Admitted, not yet prefilled: (request, trace index, reused prefix tokens, arrival)."""
    decoding: dict[str, Running] = field(default_factory=dict)
    ends: list[tuple[int, str]] = field(default_factory=list)
    """Heap of (end step, request id); entries of forgotten requests are skipped."""
    step: int = 0
    """Decode steps run so far on this target."""
    context_tokens: int = 0
    """Sum of the decoding sequences' lengths: the KV each decode step reads."""
    wake_at: float = math.inf
    """No completion can happen before this time: the engine may skip windows until then."""

    def needs_advance(self, window_end: float) -> bool:
        """Whether anything observable can happen on this target before `window_end`."""
        return bool(self.prefill) or window_end > self.wake_at

    def has_work(self) -> bool:
        return bool(self.prefill or self.decoding or self.batcher.queued)

    def advance(self, start_s: float, end_s: float, events: list[Event]) -> None:
        """Run this target's GPU up to `end_s`, appending what happened.

        A target that was decoding while the engine skipped it first catches up from
        `busy_until`; newly admitted prompts prefill no earlier than `start_s`, nor before
        the last of them has arrived (the tick admits the whole window's arrivals at once).
        """
        ready = start_s
        for entry in self.prefill:
            ready = max(ready, entry[3])
        if self.decoding:
            clock = self._decode(self.busy_until, ready if self.prefill else end_s, events)
        else:
            clock = self.busy_until
        clock = max(clock, ready)
        while clock < end_s:
            if self.prefill:
                clock = self._prefill(clock, events)
            elif self.decoding:
                clock = self._decode(clock, end_s, events)
            else:
                break
        self.busy_until = clock
        self._set_wake(clock)

    def _prefill(self, clock: float, events: list[Event]) -> float:
        batch = self.prefill
        self.prefill = []
        prompts = [(r.prompt_tokens, reused) for r, _, reused, _ in batch]
        dur = self.factor * self.latency.prefill_many_s(prompts)
        clock += dur
        self.busy_s += dur
        for r, index, _, _ in batch:
            events.append(Event(index, clock, True))
            if r.max_new_tokens <= 1:
                events.append(Event(index, clock, False))
                continue
            ctx = r.prompt_tokens + 1
            end = self.step + r.max_new_tokens - 1
            self.decoding[r.request_id] = Running(index, self.step, end, ctx)
            heapq.heappush(self.ends, (end, r.request_id))
            self.context_tokens += ctx
        return clock

    def _next_end(self) -> int:
        runs, ends = self.decoding, self.ends
        while ends[0][1] not in runs or runs[ends[0][1]].end_step != ends[0][0]:
            heapq.heappop(ends)
        return ends[0][0]

    def _decode(self, clock: float, end_s: float, events: list[Event]) -> float:
        """Decode steps from `clock` until `end_s` (finishing the step in flight)."""
        runs, ends, lat = self.decoding, self.ends, self.latency
        while runs and clock < end_s:
            step_s = self.factor * lat.decode_step_s(len(runs), self.context_tokens)
            fit = max(1, math.ceil((end_s - clock) / step_s))
            k = min(fit, self._next_end() - self.step)
            clock += k * step_s
            self.busy_s += k * step_s
            self.step += k
            self.context_tokens += k * len(runs)
            while ends and ends[0][0] <= self.step:
                _, rid = heapq.heappop(ends)
                x = runs.get(rid)
                if x is None or x.end_step > self.step:
                    continue
                del runs[rid]
                self.context_tokens -= x.start_context + (self.step - x.start_step)
                events.append(Event(x.index, clock, False))
        return clock

    def _set_wake(self, clock: float) -> None:
        self.wake_at = math.inf
        if self.decoding:
            # decode steps only get longer as contexts grow: this is a lower bound
            step_s = self.factor * self.latency.decode_step_s(
                len(self.decoding), self.context_tokens
            )
            self.wake_at = clock + (self._next_end() - self.step - 1) * step_s

    def forget(self, request_id: str) -> None:
        """A preempted request loses its progress; it will prefill again when re-admitted."""
        self.prefill = [e for e in self.prefill if e[0].request_id != request_id]
        x = self.decoding.pop(request_id, None)
        if x is not None:
            self.context_tokens -= x.start_context + (self.step - x.start_step)

    def drop_all(self) -> list[Request]:
        """A failure: everything admitted or queued here is lost, its prefix cache with it
        (a restarted engine starts cold); returns those requests."""
        lost = self.batcher.clear()
        self.prefill = []
        self.decoding.clear()
        self.ends.clear()
        self.context_tokens = 0
        for rid in list(self.pool.active):
            self.pool.release(rid)
        self.pool.clear_cache()
        return lost
