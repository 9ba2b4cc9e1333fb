"""The fleet breaker: hysteresis between "detectors say bad" and "switch the fleet".

Trip after `trip_after` consecutive bad evaluations; clear after `clear_after` consecutive
good ones *and* `cooldown_s` since the trip. An evaluation where no detector had enough
data is neutral: it neither extends nor breaks a streak (thin data never trips, and an
empty fleet never clears a breaker).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from slaguard.guard.config import BreakerConfig


class Evaluation(StrEnum):
    """One guard evaluation, summarised for the breaker."""

    BAD = "bad"
    GOOD = "good"
    NEUTRAL = "neutral"


class BreakerPhase(StrEnum):
    """Closed: normal routing. Open: tripped, the fleet belongs on round-robin."""

    CLOSED = "closed"
    OPEN = "open"


class BreakerSignal(StrEnum):
    """What one step decided."""

    NONE = "none"
    TRIP = "trip"
    CLEAR = "clear"


@dataclass(frozen=True, slots=True)
class BreakerState:
    """Counters and phase; immutable so a store can persist and compare it."""

    phase: BreakerPhase = BreakerPhase.CLOSED
    consecutive_bad: int = 0
    consecutive_good: int = 0
    opened_at_s: float | None = None


@dataclass(frozen=True, slots=True)
class BreakerStep:
    """The new state and the signal (trip / clear / none) of one step."""

    state: BreakerState
    signal: BreakerSignal


def step_breaker(
    state: BreakerState, evaluation: Evaluation, now_s: float, config: BreakerConfig
) -> BreakerStep:
    """Advance the breaker by one evaluation."""
    if evaluation is Evaluation.NEUTRAL:
        return BreakerStep(state, BreakerSignal.NONE)
    if evaluation is Evaluation.BAD:
        bad = replace(state, consecutive_bad=state.consecutive_bad + 1, consecutive_good=0)
        if state.phase is BreakerPhase.CLOSED and bad.consecutive_bad >= config.trip_after:
            return BreakerStep(
                replace(bad, phase=BreakerPhase.OPEN, opened_at_s=now_s), BreakerSignal.TRIP
            )
        return BreakerStep(bad, BreakerSignal.NONE)
    good = replace(state, consecutive_good=state.consecutive_good + 1, consecutive_bad=0)
    if (
        state.phase is BreakerPhase.OPEN
        and good.consecutive_good >= config.clear_after
        and state.opened_at_s is not None
        and now_s - state.opened_at_s >= config.cooldown_s
    ):
        return BreakerStep(
            replace(good, phase=BreakerPhase.CLOSED, opened_at_s=None), BreakerSignal.CLEAR
        )
    return BreakerStep(good, BreakerSignal.NONE)
