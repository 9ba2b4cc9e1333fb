"""Property tests: no automatic sequence exceeds the hourly switch cap or leaves a hold."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from slaguard.guard import modes
from slaguard.guard.breaker import BreakerState, Evaluation, step_breaker
from slaguard.guard.config import BreakerConfig
from slaguard.guard.modes import HOUR_S, ModeState
from slaguard.scheduler.rollout import (
    HELD_ROUND_ROBIN,
    LEARNED,
    ROUND_ROBIN,
    FleetMode,
    ModeKind,
    RolloutPlan,
)

PLAN = RolloutPlan(baseline_s=300.0, stage_s=600.0)
START_MODES = [
    ROUND_ROBIN,
    HELD_ROUND_ROBIN,
    LEARNED,
    FleetMode(ModeKind.ROLLOUT, 10),
    FleetMode(ModeKind.ROLLOUT, 50),
]
ops = st.lists(
    st.tuples(
        st.sampled_from(["trip", "return", "advance"]), st.floats(min_value=0.0, max_value=900.0)
    ),
    max_size=150,
)


def _apply(state: ModeState, op: str, now_s: float, cfg: BreakerConfig) -> modes.TransitionResult:
    if op == "trip":
        return modes.trip(state, now_s, reason="fault", evidence={})
    if op == "return":
        return modes.auto_return(state, now_s, PLAN, cfg, reason="clear")
    return modes.advance(state, now_s, PLAN)


def _max_switches_in_any_hour(times: list[float]) -> int:
    return max((sum(1 for u in times if t - HOUR_S < u <= t) for t in times), default=0)


@settings(max_examples=300, deadline=None)
@given(start=st.sampled_from(START_MODES), cap=st.integers(min_value=2, max_value=6), sequence=ops)
def test_automatic_switches_never_exceed_the_cap_in_any_hour(
    start: FleetMode, cap: int, sequence: list[tuple[str, float]]
) -> None:
    cfg = BreakerConfig(auto_return=True, max_switches_per_hour=cap)
    state = ModeState(mode=start, auto_advance=start.kind is not ModeKind.HELD_ROUND_ROBIN)
    now = 0.0
    switches: list[float] = []
    for op, dt in sequence:
        now += dt
        result = _apply(state, op, now, cfg)
        if result.changed:
            assert result.state.version == state.version + 1
            family_before = state.mode.kind in (ModeKind.ROUND_ROBIN, ModeKind.HELD_ROUND_ROBIN)
            family_after = result.state.mode.kind in (
                ModeKind.ROUND_ROBIN,
                ModeKind.HELD_ROUND_ROBIN,
            )
            if family_before != family_after:
                switches.append(now)
        else:
            assert result.state is state
        if start is HELD_ROUND_ROBIN:
            assert result.state.mode == HELD_ROUND_ROBIN
        state = result.state
    assert _max_switches_in_any_hour(switches) <= cap


@settings(max_examples=200, deadline=None)
@given(
    evaluations=st.lists(st.sampled_from(list(Evaluation)), min_size=1, max_size=600),
    cap=st.integers(min_value=2, max_value=5),
)
def test_breaker_driven_guard_loop_respects_cap_under_an_oscillating_fault(
    evaluations: list[Evaluation], cap: int
) -> None:
    cfg = BreakerConfig(
        trip_after=2, clear_after=3, cooldown_s=5.0, auto_return=True, max_switches_per_hour=cap
    )
    breaker = BreakerState()
    state = ModeState(mode=LEARNED, auto_advance=False)
    switches: list[float] = []
    for i, ev in enumerate(evaluations * 3):  # repeat: oscillating faults
        now = float(i)
        step = step_breaker(breaker, ev, now, cfg)
        breaker = step.state
        result = None
        if step.signal.value == "trip":
            result = modes.trip(state, now, reason="fault", evidence={})
        elif step.signal.value == "clear":
            result = modes.auto_return(state, now, PLAN, cfg, reason="clear")
        if result is not None and result.changed:
            switches.append(now)
            state = result.state
    assert _max_switches_in_any_hour(switches) <= cap
