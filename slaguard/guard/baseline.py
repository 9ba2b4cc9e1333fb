"""A slow baseline of a positive statistic: EWMA in log space, frozen while anomalous."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(slots=True)
class LogBaseline:
    """Geometric EWMA with time constant `tau_s`.

    While the subject is anomalous the baseline is frozen, so a persistent fault does not
    become the new normal; after `max_freeze_s` of continuous anomaly it adapts again (a
    lasting change is accepted rather than holding the breaker open forever).
    """

    tau_s: float
    max_freeze_s: float
    log_value: float | None = None
    at_s: float = 0.0
    frozen_since_s: float | None = None
    count: int = 0
    since_s: float | None = None
    """When the first value was folded in (None before)."""

    def age_s(self, now_s: float) -> float:
        """How long this baseline has been learning (0 before its first value)."""
        return 0.0 if self.since_s is None else now_s - self.since_s

    @property
    def value(self) -> float | None:
        """The baseline (None until the first update)."""
        return None if self.log_value is None else math.exp(self.log_value)

    def ratio(self, current: float) -> float | None:
        """`current / baseline`, or None before the first update."""
        return None if self.log_value is None else current / math.exp(self.log_value)

    def update(self, now_s: float, current: float, anomalous: bool) -> None:
        """Fold `current` (> 0) in, unless frozen by an ongoing anomaly."""
        if anomalous:
            self.frozen_since_s = self.frozen_since_s if self.frozen_since_s is not None else now_s
            if now_s - self.frozen_since_s < self.max_freeze_s:
                self.at_s = now_s
                return
        else:
            self.frozen_since_s = None
        self.count += 1
        if self.log_value is None:
            self.log_value = math.log(current)
            self.since_s = now_s
        else:
            # A plain mean while young (weight 1/n), then the time-constant EWMA.
            weight = max(
                1.0 / self.count, 1.0 - math.exp(-max(now_s - self.at_s, 0.0) / self.tau_s)
            )
            self.log_value += weight * (math.log(current) - self.log_value)
        self.at_s = now_s
