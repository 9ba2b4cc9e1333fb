"""Fleet-mode state machine: every transition, idempotence, holds, plan timing, the cap."""

from __future__ import annotations

import pytest

from slaguard.guard import modes
from slaguard.guard.config import BreakerConfig
from slaguard.guard.modes import ModeState, TransitionKind
from slaguard.scheduler.rollout import (
    HELD_ROUND_ROBIN,
    LEARNED,
    ROUND_ROBIN,
    FleetMode,
    ModeKind,
    RolloutPlan,
)

PLAN = RolloutPlan(baseline_s=100.0, stage_s=50.0)
AUTO = BreakerConfig(auto_return=True, max_switches_per_hour=4)
R10, R50, R100 = (FleetMode(ModeKind.ROLLOUT, p) for p in (10, 50, 100))


def _state(mode: FleetMode, **kw: object) -> ModeState:
    return ModeState(mode=mode, version=7, since_s=0.0, **kw)  # type: ignore[arg-type]


def test_plan_advances_baseline_then_each_stage_then_learned() -> None:
    state = ModeState()
    assert not modes.advance(state, 99.0, PLAN).changed
    seen = []
    for t in (100.0, 150.0, 200.0, 250.0, 300.0):
        result = modes.advance(state, t, PLAN)
        if result.changed:
            state = result.state
            seen.append((t, state.mode.label))
    assert seen == [
        (100.0, "rollout(10)"),
        (150.0, "rollout(50)"),
        (200.0, "rollout(100)"),
        (250.0, "learned"),
    ]
    assert state.version == 4 and not modes.advance(state, 1e9, PLAN).changed


def test_trip_from_rollout_goes_to_round_robin_with_a_record() -> None:
    result = modes.trip(_state(R50), 10.0, reason="hot_spot: prefix x", evidence={"share": 0.31})
    assert result.state.mode == ROUND_ROBIN and result.state.version == 8
    assert not result.state.auto_advance and result.state.entered_by is TransitionKind.TRIP
    t = result.transition
    assert t is not None and t.to_dict() == {
        "kind": "trip",
        "from": "rollout(50)",
        "to": "round_robin",
        "reason": "hot_spot: prefix x",
        "actor": "guard",
        "at_s": 10.0,
        "version": 8,
        "evidence": {"share": 0.31},
    }
    assert (
        result.message == "rollout 'rollout(50)' aborted: fleet on round_robin (hot_spot: prefix x)"
    )


@pytest.mark.parametrize("mode", [ROUND_ROBIN, HELD_ROUND_ROBIN])
def test_trip_on_round_robin_is_a_no_change(mode: FleetMode) -> None:
    result = modes.trip(_state(mode), 10.0, reason="x", evidence={})
    assert not result.changed and result.state.version == 7 and "already on" in result.message


def test_manual_rollback_is_idempotent() -> None:
    first = modes.manual_rollback(_state(LEARNED), 5.0, actor="ana", reason="drill")
    assert (
        first.changed
        and first.message == "learned policy rolled back: fleet on round_robin by ana (drill)"
    )
    again = modes.manual_rollback(first.state, 6.0, actor="ana", reason="drill")
    assert (
        not again.changed and again.message == "fleet already on round_robin; nothing to roll back"
    )
    held = modes.manual_rollback(_state(HELD_ROUND_ROBIN), 6.0, actor="ana", reason="x")
    assert not held.changed


def test_a_rollback_during_the_baseline_stops_the_plan() -> None:
    """It answered "fleet already on round_robin; nothing to roll back", and the plan took
    the fleet to rollout(10) once `baseline_s` ran out."""
    baseline = ModeState()
    assert modes.advance(baseline, PLAN.baseline_s, PLAN).changed
    result = modes.manual_rollback(baseline, 5.0, actor="ana", reason="no guard leader")
    assert result.message == (
        "rollout plan stopped: fleet stays on round_robin by ana (no guard leader)"
    )
    t = result.transition
    assert t is not None and (t.kind, t.from_mode, t.to_mode) == (
        TransitionKind.MANUAL_ROLLBACK, "round_robin", "round_robin",
    )  # fmt: skip
    stopped = result.state
    assert stopped.version == 1 and not stopped.auto_advance and stopped.switch_times_s == ()
    assert not modes.advance(stopped, 1e9, PLAN).changed
    again = modes.manual_rollback(stopped, 6.0, actor="ana", reason="x")
    assert not again.changed and again.message.endswith("; nothing to roll back")
    alert = modes.manual_rollback(baseline, 5.0, actor="alertmanager", reason="x", stop_plan=False)
    assert not alert.changed and alert.message.endswith("; nothing to roll back")


def test_the_idempotent_answers_have_one_form() -> None:
    """A second `rollback --hold` said `fleet already held on round-robin; no change`,
    next to `fleet already on held_round_robin; nothing to roll back` for a rollback."""
    held = _state(HELD_ROUND_ROBIN)
    answers = [
        modes.manual_rollback(held, 6.0, actor="ana", reason="x", hold=True),
        modes.manual_rollback(held, 6.0, actor="ana", reason="x"),
        modes.manual_rollback(_state(ROUND_ROBIN, auto_advance=False), 6.0, actor="a", reason="x"),
        modes.manual_resume(_state(LEARNED), 6.0, PLAN, actor="ana", reason="x"),
    ]
    assert [a.message.split(" (")[0] for a in answers if not a.changed] == [
        "fleet already on held_round_robin; nothing to hold",
        "fleet already on held_round_robin; nothing to roll back",
        "fleet already on round_robin; nothing to roll back",
        "fleet already on learned",
    ]
    assert answers[3].message.endswith("; nothing to resume")


def test_hold_and_nothing_automatic_leaves_it() -> None:
    held = modes.manual_rollback(_state(R10), 5.0, actor="bo", reason="freeze", hold=True)
    assert held.state.mode == HELD_ROUND_ROBIN and held.message.startswith(
        "rollout 'rollout(10)' aborted"
    )
    state = held.state
    assert not modes.advance(state, 1e9, PLAN).changed
    assert not modes.trip(state, 1e9, reason="x", evidence={}).changed
    assert not modes.auto_return(state, 1e9, PLAN, AUTO, reason="clear").changed
    assert not modes.manual_rollback(state, 1e9, actor="bo", reason="x", hold=True).changed
    resumed = modes.manual_resume(state, 1e9, PLAN, actor="bo", reason="fixed")
    assert resumed.state.mode == R10 and resumed.state.auto_advance


def test_auto_return_is_off_by_default_and_reenters_at_the_first_stage() -> None:
    tripped = modes.trip(_state(LEARNED), 0.0, reason="x", evidence={}).state
    off = modes.auto_return(tripped, 600.0, PLAN, BreakerConfig(), reason="clear")
    assert not off.changed and "slaguard resume --stage 10" in off.message
    on = modes.auto_return(tripped, 600.0, PLAN, AUTO, reason="clear")
    assert (
        on.state.mode == R10
        and on.transition is not None
        and on.transition.kind is TransitionKind.AUTO_RETURN
    )


def test_auto_return_never_undoes_a_human_rollback() -> None:
    rolled = modes.manual_rollback(_state(LEARNED), 0.0, actor="ana", reason="x").state
    assert not modes.auto_return(rolled, 600.0, PLAN, AUTO, reason="clear").changed


def test_a_humans_rollback_takes_a_tripped_fleet_over_from_the_guard() -> None:
    """It answered "fleet already on round_robin; nothing to roll back", and with
    `auto_return` the guard put the learned policy back once the fault cleared: the
    on-call's rollback was undone by the very automation it meant to overrule."""
    tripped = modes.trip(_state(LEARNED), 10.0, reason="tier", evidence={}).state
    assert modes.auto_return(tripped, 600.0, PLAN, AUTO, reason="clear").changed
    alert = modes.manual_rollback(tripped, 20.0, actor="am", reason="x", stop_plan=False)
    assert not alert.changed and alert.message.endswith("; nothing to roll back")
    result = modes.manual_rollback(tripped, 20.0, actor="ana", reason="keep it")
    assert result.message == (
        "fleet stays on round_robin by ana (keep it): taken over from the guard's trip, so "
        "no automatic return undoes it"
    )
    t = result.transition
    assert t is not None and (t.kind, t.from_mode, t.to_mode) == (
        TransitionKind.MANUAL_ROLLBACK, "round_robin", "round_robin",
    )  # fmt: skip
    taken = result.state
    assert taken.switch_times_s == tripped.switch_times_s, "no policy switch counted"
    assert not modes.auto_return(taken, 600.0, PLAN, AUTO, reason="clear").changed
    again = modes.manual_rollback(taken, 30.0, actor="ana", reason="x")
    assert not again.changed and again.message.endswith("; nothing to roll back")
    assert modes.manual_resume(taken, 40.0, PLAN, actor="ana", reason="ok").changed


def test_auto_return_refused_when_the_hourly_cap_would_be_exceeded() -> None:
    state = _state(R10)
    t = 0.0
    log = []
    for _ in range(6):
        state = modes.trip(state, t, reason="x", evidence={}).state
        t += 60.0
        result = modes.auto_return(state, t, PLAN, AUTO, reason="clear")
        log.append(result.changed)
        state = result.state
        t += 60.0
    assert log == [
        True,
        False,
        False,
        False,
        False,
        False,
    ]  # trip+return+trip = 3; a 4th return needs room for a 5th
    later = modes.auto_return(state, t + 3600.0, PLAN, AUTO, reason="clear")
    assert later.changed


def test_resume_is_idempotent_and_accepts_a_stage() -> None:
    rr = _state(ROUND_ROBIN)
    at50 = modes.manual_resume(rr, 1.0, PLAN, actor="a", reason="r", stage_pct=50)
    assert at50.state.mode == R50 and at50.message == "fleet resumed at rollout(50) by a (r)"
    again = modes.manual_resume(at50.state, 2.0, PLAN, actor="a", reason="r", stage_pct=50)
    assert not again.changed and again.message == (
        "fleet already on rollout(50) (the learned policy routes 50 % of requests); "
        "nothing to resume"
    )


def test_resume_acts_only_from_round_robin_or_a_hold() -> None:
    """A resume on a fleet already in the learned family dropped it to the first stage
    (learned -> rollout(10): 90 % of traffic back to round-robin, exit 0): a second
    on-call running the runbook's `resume --stage 10` undid the rollout's progress."""
    for mode in (R50, LEARNED):
        for stage in (None, 10, 50):
            state = _state(mode)
            kept = modes.manual_resume(state, 1.0, PLAN, actor="b", reason="r", stage_pct=stage)
            assert not kept.changed and kept.state == state, (mode, stage)
    learned = modes.manual_resume(_state(LEARNED), 1.0, PLAN, actor="b", reason="r")
    assert learned.message == (
        "fleet already on learned (the learned policy routes); nothing to resume"
    )
    lower = modes.manual_resume(_state(R50), 1.0, PLAN, actor="b", reason="r", stage_pct=10)
    assert lower.message.endswith("nothing to resume (to restart at rollout(10), roll back first)")
    for mode in (ROUND_ROBIN, HELD_ROUND_ROBIN):
        moved = modes.manual_resume(_state(mode), 1.0, PLAN, actor="b", reason="r", stage_pct=50)
        assert moved.changed and moved.state.mode == R50


def test_adopt_takes_only_newer_versions() -> None:
    mine = _state(R10)
    assert modes.adopt(mine, ModeState(mode=ROUND_ROBIN, version=8)).mode == ROUND_ROBIN
    assert modes.adopt(mine, ModeState(mode=ROUND_ROBIN, version=7)).mode == R10


def test_the_baseline_starts_only_over_the_untouched_seed() -> None:
    seed = ModeState(since_s=10.0, actor="migration 0002_guard_state")
    started = modes.start_baseline(seed, 90_000.0, seed_actor="migration 0002_guard_state")
    assert started is not None and (started.since_s, started.version) == (90_000.0, 0)
    assert started.actor == "guard" and started.mode == ROUND_ROBIN and started.auto_advance
    assert not modes.advance(started, 90_001.0, PLAN).changed
    for other in (started, ModeState(version=1, since_s=10.0, actor="migration 0002_guard_state")):
        assert modes.start_baseline(other, 1e6, seed_actor="migration 0002_guard_state") is None
