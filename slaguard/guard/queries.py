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
_TEXT = "str"
_TIME = "datetime64[us, UTC]"
HISTORY_DTYPES = {"at": _TIME, **{c: _TEXT for c in HISTORY_COLUMNS[1:-1]}}
INCIDENT_DTYPES = {
    "id": "int64", "opened_at": _TIME, "resolved_at": _TIME, "detector": _TEXT,
    "severity": _TEXT, "subject": _TEXT, "summary": _TEXT, "notification_state": _TEXT,
    "messages_sent": "int64", "messages_waiting": "int64", "slack_ts": _TEXT,
}  # fmt: skip
"""Each column's type whatever its values: from the values alone, a quiet window's
columns, an open incident's `resolved_at` and a run without Slack's `slack_ts` were
untyped, written to parquet as `null`."""


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
    frame = pd.DataFrame.from_records(records, columns=HISTORY_COLUMNS).astype(HISTORY_DTYPES)
    # object, not float: ids print as 7 (not 7.0) and a missing one as "-"; with no id
    # at all (a quiet window, manual switches only) typed still: parquet wrote `null`
    ids = [r["incident_id"] for r in records]
    held = any(i is not None for i in ids)
    frame["incident_id"] = pd.Series(ids, dtype=object if held else "Int64")
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
    return pd.DataFrame.from_records(rows, columns=INCIDENT_COLUMNS).astype(INCIDENT_DTYPES)
