"""Open-loop load generator: replays a trace's arrivals against an OpenAI-compatible URL.

Each trace row becomes one streamed chat completion sent at `arrival_s / speedup` (open
loop: late answers never delay later arrivals). Prompts are `prompt_tokens x 4`
characters of distinct text; `hot_share` of the requests inside a hot window carry one
identical prompt instead (a hot prefix). Per-target TTFT (from the
`x-slaguard-target` header) and errors are collected for the live display.

At the end the generator stops sending and waits (bounded) for the requests in flight;
those still running after that are cancelled and counted as `cut_off`, not as errors: a
request the demo abandons is not a failure of the stack.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from dataclasses import dataclass, field

import httpx
import numpy as np

from slaguard.sim.trace import Trace

HOT_PROMPT = "Summarise the quarterly incident report for the platform team. " * 16


@dataclass(slots=True)
class LoadStats:
    """What the generator saw, per target, since the last `take_window`."""

    sent: int = 0
    ok: int = 0
    errors: int = 0
    cut_off: int = 0
    error_kinds: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    ttft_by_target: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def take_window(self) -> dict[str, list[float]]:
        """The TTFTs since the last call (and forget them)."""
        out = dict(self.ttft_by_target)
        self.ttft_by_target = defaultdict(list)
        return out


@dataclass(frozen=True, slots=True)
class HotWindow:
    """From `start_s` to `end_s` (wall seconds from the start), `share` of requests are hot."""

    start_s: float
    end_s: float
    share: float


class LoadGenerator:
    """Replays `trace` against `base_url` at `speedup` times its real rate."""

    def __init__(
        self,
        base_url: str,
        trace: Trace,
        *,
        model: str,
        speedup: float,
        max_tokens_cap: int = 32,
        prompt_tokens_cap: int = 6000,
        hot: HotWindow | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.trace = trace
        self.model = model
        self.speedup = speedup
        self.max_tokens_cap = max_tokens_cap
        self.prompt_tokens_cap = prompt_tokens_cap
        self.hot = hot
        self.stats = LoadStats()
        self.sending = True
        """False once the last arrival was sent (the rest is the drain)."""
        self._rng = np.random.default_rng(7)

    def _prompt(self, i: int, elapsed_s: float) -> str:
        hot = self.hot
        if (
            hot is not None
            and hot.start_s <= elapsed_s < hot.end_s
            and self._rng.random() < hot.share
        ):
            return HOT_PROMPT
        tokens = min(int(self.trace.prompt_tokens[i]), self.prompt_tokens_cap)
        head = f"request {i}: "
        return head + "x" * max(4 * tokens - len(head), 1)

    async def _one(self, client: httpx.AsyncClient, i: int, elapsed_s: float) -> None:
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": self._prompt(i, elapsed_s)}],
            "max_tokens": max(1, min(int(self.trace.output_tokens[i]), self.max_tokens_cap)),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        self.stats.sent += 1
        started = time.perf_counter()
        try:
            async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                if r.status_code != 200:
                    await r.aread()
                    raise RuntimeError(f"HTTP {r.status_code}")
                target = r.headers.get("x-slaguard-target", "?")
                first: float | None = None
                async for line in r.aiter_lines():
                    if first is None and '"content":"' in line:
                        first = time.perf_counter() - started
            if first is not None:
                self.stats.ttft_by_target[target].append(first)
            self.stats.ok += 1
        except (httpx.HTTPError, RuntimeError) as exc:
            self.stats.errors += 1
            self.stats.error_kinds[str(exc)[:40] or type(exc).__name__] += 1

    @property
    def in_flight(self) -> int:
        return self.stats.sent - self.stats.ok - self.stats.errors - self.stats.cut_off

    async def run(self, duration_s: float, drain_s: float = 20.0) -> None:
        """Send every arrival that falls within `duration_s` wall seconds, then wait up to
        `drain_s` for the answers in flight and cancel (count as cut off) the rest."""
        limits = httpx.Limits(max_connections=1000, max_keepalive_connections=200)
        timeout = httpx.Timeout(60.0, connect=5.0)
        async with httpx.AsyncClient(base_url=self.base_url, limits=limits, timeout=timeout) as c:
            tasks: set[asyncio.Task[None]] = set()
            loop = asyncio.get_running_loop()
            start = loop.time()
            arrivals = self.trace.arrival_s / self.speedup
            for i, at in enumerate(arrivals):
                if at > duration_s:
                    break
                delay = start + float(at) - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                task = asyncio.create_task(self._one(c, i, loop.time() - start))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            self.sending = False
            if tasks:
                _, late = await asyncio.wait(set(tasks), timeout=drain_s)
                for task in late:
                    task.cancel()
                await asyncio.gather(*late, return_exceptions=True)
                self.stats.cut_off += len(late)
