"""The Guard facade end to end on simulated time: trip, incident lifecycle, no spam."""

from __future__ import annotations

from fakes.drive import run_seconds
from fakes.synthetic import flood_stream

from slaguard.guard import modes
from slaguard.guard.config import BreakerConfig, GuardConfig
from slaguard.guard.events import (
    BreakerEvent,
    GuardEvent,
    IncidentEvent,
    IncidentState,
    ModeChangedEvent,
    VerdictEvent,
    VerdictPhase,
    log_line,
)
from slaguard.guard.guard import Guard
from slaguard.guard.modes import ModeState
from slaguard.guard.samples import GuardSample
from slaguard.guard.verdicts import Action, Severity, Verdict
from slaguard.scheduler.rollout import ROUND_ROBIN, Arm, FleetMode, ModeKind, RolloutPlan

R10 = FleetMode(ModeKind.ROLLOUT, 10)
FLOOD = (300.0, 400.0)  # flood_stream default


def _guard(auto_return: bool = False) -> Guard:
    config = GuardConfig(
        breaker=BreakerConfig(cooldown_s=120.0, clear_after=30, auto_return=auto_return)
    )
    plan = RolloutPlan(baseline_s=86_400.0, stage_s=86_400.0)
    return Guard(config, plan, ModeState(mode=R10, version=3, since_s=0.0))


def _run(guard: Guard, seconds: int = 900) -> list[tuple[int, list[GuardEvent]]]:
    return list(run_seconds(guard, flood_stream(seconds), 1, seconds, guard.evaluate))


def test_trip_switches_the_mode_in_the_same_evaluation_as_the_breaker() -> None:
    guard = _guard()
    timeline = _run(guard)
    raised = [
        s
        for s, evs in timeline
        for e in evs
        if isinstance(e, VerdictEvent) and e.phase is VerdictPhase.RAISED
    ]
    trips = [
        (s, evs)
        for s, evs in timeline
        if any(isinstance(e, BreakerEvent) and e.signal == "trip" for e in evs)
    ]
    assert len(raised) == 1 and len(trips) == 1
    trip_s, events = trips[0]
    assert trip_s == raised[0] + 2  # K = 3 consecutive bad evaluations
    assert FLOOD[0] <= raised[0] <= FLOOD[0] + 12
    changed = [e for e in events if isinstance(e, ModeChangedEvent)]
    assert [(c.transition.from_mode, c.transition.to_mode) for c in changed] == [
        ("rollout(10)", "round_robin")
    ]
    assert changed[0].transition.version == 4
    assert changed[0].transition.evidence["verdicts"][0]["evidence"]["trip_share"] == 0.2
    assert guard.state.mode == ROUND_ROBIN


def test_one_message_per_state_change_and_manual_resume_resolves() -> None:
    guard = _guard()
    timeline = _run(guard)
    incidents = [e for _, evs in timeline for e in evs if isinstance(e, IncidentEvent)]
    assert [(i.state, i.revision) for i in incidents] == [
        (IncidentState.OPENED, 0),
        (IncidentState.UPDATED, 1),
    ]
    opened, cleared = incidents
    assert opened.mode_before == "rollout(10)" and opened.mode_after == "round_robin"
    assert opened.detector == "hot_spot" and opened.subject == "prefix:hot"
    assert "slaguard resume --stage 10" in cleared.summary
    assert guard.state.mode == ROUND_ROBIN  # manual return by default
    ended = [
        e
        for _, evs in timeline
        for e in evs
        if isinstance(e, VerdictEvent) and e.phase is VerdictPhase.ENDED
    ]
    (end,) = ended
    assert end.verdict.summary.startswith("ended: normal now (score 0.19"), end.verdict.summary
    assert ", threshold 0.2); was: prefix hot has at least " in end.verdict.summary
    result, events = guard.resume(901.0, actor="ana", reason="flood over")
    assert result.changed and guard.state.mode == R10
    resolved = [e for e in events if isinstance(e, IncidentEvent)]
    assert [(r.state, r.incident_id) for r in resolved] == [
        (IncidentState.RESOLVED, opened.incident_id)
    ]
    # every message of the thread carries the incident's severity, not a quieter one
    assert {e.severity for e in [*incidents, *resolved]} == {Severity.CRITICAL}
    again, more = guard.resume(902.0, actor="ana", reason="flood over")
    assert not again.changed and more == []


def test_auto_return_reenters_the_first_stage_and_resolves() -> None:
    guard = _guard(auto_return=True)
    timeline = _run(guard)
    changes = [
        (s, e.transition.kind.value, e.transition.to_mode)
        for s, evs in timeline
        for e in evs
        if isinstance(e, ModeChangedEvent)
    ]
    assert [c[1:] for c in changes] == [("trip", "round_robin"), ("auto_return", "rollout(10)")]
    trip_s, return_s = changes[0][0], changes[1][0]
    assert return_s - trip_s >= 120
    states = [e.state for _, evs in timeline for e in evs if isinstance(e, IncidentEvent)]
    assert states == [IncidentState.OPENED, IncidentState.RESOLVED]


def test_rollback_is_idempotent_and_adopt_state_resolves_an_open_incident() -> None:
    guard = _guard()
    result, events = guard.rollback(1.0, actor="bo", reason="drill")
    assert result.changed and [type(e) for e in events] == [ModeChangedEvent]
    again, none = guard.rollback(2.0, actor="bo", reason="drill")
    assert not again.changed and none == [] and "already on round_robin" in again.message
    other = _guard()
    timeline = _run(other, 500)
    assert other.incidents.current is not None
    stored = ModeState(
        mode=R10, version=other.state.version + 1, since_s=500.0, reason="resumed by cli"
    )
    events = other.adopt_state(stored, 501.0)
    assert [(e.state, e.summary) for e in events if isinstance(e, IncidentEvent)] == [
        (IncidentState.RESOLVED, "resumed by cli")
    ]
    assert other.adopt_state(stored, 502.0) == []
    assert timeline


def test_all_events_are_json_serialisable() -> None:
    import json

    guard = _guard(auto_return=True)
    for _, events in _run(guard):
        for event in events:
            json.dumps(event.to_dict())


def test_a_resume_closes_the_breaker_so_the_plan_advances_as_after_a_restart() -> None:
    """After a resume the breaker stayed open in memory until it cleared (30 good
    evaluations, none at all without traffic), holding the plan back, while a restart (a
    fresh, closed breaker) let it advance at once."""
    config = GuardConfig(breaker=BreakerConfig(cooldown_s=120.0, clear_after=30))
    guard = Guard(config, RolloutPlan(baseline_s=1.0, stage_s=5.0), ModeState(mode=R10))
    list(run_seconds(guard, flood_stream(900), 1, 420, guard.evaluate))  # flood 300-400
    assert guard.state.mode == ROUND_ROBIN  # tripped by the flood
    assert guard.breaker.opened_at_s is not None  # not cleared yet (30 good evaluations)
    result, _ = guard.resume(421.0, actor="ana", reason="flood over")
    assert result.changed and guard.state.mode == R10
    for t in range(422, 430):  # the stage ends at 426; 30 good evaluations end at ~435
        guard.evaluate(float(t))
    assert guard.state.mode == FleetMode(ModeKind.ROLLOUT, 50)


def test_an_ended_trip_verdict_says_what_is_true_now() -> None:
    """A flapping `hot_spot` logged "ended: prefix ... has at least 45% of recent traffic
    (>= 20%, ...)": the old firing summary alone, which reads as still firing."""
    guard = Guard(GuardConfig(), RolloutPlan(baseline_s=86_400.0, stage_s=86_400.0))
    for k in range(40):
        guard.observe_arrival(k * 0.1, "hot" if k % 2 else f"cold-{k}")
    raised = [e for e in guard.evaluate(4.0) if isinstance(e, VerdictEvent)]
    assert [e.phase for e in raised] == [VerdictPhase.RAISED]
    quiet = [e for e in guard.evaluate(60.0) if isinstance(e, VerdictEvent)]  # traffic stopped
    assert [e.phase for e in quiet] == [VerdictPhase.ENDED]
    said = log_line(quiet[0])
    assert said is not None and said[1].startswith(
        "guard hot_spot on prefix:hot: ended: too little data to judge now; was: prefix hot "
        "has at least "
    ), said


def test_a_resume_written_elsewhere_closes_the_breaker_so_a_persisting_fault_trips_again() -> None:
    """`slaguard resume` (the command every incident message gives) reaches the leader as
    a stored state it adopts: the breaker stayed open from the trip, so the flood still
    running never tripped the fleet again, where a resume through the leader's API did."""
    guard = _guard()
    plan = RolloutPlan(baseline_s=86_400.0, stage_s=86_400.0)
    timeline = list(run_seconds(guard, flood_stream(900), 1, 330, guard.evaluate))
    assert guard.state.mode == ROUND_ROBIN and guard.breaker.opened_at_s is not None
    tripped = [s for s, evs in timeline if any(isinstance(e, BreakerEvent) for e in evs)]
    resumed = modes.manual_resume(guard.state, 330.0, plan, actor="ana", reason="cli")
    guard.adopt_state(resumed.state, 330.0)
    assert guard.state.mode == R10
    later = list(
        run_seconds(guard, flood_stream(900)[_index_at(330.0) :], 331, 360, guard.evaluate)
    )
    again = [
        s
        for s, evs in later
        if any(isinstance(e, BreakerEvent) and e.signal == "trip" for e in evs)
    ]
    assert len(tripped) == 1 and again and again[0] <= 331 + 2  # K = 3 evaluations
    assert guard.state.mode == ROUND_ROBIN


def _index_at(at_s: float) -> int:
    """The first sample of `flood_stream` at or after `at_s`."""
    return next(i for i, s in enumerate(flood_stream(900)) if s.at_s >= at_s)


def test_a_resume_starts_the_rollout_comparison_afresh() -> None:
    """With the resume closing the breaker, the learned arm's losses from before the trip
    (still in the 10-minute window) tripped the fleet again at once: the comparison
    judges the new gray stage, not the episode the human reviewed."""
    guard, t = _tripped_by_a_losing_rollout()
    plan = RolloutPlan(baseline_s=86_400.0, stage_s=86_400.0)
    resumed = modes.manual_resume(guard.state, t + 1, plan, actor="carol", reason="reviewed")
    guard.adopt_state(resumed.state, t + 1)
    for s in range(2, 12):
        guard.evaluate(t + s)
    assert guard.state.mode == R10


def test_a_trip_the_database_refused_keeps_the_comparison_it_tripped_on() -> None:
    """Another writer took the version of this guard's trip: the fleet never left its
    gray stage, yet adopting the stored stage restarted the rollout comparison and its
    losses, so the fault needed a new 10-minute window to trip again."""
    guard, t = _tripped_by_a_losing_rollout()
    assert guard.state.version == 2
    theirs = ModeState(mode=FleetMode(ModeKind.ROLLOUT, 50), version=2, actor="other")
    guard.adopt_state(theirs, t + 1, replacing_unsaved=True)
    assert guard.state.mode == FleetMode(ModeKind.ROLLOUT, 50)
    for s in range(2, 8):
        guard.evaluate(t + s)
    assert guard.state.mode == ROUND_ROBIN  # the same losses trip it again


def test_a_refused_trip_behind_a_rollback_and_a_resume_starts_the_comparison_afresh() -> None:
    """While this guard's trip (v2) waited to be stored, an operator rolled back (v2) and
    resumed (v3): the resumed stage is new, and the old losses must not trip it again."""
    guard, t = _tripped_by_a_losing_rollout()
    resumed = ModeState(mode=R10, version=3, actor="carol")
    guard.adopt_state(resumed, t + 1, replacing_unsaved=True)
    for s in range(2, 8):
        guard.evaluate(t + s)
    assert guard.state.mode == R10


def _tripped_by_a_losing_rollout() -> tuple[Guard, float]:
    """A guard on rollout(50) fed 100 s at 20 req/s where the learned arm misses 40 % and
    round-robin 5 %, tripped by `rollout_compare`; (the guard, the last sample's time)."""
    guard = Guard(GuardConfig(), RolloutPlan(baseline_s=86_400.0, stage_s=86_400.0))
    guard.adopt_state(ModeState(mode=FleetMode(ModeKind.ROLLOUT, 50), version=1), 0.0)
    t = 0.0
    for k in range(2000):
        t = k * 0.05
        arm, missed = (Arm.LEARNED, k % 5 < 2) if k % 2 == 0 else (Arm.ROUND_ROBIN, k % 20 == 1)
        guard.observe(GuardSample(t, f"t{k % 4}", "h100", "m", not missed, 4.0, 0.3, arm=arm))
        if k % 20 == 0:
            guard.evaluate(t)
    assert guard.state.mode == ROUND_ROBIN
    return guard, t


def test_a_log_line_writes_out_the_control_characters_of_chosen_text() -> None:
    """A prefix id (or an alert's label) with a newline and an escape forged a log line
    with its own time and level, and drove the terminal of whoever tailed the log."""
    forged = "x\n2026-11-30 19:40:00,000 CRITICAL FORGED\x1b[2J"
    verdict = Verdict("hot_spot", Action.TRIP, f"prefix:{forged}", Severity.CRITICAL, forged, 1.0)
    said = log_line(VerdictEvent(verdict, VerdictPhase.RAISED))
    assert said is not None
    assert "\n" not in said[1] and "\x1b" not in said[1]
    assert said[1] == (
        "guard hot_spot on prefix:x\\n2026-11-30 19:40:00,000 CRITICAL FORGED\\x1b[2J: "
        "x\\n2026-11-30 19:40:00,000 CRITICAL FORGED\\x1b[2J"
    )
