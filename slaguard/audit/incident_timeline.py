"""An incident with what happened around it: detector evidence, mode switches, and
per-target statistics before, during and after it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pandas as pd  # type: ignore[import-untyped]
from sqlalchemy import Engine, case, or_, select

from slaguard.audit.group_stats import TargetCapacity, grouped_stats, with_shares
from slaguard.audit.models import Decision, Incident, ModeChange
from slaguard.audit.store import StoredIncident, UnknownIncidentError, get_incident
from slaguard.guard.incident_store import GUARD_KEY

PHASES = ("before", "during", "after")


@dataclass(frozen=True)
class IncidentTimeline:
    """An incident with what happened around it."""

    incident: StoredIncident
    phases: dict[str, tuple[datetime, datetime]]
    mode_changes: pd.DataFrame
    per_target: pd.DataFrame
    """phase, model, target, card: decisions, decision and capacity share, TTFT p50/p99,
    SLA violation rate."""

    @property
    def window(self) -> tuple[datetime, datetime]:
        return self.phases["before"][0], self.phases["after"][1]


GUARD_INCIDENT_PREFIX = "inc-"
"""The guard's own incident ids (`inc-<second>-<n>`), which a simulate report's trips name."""


def incident_with_guard_id(engine: Engine, guard_id: str) -> int:
    """The audit id of the incident a simulated run stored for the guard's `guard_id` (in
    its `evidence.incident`): the report names the guard's id, the database its own."""
    with engine.connect() as conn:
        rows = conn.execute(select(Incident.id, Incident.evidence).order_by(Incident.id)).all()
    held = []
    for incident_id, evidence in rows:
        found = evidence.get("incident") if isinstance(evidence, dict) else None
        if found == guard_id:
            return int(incident_id)
        if isinstance(found, str):
            held.append(found)
    raise UnknownIncidentError(
        f"no incident with guard id {guard_id}; fix: give one a simulate report's trips name "
        f"(this database holds {_some(held) if held else 'none'}), or an audit id "
        "`slaguard incidents` lists"
    )


def _some(ids: list[str]) -> str:
    return ", ".join(ids[:4]) + (f" and {len(ids) - 4} more" if len(ids) > 4 else "")


def incident_timeline(
    engine: Engine,
    incident_id: int,
    *,
    before: timedelta = timedelta(minutes=30),
    after: timedelta = timedelta(minutes=30),
    now: datetime,
    capacity: Mapping[str, TargetCapacity] | None = None,
) -> IncidentTimeline:
    """Detector evidence, mode switches and per-target stats before/during/after."""
    stored = get_incident(engine, incident_id)
    rec = stored.record
    opened = datetime.fromtimestamp(rec.opened_at_s, UTC)
    resolved = now if rec.resolved_at_s is None else datetime.fromtimestamp(rec.resolved_at_s, UTC)
    # an open incident lasts until now and has no "after" yet (it was 30 minutes of future)
    later = resolved if rec.resolved_at_s is None else resolved + after
    phases = {
        "before": (opened - before, opened),
        "during": (opened, resolved),
        "after": (resolved, later),
    }
    start, end = phases["before"][0], phases["after"][1]
    phase = case(
        (Decision.decided_at < opened, "before"),
        (Decision.decided_at < resolved, "during"),
        else_="after",
    ).label("phase")
    keys = [phase, Decision.model_id, Decision.target_id, Decision.card_type]
    with engine.connect() as conn:
        per_target = grouped_stats(conn, start, end, keys)
        changes = pd.read_sql(
            select(
                ModeChange.id,
                ModeChange.at,
                ModeChange.from_mode,
                ModeChange.to_mode,
                ModeChange.reason,
                ModeChange.actor,
                ModeChange.incident_id,
            )
            .where(
                or_(
                    ModeChange.incident_id == incident_id,
                    ModeChange.at.between(start, end),
                )
            )
            .order_by(ModeChange.at),
            conn,
            dtype={"incident_id": "Int64"},  # nullable: float64 wrote incident 1 as 1.0
        )
    per_target = with_shares(per_target, ["phase", "model_id"], capacity or {})
    per_target["phase"] = pd.Categorical(per_target["phase"], categories=PHASES, ordered=True)
    per_target = per_target.sort_values(["phase", "model_id", "target_id"], ignore_index=True)
    cols = ["phase", "model_id", "target_id", "card_type", "decisions", "decision_share",
            "capacity_share", "ttft_p50_s", "ttft_p99_s", "sla_violation_rate"]  # fmt: skip
    return IncidentTimeline(stored, phases, changes, per_target[cols])


def mode_in_force(engine: Engine, timeline: IncidentTimeline) -> str | None:
    """The fleet mode through an incident's window that no switch falls in (its plot had
    no mode band): the one the last switch before it entered, else the one the next
    switch after it left, else the one the guard booked on the incident."""
    start, end = timeline.window
    with engine.connect() as conn:
        entered = conn.execute(
            select(ModeChange.to_mode)
            .where(ModeChange.at < start)
            .order_by(ModeChange.at.desc(), ModeChange.id.desc())
            .limit(1)
        ).scalar()
        left = conn.execute(
            select(ModeChange.from_mode)
            .where(ModeChange.at >= end)
            .order_by(ModeChange.at, ModeChange.id)
            .limit(1)
        ).scalar()
    booked = (timeline.incident.record.evidence.get(GUARD_KEY) or {}).get("mode_before")
    mode = entered or left or booked
    return None if mode is None else str(mode)
