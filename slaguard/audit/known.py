"""Which target and model ids the audit database knows, for naming a filter typo: an
empty answer to `audit decisions --target l40s-8b-O` looked like a quiet hour.

The targets are index-served on a table of millions of rows: a loose scan of the
(target_id, decided_at) index, one probe per distinct target (1.2 ms on 1M PostgreSQL
rows). The models have no index of their own: they come from the time range's rows only,
a scan of that range (206 ms for a month of 1M rows on PostgreSQL); both run only for an
empty answer.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Engine, func, select

from slaguard.audit.models import Decision


def recorded_targets(engine: Engine) -> list[str]:
    """Every target id any stored decision was routed to, sorted."""
    known = select(func.min(Decision.target_id).label("id")).cte("known", recursive=True)
    following = (
        select(Decision.target_id)
        .where(Decision.target_id > known.c.id)
        .order_by(Decision.target_id)
        .limit(1)
        .scalar_subquery()
    )
    known = known.union_all(select(following).where(known.c.id.is_not(None)))
    with engine.connect() as conn:
        ids = conn.execute(select(known.c.id).where(known.c.id.is_not(None))).scalars()
        return sorted(ids)


def models_between(engine: Engine, since: datetime, until: datetime) -> list[str]:
    """The model ids of the decisions in [since, until), sorted."""
    stmt = (
        select(Decision.model_id)
        .where(Decision.decided_at >= since, Decision.decided_at < until)
        .distinct()
    )
    with engine.connect() as conn:
        return sorted(conn.execute(stmt).scalars())
