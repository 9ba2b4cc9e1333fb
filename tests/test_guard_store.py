"""The shared fleet mode in the database: every transition reads back as the state
machine left it (both backends), compare-and-set refuses stale writers, rows written by
other writers read back, and guard events land as linked incident + mode change rows."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import Engine, insert, select
from sqlalchemy.orm import Session

from slaguard.audit.models import Decision, Incident, ModeChange, Outcome, utc_from_unix
from slaguard.audit.records import ModeChangeRecord
from slaguard.audit.store import current_mode, record_mode_change
from slaguard.guard import modes
from slaguard.guard.config import BreakerConfig, GuardConfig, RolloutCompareConfig
from slaguard.guard.events import GuardEvent, IncidentEvent, IncidentState, ModeChangedEvent
from slaguard.guard.guard import Guard
from slaguard.guard.incident_store import GUARD_KEY, OUTBOX_KEY, IncidentStore
from slaguard.guard.manual import ManualAction, apply_manual
from slaguard.guard.modes import ModeState, TransitionKind
from slaguard.guard.persist import EventPersister
from slaguard.guard.samples import GuardSample
from slaguard.guard.store import TRANSITION_KEY, GuardStore
from slaguard.scheduler.rollout import ROUND_ROBIN, Arm, FleetMode, ModeKind, RolloutPlan

T0 = float(int(time.time()) + 3_600)
"""An hour ahead of the wall clock: the migration seeds the fleet state's `since` with the
wall time, and the cold-start baseline (60 s) must be over by the first step at T0 + 61 s
(a fixed T0 broke the day the wall clock passed it)."""
PLAN = RolloutPlan(baseline_s=60.0, stage_s=30.0)
R10, R50 = FleetMode(ModeKind.ROLLOUT, 10), FleetMode(ModeKind.ROLLOUT, 50)
BREAKER = BreakerConfig(auto_return=True, cooldown_s=0.0, clear_after=1, max_switches_per_hour=6)


def same_state(loaded: ModeState, want: ModeState) -> None:
    """Equal in everything the state machine reads (times to the microsecond)."""
    assert (loaded.mode, loaded.version, loaded.reason, loaded.actor) == (
        want.mode, want.version, want.reason, want.actor,
    )  # fmt: skip
    assert (loaded.auto_advance, loaded.entered_by) == (want.auto_advance, want.entered_by)
    assert loaded.since_s == pytest.approx(want.since_s, rel=0, abs=1e-5)
    assert loaded.switch_times_s == pytest.approx(want.switch_times_s, rel=0, abs=1e-5)


def test_seed_state_is_the_cold_start_baseline(audit_engine: Engine) -> None:
    state = GuardStore(audit_engine).load(time.time())
    assert (state.mode, state.version, state.entered_by) == (ROUND_ROBIN, 0, None)
    assert state.auto_advance and state.switch_times_s == ()


def test_every_transition_reads_back_as_the_state_machine_left_it(audit_engine: Engine) -> None:
    store = GuardStore(audit_engine)
    state = store.load(T0)
    t = T0 + 61.0
    steps = [
        lambda s, t: modes.advance(s, t, PLAN),  # baseline done -> rollout(10)
        lambda s, t: modes.advance(s, t + 30, PLAN),  # -> rollout(50)
        lambda s, t: modes.trip(s, t, reason="ttft_zscore: tier l40s", evidence={"z": 9.1}),
        lambda s, t: modes.auto_return(s, t, PLAN, BREAKER, reason="30 good evaluations"),
        lambda s, t: modes.manual_rollback(s, t, actor="alice", reason="paged"),
        lambda s, t: modes.manual_rollback(s, t, actor="bob", reason="freeze", hold=True),
        lambda s, t: modes.manual_resume(s, t, PLAN, actor="carol", reason="ok", stage_pct=50),
        lambda s, t: modes.advance(s, t + 30, PLAN),  # -> rollout(100)
        lambda s, t: modes.advance(s, t + 60, PLAN),  # -> learned
    ]
    kinds = []
    for step in steps:
        result = step(state, t)
        assert result.transition is not None, result.message
        assert store.save(result.transition, result.state.since_s).saved
        loaded = store.load(result.state.since_s)
        same_state(loaded, result.state)
        kinds.append(loaded.entered_by)
        state, t = loaded, result.state.since_s + 1.0
    assert kinds == [
        TransitionKind.STAGE_ADVANCE, TransitionKind.STAGE_ADVANCE, TransitionKind.TRIP,
        TransitionKind.AUTO_RETURN, TransitionKind.MANUAL_ROLLBACK, TransitionKind.MANUAL_HOLD,
        TransitionKind.MANUAL_RESUME, TransitionKind.STAGE_ADVANCE, TransitionKind.STAGE_ADVANCE,
    ]  # fmt: skip
    assert state.mode.kind is ModeKind.LEARNED and not state.auto_advance
    assert current_mode(audit_engine).version == len(steps)


def test_stale_writer_loses_the_compare_and_set(audit_engine: Engine) -> None:
    store = GuardStore(audit_engine)
    base = store.load(T0)
    first = modes.manual_resume(base, T0 + 1, PLAN, actor="a", reason="go", stage_pct=50)
    second = modes.manual_rollback(base, T0 + 2, actor="b", reason="no", hold=True)
    assert first.transition is not None and second.transition is not None
    assert store.save(first.transition, T0 + 1).saved
    lost = store.save(second.transition, T0 + 2)
    assert not lost.saved and lost.stored is not None
    same_state(lost.stored, first.state)
    with audit_engine.connect() as conn:
        assert conn.execute(select(ModeChange.to_mode)).scalars().all() == ["rollout(50)"]


def test_switches_older_than_an_hour_and_stage_moves_do_not_count(audit_engine: Engine) -> None:
    store = GuardStore(audit_engine)
    state = store.load(T0)
    moves = [
        (T0, lambda s, t: modes.manual_resume(s, t, PLAN, actor="a", reason="1")),
        (T0 + 100, lambda s, t: modes.manual_rollback(s, t, actor="a", reason="2")),
        (T0 + 3000, lambda s, t: modes.manual_resume(s, t, PLAN, actor="a", reason="3")),
        (T0 + 3100, lambda s, t: modes.advance(s, t, PLAN)),
    ]
    for at, move in moves:
        result = move(state, at)
        assert result.transition is not None
        assert store.save(result.transition, at).saved
        state = store.load(at)
    # at T0 + 3750 the first two switches are more than an hour old; 10 -> 50 is no switch
    assert store.load(T0 + 3650.0).switch_times_s == pytest.approx((T0 + 100, T0 + 3000), rel=0)
    later = store.load(T0 + 3750.0)
    assert later.switch_times_s == pytest.approx((T0 + 3000,), rel=0)
    assert later.switches_within_hour(T0 + 3750.0) == 1


def test_rows_from_the_services_single_replica_store_read_back(audit_engine: Engine) -> None:
    """Rows an older single-replica service wrote (`kind: reason`, no transition marker)."""
    record_mode_change(
        audit_engine,
        ModeChangeRecord(T0, "round_robin", "rollout(10)", "manual_resume: ok", "alice"),
        expected_version=0,
    )
    record_mode_change(
        audit_engine,
        ModeChangeRecord(T0 + 5, "rollout(10)", "round_robin", "trip: hot prompt", "guard"),
        expected_version=1,
    )
    state = GuardStore(audit_engine).load(T0 + 10)
    assert (state.mode, state.version, state.entered_by) == (ROUND_ROBIN, 2, TransitionKind.TRIP)
    assert not state.auto_advance
    assert state.switch_times_s == pytest.approx((T0, T0 + 5), rel=0)


# -- guard events into the database -------------------------------------------------------


def tripping_guard(state: ModeState) -> Guard:
    """A guard whose rollout comparison trips on 60 requests per arm."""
    config = GuardConfig(
        rollout_compare=RolloutCompareConfig(min_samples_per_arm=60),
        breaker=BreakerConfig(trip_after=3),
    )
    return Guard(config, RolloutPlan(), state=state)


def arm_samples(at_s: float, n: int = 60) -> list[GuardSample]:
    """`n` per arm: learned misses 40 %, round-robin 2 %."""
    out = []
    for i in range(n):
        for arm, miss_every in ((Arm.LEARNED, 5), (Arm.ROUND_ROBIN, 50)):
            missed = i % miss_every in ((0, 1) if arm is Arm.LEARNED else (0,))
            out.append(
                GuardSample(
                    at_s + i * 0.01, "h100-8b-0", "h100", "llama3.1-8b", not missed, 1.0, 0.3, arm
                )
            )
    return out


def start_rollout(store: GuardStore, stage_pct: int = 50, at_s: float = T0) -> None:
    """A human resumes the fleet at `stage_pct` at `at_s`."""
    result = modes.manual_resume(
        store.load(at_s), at_s, PLAN, actor="a", reason="go", stage_pct=stage_pct
    )
    assert result.transition is not None and store.save(result.transition, at_s).saved


def trip(guard: Guard, at_s: float) -> list[GuardEvent]:
    """Feed a bad learned arm and evaluate until the breaker trips; that evaluation."""
    for sample in arm_samples(at_s):
        guard.observe(sample)
    for k in range(10):
        events = guard.evaluate(at_s + 1.0 + k)
        if any(isinstance(e, ModeChangedEvent) for e in events):
            return events
    raise AssertionError("no trip")


def insert_arm_rows(engine: Engine, at_s: float, n: int = 60, prefix: str = "r") -> None:
    """Decisions + outcomes matching `arm_samples` (what replicas' writers store)."""
    decisions, outcomes = [], []
    for k, s in enumerate(arm_samples(at_s, n)):
        rid = f"{prefix}{k:06d}"
        decisions.append(
            {
                "request_id": rid,
                "decided_at": utc_from_unix(s.at_s - s.ttft_s),
                "model_id": s.model_id,
                "priority": "normal",
                "prompt_tokens": 100,
                "max_new_tokens": 10,
                "deadline_s": 1.0,
                "policy_arm": s.arm.value,
                "fleet_mode": "rollout(50)",
                "outcome": "routed",
                "target_id": s.target_id,
                "card_type": s.card_type,
                "explanation": {},
                "weights_version": "w1",
                "config_hash": "c",
                "decision_latency_s": 1e-4,
            }
        )
        outcomes.append(
            {
                "request_id": rid,
                "finished_at": utc_from_unix(s.at_s),
                "ttft_s": s.ttft_s,
                "tpot_s": 0.02,
                "e2e_s": 0.5,
                "status": "ok",
                "sla_met": s.sla_met,
            }
        )
    with engine.begin() as conn:
        conn.execute(insert(Decision), decisions)
        conn.execute(insert(Outcome), outcomes)


def test_trip_stores_a_linked_incident_and_mode_change(audit_engine: Engine) -> None:
    store, incidents = GuardStore(audit_engine), IncidentStore(audit_engine)
    persister = EventPersister(store, incidents)
    start_rollout(store)
    guard = tripping_guard(store.load(T0 + 1))
    result = persister.persist(guard, trip(guard, T0 + 10), T0 + 14)
    assert result.conflict is None and len(result.queued) == 1
    opened = result.queued[0]
    assert opened.state is IncidentState.OPENED and opened.incident_id == str(result.incident_id)
    assert guard.incidents.current is not None
    assert guard.incidents.current.incident_id == opened.incident_id  # the audit id from now on
    with Session(audit_engine) as session:
        inc = session.scalars(select(Incident)).one()
        change = session.scalars(select(ModeChange).order_by(ModeChange.id.desc())).first()
    assert change is not None and change.incident_id == inc.id
    assert (change.from_mode, change.to_mode) == ("rollout(50)", "round_robin")
    assert change.evidence[TRANSITION_KEY] == {"kind": "trip", "version": 2}
    verdict = change.evidence["verdicts"][0]
    assert verdict["detector"] == "rollout_compare"
    assert verdict["evidence"]["learned"] == {
        "requests": 60,
        "violations": 24,
        "violation_rate": 0.4,
    }
    assert verdict["evidence"]["min_samples_per_arm"] == 60
    assert inc.detector == "rollout_compare" and inc.subject == "arm:learned"
    assert inc.evidence["verdicts"][0]["evidence"]["round_robin"]["violations"] == 2
    assert inc.evidence[GUARD_KEY]["revision"] == 1
    assert [m["event"]["state"] for m in inc.evidence[OUTBOX_KEY]] == ["opened"]
    assert inc.notification_state == "pending:r0"
    assert store.load(T0 + 15).entered_by is TransitionKind.TRIP


def test_two_replicas_tripping_at_once_open_one_incident(audit_engine: Engine) -> None:
    """The loser's incident is rolled back with its switch: three replicas answering one
    Alertmanager alert at once opened an incident each, and each was announced."""
    store, incidents = GuardStore(audit_engine), IncidentStore(audit_engine)
    persister = EventPersister(store, incidents)
    start_rollout(store)
    first, second = (tripping_guard(store.load(T0 + 1)) for _ in range(2))
    first_events, second_events = trip(first, T0 + 10), trip(second, T0 + 10)
    won = persister.persist(first, first_events, T0 + 14)
    lost = persister.persist(second, second_events, T0 + 14)
    assert won.conflict is None and len(won.queued) == 1
    assert lost.conflict is not None and lost.queued == [] and lost.incident_id is None
    with Session(audit_engine) as session:
        assert [i.id for i in session.scalars(select(Incident))] == [won.incident_id]
    assert second.state.mode.label == "round_robin"  # it adopted the winner's switch
    assert second.incidents.current is not None
    assert second.incidents.current.incident_id == str(won.incident_id)


def test_resume_resolves_once_and_a_leader_adopting_it_adds_nothing(audit_engine: Engine) -> None:
    store, incidents = GuardStore(audit_engine), IncidentStore(audit_engine)
    persister = EventPersister(store, incidents)
    start_rollout(store)
    leader = tripping_guard(store.load(T0 + 1))
    persister.persist(leader, trip(leader, T0 + 10), T0 + 14)
    # a human resumes with the CLI's code path, on a fresh guard over the database
    cli = Guard()
    outcome = apply_manual(cli, persister, ManualAction.RESUME, T0 + 60, actor="carol",
                           reason="incident reviewed")  # fmt: skip
    assert outcome.result.changed and cli.state.mode == R10
    assert [(e.state, e.revision) for e in outcome.queued] == [(IncidentState.RESOLVED, 1)]
    # the leader's sync adopts the change: its own "resolved" event is dropped
    events = leader.adopt_state(store.load(T0 + 61), T0 + 61)
    assert [e.state for e in events if isinstance(e, IncidentEvent)] == [IncidentState.RESOLVED]
    assert persister.persist(leader, events, T0 + 61).queued == []
    with Session(audit_engine) as session:
        inc = session.scalars(select(Incident)).one()
        link = session.execute(
            select(ModeChange.incident_id).order_by(ModeChange.id.desc())
        ).first()
    assert inc.resolved_at is not None and inc.resolved_at.timestamp() == pytest.approx(
        T0 + 60, rel=0, abs=1e-5
    )
    assert [m["event"]["state"] for m in inc.evidence[OUTBOX_KEY]] == ["opened", "resolved"]
    assert link is not None and link[0] == inc.id
    again = apply_manual(Guard(), persister, ManualAction.RESUME, T0 + 70, actor="d",
                         reason="again")  # fmt: skip
    assert not again.result.changed and "already on rollout(10)" in again.result.message
