"""Guard state: incidents, mode changes, and the shared one-row fleet_state.

Revision ID: 0002_guard_state
Revises: 0001_audit_log
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0002_guard_state"
down_revision: str | None = "0001_audit_log"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC_TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "incidents",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("opened_at", UTC_TIME, nullable=False),
        sa.Column("resolved_at", UTC_TIME, nullable=True),
        sa.Column("detector", sa.String(length=64), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("notification_state", sa.String(length=32), nullable=False),
        sa.Column("slack_channel", sa.String(length=64), nullable=True),
        sa.Column("slack_ts", sa.String(length=32), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_incidents")),
    )
    op.create_index("ix_incidents_opened_at", "incidents", ["opened_at"])

    op.create_table(
        "mode_changes",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at", UTC_TIME, nullable=False),
        sa.Column("from_mode", sa.String(length=32), nullable=False),
        sa.Column("to_mode", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("incident_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["incident_id"], ["incidents.id"], name=op.f("fk_mode_changes_incident_id_incidents")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_mode_changes")),
    )
    op.create_index("ix_mode_changes_at", "mode_changes", ["at"])
    op.create_index("ix_mode_changes_incident_id", "mode_changes", ["incident_id"])

    fleet_state = op.create_table(
        "fleet_state",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("mode", sa.String(length=32), nullable=False),
        sa.Column("since", UTC_TIME, nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_fleet_state_single_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_fleet_state")),
    )
    # Cold start is round-robin (scheduler spec, section 5): seed the one shared row.
    op.bulk_insert(
        fleet_state,
        [
            {
                "id": 1,
                "mode": "round_robin",
                "since": datetime.now(UTC),
                "reason": "initial cold-start mode",
                "actor": "migration 0002_guard_state",
                "version": 0,
            }
        ],
    )


def downgrade() -> None:
    op.drop_table("fleet_state")
    op.drop_index("ix_mode_changes_incident_id", table_name="mode_changes")
    op.drop_index("ix_mode_changes_at", table_name="mode_changes")
    op.drop_table("mode_changes")
    op.drop_index("ix_incidents_opened_at", table_name="incidents")
    op.drop_table("incidents")
