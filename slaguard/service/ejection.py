"""Outlier ejection at the gateway: a target that fails `gateway.eject_after_failures`
times in a row before the first byte is marked unhealthy for `gateway.eject_s`.

A backend refusing every request (HTTP 503) while its `/metrics` still answers looks idle
to the router (an empty queue), so it keeps its share of the traffic, each request paying
a failed attempt and a retry; a refusal gives the guard no TTFT, so it is never demoted.
Its pictures (the scraper's, a push to `/v1/telemetry`) would mark it healthy again at
once, so during the window they leave it unhealthy; the first picture after the window
gives it back the health that picture says. No I/O, the runtime's clock passed in: this
runs on the event loop thread.
"""

from __future__ import annotations

import logging

from prometheus_client import Counter

from slaguard.fleet import Fleet
from slaguard.scheduler.state import FleetState
from slaguard.service.config import ServiceConfig

log = logging.getLogger(__name__)


class Ejections:
    """Per target: its consecutive failures before the first byte, and the end of its
    ejection (None: not ejected)."""

    def __init__(
        self, fleet: Fleet, state: FleetState, counter: Counter, config: ServiceConfig
    ) -> None:
        self.fleet = fleet
        self.state = state
        self.counter = counter
        self.after = config.gateway.eject_after_failures
        self.eject_s = config.gateway.eject_s
        self._streak = [0] * len(fleet)
        self._until: list[float | None] = [None] * len(fleet)

    def failed(self, index: int, why: str, now_s: float) -> None:
        """An attempt on target `index` failed before the first byte. Attempts sent
        before an ejection that fail during it do not count towards the next one."""
        until = self._until[index]
        if self.after == 0 or (until is not None and now_s < until):
            return
        self._streak[index] += 1
        if self._streak[index] < self.after:
            return
        self._streak[index] = 0
        self._until[index] = now_s + self.eject_s
        self.state.set_healthy(index, False)
        target = self.fleet.targets[index].id
        self.counter.labels(target).inc()
        log.warning(
            "gateway: target %s ejected for %g s after %d consecutive failures before the "
            "first byte (last: %s); no request goes to it until then",
            target,
            self.eject_s,
            self.after,
            why,
        )

    def answered(self, index: int) -> None:
        """A first byte from target `index`: its failures are no longer consecutive."""
        self._streak[index] = 0

    def health(self, index: int, said: bool | None, now_s: float) -> bool | None:
        """The health a picture of target `index` saying `said` (None: nothing) writes:
        False during an ejection; the first picture after one ends it, healthy unless it
        says otherwise (the ejection, not the picture, made it unhealthy)."""
        until = self._until[index]
        if until is None:
            return said
        if now_s < until:
            return False
        self._until[index] = None
        return True if said is None else said
