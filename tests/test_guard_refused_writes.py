"""A switch the database refuses (not a lost compare-and-set: a lock held elsewhere, a
value it will not store) on both backends: a command leaves the guard on the stored
state, so the next command succeeds; the leader's own trip stays in force here and is
written at the next sync that reaches the database."""

from __future__ import annotations

import copy
import logging
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import BACKENDS, pg_connect
from sqlalchemy import Engine, func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from test_guard_store import T0, arm_samples, same_state, start_rollout, tripping_guard
from test_replicas_runtime import run_until_trip

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.models import Incident, ModeChange
from slaguard.guard.baseline import LogBaseline
from slaguard.guard.guard import Guard
from slaguard.guard.incident_store import IncidentStore
from slaguard.guard.leader import SoloLease
from slaguard.guard.manual import ManualAction, apply_manual
from slaguard.guard.persist import EventPersister
from slaguard.guard.runtime import GuardReplica
from slaguard.guard.samples import FirstToken
from slaguard.guard.store import GuardStore
from slaguard.guard.verdicts import Action, Severity, Verdict
from slaguard.notify.file import FileNotifier

ALERT = Verdict(
    "alertmanager", Action.TRIP, "SlaguardSLAErrorBudgetBurn", Severity.CRITICAL,
    "SlaguardSLAErrorBudgetBurn firing", T0, {"alerts": [{"labels": {"severity": "critical"}}]},
)  # fmt: skip


@contextmanager
def refused_reason(engine: Engine) -> Iterator[str]:
    """A reason whose switch the database refuses: PostgreSQL stores no NUL in text; a
    SQLite file is held by another writer meanwhile."""
    if engine.dialect.name == "postgresql":
        yield "paged\x00"
        return
    blocker = sqlite3.connect(str(engine.url.database), timeout=0.1)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        yield "paged"
    finally:
        blocker.rollback()
        blocker.close()


def incidents_stored(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(Incident)).scalar_one())


def test_a_refused_command_leaves_the_guard_on_the_stored_state(audit_engine: Engine) -> None:
    """A replica whose alert rollback was refused routed a mode never stored, one version
    ahead, and answered every later command "the fleet mode changed 5 times"."""
    store = GuardStore(audit_engine)
    persister = EventPersister(store, IncidentStore(audit_engine))
    start_rollout(store)
    guard = Guard()
    rollback = dict(actor="alertmanager", alert=ALERT)
    with refused_reason(audit_engine) as reason, pytest.raises(SQLAlchemyError):
        apply_manual(guard, persister, ManualAction.ROLLBACK, T0 + 5, reason=reason, **rollback)
    stored = store.load(T0 + 6)
    assert (stored.mode.label, stored.version) == ("rollout(50)", 1)
    same_state(guard.state, stored)
    assert guard.incidents.current is None and incidents_stored(audit_engine) == 0
    out = apply_manual(guard, persister, ManualAction.ROLLBACK, T0 + 7, reason="paged", **rollback)
    assert out.result.changed and out.incident_id is not None
    assert (guard.state.mode.label, guard.state.version) == ("round_robin", 2)
    assert guard.incidents.current is not None
    assert guard.incidents.current.incident_id == str(out.incident_id)
    with refused_reason(audit_engine) as reason, pytest.raises(SQLAlchemyError):
        apply_manual(guard, persister, ManualAction.RESUME, T0 + 8, actor="ana", reason=reason)
    same_state(guard.state, store.load(T0 + 9))
    assert guard.incidents.current is not None and guard.incidents.current.revision == 1
    held = apply_manual(guard, persister, ManualAction.HOLD, T0 + 10, actor="ana", reason="hold")
    assert held.result.changed and (guard.state.mode.label, guard.state.version) == (
        "held_round_robin", 3,
    )  # fmt: skip
    assert [(e.state.value, e.revision) for e in held.queued] == [("resolved", 1)]
    same_state(guard.state, store.load(T0 + 11))


def ttft_baselines(guard: Guard) -> dict[str, LogBaseline]:
    """The TTFT detector's learned normal per target: the change score's and the tier
    test's baselines (value, samples folded in, since when)."""
    ttft = guard.ttft
    return {
        **{f"change:{t}": copy.copy(s.baseline) for t, s in ttft._targets.items()},
        **{f"tier:{t}": copy.copy(b) for t, b in ttft._tier_test._target_baselines.items()},
    }


def test_a_refused_command_keeps_what_the_detectors_learned(audit_engine: Engine) -> None:
    """The refused rollback from rollout(50) changed the learned share twice (the switch,
    then its undo), so the TTFT baselines were forgotten; a refused resume had already
    restarted the rollout comparison."""
    store = GuardStore(audit_engine)
    persister = EventPersister(store, IncidentStore(audit_engine))
    start_rollout(store)
    guard = Guard()
    guard.adopt_state(store.load(T0), T0)
    for k in range(300):
        for target in ("h100-8b-0", "h100-8b-1", "l40s-8b-0"):
            guard.observe(FirstToken(T0 + k * 0.1, target, target[:4], "llama3.1-8b", 0.2, 500))
    guard.evaluate(T0 + 30)
    learned = ttft_baselines(guard)
    assert len(learned) == 6 and all(b.count > 0 for b in learned.values())
    with refused_reason(audit_engine) as reason, pytest.raises(SQLAlchemyError):
        apply_manual(guard, persister, ManualAction.ROLLBACK, T0 + 31, actor="ana", reason=reason)
    assert guard.state.mode.label == "rollout(50)"
    assert ttft_baselines(guard) == learned
    apply_manual(guard, persister, ManualAction.ROLLBACK, T0 + 32, actor="ana", reason="paged")
    for sample in arm_samples(T0 + 33):
        guard.observe(sample)
    compared = guard.compare.evaluate(T0 + 34).evidence
    assert compared["learned"]["requests"] == compared["round_robin"]["requests"] == 60
    with refused_reason(audit_engine) as reason, pytest.raises(SQLAlchemyError):
        apply_manual(guard, persister, ManualAction.RESUME, T0 + 34, actor="ana", reason=reason)
    assert guard.state.mode.label == "round_robin"
    assert guard.compare.evaluate(T0 + 34).evidence == compared


@contextmanager
def mode_refused(engine: Engine) -> Iterator[Engine]:
    """An engine whose switches the database refuses while this lasts: PostgreSQL, another
    session locks `fleet_state` (statements time out after 0.5 s; an incident row can
    still be written); SQLite, another writer holds the file."""
    if engine.dialect.name != "postgresql":
        with refused_reason(engine):
            yield engine
        return
    timed = create_audit_engine(engine.url, statement_timeout_s=0.5)
    with pg_connect(engine.url) as blocker:
        blocker.execute("BEGIN")
        blocker.execute("LOCK TABLE fleet_state IN EXCLUSIVE MODE")
        yield timed
        blocker.execute("ROLLBACK")
    timed.dispose()


def losing_learned_leader(
    engine: Engine, audit_engine: Engine, tmp_path: Path, now: float
) -> GuardReplica:
    """The only replica, leading on `engine`, fed a learned arm that loses: it trips."""
    leader = GuardReplica(
        engine, SoloLease(), FileNotifier(tmp_path / "notify.jsonl"), replica_id="a",
        config=tripping_guard(GuardStore(audit_engine).load(now)).config,
    )  # fmt: skip
    assert leader.sync(now).leader
    for sample in arm_samples(now - 5):
        leader.observe(sample)
    return leader


@pytest.mark.parametrize("stored_by", ["sync", "command"])
def test_a_refused_trip_stays_in_force_and_is_stored_with_its_incident(
    audit_engine: Engine, tmp_path: Path, stored_by: str
) -> None:
    """The leader routes round-robin at once; the next sync writes the switch, linked to
    the incident it opened (not to a row rolled back with the refused switch), and a
    command taken before that sync first writes it too."""
    now = time.time()
    start_rollout(GuardStore(audit_engine), at_s=now - 30)
    with mode_refused(audit_engine) as engine:
        leader = losing_learned_leader(engine, audit_engine, tmp_path, now)
        (change,) = run_until_trip(leader, now)
        assert leader.stats.persist_errors == 1
        assert leader.current().label == "round_robin"  # this replica is safe at once
    assert GuardStore(audit_engine).load(now).mode.label == "rollout(50)"
    if stored_by == "sync":
        assert leader.sync(now + 11).error is None
        assert GuardStore(audit_engine).load(now + 11).mode.label == "round_robin"
    held = leader.command(ManualAction.HOLD, now + 12, actor="ana", reason="hold")
    assert held.result.changed and leader.current().label == "held_round_robin"
    with Session(audit_engine) as session:
        changes = session.scalars(select(ModeChange).order_by(ModeChange.id)).all()
        (incident,) = session.scalars(select(Incident)).all()
    assert [(c.to_mode, c.incident_id) for c in changes[-2:]] == [
        ("round_robin", incident.id), ("held_round_robin", incident.id),
    ]  # fmt: skip
    assert change.transition.version == changes[-2].evidence["transition"]["version"]
    assert incident.resolved_at is not None
    leader.close()


def hot_prefix_leader(engine: Engine, tmp_path: Path, now: float, prefix: str) -> GuardReplica:
    """A leader on rollout(50) whose next evaluations trip the hot-spot detector on
    `prefix` (every arrival of the last 3 s)."""
    start_rollout(GuardStore(engine), at_s=now - 30)
    leader = GuardReplica(
        engine, SoloLease(), FileNotifier(tmp_path / "notify.jsonl"), replica_id="a",
        config=tripping_guard(GuardStore(engine).load(now)).config,
    )  # fmt: skip
    assert leader.sync(now).leader
    for k in range(60):
        leader.observe_arrival(now - 3 + k * 0.05, prefix, None)
    return leader


def stored_rows(engine: Engine) -> tuple[list[ModeChange], list[Incident]]:
    with Session(engine) as session:
        changes = session.scalars(select(ModeChange).order_by(ModeChange.id)).all()
        incidents = session.scalars(select(Incident).order_by(Incident.id)).all()
    return list(changes), list(incidents)


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("audit_engine", [BACKENDS[1]], indirect=True)
def test_a_nul_in_a_hot_prefix_is_written_out_not_retried_for_ever(
    audit_engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """PostgreSQL text holds no NUL: the trip naming the prefix was refused and kept, and
    retried at every sync and before every command; the fleet never switched and every
    command on the leader failed until a restart."""
    now = time.time()
    leader = hot_prefix_leader(audit_engine, tmp_path, now, "p\x00hot")
    with caplog.at_level(logging.ERROR):
        (change,) = run_until_trip(leader, now)
        assert leader.sync(now + 11).error is None and leader.sync(now + 11.5).error is None
        held = leader.command(ManualAction.HOLD, now + 12, actor="ana", reason="hold")
    (refused,) = refusals(caplog)  # said once, not at every retry
    assert "DataError" in refused and "storing them with each NUL written out as \\x00" in refused
    assert held.result.changed and leader.current().label == "held_round_robin"
    changes, (incident,) = stored_rows(audit_engine)
    assert [(c.to_mode, c.incident_id) for c in changes[-2:]] == [
        ("round_robin", incident.id), ("held_round_robin", incident.id),
    ]  # fmt: skip
    assert change.transition.version == changes[-2].evidence["transition"]["version"]
    assert incident.subject == "prefix:p\\x00hot" and "p\\x00hot" in changes[-2].reason
    assert incident.resolved_at is not None  # the hold resolved it: the tracker had its id
    leader.close()


@contextmanager
def refused_for_good(engine: Engine, table: str, check: str) -> Iterator[None]:
    """A CHECK constraint the guard's rows break: IntegrityError at every try."""
    with pg_connect(engine.url) as conn:
        constraint = f"refused_for_good CHECK ({check}) NOT VALID"  # rows stored stand
        conn.execute(f"ALTER TABLE {table} ADD CONSTRAINT {constraint}")
        try:
            yield
        finally:
            conn.execute(f"ALTER TABLE {table} DROP CONSTRAINT refused_for_good")


@pytest.mark.parametrize("audit_engine", [BACKENDS[1]], indirect=True)
def test_a_trip_refused_for_good_stores_its_switch_alone_else_goes_back(
    audit_engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """With no NUL to write out, the fleet still switches (the incident refused); with the
    switch refused too, the batch is dropped and the leader back on the stored mode, so a
    command works at once (it answered 'the fleet mode changed 5 times' for ever)."""
    now = time.time()
    leader = hot_prefix_leader(audit_engine, tmp_path, now, "hot")
    with caplog.at_level(logging.ERROR), refused_for_good(audit_engine, "incidents", "false"):
        run_until_trip(leader, now)
        assert leader.sync(now + 11).error is None
    (refused,) = refusals(caplog)
    assert "CheckViolation" in refused and "as the mode change alone" in refused
    changes, incidents = stored_rows(audit_engine)
    assert incidents == [] and (changes[-1].to_mode, changes[-1].incident_id) == (
        "round_robin", None,
    )  # fmt: skip
    assert leader.guard.incidents.current is None
    caplog.clear()
    leader.close()
    leader = hot_prefix_leader(audit_engine, tmp_path, now + 100, "hot")
    with caplog.at_level(logging.ERROR), refused_for_good(audit_engine, "mode_changes", "false"):
        assert run_until_trip(leader, now + 100) != []
        assert leader.current().label == "rollout(50)"  # back on the stored mode
        assert leader.sync(now + 111).error is None
    refused_as_is, dropped = refusals(caplog)
    assert "CheckViolation" in refused_as_is and "as the mode change alone" in refused_as_is
    assert dropped.startswith("guard events dropped: the database refuses them (CheckViolation")
    assert dropped.endswith("back on the stored mode rollout(50)")
    assert stored_rows(audit_engine)[0][-1].to_mode == "rollout(50)"  # no row of this trip
    held = leader.command(ManualAction.HOLD, now + 112, actor="ana", reason="hold")
    assert held.result.changed and leader.current().label == "held_round_robin"
    leader.close()


def test_the_only_replica_says_it_leads_on_when_its_writes_fail(
    audit_engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An in-memory database's one process cannot give leadership up: it said
    "leadership given up ... another replica leads meanwhile" and led on."""
    now = time.time()
    start_rollout(GuardStore(audit_engine), at_s=now - 30)
    with mode_refused(audit_engine) as engine, caplog.at_level(logging.ERROR):
        leader = losing_learned_leader(engine, audit_engine, tmp_path, now)
        run_until_trip(leader, now)
        assert all(leader.sync(now + 11 + k / 2).leader for k in range(4))
    said = [r.getMessage() for r in caplog.records if r.name.endswith("lead_gate")]
    assert [line.split(": ")[:2] for line in said] == [
        ["guard writes failing", "it cannot write"],  # on its first sync
        ["guard writes failing", "its guard writes failed 3 times in a row"],
    ]
    assert all(line.endswith("; this replica leads on: it is the only one") for line in said)
    leader.close()
