"""What `slaguard history / incidents` show, as plain functions over an engine.

Read-only; answers are DataFrames, rendered by the audit line's table/csv/json output.
"""

from __future__ import annotations

from datetime import datetime

import pandas as pd  # type: ignore[import-untyped]
from sqlalchemy import Engine, select

from slaguard.audit.models import ModeChange
from slaguard.guard.status_rows import INCIDENT_COLUMNS, incident_rows
from slaguard.guard.store import is_simulated, transition_kind

HISTORY_COLUMNS = ["at", "from_mode", "to_mode", "kind", "actor", "reason", "incident_id"]


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
    rows = incident_rows(engine, open_only=open_only, since=since)
    return pd.DataFrame.from_records(rows, columns=INCIDENT_COLUMNS)
