"""Audit log: decisions, outcomes, weight versions.

Revision ID: 0001_audit_log
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001_audit_log"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC_TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "decisions",
        sa.Column("request_id", sa.String(length=128), nullable=False),
        sa.Column("decided_at", UTC_TIME, nullable=False),
        sa.Column("model_id", sa.String(length=128), nullable=False),
        sa.Column("priority", sa.String(length=8), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("max_new_tokens", sa.Integer(), nullable=False),
        sa.Column("deadline_s", sa.Double(), nullable=False),
        sa.Column("policy_arm", sa.String(length=16), nullable=False),
        sa.Column("fleet_mode", sa.String(length=32), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("target_id", sa.String(length=128), nullable=True),
        sa.Column("card_type", sa.String(length=64), nullable=True),
        sa.Column("explanation", sa.JSON(), nullable=False),
        sa.Column("weights_version", sa.String(length=64), nullable=False),
        sa.Column("config_hash", sa.String(length=64), nullable=False),
        sa.Column("decision_latency_s", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("request_id", name=op.f("pk_decisions")),
    )
    op.create_index("ix_decisions_decided_at", "decisions", ["decided_at"])
    op.create_index(
        "ix_decisions_target_id_decided_at", "decisions", ["target_id", "decided_at"]
    )

    op.create_table(
        "outcomes",
        sa.Column("request_id", sa.String(length=128), nullable=False),
        sa.Column("finished_at", UTC_TIME, nullable=False),
        sa.Column("ttft_s", sa.Double(), nullable=True),
        sa.Column("tpot_s", sa.Double(), nullable=True),
        sa.Column("e2e_s", sa.Double(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("sla_met", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("request_id", name=op.f("pk_outcomes")),
    )
    op.create_index("ix_outcomes_finished_at", "outcomes", ["finished_at"])

    op.create_table(
        "weight_versions",
        sa.Column("version", sa.String(length=64), nullable=False),
        sa.Column("at", UTC_TIME, nullable=False),
        sa.Column("weights", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("version", name=op.f("pk_weight_versions")),
    )
    op.create_index("ix_weight_versions_at", "weight_versions", ["at"])


def downgrade() -> None:
    op.drop_index("ix_weight_versions_at", table_name="weight_versions")
    op.drop_table("weight_versions")
    op.drop_index("ix_outcomes_finished_at", table_name="outcomes")
    op.drop_table("outcomes")
    op.drop_index("ix_decisions_target_id_decided_at", table_name="decisions")
    op.drop_index("ix_decisions_decided_at", table_name="decisions")
    op.drop_table("decisions")
