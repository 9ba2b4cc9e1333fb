"""Detector output: verdicts that carry the numbers they saw and the thresholds they used."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

JsonDict = dict[str, Any]


class Action(StrEnum):
    """What a verdict asks for."""

    TRIP = "trip"
    """Switch the whole fleet to round-robin (through the breaker)."""
    DEMOTE = "demote"
    """Demote one target to low-priority / fallback traffic (the router's jitter term)."""
    RESTORE = "restore"
    """Lift a demotion."""


class Status(StrEnum):
    """A detector's state after one evaluation."""

    OK = "ok"
    ANOMALOUS = "anomalous"
    INSUFFICIENT = "insufficient"
    """Too little data to judge: neither good nor bad (thin data never trips)."""


class Severity(StrEnum):
    """How loud the verdict is."""

    WARNING = "warning"
    CRITICAL = "critical"


@dataclass(frozen=True, slots=True)
class Verdict:
    """One detector's finding about one subject, with its evidence as a JSON-able dict."""

    detector: str
    action: Action
    subject: str
    severity: Severity
    summary: str
    at_s: float
    evidence: JsonDict = field(default_factory=dict)

    def to_dict(self) -> JsonDict:
        """JSON-able form for the audit line and notifications."""
        return {
            "detector": self.detector,
            "action": self.action.value,
            "subject": self.subject,
            "severity": self.severity.value,
            "summary": self.summary,
            "at_s": self.at_s,
            "evidence": self.evidence,
        }


@dataclass(frozen=True, slots=True)
class DetectorReport:
    """One evaluation of one detector: its status and any verdicts."""

    detector: str
    status: Status
    verdicts: tuple[Verdict, ...] = ()
    evidence: JsonDict = field(default_factory=dict)
    score: float | None = None
    """The headline number the detector compares with `threshold` (published as
    `slaguard_detector_score`); None when it judged nothing."""
    threshold: float | None = None

    @property
    def trips(self) -> tuple[Verdict, ...]:
        """The verdicts that ask the breaker to trip the fleet."""
        return tuple(v for v in self.verdicts if v.action is Action.TRIP)


def finite_or_none(value: float) -> float | None:
    """Evidence numbers stay JSON-able: NaN and infinities become None, never 0."""
    return value if value == value and value not in (float("inf"), float("-inf")) else None
