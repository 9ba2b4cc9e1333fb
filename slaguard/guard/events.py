"""What `Guard.evaluate` returns: typed, JSON-able events for the audit and notify lines."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from slaguard.guard.modes import ModeTransition
from slaguard.guard.verdicts import Action, JsonDict, Severity, Verdict
from slaguard.plaintext import visible


class VerdictPhase(StrEnum):
    """A trip verdict is reported when it starts and when it ends, not every evaluation."""

    RAISED = "raised"
    ENDED = "ended"
    ONCE = "once"
    """Demote / restore verdicts are one-shot."""


class IncidentState(StrEnum):
    """The three messages an incident ever sends."""

    OPENED = "opened"
    UPDATED = "updated"
    RESOLVED = "resolved"


@dataclass(frozen=True, slots=True)
class VerdictEvent:
    """A detector verdict began, ended, or (demote/restore) happened."""

    verdict: Verdict
    phase: VerdictPhase
    kind: str = "verdict"

    def to_dict(self) -> JsonDict:
        """JSON-able form."""
        return {"kind": self.kind, "phase": self.phase.value, **self.verdict.to_dict()}


@dataclass(frozen=True, slots=True)
class BreakerEvent:
    """The breaker tripped or cleared."""

    signal: str
    at_s: float
    reason: str
    evidence: JsonDict = field(default_factory=dict)
    kind: str = "breaker"

    def to_dict(self) -> JsonDict:
        """JSON-able form."""
        return {
            "kind": self.kind,
            "signal": self.signal,
            "at_s": self.at_s,
            "reason": self.reason,
            "evidence": self.evidence,
        }


@dataclass(frozen=True, slots=True)
class ModeChangedEvent:
    """The fleet mode changed; the driver must publish the new state at once."""

    transition: ModeTransition
    message: str
    kind: str = "mode_changed"

    def to_dict(self) -> JsonDict:
        """JSON-able form."""
        return {"kind": self.kind, "message": self.message, **self.transition.to_dict()}


@dataclass(frozen=True, slots=True)
class IncidentEvent:
    """One incident state change: exactly what a notifier turns into one message.

    `revision` grows with every event of an incident, so (incident_id, revision) is a
    unique delivery key for deduplication.
    """

    incident_id: str
    state: IncidentState
    revision: int
    at_s: float
    opened_at_s: float
    detector: str
    severity: Severity
    subject: str
    summary: str
    mode_before: str
    mode_after: str
    resume_stage_pct: int
    evidence: JsonDict = field(default_factory=dict)
    kind: str = "incident"

    @property
    def dedup_key(self) -> str:
        """`incident_id:revision:state`."""
        return f"{self.incident_id}:{self.revision}:{self.state.value}"

    def to_dict(self) -> JsonDict:
        """JSON-able form."""
        return {
            "kind": self.kind,
            "incident_id": self.incident_id,
            "state": self.state.value,
            "revision": self.revision,
            "at_s": self.at_s,
            "opened_at_s": self.opened_at_s,
            "detector": self.detector,
            "severity": self.severity.value,
            "subject": self.subject,
            "summary": self.summary,
            "mode_before": self.mode_before,
            "mode_after": self.mode_after,
            "resume_stage_pct": self.resume_stage_pct,
            "evidence": self.evidence,
        }


GuardEvent = VerdictEvent | BreakerEvent | ModeChangedEvent | IncidentEvent


def incident_line(event: IncidentEvent) -> str:
    """What an operator's log says of an incident state change, once it is stored (control
    characters written out: subjects and summaries carry text clients and alerts chose)."""
    return visible(f"incident {event.incident_id} {event.state.value}: {event.summary}")


def log_line(event: GuardEvent) -> tuple[bool, str] | None:
    """What an operator's log says of an event, and whether it is a warning (a switch,
    a trip, a demotion: the fleet routes differently); None for nothing worth a line. The
    service logged none of them, so its log never told that a target was demoted.

    None for an incident: the guard's event carries its in-memory id (the audit id is
    assigned when it is stored) and may not be stored at all (already announced), and
    commands and adoptions change incidents too; `EventPersister` logs each one it stores
    (`incident_line`), with the audit id used everywhere else. Control characters are
    written out (a newline in an alert's label forged a log line)."""
    found = _log_line(event)
    return None if found is None else (found[0], visible(found[1]))


def _log_line(event: GuardEvent) -> tuple[bool, str] | None:
    if isinstance(event, ModeChangedEvent):
        t = event.transition
        return True, f"fleet mode {t.from_mode} -> {t.to_mode} ({t.kind.value}): {t.reason}"
    if isinstance(event, BreakerEvent):
        return event.signal == "trip", f"guard breaker {event.signal}: {event.reason}"
    if isinstance(event, IncidentEvent):
        return None
    v = event.verdict
    if event.phase is VerdictPhase.ONCE:
        line = f"guard {v.detector} {v.action.value}s {v.subject}: {v.summary}"
        return v.action is Action.DEMOTE, line
    if event.phase is VerdictPhase.RAISED:
        return True, f"guard {v.detector} on {v.subject}: {v.summary}"
    return False, f"guard {v.detector} on {v.subject}: {v.summary}"
