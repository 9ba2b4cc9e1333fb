"""One simulated target: its KV pool, its batcher's admitted work, and the GPU's clock.

Work advances in 100 ms windows: newly admitted prompts prefill together (one pass), then
decode steps run for the rest of the window, jumping straight to the next finishing
request instead of stepping token by token. Latencies come from the fitted latency model
(`TargetLatency`) multiplied by the active fault factor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from slaguard.fleet.request import Request
from slaguard.scheduler.batching import Batcher
from slaguard.scheduler.kv import KvPool
from slaguard.sim.latency import TargetLatency


@dataclass(slots=True)
class Running:
    """A request after its first token: tokens still to generate and its context length."""

    index: int
    remaining: int
    context: int


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
    prefill: list[tuple[Request, int, int]] = field(default_factory=list)
    """Admitted, not yet prefilled: (request, trace index, reused prefix tokens)."""
    decoding: dict[str, Running] = field(default_factory=dict)
    queued_kv_tokens: int = 0
    context_tokens: int = 0
    """Sum of the decoding sequences' lengths: the KV each decode step reads."""

    def has_work(self) -> bool:
        return bool(self.prefill or self.decoding or self.batcher.queued)

    def kv_used_gb(self) -> float:
        """What the router sees as v_h's dynamic part: admitted plus committed-queued KV."""
        tokens = self.pool.active_tokens + self.queued_kv_tokens
        return tokens * self.pool.bytes_per_token / 1e9

    def advance(self, start_s: float, end_s: float, events: list[Event]) -> None:
        """Run this target's GPU from `start_s` to `end_s`, appending what happened."""
        clock = max(self.busy_until, start_s)
        lat = self.latency
        while clock < end_s:
            if self.prefill:
                batch = self.prefill
                self.prefill = []
                dur = self.factor * lat.prefill_many_s([(r.prompt_tokens, u) for r, _, u in batch])
                clock += dur
                self.busy_s += dur
                for r, index, _ in batch:
                    events.append(Event(index, clock, True))
                    if r.max_new_tokens <= 1:
                        events.append(Event(index, clock, False))
                    else:
                        ctx = r.prompt_tokens + 1
                        self.decoding[r.request_id] = Running(index, r.max_new_tokens - 1, ctx)
                        self.context_tokens += ctx
                continue
            if not self.decoding:
                break
            runs = self.decoding
            step = self.factor * lat.decode_step_s(len(runs), self.context_tokens)
            fit = max(1, math.ceil((end_s - clock) / step))
            k = min(fit, min(x.remaining for x in runs.values()))
            clock += k * step
            self.busy_s += k * step
            self.context_tokens += k * len(runs)
            done = []
            for rid, x in runs.items():
                x.remaining -= k
                x.context += k
                if x.remaining <= 0:
                    done.append(rid)
            for rid in done:
                x = runs.pop(rid)
                self.context_tokens -= x.context
                events.append(Event(x.index, clock, False))
        self.busy_until = clock

    def forget(self, request_id: str) -> None:
        """A preempted request loses its progress; it will prefill again when re-admitted."""
        self.prefill = [e for e in self.prefill if e[0].request_id != request_id]
        x = self.decoding.pop(request_id, None)
        if x is not None:
            self.context_tokens -= x.context

    def drop_all(self) -> list[Request]:
        """A failure: everything admitted or queued here is lost; returns those requests."""
        lost = self.batcher.clear()
        self.prefill = []
        self.decoding.clear()
        self.context_tokens = 0
        for rid in list(self.pool.active):
            self.pool.release(rid)
        self.queued_kv_tokens = 0
        return lost
