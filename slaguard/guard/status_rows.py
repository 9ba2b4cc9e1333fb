"""What `slaguard status` reads, as plain rows: no pandas, so the command an SRE runs
mid-incident starts in about a second (`queries.py` builds the tables of `history` and
`incidents` from the same rows).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, case, func, select
from sqlalchemy.orm import Session

from slaguard.audit.models import Decision, Incident, Outcome
from slaguard.guard.config import RolloutCompareConfig
from slaguard.guard.incident_store import GUARD_KEY, OUTBOX_KEY
from slaguard.scheduler.rollout import ROLLBACK_RATIO, Arm, should_roll_back

INCIDENT_COLUMNS = [
    "id", "opened_at", "resolved_at", "detector", "severity", "subject", "summary",
    "notification_state", "messages_sent", "messages_waiting", "slack_ts",
]  # fmt: skip
ARM_COLUMNS = ["arm", "decisions", "outcomes", "sla_violations", "sla_violation_rate"]


def incident_rows(
    engine: Engine, *, open_only: bool, since: datetime | None = None
) -> list[dict[str, Any]]:
    """Incidents (unresolved ones only with `open_only`), newest first, one dict each in
    `INCIDENT_COLUMNS` order."""
    stmt = select(Incident).order_by(Incident.opened_at.desc(), Incident.id.desc())
    if open_only:
        stmt = stmt.where(Incident.resolved_at.is_(None))
    if since is not None:
        stmt = stmt.where(Incident.opened_at >= since)
    with Session(engine) as session:
        rows = session.scalars(stmt).all()
    records = []
    for row in rows:
        evidence = row.evidence if isinstance(row.evidence, dict) else {}
        book = evidence.get(GUARD_KEY) or {}
        records.append(
            {
                "id": row.id,
                "opened_at": row.opened_at,
                "resolved_at": row.resolved_at,
                "detector": row.detector,
                "severity": row.severity,
                "subject": row.subject,
                "summary": str(evidence.get("summary", "")),
                "notification_state": row.notification_state,
                "messages_sent": int(book.get("sent", 0)),
                "messages_waiting": len(evidence.get(OUTBOX_KEY) or []),
                "slack_ts": row.slack_ts,
            }
        )
    return records


@dataclass(frozen=True, slots=True)
class ArmComparison:
    """Per-arm SLA figures over a window, and what the rollback rule says about them."""

    arms: list[dict[str, Any]]
    """One row per arm in `ARM_COLUMNS` order."""
    ratio: float | None
    """learned violation rate / round-robin's (None without both arms' outcomes)."""
    verdict: str


def arm_sla(engine: Engine, since: datetime, until: datetime) -> ArmComparison:
    """Decisions, outcomes an SLA judges and SLA violations per policy arm in [since, until)."""
    stmt = (
        select(
            Decision.policy_arm,
            func.count(),
            func.count(Outcome.sla_met),  # judged outcomes: a client_error is none
            func.coalesce(func.sum(case((Outcome.sla_met.is_(False), 1), else_=0)), 0),
        )
        .select_from(Decision)
        .outerjoin(Outcome, Outcome.request_id == Decision.request_id)
        .where(Decision.decided_at >= since, Decision.decided_at < until)
        .group_by(Decision.policy_arm)
        .order_by(Decision.policy_arm)
    )
    with engine.connect() as conn:
        rows = conn.execute(stmt).all()
    arms = [
        dict(zip(ARM_COLUMNS, (a, int(d), int(o), int(v), v / o if o else None), strict=True))
        for a, d, o, v in rows
    ]
    rates = {r["arm"]: r["sla_violation_rate"] for r in arms}
    counts = {r["arm"]: r["outcomes"] for r in arms}
    learned, rr = rates.get(Arm.LEARNED.value), rates.get(Arm.ROUND_ROBIN.value)
    gate = RolloutCompareConfig().min_samples_per_arm
    if learned is None or rr is None:
        return ArmComparison(arms, None, "no comparison: both arms need outcomes in the window")
    ratio = learned / rr if rr > 0 else (float("inf") if learned > 0 else 1.0)
    thin = min(counts[Arm.LEARNED.value], counts[Arm.ROUND_ROBIN.value]) < gate
    over = should_roll_back(learned, rr)
    verdict = (
        f"learned / round_robin violation rate x{ratio:.2f} "
        f"({'above' if over else 'within'} the x{ROLLBACK_RATIO} rollback rule"
        + (f"; fewer than {gate} outcomes per arm, the guard gives no verdict" if thin else "")
        + ")"
    )
    return ArmComparison(arms, ratio, verdict)
