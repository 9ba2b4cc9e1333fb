"""Global correction, the slow feedback loop (reference scheduler, section 4).

Every 500 ms a scalar signal combines load imbalance across targets (std / mean of queue
per unit of capacity), total queued requests and the SLA violation rate. Past the
threshold, targets loaded above the band get "slow down" (larger batches: throughput to
drain the queue) and targets below it get "speed up" (smaller batches: better TTFT for
what they receive). The result is a new batching factor per target; the per-target loops
apply it and keep running unchanged if this loop stops.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from slaguard.scheduler.config import CorrectionConfig


class Action(StrEnum):
    SPEED_UP = "speed_up"
    SLOW_DOWN = "slow_down"
    HOLD = "hold"


@dataclass(frozen=True, slots=True)
class CorrectionSignal:
    """The signal, its components, and what each target is told (index-aligned)."""

    value: float
    imbalance: float
    queued: float
    violation_rate: float
    actions: tuple[Action, ...]
    factors: tuple[float, ...]

    @property
    def fired(self) -> bool:
        return any(a is not Action.HOLD for a in self.actions)


def correction_signal(
    queue_depths: np.ndarray,
    capacities: np.ndarray,
    violation_rate: float,
    current_factors: np.ndarray,
    cfg: CorrectionConfig,
) -> CorrectionSignal:
    """Compute the signal and the next batching factor per target.

    `capacities` are relative speeds (queue per unit of capacity is what counts as load);
    a NaN violation rate (no completions yet) counts as 0, never as a violation.
    """
    load = queue_depths / capacities
    mean = float(load.mean()) if load.size else 0.0
    imbalance = float(load.std() / mean) if mean > 0 else 0.0
    queued = float(queue_depths.sum())
    vr = 0.0 if not np.isfinite(violation_rate) else violation_rate
    value = (
        cfg.imbalance_weight * imbalance
        + cfg.queued_weight * min(queued / cfg.queued_norm, 1.0)
        + cfg.violation_weight * vr
    )
    factors = current_factors.astype(np.float64, copy=True)
    actions = [Action.HOLD] * len(load)
    if value > cfg.threshold and mean > 0:
        high = load > mean * (1.0 + cfg.band)
        low = load < mean * (1.0 - cfg.band)
        factors[high] = np.minimum(factors[high] + cfg.step, cfg.max_factor)
        factors[low] = np.maximum(factors[low] - cfg.step, cfg.min_factor)
        for i in np.flatnonzero(high):
            actions[int(i)] = Action.SLOW_DOWN
        for i in np.flatnonzero(low):
            actions[int(i)] = Action.SPEED_UP
    return CorrectionSignal(
        value=value,
        imbalance=imbalance,
        queued=queued,
        violation_rate=vr,
        actions=tuple(actions),
        factors=tuple(float(f) for f in factors),
    )
