"""A switch the database refuses (not a lost compare-and-set: a lock held elsewhere, a
value it will not store) on both backends: a command leaves the guard on the stored
state, so the next command succeeds."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.exc import SQLAlchemyError
from test_guard_store import T0, same_state, start_rollout

from slaguard.audit.models import Incident
from slaguard.guard.guard import Guard
from slaguard.guard.incident_store import IncidentStore
from slaguard.guard.manual import ManualAction, apply_manual
from slaguard.guard.persist import EventPersister
from slaguard.guard.store import GuardStore
from slaguard.guard.verdicts import Action, Severity, Verdict

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
