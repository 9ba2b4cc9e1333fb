"""Outcomes no SLA judges: `outcomes.sla_met` may be NULL.

A request a backend refused as the client's mistake (status `client_error`, e.g. an HTTP
400 for a prompt over the model's context) is audited but judged by no SLA: counting it
as a miss blamed a card for a client's request.

Revision ID: 0003_unjudged_outcomes
Revises: 0002_guard_state
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_unjudged_outcomes"
down_revision: str | None = "0002_guard_state"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("outcomes") as batch:
        batch.alter_column("sla_met", existing_type=sa.Boolean(), nullable=True)


def downgrade() -> None:
    """Unjudged outcomes become misses: what slaguard before this revision recorded for
    every status but `ok`."""
    op.execute(sa.text("UPDATE outcomes SET sla_met = false WHERE sla_met IS NULL"))
    with op.batch_alter_table("outcomes") as batch:
        batch.alter_column("sla_met", existing_type=sa.Boolean(), nullable=False)
