"""What `slaguard status / history / incidents` show, as plain functions over an engine.

Read-only; answers are DataFrames (rendered by the audit line's table/csv/json output)
or small dataclasses.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pandas as pd  # type: ignore[import-untyped]
from sqlalchemy import Engine, case, func, select
from sqlalchemy.orm import Session

from slaguard.audit.models import Decision, Incident, ModeChange, Outcome
from slaguard.guard.config import RolloutCompareConfig
from slaguard.guard.incident_store import GUARD_KEY, OUTBOX_KEY
from slaguard.guard.store import is_simulated, transition_kind
from slaguard.scheduler.rollout import ROLLBACK_RATIO, Arm, should_roll_back

HISTORY_COLUMNS = ["at", "from_mode", "to_mode", "kind", "actor", "reason", "incident_id"]
INCIDENT_COLUMNS = [
    "id", "opened_at", "resolved_at", "detector", "severity", "subject", "summary",
    "notification_state", "messages_sent", "messages_waiting", "slack_ts",
]  # fmt: skip
ARM_COLUMNS = ["arm", "decisions", "outcomes", "sla_violations", "sla_violation_rate"]


def mode_history(engine: Engine, since: datetime, until: datetime) -> pd.DataFrame:
    """Mode switches in [since, until), oldest first, with their kind and incident."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(
                ModeChange.at,
                ModeChange.from_mode,
                ModeChange.to_mode,
                ModeChange.evidence,
                ModeChange.actor,
                ModeChange.reason,
                ModeChange.incident_id,
            )
            .where(ModeChange.at >= since, ModeChange.at < until)
            .order_by(ModeChange.at, ModeChange.id)
        ).all()
    records = [
        {
            "at": at,
            "from_mode": a,
            "to_mode": b,
            "kind": _kind(evidence, reason),
            "actor": actor,
            "reason": reason,
            "incident_id": incident,
        }
        for at, a, b, evidence, actor, reason, incident in rows
    ]
    frame = pd.DataFrame.from_records(records, columns=HISTORY_COLUMNS)
    # object, not float: ids print as 7 (not 7.0) and a missing one as "-"
    frame["incident_id"] = pd.Series([r["incident_id"] for r in records], dtype=object)
    return frame


def _kind(evidence: object, reason: str) -> str:
    """The switch's transition kind; `simulated` for a row `simulate --audit-db` wrote
    (history only: it never changed the stored mode that `status` shows)."""
    if is_simulated(evidence):
        return "simulated"
    return transition_kind(evidence, reason) or "-"


def incident_list(
    engine: Engine, *, open_only: bool, since: datetime | None = None
) -> pd.DataFrame:
    """Incidents (unresolved ones only with `open_only`), newest first."""
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
    return pd.DataFrame.from_records(records, columns=INCIDENT_COLUMNS)


@dataclass(frozen=True, slots=True)
class ArmComparison:
    """Per-arm SLA figures over a window, and what the rollback rule says about them."""

    arms: pd.DataFrame
    ratio: float | None
    """learned violation rate / round-robin's (None without both arms' outcomes)."""
    verdict: str


def arm_sla(engine: Engine, since: datetime, until: datetime) -> ArmComparison:
    """Decisions, outcomes and SLA violations per policy arm in [since, until)."""
    stmt = (
        select(
            Decision.policy_arm,
            func.count(),
            func.count(Outcome.request_id),
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
    frame = pd.DataFrame.from_records(
        [(a, int(d), int(o), int(v), v / o if o else None) for a, d, o, v in rows],
        columns=ARM_COLUMNS,
    )
    rates = dict(zip(frame["arm"], frame["sla_violation_rate"], strict=True))
    counts = dict(zip(frame["arm"], frame["outcomes"], strict=True))
    learned, rr = rates.get(Arm.LEARNED.value), rates.get(Arm.ROUND_ROBIN.value)
    gate = RolloutCompareConfig().min_samples_per_arm
    if learned is None or rr is None:
        return ArmComparison(frame, None, "no comparison: both arms need outcomes in the window")
    ratio = learned / rr if rr > 0 else (float("inf") if learned > 0 else 1.0)
    thin = min(counts[Arm.LEARNED.value], counts[Arm.ROUND_ROBIN.value]) < gate
    over = should_roll_back(learned, rr)
    verdict = (
        f"learned / round_robin violation rate x{ratio:.2f} "
        f"({'above' if over else 'within'} the x{ROLLBACK_RATIO} rollback rule"
        + (f"; fewer than {gate} outcomes per arm, the guard gives no verdict" if thin else "")
        + ")"
    )
    return ArmComparison(frame, ratio, verdict)
