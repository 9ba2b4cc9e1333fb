"""Manual mode commands over the database: rollback, hold, resume.

The CLI (service down or not) and a replica's admin endpoint both run them here: take
the stored mode and the open incident, apply the pure transition, store the switch with
compare-and-set and queue the incident's resolution when the command ends the episode.
A switch by someone else in between is not overwritten: the command is re-applied to
the new state (so "already on round-robin" stays an idempotent answer).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from slaguard.guard.events import IncidentEvent
from slaguard.guard.guard import Guard
from slaguard.guard.modes import TransitionResult
from slaguard.guard.persist import EventPersister

ATTEMPTS = 5


class ManualAction(StrEnum):
    """What a human asks for."""

    ROLLBACK = "rollback"
    HOLD = "hold"
    RESUME = "resume"


class ModeBusyError(RuntimeError):
    """The mode changed under every attempt (someone keeps switching it)."""


@dataclass(frozen=True, slots=True)
class ManualOutcome:
    """The transition (its `message` is the line to print) and the messages it queued."""

    result: TransitionResult
    queued: list[IncidentEvent] = field(default_factory=list)
    incident_id: int | None = None


def apply_manual(
    guard: Guard,
    persister: EventPersister,
    action: ManualAction,
    now_s: float,
    *,
    actor: str,
    reason: str,
    stage_pct: int | None = None,
) -> ManualOutcome:
    """Run one command against the stored mode; `guard` ends on the stored result."""
    for _ in range(ATTEMPTS):
        guard.state = persister.modes.load(now_s)
        guard.incidents.current = persister.incidents.restore()
        if action is ManualAction.RESUME:
            result, events = guard.resume(now_s, actor=actor, reason=reason, stage_pct=stage_pct)
        else:
            result, events = guard.rollback(
                now_s, actor=actor, reason=reason, hold=action is ManualAction.HOLD
            )
        if not result.changed:
            return ManualOutcome(result)
        stored = persister.persist(guard, events, now_s)
        if stored.conflict is None:
            return ManualOutcome(result, stored.queued, stored.incident_id)
    raise ModeBusyError(
        f"the fleet mode changed {ATTEMPTS} times while applying {action.value}; try again"
    )
