"""The service's durable facts in the audit database: fleet mode, incidents, decisions.

Thin wrappers over `slaguard.audit.store` (compare-and-set mode switches, incidents) and
the lookups the feedback and route endpoints need for a decision no longer held in memory
(or, for its explanation, never held).
Every method is synchronous and blocking: callers run them in a worker thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, select

from slaguard.audit.models import Decision, Outcome
from slaguard.audit.records import IncidentRecord, ModeChangeRecord
from slaguard.audit.store import (
    CurrentMode,
    ModeConflictError,
    current_mode,
    open_incident,
    record_mode_change,
    resolve_incident,
)
from slaguard.guard.events import IncidentEvent
from slaguard.guard.modes import ModeTransition


@dataclass(frozen=True, slots=True)
class StoredDecision:
    """What feedback needs about a decision found only in the database."""

    request_id: str
    has_outcome: bool
    deadline_s: float


class ModeStore:
    """The `fleet_state` row, incidents and decision lookups of one audit database."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def load(self) -> CurrentMode | None:
        """The stored mode, None when the table has no row yet."""
        try:
            return current_mode(self.engine)
        except LookupError:
            return None

    def save(self, transition: ModeTransition, incident_id: int | None) -> CurrentMode:
        """Persist one switch (compare-and-set on the version it was made from).

        On a conflict the stored mode wins and is returned; the caller adopts it.
        """
        rec = ModeChangeRecord(
            at_s=transition.at_s,
            from_mode=transition.from_mode,
            to_mode=transition.to_mode,
            reason=f"{transition.kind.value}: {transition.reason}"[:2000],
            actor=transition.actor[:128],
            evidence=transition.evidence,
            incident_id=incident_id,
        )
        try:
            return record_mode_change(self.engine, rec, expected_version=transition.version - 1)
        except ModeConflictError as exc:
            return exc.current

    def open_incident(self, event: IncidentEvent) -> int:
        """Store an opened incident; its database id."""
        return open_incident(
            self.engine,
            IncidentRecord(
                opened_at_s=event.opened_at_s,
                detector=event.detector,
                severity=event.severity.value,
                subject=event.subject,
                evidence={"summary": event.summary, "guard_incident": event.incident_id}
                | dict(event.evidence),
            ),
        )

    def resolve_incident(self, incident_id: int, at_s: float) -> None:
        resolve_incident(self.engine, incident_id, at_s)

    def find_decision(self, request_id: str) -> StoredDecision | None:
        """A decision by request id (and whether its outcome is stored), or None."""
        with self.engine.connect() as conn:
            row = conn.execute(
                select(Decision.request_id, Decision.deadline_s, Outcome.request_id)
                .outerjoin(Outcome, Outcome.request_id == Decision.request_id)
                .where(Decision.request_id == request_id)
            ).one_or_none()
        if row is None:
            return None
        return StoredDecision(row[0], row[2] is not None, float(row[1]))

    def find_explanation(self, request_id: str) -> dict[str, Any] | None:
        """A stored decision's explanation (what `?explain=1` answered), or None."""
        with self.engine.connect() as conn:
            found = conn.execute(
                select(Decision.explanation).where(Decision.request_id == request_id)
            ).scalar_one_or_none()
        return None if found is None else dict(found)
