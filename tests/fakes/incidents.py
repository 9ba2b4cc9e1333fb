"""Incident events for notify tests."""

from __future__ import annotations

from slaguard.guard.events import IncidentEvent, IncidentState
from slaguard.guard.verdicts import Severity


def incident(
    state: IncidentState = IncidentState.OPENED,
    revision: int = 0,
    incident_id: str = "inc-300-1",
    summary: str = "prefix 9f3a has at least 31% of recent traffic",
    subject: str = "prefix:9f3a",
) -> IncidentEvent:
    verdict = {
        "detector": "hot_spot",
        "action": "trip",
        "subject": subject,
        "severity": "critical",
        "summary": summary,
        "at_s": 303.0,
        "evidence": {
            "share": 0.31,
            "trip_share": 0.2,
            "effective_samples": 61.5,
            "counters": 64,
            "top_prefixes": [{"prefix": "9f3a", "share_lower_bound": 0.31}],
        },
    }
    return IncidentEvent(
        incident_id,
        state,
        revision,
        303.0 + revision,
        303.0,
        "hot_spot",
        Severity.CRITICAL,
        subject,
        summary,
        "rollout(10)",
        "round_robin",
        10,
        {"verdicts": [verdict]} if state is IncidentState.OPENED else {},
    )
