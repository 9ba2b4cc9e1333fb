"""Decision lookups in the audit database for the feedback and route endpoints: a
decision no longer held in memory (or, for its explanation, never held). The fleet mode
and incidents are the guard's (`slaguard.guard.store`, `slaguard.guard.incident_store`).
Every method is synchronous and blocking: callers run them in a worker thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, select

from slaguard.audit.models import Decision, Outcome


@dataclass(frozen=True, slots=True)
class StoredDecision:
    """What feedback needs about a decision found only in the database."""

    request_id: str
    has_outcome: bool
    sla_met: bool | None
    """The stored outcome's verdict; None without one, or for one no SLA judges."""
    deadline_s: float
    routed: bool
    """False for a `no_capacity` decision: it went to no target."""


class DecisionStore:
    """Decision lookups of one audit database."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def find_decision(self, request_id: str) -> StoredDecision | None:
        """A decision by request id (and its stored outcome's verdict), or None."""
        with self.engine.connect() as conn:
            row = conn.execute(
                select(
                    Decision.request_id,
                    Decision.deadline_s,
                    Outcome.request_id,
                    Outcome.sla_met,
                    Decision.target_id,
                )
                .outerjoin(Outcome, Outcome.request_id == Decision.request_id)
                .where(Decision.request_id == request_id)
            ).one_or_none()
        if row is None:
            return None
        request, deadline, outcome, met, target = row
        return StoredDecision(
            request, outcome is not None, met, float(deadline), target is not None
        )

    def find_explanation(self, request_id: str) -> dict[str, Any] | None:
        """A stored decision's explanation (what `?explain=1` answered), or None."""
        with self.engine.connect() as conn:
            found = conn.execute(
                select(Decision.explanation).where(Decision.request_id == request_id)
            ).scalar_one_or_none()
        return None if found is None else dict(found)
