"""The audit schema as SQLAlchemy 2 typed ORM classes (Alembic migrations mirror it).

Times are `timestamptz` on PostgreSQL and UTC text on SQLite (which sorts correctly, so
the same range indexes serve both). Explanations and evidence are compact JSON (`json`
on PostgreSQL: stored as written, cheapest to insert; postmortems fetch them by key).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    CheckConstraint,
    DateTime,
    Dialect,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Select,
    String,
    Text,
    TypeDecorator,
    select,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UtcDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes in and out on every backend (SQLite drops the zone otherwise)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    @property
    def python_type(self) -> type[datetime]:
        """What a value comes out as (`audit.frames` types an empty answer by it)."""
        return datetime

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: pass an aware UTC datetime")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utc_from_unix(seconds: float) -> datetime:
    """Unix seconds (as records carry them) -> aware UTC datetime (as the schema stores)."""
    return datetime.fromtimestamp(seconds, UTC)


class Base(DeclarativeBase):
    """Declarative base with stable constraint names (Alembic needs them on SQLite)."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {  # noqa: RUF012 - SQLAlchemy reads this class attribute
        datetime: UtcDateTime(),
        float: Double(),
        dict[str, Any]: JSON(),
    }


class Decision(Base):
    """One routing decision; the primary key makes replays idempotent."""

    __tablename__ = "decisions"

    request_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    decided_at: Mapped[datetime]
    model_id: Mapped[str] = mapped_column(String(128))
    priority: Mapped[str] = mapped_column(String(8))
    prompt_tokens: Mapped[int] = mapped_column(Integer)
    max_new_tokens: Mapped[int] = mapped_column(Integer)
    deadline_s: Mapped[float]
    policy_arm: Mapped[str] = mapped_column(String(16))
    fleet_mode: Mapped[str] = mapped_column(String(32))
    outcome: Mapped[str] = mapped_column(String(16))
    target_id: Mapped[str | None] = mapped_column(String(128))
    card_type: Mapped[str | None] = mapped_column(String(64))
    explanation: Mapped[dict[str, Any]]
    weights_version: Mapped[str] = mapped_column(String(64))
    config_hash: Mapped[str] = mapped_column(String(64))
    decision_latency_s: Mapped[float]

    __table_args__ = (
        Index("ix_decisions_decided_at", "decided_at"),
        Index("ix_decisions_target_id_decided_at", "target_id", "decided_at"),
    )


class Outcome(Base):
    """How a request went; joined to `decisions` by request id (no FK: outcomes may land
    first after a replay, and pruning deletes both by time)."""

    __tablename__ = "outcomes"

    request_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    finished_at: Mapped[datetime]
    ttft_s: Mapped[float | None]
    tpot_s: Mapped[float | None]
    e2e_s: Mapped[float | None]
    status: Mapped[str] = mapped_column(String(16))
    sla_met: Mapped[bool | None]
    """None: judged by no SLA (a `client_error`, the client's mistake; a `cancelled`
    request whose client left before its first token and its deadline)."""

    __table_args__ = (Index("ix_outcomes_finished_at", "finished_at"),)


class WeightVersion(Base):
    """A router weight set, referenced by `decisions.weights_version`."""

    __tablename__ = "weight_versions"

    version: Mapped[str] = mapped_column(String(64), primary_key=True)
    at: Mapped[datetime]
    weights: Mapped[dict[str, Any]]

    __table_args__ = (Index("ix_weight_versions_at", "at"),)


class Incident(Base):
    """A detector finding, from opening to resolution, with its Slack thread."""

    __tablename__ = "incidents"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    opened_at: Mapped[datetime]
    resolved_at: Mapped[datetime | None]
    detector: Mapped[str] = mapped_column(String(64))
    severity: Mapped[str] = mapped_column(String(16))
    subject: Mapped[str] = mapped_column(Text)
    evidence: Mapped[dict[str, Any]]
    notification_state: Mapped[str] = mapped_column(String(32))
    slack_channel: Mapped[str | None] = mapped_column(String(64))
    slack_ts: Mapped[str | None] = mapped_column(String(32))

    __table_args__ = (Index("ix_incidents_opened_at", "opened_at"),)


class ModeChange(Base):
    """One fleet mode switch and the evidence behind it."""

    __tablename__ = "mode_changes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime]
    from_mode: Mapped[str] = mapped_column(String(32))
    to_mode: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str] = mapped_column(Text)
    actor: Mapped[str] = mapped_column(String(128))
    evidence: Mapped[dict[str, Any]]
    incident_id: Mapped[int | None] = mapped_column(ForeignKey("incidents.id"))

    __table_args__ = (
        Index("ix_mode_changes_at", "at"),
        Index("ix_mode_changes_incident_id", "incident_id"),
    )


class FleetState(Base):
    """The fleet's current mode, one row shared by all replicas; `version` counts
    switches so a replica can compare-and-set."""

    __tablename__ = "fleet_state"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    mode: Mapped[str] = mapped_column(String(32))
    since: Mapped[datetime]
    reason: Mapped[str] = mapped_column(Text)
    actor: Mapped[str] = mapped_column(String(128))
    version: Mapped[int] = mapped_column(Integer)

    __table_args__ = (CheckConstraint("id = 1", name="single_row"),)


FLEET_STATE_ROW_ID = 1


def select_fleet_state() -> Select[str, datetime, str, str, int]:
    """The fleet mode row as (mode, since, reason, actor, version)."""
    return select(
        FleetState.mode, FleetState.since, FleetState.reason, FleetState.actor, FleetState.version
    ).where(FleetState.id == FLEET_STATE_ROW_ID)


INITIAL_FLEET_MODE = "round_robin"
"""Cold start: round-robin collects the unbiased baseline first (scheduler spec, section 5)."""


class GuardRouterInputs(Base):
    """The guard leader's last demotions and fleet digest (a `RouterInputs` text without
    Z-scores), kept for a leader that starts after every replica stopped: on PostgreSQL
    the router inputs otherwise travel by NOTIFY alone (`guard/lease_pg_kept.py`)."""

    __tablename__ = "guard_router_inputs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    published_at: Mapped[datetime]
    inputs: Mapped[str] = mapped_column(Text)

    __table_args__ = (CheckConstraint("id = 1", name="single_row"),)
