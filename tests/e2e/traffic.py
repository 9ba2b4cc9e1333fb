"""Open-loop streamed chat completions through slaguard's gateway, from a background thread.

Requests leave at a fixed rate whatever the answers do (late answers never delay later
arrivals). Prompt sizes cycle through a real trace's prompt lengths; every prompt is
distinct text until `hot` is set, from then on `hot_share` of them carry one identical
prompt (a hot prefix, what the hot-spot detector keys on). Every `tight_every`-th request
asks for a deadline no backend can meet, so SLA violations exist in both policy arms.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx

HOT_PROMPT = "Summarise the quarterly incident report for the platform team. " * 8
TIGHT_DEADLINE_S = 0.002
"""Below any first-token time through the gateway: such a request always misses."""


@dataclass
class TrafficStats:
    """What the driver saw."""

    sent: int = 0
    ok: int = 0
    tight_ok: int = 0
    """Answered requests that carried the unmeetable deadline."""
    by_target: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)


class GatewayTraffic:
    """`start()` sends `rate_per_s` requests a second to `base_url` until `stop()`."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        rate_per_s: float,
        prompt_tokens: Sequence[int],
        max_tokens: int = 12,
        hot_share: float = 0.9,
        tight_every: int = 0,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self.period_s = 1.0 / rate_per_s
        self.prompt_tokens = list(prompt_tokens)
        self.max_tokens = max_tokens
        self.hot_share = hot_share
        self.tight_every = tight_every
        self.hot = False
        self.stats = TrafficStats()
        self._loop = asyncio.new_event_loop()
        self._stopping: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="gateway-traffic", daemon=True)

    def start(self) -> GatewayTraffic:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 15.0) -> None:
        if self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(timeout_s)

    def _prompt(self, i: int) -> str:
        if self.hot and (i * 0.618034) % 1.0 < self.hot_share:
            return HOT_PROMPT
        tokens = self.prompt_tokens[i % len(self.prompt_tokens)]
        head = f"request {i}: "
        return head + "x" * max(4 * tokens - len(head), 1)

    def _run(self) -> None:
        self._loop.run_until_complete(self._send_all())
        self._loop.close()

    async def _send_all(self) -> None:
        self._stopping = asyncio.Event()
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=50)
        timeout = httpx.Timeout(30.0, connect=5.0)
        async with httpx.AsyncClient(base_url=self.base_url, limits=limits, timeout=timeout) as c:
            tasks: set[asyncio.Task[None]] = set()
            start = self._loop.time()
            for i in itertools.count():
                delay = start + i * self.period_s - self._loop.time()
                if delay > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stopping.wait(), delay)
                if self._stopping.is_set():
                    break
                task = asyncio.create_task(self._one(c, i))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if tasks:
                await asyncio.wait(tasks, timeout=10)

    async def _one(self, client: httpx.AsyncClient, i: int) -> None:
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": self._prompt(i)}],
            "max_tokens": self.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        tight = self.tight_every > 0 and i % self.tight_every == 0
        headers = {"X-Slaguard-Deadline-S": str(TIGHT_DEADLINE_S)} if tight else {}
        self.stats.sent += 1
        try:
            async with client.stream(
                "POST", "/v1/chat/completions", json=body, headers=headers
            ) as answer:
                await answer.aread()
                if answer.status_code != 200:
                    self.stats.errors[f"HTTP {answer.status_code}"] += 1
                    return
                self.stats.by_target[answer.headers.get("x-slaguard-target", "?")] += 1
            self.stats.ok += 1
            self.stats.tight_ok += tight
        except httpx.HTTPError as exc:
            self.stats.errors[type(exc).__name__] += 1
