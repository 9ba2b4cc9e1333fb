"""Synchronous writes for rare, must-be-durable facts: mode switches, incidents, weights.

Each call is one committed transaction before it returns. The fleet mode lives in the
one-row `fleet_state` table shared by every replica; `record_mode_change` is a
compare-and-set on the current mode (and optionally the version), so two replicas that
both decide to roll back produce one switch and one `ModeConflictError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, Insert, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from slaguard.audit.models import (
    FLEET_STATE_ROW_ID,
    FleetState,
    Incident,
    ModeChange,
    WeightVersion,
    select_fleet_state,
    utc_from_unix,
)
from slaguard.audit.records import IncidentRecord, ModeChangeRecord, WeightVersionRecord


class ModeConflictError(RuntimeError):
    """The fleet is no longer in the mode (or version) the caller switched from."""

    def __init__(self, message: str, current: CurrentMode) -> None:
        super().__init__(message)
        self.current = current


class UnknownIncidentError(LookupError):
    """No incident with that id."""


@dataclass(frozen=True, slots=True)
class CurrentMode:
    """The shared fleet mode as stored: label (`rollout(10)`, ...), since when, why, who."""

    mode: str
    since_s: float
    reason: str
    actor: str
    version: int


@dataclass(frozen=True, slots=True)
class StoredIncident:
    """An incident with its database id."""

    id: int
    record: IncidentRecord


def _dict(value: Any) -> dict[str, Any]:
    return dict(value)


def _current(row: FleetState) -> CurrentMode:
    return CurrentMode(row.mode, row.since.timestamp(), row.reason, row.actor, row.version)


def current_mode(engine: Engine) -> CurrentMode:
    """The fleet mode every replica should route with now."""
    with Session(engine) as session:
        row = session.get(FleetState, FLEET_STATE_ROW_ID)
        if row is None:
            raise LookupError("fleet_state has no row; run `slaguard db upgrade`")
        return _current(row)


def record_mode_change(
    engine: Engine, rec: ModeChangeRecord, *, expected_version: int | None = None
) -> CurrentMode:
    """Switch the shared mode from `rec.from_mode` to `rec.to_mode` and log the switch,
    atomically; raise ModeConflictError if another replica switched first."""
    with engine.begin() as conn:
        switch_mode(conn, rec, expected_version=expected_version)
    return current_mode(engine)


def switch_mode(
    conn: Connection, rec: ModeChangeRecord, *, expected_version: int | None = None
) -> None:
    """`record_mode_change` inside the caller's transaction: what the caller wrote before
    in it is undone with the switch when another replica won (ModeConflictError)."""
    stmt = (
        update(FleetState)
        .where(FleetState.id == FLEET_STATE_ROW_ID, FleetState.mode == rec.from_mode)
        .values(
            mode=rec.to_mode,
            since=utc_from_unix(rec.at_s),
            reason=rec.reason,
            actor=rec.actor,
            version=FleetState.version + 1,
        )
    )
    if expected_version is not None:
        stmt = stmt.where(FleetState.version == expected_version)
    if conn.execute(stmt).rowcount != 1:
        mode, since, reason, actor, version = conn.execute(select_fleet_state()).one()
        current = CurrentMode(mode, since.timestamp(), reason, actor, version)
        raise ModeConflictError(
            f"fleet mode is {current.mode!r} (version {current.version}), not "
            f"{rec.from_mode!r}" + (
                f" at version {expected_version}" if expected_version is not None else ""
            ),
            current,
        )  # fmt: skip
    conn.execute(_mode_change_row(rec))


def _mode_change_row(rec: ModeChangeRecord) -> Insert:
    return insert(ModeChange).values(
        at=utc_from_unix(rec.at_s),
        from_mode=rec.from_mode,
        to_mode=rec.to_mode,
        reason=rec.reason,
        actor=rec.actor,
        evidence=_dict(rec.evidence),
        incident_id=rec.incident_id,
    )


def log_mode_change(engine: Engine, rec: ModeChangeRecord) -> None:
    """Add a switch to the history only, leaving the shared mode alone (simulated runs)."""
    with engine.begin() as conn:
        conn.execute(_mode_change_row(rec))


def open_incident(engine: Engine, rec: IncidentRecord) -> int:
    """Store a new incident; return its id (used by mode changes and `audit incident`)."""
    with engine.begin() as conn:
        result = conn.execute(
            insert(Incident).values(
                opened_at=utc_from_unix(rec.opened_at_s),
                resolved_at=None if rec.resolved_at_s is None else utc_from_unix(rec.resolved_at_s),
                detector=rec.detector,
                severity=rec.severity,
                subject=rec.subject,
                evidence=_dict(rec.evidence),
                notification_state=rec.notification_state,
                slack_channel=rec.slack_channel,
                slack_ts=rec.slack_ts,
            )
        )
        key = result.inserted_primary_key
    assert key is not None
    return int(key[0])


_MAX_INCIDENT_ID = 2**31 - 1
"""`incidents.id` is an INTEGER: 32 bits on PostgreSQL."""


def _update_incident(engine: Engine, incident_id: int, **values: Any) -> None:
    with engine.begin() as conn:
        result = conn.execute(update(Incident).where(Incident.id == incident_id).values(**values))
        if result.rowcount != 1:
            raise UnknownIncidentError(f"no incident with id {incident_id}")


def resolve_incident(engine: Engine, incident_id: int, resolved_at_s: float) -> None:
    """Mark an incident resolved at `resolved_at_s`."""
    _update_incident(engine, incident_id, resolved_at=utc_from_unix(resolved_at_s))


def set_incident_notification(
    engine: Engine,
    incident_id: int,
    state: str,
    *,
    slack_channel: str | None = None,
    slack_ts: str | None = None,
) -> None:
    """Record where the incident's notification stands (and its Slack thread, once known)."""
    values: dict[str, Any] = {"notification_state": state}
    if slack_channel is not None:
        values["slack_channel"] = slack_channel
    if slack_ts is not None:
        values["slack_ts"] = slack_ts
    _update_incident(engine, incident_id, **values)


def _to_stored(row: Incident) -> StoredIncident:
    return StoredIncident(
        row.id,
        IncidentRecord(
            opened_at_s=row.opened_at.timestamp(),
            resolved_at_s=None if row.resolved_at is None else row.resolved_at.timestamp(),
            detector=row.detector,
            severity=row.severity,
            subject=row.subject,
            evidence=row.evidence,
            notification_state=row.notification_state,
            slack_channel=row.slack_channel,
            slack_ts=row.slack_ts,
        ),
    )


def get_incident(engine: Engine, incident_id: int) -> StoredIncident:
    """One incident by id, or UnknownIncidentError (also for an id no INTEGER column can
    hold, which SQLite's driver and PostgreSQL would refuse with errors of their own)."""
    with Session(engine) as session:
        row = session.get(Incident, incident_id) if 1 <= incident_id <= _MAX_INCIDENT_ID else None
        if row is None:
            low, high = session.execute(select(func.min(Incident.id), func.max(Incident.id))).one()
            held = "none" if low is None else f"id {low}" if low == high else f"ids {low}-{high}"
            raise UnknownIncidentError(
                f"no incident with id {incident_id}; fix: `slaguard incidents` lists the ids "
                f"(this database holds {held})"
            )
        return _to_stored(row)


def open_incidents(engine: Engine) -> list[StoredIncident]:
    """Incidents not resolved yet, oldest first (a restarted guard picks them up)."""
    with Session(engine) as session:
        rows = session.scalars(
            select(Incident).where(Incident.resolved_at.is_(None)).order_by(Incident.opened_at)
        ).all()
        return [_to_stored(row) for row in rows]


def record_weight_version(engine: Engine, rec: WeightVersionRecord) -> bool:
    """Store a weight set once; True if it was new (re-recording a version is a no-op)."""
    values = {"version": rec.version, "at": utc_from_unix(rec.at_s), "weights": dict(rec.weights)}
    with engine.begin() as conn:
        insert_fn = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
        stmt = (
            insert_fn(WeightVersion)
            .values(**values)
            .on_conflict_do_nothing()
            .execution_options(preserve_rowcount=True)
        )
        return conn.execute(stmt).rowcount == 1


def weights_at(engine: Engine, at: datetime) -> WeightVersionRecord | None:
    """The weight set in force at `at` (the newest version recorded before it)."""
    with Session(engine) as session:
        row = session.scalars(
            select(WeightVersion).where(WeightVersion.at <= at).order_by(WeightVersion.at.desc())
        ).first()
        if row is None:
            return None
        return WeightVersionRecord(row.version, row.at.timestamp(), row.weights)
