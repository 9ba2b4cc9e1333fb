"""Pull each target's vLLM-style `/metrics` into the router's hardware picture.

For platforms that do not push (`POST /v1/telemetry`): every `scrape_interval_s` each
target with a URL is scraped concurrently; the text is parsed with prometheus-client's
parser and three families are read: `vllm:gpu_cache_usage_perc` (share of the KV cache in
use, 0..1), `vllm:num_requests_running` and `vllm:num_requests_waiting` (queue depth is
their sum). Only those families' lines reach the parser: a vLLM page is mostly histogram
buckets, and parsing them all cost ~2 ms of the event loop per scrape (0.2 ms filtered).
A target that does not answer is simply not refreshed: its picture ages and, past
`stale_after_s`, the router treats it as saturated.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from slaguard.failure_log import FailureLog
from slaguard.fleet import Fleet, Target
from slaguard.scheduler.state import FleetState
from slaguard.service.ejection import Ejections
from slaguard.service.upstream import REFUSALS, refusal, refusal_fix

log = logging.getLogger(__name__)

KV_USAGE = "vllm:gpu_cache_usage_perc"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
_WANTED = (KV_USAGE, RUNNING, WAITING)
_WANTED_LINE_STARTS = tuple(p + name for name in _WANTED for p in ("", "# HELP ", "# TYPE "))
"""Samples and metadata lines of the three families (a longer name that shares a prefix
gets through too and is parsed as its own family, then ignored)."""


class ScrapeError(ValueError):
    """A `/metrics` page without the families the router needs."""


@dataclass(frozen=True, slots=True)
class BackendPicture:
    """What one scrape said about a backend."""

    kv_usage_ratio: float
    running: float
    waiting: float

    @property
    def queue_depth(self) -> float:
        return self.running + self.waiting


def _value(values: dict[str, float], name: str) -> float:
    if name not in values:
        raise ScrapeError(f"{name} missing from /metrics")
    v = values[name]
    if math.isnan(v) or v < 0:
        raise ScrapeError(f"{name} = {v}: not a usable value")
    return v


def parse_vllm_metrics(text: str) -> BackendPicture:
    """The three gauges from an exposition page (summed over label sets, e.g. per model)."""
    values: dict[str, float] = {}
    wanted = "\n".join(ln for ln in text.splitlines() if ln.startswith(_WANTED_LINE_STARTS))
    for family in text_string_to_metric_families(wanted):
        if family.name in _WANTED:
            for sample in family.samples:
                if sample.name == family.name:
                    values[family.name] = values.get(family.name, 0.0) + sample.value
    usage = _value(values, KV_USAGE)
    return BackendPicture(min(usage, 1.0), _value(values, RUNNING), _value(values, WAITING))


def apply_picture(
    state: FleetState,
    target: Target,
    picture: BackendPicture,
    now_s: float,
    ejections: Ejections | None = None,
) -> None:
    """Write one scraped picture into the router's row for `target`. A backend that
    answers its metrics is healthy: a `healthy: false` pushed to `/v1/telemetry` (which
    anyone on the network can send) no longer drains it until someone pushes it back.
    Not while the gateway has it ejected: its metrics answer, its requests fail."""
    state.refresh(
        target.index,
        now_s,
        kv_used_gb=picture.kv_usage_ratio * target.kv_budget_gb,
        queue_depth=picture.queue_depth,
    )
    healthy = True if ejections is None else ejections.health(target.index, True, now_s)
    if healthy is not None:
        state.set_healthy(target.index, healthy)


class MetricsScraper:
    """Scrapes every target with a URL; `scrape_once` is one round (tests call it).
    `headers` go with every scrape: slaguard's credentials (`upstream.BackendAccess.auth`),
    for a backend behind an authenticating proxy; `ejections`: the gateway's, which keep
    an ejected target unhealthy."""

    def __init__(
        self,
        fleet: Fleet,
        state: FleetState,
        client: aiohttp.ClientSession,
        clock: Callable[[], float],
        *,
        timeout_s: float = 0.5,
        headers: Mapping[str, str] | None = None,
        ejections: Ejections | None = None,
    ) -> None:
        self.targets = [t for t in fleet if t.url]
        self.ejections = ejections
        self.state = state
        self.client = client
        self.clock = clock
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.headers = dict(headers or {})
        self.rounds = 0
        self.errors = 0
        self._failures = {t.id: FailureLog(log, f"scrape of {t.id}") for t in self.targets}

    async def _one(self, target: Target) -> None:
        url = f"{str(target.url).rstrip('/')}/metrics"
        try:
            async with self.client.get(
                url, timeout=self.timeout, headers=self.headers, allow_redirects=False
            ) as resp:
                if resp.status in REFUSALS:
                    keyed = "authorization" in self.headers
                    raise ScrapeError(f"{refusal(resp.status, keyed)}; fix: {refusal_fix(keyed)}")
                resp.raise_for_status()
                if resp.status != 200:  # a redirect is not followed to a host of its choosing
                    raise ScrapeError(f"HTTP {resp.status}: expected 200 with the metrics")
                text = await resp.text()
            picture = parse_vllm_metrics(text)
        except (aiohttp.ClientError, TimeoutError, ScrapeError, ValueError) as exc:
            self.errors += 1
            detail = f"{url}: {type(exc).__name__}: {self._detail(exc)}"
            self._failures[target.id].failed(detail, self.clock())
            return
        now_s = self.clock()
        self._failures[target.id].succeeded(now_s)
        apply_picture(self.state, target, picture, now_s, self.ejections)

    def _detail(self, exc: BaseException) -> str:
        """The error's own text; a timeout has none, so the limit it ran into."""
        if str(exc):
            return str(exc)
        if isinstance(exc, TimeoutError):
            return f"no answer within {self.timeout.total:g} s (telemetry.scrape_timeout_s)"
        return "no detail given"

    async def scrape_once(self) -> None:
        """Scrape all targets concurrently; failures leave their pictures to age."""
        self.rounds += 1
        await asyncio.gather(*(self._one(t) for t in self.targets))

    async def run(self, interval_s: float) -> None:
        """Scrape forever, every `interval_s` (cancel the task to stop)."""
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            await self.scrape_once()
            next_at = max(next_at + interval_s, loop.time())
            await asyncio.sleep(next_at - loop.time())
