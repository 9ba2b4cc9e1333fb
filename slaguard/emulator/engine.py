"""A vLLM-like replica in one asyncio task: continuous batching paced by the latency model.

Each engine step either prefills every newly admitted prompt in one pass (they all get
their first token at its end) or runs one decode step that gives every running sequence
its next token. Between steps, waiting requests are admitted while the batch has room
(`max_batch`) and the KV cache has room for their whole length (prompt + max tokens), as
vLLM's scheduler reserves blocks. Step durations are the fitted latency model's
`prefill_many_s` / `decode_step_s` for the card, times the fault slow-down factor and
divided by `speedup` (tests run the same engine faster than real time).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum

from slaguard.sim.latency import TargetLatency

DONE = -1
"""Queue sentinel: the sequence finished."""
BROKEN = -2
"""Queue sentinel: the fault switch broke the stream after its first token."""


class FailMode(StrEnum):
    """What the `fail` switch does to new and running requests."""

    NONE = "none"
    REFUSE = "refuse"
    """New requests get HTTP 503 before any byte of an answer."""
    BREAK = "break"
    """Requests get their first token, then the connection drops."""


@dataclass(slots=True)
class Faults:
    """The admin switches."""

    slowdown: float = 1.0
    fail: FailMode = FailMode.NONE


@dataclass(eq=False, slots=True)
class Sequence:
    """One request inside the engine; tokens go out through `tokens`."""

    prompt_tokens: int
    max_tokens: int
    arrived: float
    tokens: asyncio.Queue[int] = field(default_factory=asyncio.Queue)
    generated: int = 0
    first_token_at: float | None = None
    cancelled: bool = False

    @property
    def reserved_tokens(self) -> int:
        return self.prompt_tokens + self.max_tokens

    @property
    def context(self) -> int:
        return self.prompt_tokens + self.generated


@dataclass(slots=True)
class EngineStats:
    """Counters for `/metrics`."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished: int = 0
    steps: int = 0


class Engine:
    """Continuous batching over one `TargetLatency`."""

    def __init__(
        self,
        latency: TargetLatency,
        kv_capacity_tokens: int,
        *,
        max_batch: int = 256,
        speedup: float = 1.0,
    ) -> None:
        self.latency = latency
        self.kv_capacity_tokens = kv_capacity_tokens
        self.max_batch = max_batch
        self.speedup = speedup
        self.faults = Faults()
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.kv_reserved = 0
        self.stats = EngineStats()
        self._wake = asyncio.Event()

    @property
    def kv_usage(self) -> float:
        """Share of the KV cache reserved (what `vllm:gpu_cache_usage_perc` reports)."""
        return self.kv_reserved / self.kv_capacity_tokens

    def submit(self, prompt_tokens: int, max_tokens: int) -> Sequence:
        """Queue a request; read its tokens from `seq.tokens` until DONE or BROKEN."""
        seq = Sequence(max(prompt_tokens, 1), max(max_tokens, 1), time.perf_counter())
        self.stats.prompt_tokens += seq.prompt_tokens
        self.waiting.append(seq)
        self._wake.set()
        return seq

    def _duration(self, seconds: float) -> float:
        return seconds * self.faults.slowdown / self.speedup

    def _admit(self) -> list[Sequence]:
        admitted: list[Sequence] = []
        while self.waiting and len(self.running) + len(admitted) < self.max_batch:
            seq = self.waiting[0]
            if seq.cancelled:
                self.waiting.popleft()
                continue
            if self.kv_reserved + seq.reserved_tokens > self.kv_capacity_tokens and (
                self.running or admitted
            ):
                break
            self.waiting.popleft()
            self.kv_reserved += seq.reserved_tokens
            admitted.append(seq)
        return admitted

    def _emit(self, seq: Sequence) -> bool:
        """Give `seq` its next token; True when it is finished."""
        seq.generated += 1
        self.stats.generation_tokens += 1
        if seq.first_token_at is None:
            seq.first_token_at = time.perf_counter()
        seq.tokens.put_nowait(seq.generated)
        if self.faults.fail is FailMode.BREAK:
            seq.tokens.put_nowait(BROKEN)
            return True
        if seq.generated >= seq.max_tokens:
            seq.tokens.put_nowait(DONE)
            return True
        return False

    def _release(self, seq: Sequence) -> None:
        self.kv_reserved -= seq.reserved_tokens
        self.stats.finished += 1

    async def run(self) -> None:
        """The engine loop (cancel the task to stop)."""
        while True:
            if not self.waiting and not self.running:
                self._wake.clear()
                await self._wake.wait()
            self.running = [s for s in self.running if not s.cancelled or self._drop(s)]
            admitted = self._admit()
            self.stats.steps += 1
            if admitted:
                prompts = [(s.prompt_tokens, 0) for s in admitted]
                await asyncio.sleep(self._duration(self.latency.prefill_many_s(prompts)))
                for seq in admitted:
                    if self._emit(seq):
                        self._release(seq)
                    else:
                        self.running.append(seq)
            elif self.running:
                context = sum(s.context for s in self.running)
                step = self.latency.decode_step_s(len(self.running), context)
                await asyncio.sleep(self._duration(step))
                still: list[Sequence] = []
                for seq in self.running:
                    if self._emit(seq):
                        self._release(seq)
                    else:
                        still.append(seq)
                self.running = still
            else:
                await asyncio.sleep(0)

    def _drop(self, seq: Sequence) -> bool:
        """Free a cancelled sequence's KV (always False: filter it out)."""
        self._release(seq)
        return False
