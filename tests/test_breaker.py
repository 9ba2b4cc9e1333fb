"""Breaker hysteresis: K bad to trip, M good plus a cool-down to clear, neutral is neutral."""

from __future__ import annotations

from slaguard.guard.breaker import (
    BreakerPhase,
    BreakerSignal,
    BreakerState,
    Evaluation,
    step_breaker,
)
from slaguard.guard.config import BreakerConfig

B, G, N = Evaluation.BAD, Evaluation.GOOD, Evaluation.NEUTRAL
CFG = BreakerConfig(trip_after=3, clear_after=5, cooldown_s=60.0)


def _run(
    evals: list[Evaluation], start_s: float = 0.0, state: BreakerState | None = None
) -> tuple[BreakerState, list[tuple[float, BreakerSignal]]]:
    state = state or BreakerState()
    signals = []
    for i, ev in enumerate(evals):
        step = step_breaker(state, ev, start_s + i, CFG)
        state = step.state
        if step.signal is not BreakerSignal.NONE:
            signals.append((start_s + i, step.signal))
    return state, signals


def test_trips_on_the_kth_consecutive_bad_evaluation() -> None:
    state, signals = _run([B, B, G, B, B, B, B])
    assert signals == [(5.0, BreakerSignal.TRIP)]
    assert state.phase is BreakerPhase.OPEN and state.opened_at_s == 5.0


def test_neutral_evaluations_neither_extend_nor_break_a_streak() -> None:
    _, signals = _run([B, N, N, B, N, B])
    assert signals == [(5.0, BreakerSignal.TRIP)]
    _, none = _run([N] * 100)
    assert none == []


def test_clears_only_after_m_good_and_the_cooldown() -> None:
    opened, _ = _run([B, B, B])
    # 5 good evaluations come at once, but the cool-down (60 s from the trip at 2 s) holds
    state, signals = _run([G] * 70, start_s=3.0, state=opened)
    assert signals == [(62.0, BreakerSignal.CLEAR)]
    assert state.phase is BreakerPhase.CLOSED


def test_a_bad_evaluation_restarts_the_good_count() -> None:
    opened, _ = _run([B, B, B])
    # good from 3 s to 58 s, bad at 59 s: the cool-down is over but 5 new good ones are needed
    _, signals = _run([G] * 56 + [B] + [G] * 10, start_s=3.0, state=opened)
    assert signals == [(64.0, BreakerSignal.CLEAR)]
