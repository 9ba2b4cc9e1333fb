"""Page-Hinkley test for an upward shift in the mean of a stream.

Statistic: m_T = sum_{t<=T} (x_t - mu - delta), alarm when m_T - min_{t<=T} m_t > lambda.
`mu` is the known pre-change mean when given (Page's original test: here, the baseline the
caller subtracted), else the running mean of the stream itself (the form river implements),
which only sees changes *within* the stream. `delta` is the tolerated drift per sample and
`lambda` the alarm threshold, both in the units of x. A small implementation beats pulling
in river (a large online-learning library) for twenty lines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(slots=True)
class PageHinkley:
    """One-sided (upward) Page-Hinkley detector; feed values, read `alarm`."""

    delta: float
    threshold: float
    min_samples: int = 30
    reference_mean: float | None = None
    count: int = 0
    mean: float = 0.0
    cumulative: float = 0.0
    minimum: float = 0.0
    since_minimum: int = 0
    """Values folded in since the cumulative sum was at its lowest: the ones the
    statistic measures."""

    def update(self, value: float) -> bool:
        """Fold in one value (NaN is rejected, never read as 0); return `alarm`."""
        if math.isnan(value):
            raise ValueError("Page-Hinkley input must not be NaN")
        self.count += 1
        self.mean += (value - self.mean) / self.count
        mu = self.mean if self.reference_mean is None else self.reference_mean
        self.cumulative += value - mu - self.delta
        if self.cumulative <= self.minimum:
            self.minimum, self.since_minimum = self.cumulative, 0
        else:
            self.since_minimum += 1
        return self.alarm

    @property
    def statistic(self) -> float:
        """m_T - min m_t: how far the cumulative drift rose above its lowest point."""
        return self.cumulative - self.minimum

    @property
    def shift_since_minimum(self) -> float | None:
        """Mean of `x - mu` over the values since the lowest point (exact with a
        `reference_mean`): the size of the shift an alarm reports, where the lifetime mean
        dilutes it with the values before it began. None before any rise."""
        if self.since_minimum == 0:
            return None
        return self.statistic / self.since_minimum + self.delta

    @property
    def alarm(self) -> bool:
        """True once enough samples were seen and the statistic passed the threshold."""
        return self.count >= self.min_samples and self.statistic > self.threshold

    def reset(self) -> None:
        """Start over (after an alarm was handled)."""
        self.count = self.since_minimum = 0
        self.mean = self.cumulative = self.minimum = 0.0
