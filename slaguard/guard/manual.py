"""Manual mode commands over the database: rollback, hold, resume.

The CLI (service down or not) and a replica's admin endpoint both run them here: take
the stored mode and the open incident, apply the pure transition, store the switch with
compare-and-set and queue the incident's resolution when the command ends the episode.
A switch by someone else in between is not overwritten: the command is re-applied to
the new state (so "already on round-robin" stays an idempotent answer). A switch the
database refuses for another reason (a lock, a value it will not store) is undone: the
guard stays on the stored state, so the command can simply be tried again.

A rollback asked for by an alert (Alertmanager) carries the alert as a trip verdict: the
switch then opens an incident with the alert's evidence (or updates the open one), and
the mode change names it, exactly like a detector's trip.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from slaguard.guard.events import GuardEvent, IncidentEvent
from slaguard.guard.guard import Checkpoint, Guard
from slaguard.guard.modes import TransitionResult
from slaguard.guard.persist import EventPersister, PersistResult
from slaguard.guard.verdicts import Verdict

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


def note_alerts_resolved(
    guard: Guard, persister: EventPersister, detector: str, alertnames: set[str], now_s: float
) -> bool:
    """Alertmanager says alerts resolved: if they opened the open incident, one update in
    its thread (stored in the outbox); True if one was queued."""
    guard.adopt_state(persister.modes.load(now_s), now_s)
    guard.incidents.current = persister.incidents.restore()
    checkpoint = guard.checkpoint()
    event = guard.incidents.alert_resolved(now_s, detector, alertnames, guard.state.mode.label)
    if event is None:
        return False
    return _persist_or_undo(guard, persister, [event], now_s, checkpoint).conflict is None


def apply_manual(
    guard: Guard,
    persister: EventPersister,
    action: ManualAction,
    now_s: float,
    *,
    actor: str,
    reason: str,
    stage_pct: int | None = None,
    alert: Verdict | None = None,
) -> ManualOutcome:
    """Run one command against the stored mode; `guard` ends on the stored result.
    `alert` (rollback only): the alert that asked for it, opened as an incident."""
    if alert is not None and action is not ManualAction.ROLLBACK:
        raise ValueError(f"an alert can only ask for a rollback, not {action.value}")
    for _ in range(ATTEMPTS):
        guard.adopt_state(persister.modes.load(now_s), now_s)
        guard.incidents.current = persister.incidents.restore()
        before = guard.state.mode.label
        checkpoint = guard.checkpoint()
        events: list[GuardEvent]
        if action is ManualAction.RESUME:
            result, events = guard.resume(
                now_s, actor=actor, reason=reason, stage_pct=stage_pct, keep=checkpoint
            )
        else:
            hold = action is ManualAction.HOLD
            result, events = guard.rollback(  # an alert on round-robin changes nothing
                now_s, actor=actor, reason=reason, hold=hold, stop_plan=alert is None,
                keep=checkpoint,
            )  # fmt: skip
        if not result.changed:
            if persister.modes.confirm_version(guard.state.version):
                return ManualOutcome(result)
            continue  # a switch landed meanwhile: judge again on it
        if alert is not None:
            opened = guard.incidents.tripped(now_s, [alert], before, result.state.mode.label)
            events = [opened, *events]
        stored = _persist_or_undo(guard, persister, events, now_s, checkpoint)
        if stored.conflict is None:
            return ManualOutcome(result, stored.queued, stored.incident_id)
    raise ModeBusyError(
        f"the fleet mode changed {ATTEMPTS} times while applying {action.value}; try again"
    )


def _persist_or_undo(
    guard: Guard,
    persister: EventPersister,
    events: list[GuardEvent],
    now_s: float,
    checkpoint: Checkpoint,
) -> PersistResult:
    """Store a command's events; if the database refuses them, back to `checkpoint`."""
    try:
        return persister.persist(guard, events, now_s)
    except BaseException:
        guard.undo(checkpoint)
        raise
