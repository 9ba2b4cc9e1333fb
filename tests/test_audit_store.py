"""Mode switches (shared, compare-and-set), incidents and weight versions."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, func, select

from slaguard.audit.models import ModeChange
from slaguard.audit.records import IncidentRecord, ModeChangeRecord, WeightVersionRecord
from slaguard.audit.store import (
    ModeConflictError,
    UnknownIncidentError,
    current_mode,
    get_incident,
    open_incident,
    open_incidents,
    record_mode_change,
    record_weight_version,
    resolve_incident,
    set_incident_notification,
    weights_at,
)

T0 = 1_796_000_000.0


def switch(frm: str, to: str, at: float = T0, incident: int | None = None) -> ModeChangeRecord:
    return ModeChangeRecord(at, frm, to, f"{frm} -> {to}", "guard-a", {"ratio": 1.2}, incident)


def test_mode_changes_move_the_shared_state_and_are_logged(audit_engine: Engine) -> None:
    state = record_mode_change(audit_engine, switch("round_robin", "rollout(10)"))
    assert (state.mode, state.version, state.since_s) == ("rollout(10)", 1, T0)
    incident = open_incident(audit_engine, IncidentRecord(T0 + 5, "ttft_zscore", "page", "x"))
    state = record_mode_change(
        audit_engine, switch("rollout(10)", "held_round_robin", T0 + 9, incident),
        expected_version=1,
    )  # fmt: skip
    assert current_mode(audit_engine) == state
    assert (state.mode, state.version, state.actor) == ("held_round_robin", 2, "guard-a")
    with audit_engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(ModeChange)).scalar_one() == 2
        linked = conn.execute(select(ModeChange.incident_id).order_by(ModeChange.id)).all()
    assert [r[0] for r in linked] == [None, incident]


def test_a_stale_switch_is_refused_and_changes_nothing(audit_engine: Engine) -> None:
    record_mode_change(audit_engine, switch("round_robin", "rollout(10)"))
    with pytest.raises(ModeConflictError, match="fleet mode is 'rollout\\(10\\)'") as info:
        record_mode_change(audit_engine, switch("round_robin", "rollout(50)"))
    assert info.value.current.version == 1
    with pytest.raises(ModeConflictError, match="at version 0"):
        record_mode_change(audit_engine, switch("rollout(10)", "learned"), expected_version=0)
    assert current_mode(audit_engine).mode == "rollout(10)"
    with audit_engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(ModeChange)).scalar_one() == 1


def test_replicas_racing_to_roll_back_produce_one_switch(audit_engine: Engine) -> None:
    record_mode_change(audit_engine, switch("round_robin", "rollout(50)"))

    def roll_back(replica: int) -> bool:
        try:
            record_mode_change(
                audit_engine,
                ModeChangeRecord(T0 + 1, "rollout(50)", "round_robin", "rollback",
                                 f"replica-{replica}"),
            )  # fmt: skip
        except ModeConflictError:
            return False
        return True

    with ThreadPoolExecutor(max_workers=6) as pool:
        outcomes = list(pool.map(roll_back, range(6)))
    assert outcomes.count(True) == 1
    assert current_mode(audit_engine).version == 2


def test_incident_lifecycle(audit_engine: Engine) -> None:
    with pytest.raises(UnknownIncidentError, match=r"holds none\)$"):
        get_incident(audit_engine, 1)
    iid = open_incident(
        audit_engine, IncidentRecord(T0, "hot_spot", "ticket", "prefix 9f3a", {"share": 0.31})
    )
    assert [i.id for i in open_incidents(audit_engine)] == [iid]
    set_incident_notification(audit_engine, iid, "sent", slack_channel="C1", slack_ts="17.1")
    resolve_incident(audit_engine, iid, T0 + 600)
    stored = get_incident(audit_engine, iid).record
    assert stored.resolved_at_s == T0 + 600
    assert (stored.notification_state, stored.slack_channel, stored.slack_ts) == (
        "sent", "C1", "17.1",
    )  # fmt: skip
    assert stored.evidence == {"share": 0.31}
    assert open_incidents(audit_engine) == []
    with pytest.raises(UnknownIncidentError, match="no incident with id 999"):
        resolve_incident(audit_engine, 999, T0)
    with pytest.raises(UnknownIncidentError, match=rf"holds id {iid}\)$"):  # not "ids 1-1"
        get_incident(audit_engine, 999)
    later = open_incident(audit_engine, IncidentRecord(T0 + 700, "hot_spot", "ticket", "p", {}))
    with pytest.raises(UnknownIncidentError, match=rf"holds ids {iid}-{later}\)$"):
        get_incident(audit_engine, 999)


def test_weight_versions_are_recorded_once_and_found_by_time(audit_engine: Engine) -> None:
    v1 = WeightVersionRecord("w1", T0, {"compute": 0.5, "memory": 0.5})
    assert record_weight_version(audit_engine, v1) is True
    assert record_weight_version(audit_engine, v1) is False
    record_weight_version(audit_engine, WeightVersionRecord("w2", T0 + 3600, {"compute": 1.0}))
    found = weights_at(audit_engine, datetime.fromtimestamp(T0 + 10, UTC))
    assert found == v1
    assert weights_at(audit_engine, datetime.fromtimestamp(T0 - 1, UTC)) is None
