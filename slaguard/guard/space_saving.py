"""Space-Saving heavy hitters (Metwally et al. 2005) with forward exponential decay.

`k` counters bound the memory. Each tracked item keeps a count and the error it inherited
when it took over the smallest counter, so `count - error` is a guaranteed lower bound of
its (decayed) frequency: trip decisions use that bound, never the overestimate.

Decay is forward decay (Cormode et al. 2009): an arrival at time t weighs exp((t - L)/tau)
for a landmark L, so old counts need no touching; dividing by exp((now - L)/tau) reads them
as decayed counts. The landmark moves (all counts rescaled) before weights overflow.
Apache DataSketches' frequent-items sketch has the same guarantees but integer weights only,
so it cannot decay.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

_RESCALE_EXPONENT = 300.0
"""Move the landmark once weights reach e^300 (floats overflow near e^709)."""


@dataclass(frozen=True, slots=True)
class HeavyHitter:
    """One tracked item: decayed count, its overestimate error and the guaranteed bound."""

    item: str
    count: float
    error: float

    @property
    def lower_bound(self) -> float:
        """At least this much decayed weight really belongs to the item."""
        return self.count - self.error


class DecayedSpaceSaving:
    """Top items of a stream by exponentially decayed frequency, in `k` counters."""

    def __init__(self, k: int, tau_s: float) -> None:
        if k < 1 or tau_s <= 0:
            raise ValueError("k must be >= 1 and tau_s > 0")
        self.k = k
        self.tau_s = tau_s
        self._landmark_s: float | None = None
        self._counts: dict[str, float] = {}
        self._errors: dict[str, float] = {}
        self._total = 0.0

    def _weight(self, at_s: float) -> float:
        if self._landmark_s is None:
            self._landmark_s = at_s
        exponent = (at_s - self._landmark_s) / self.tau_s
        if exponent > _RESCALE_EXPONENT:
            self._rescale(at_s)
            exponent = 0.0
        return math.exp(exponent)

    def _rescale(self, new_landmark_s: float) -> None:
        assert self._landmark_s is not None
        factor = math.exp(-(new_landmark_s - self._landmark_s) / self.tau_s)
        self._counts = {item: c * factor for item, c in self._counts.items()}
        self._errors = {item: e * factor for item, e in self._errors.items()}
        self._total *= factor
        self._landmark_s = new_landmark_s

    def add_untracked(self, at_s: float) -> None:
        """Count traffic that has no item identity (it still dilutes every share)."""
        self._total += self._weight(at_s)

    def add(self, item: str, at_s: float) -> None:
        """Count one arrival of `item` at `at_s` (arrivals should come in time order)."""
        weight = self._weight(at_s)
        self._total += weight
        if item in self._counts:
            self._counts[item] += weight
        elif len(self._counts) < self.k:
            self._counts[item] = weight
            self._errors[item] = 0.0
        else:
            victim = min(self._counts, key=self._counts.__getitem__)
            floor = self._counts.pop(victim)
            del self._errors[victim]
            self._counts[item] = floor + weight
            self._errors[item] = floor

    def _scale(self, now_s: float) -> float:
        if self._landmark_s is None:
            return 0.0
        return math.exp(-(now_s - self._landmark_s) / self.tau_s)

    def total(self, now_s: float) -> float:
        """Decayed weight of all traffic seen (tracked or not) as of `now_s`."""
        return self._total * self._scale(now_s)

    def top(self, now_s: float, n: int = 1) -> list[HeavyHitter]:
        """The `n` items with the largest guaranteed decayed count as of `now_s`."""
        scale = self._scale(now_s)
        ranked = sorted(self._counts, key=lambda i: self._counts[i] - self._errors[i], reverse=True)
        return [
            HeavyHitter(i, self._counts[i] * scale, self._errors[i] * scale) for i in ranked[:n]
        ]
