"""The guard leader's demotions kept for its successor: one-row `guard_router_inputs`.

On PostgreSQL the leader's router inputs reached the other replicas by NOTIFY alone, so
a leader that started after every replica had stopped (a host reboot, a restart of the
only replica) inherited no demotion and a target demoted as slow got its full traffic
back. The leader now keeps its demoted targets and fleet digest in this row (written
when they change, refreshed every 30 s while a target is demoted); a new leader takes
them when under 5 minutes old. SQLite keeps them in a file beside its lock, as before,
and leaves the table empty.

Revision ID: 0004_guard_router_inputs
Revises: 0003_unjudged_outcomes
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_guard_router_inputs"
down_revision: str | None = "0003_unjudged_outcomes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "guard_router_inputs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("inputs", sa.Text(), nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_guard_router_inputs_single_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_guard_router_inputs")),
    )


def downgrade() -> None:
    """The kept demotions go: an earlier version's new leader inherits only what NOTIFY
    brought it (nothing after a full restart)."""
    op.drop_table("guard_router_inputs")
