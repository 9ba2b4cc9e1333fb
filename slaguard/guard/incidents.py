"""Incidents: one per fault episode, three kinds of messages, never one per evaluation.

Opened when the breaker trips; updated when another detector or subject joins, when the
fault clears while the fleet waits for a resume, or when it comes back; resolved when the
fleet returns to the learned policy (automatically or by a resume) or a human holds it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slaguard.guard.events import IncidentEvent, IncidentState
from slaguard.guard.verdicts import JsonDict, Severity, Verdict


@dataclass(slots=True)
class OpenIncident:
    """The incident in progress."""

    incident_id: str
    opened_at_s: float
    detector: str
    subject: str
    mode_before: str
    mode_after: str
    revision: int = 0
    cleared: bool = False
    seen: set[tuple[str, str]] = field(default_factory=set)


INCIDENT_SEVERITY = Severity.CRITICAL
"""An incident is the whole fleet switched off the learned policy: it pages, and every
message of its thread (updates and the resolution too) says so."""


def _evidence(trips: list[Verdict]) -> JsonDict:
    return {"verdicts": [v.to_dict() for v in trips]}


class IncidentTracker:
    """Turns breaker signals and mode changes into incident events."""

    def __init__(self, prefix: str = "inc", resume_stage_pct: int = 10) -> None:
        self.prefix = prefix
        self.resume_stage_pct = resume_stage_pct
        self.current: OpenIncident | None = None
        self._seq = 0

    def _event(
        self,
        state: IncidentState,
        now_s: float,
        summary: str,
        evidence: JsonDict,
        modes: tuple[str, str] | None = None,
    ) -> IncidentEvent:
        inc = self.current
        assert inc is not None
        before, after = modes if modes is not None else (inc.mode_before, inc.mode_after)
        event = IncidentEvent(
            inc.incident_id,
            state,
            inc.revision,
            now_s,
            inc.opened_at_s,
            inc.detector,
            INCIDENT_SEVERITY,
            inc.subject,
            summary,
            before,
            after,
            self.resume_stage_pct,
            evidence,
        )
        inc.revision += 1
        return event

    def tripped(
        self, now_s: float, trips: list[Verdict], mode_before: str, mode_after: str
    ) -> IncidentEvent:
        """The breaker tripped: open an incident, or update the open one (fault is back)."""
        first = trips[0]
        keys = {(v.detector, v.subject) for v in trips}
        if self.current is None:
            self._seq += 1
            self.current = OpenIncident(
                f"{self.prefix}-{int(now_s)}-{self._seq}",
                now_s,
                first.detector,
                first.subject,
                mode_before,
                mode_after,
                seen=keys,
            )
            summary = f"{first.summary}; fleet {mode_before} -> {mode_after}"
            return self._event(IncidentState.OPENED, now_s, summary, _evidence(trips))
        self.current.cleared = False
        self.current.seen |= keys
        summary = f"fault is back: {first.summary}"
        modes = (mode_before, mode_after)  # this trip's switch, often none: not the opening's
        return self._event(IncidentState.UPDATED, now_s, summary, _evidence(trips), modes)

    def joined(self, now_s: float, trips: list[Verdict], mode: str) -> IncidentEvent | None:
        """Update once when a detector/subject not yet in the open incident trips too (the
        fleet stays on `mode`: no switch to report)."""
        inc = self.current
        if inc is None:
            return None
        new = [v for v in trips if (v.detector, v.subject) not in inc.seen]
        if not new:
            return None
        inc.seen |= {(v.detector, v.subject) for v in new}
        summary = "also: " + "; ".join(v.summary for v in new)
        return self._event(IncidentState.UPDATED, now_s, summary, _evidence(new), (mode, mode))

    def cleared(self, now_s: float, mode: str, how_to_resume: str) -> IncidentEvent | None:
        """The breaker cleared but the fleet stays on round-robin for now."""
        inc = self.current
        if inc is None or inc.cleared:
            return None
        inc.cleared = True
        summary = f"detectors are back to normal; fleet stays on {mode}: {how_to_resume}"
        return self._event(IncidentState.UPDATED, now_s, summary, {}, (mode, mode))

    def alert_resolved(
        self, now_s: float, detector: str, alertnames: set[str], mode: str
    ) -> IncidentEvent | None:
        """The alerts that opened the incident (detector `detector`) resolved: said once
        in its thread, since no breaker clears an alert's rollback; the fleet stays on
        round-robin until someone resumes."""
        inc = self.current
        if inc is None or inc.cleared or inc.detector != detector:
            return None
        names = alertnames & set(inc.subject.split(", "))
        if not names:
            return None
        inc.cleared = True
        summary = f"{', '.join(sorted(names))} resolved; the fleet stays on {mode} until resumed"
        return self._event(IncidentState.UPDATED, now_s, summary, {}, (mode, mode))

    def resolved(
        self, now_s: float, reason: str, mode_before: str, mode_after: str
    ) -> IncidentEvent | None:
        """The episode is over (fleet back on the learned policy, or held by a human)."""
        if self.current is None:
            return None
        event = self._event(IncidentState.RESOLVED, now_s, reason, {}, (mode_before, mode_after))
        self.current = None
        return event
