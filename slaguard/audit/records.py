"""What the core hands the audit line: plain frozen records, no I/O, no clock reads.

The scheduler builds a `DecisionRecord` per routing decision and an `OutcomeRecord` when
the request finishes; the guard builds `ModeChangeRecord`/`IncidentRecord`; the weight
fitter builds `WeightVersionRecord`. Times are unix seconds (`*_s`), stored as UTC
timestamps. Values are checked here so a bad record fails at its producer, not in the
background writer minutes later.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypedDict

PriorityName = Literal["high", "normal", "low"]
PolicyArm = Literal["round_robin", "learned"]
DecisionOutcome = Literal["routed", "no_capacity", "degraded", "spilled"]
RequestStatus = Literal["ok", "failed", "rejected", "timeout", "client_error", "cancelled"]

PRIORITIES: frozenset[str] = frozenset({"high", "normal", "low"})
POLICY_ARMS: frozenset[str] = frozenset({"round_robin", "learned"})
DECISION_OUTCOMES: frozenset[str] = frozenset({"routed", "no_capacity", "degraded", "spilled"})
REQUEST_STATUSES: frozenset[str] = frozenset(
    {"ok", "failed", "rejected", "timeout", "client_error", "cancelled"}
)
UNJUDGED_STATUSES: frozenset[str] = frozenset({"client_error"})
"""Requests no SLA judges (`sla_met` None): the client's mistake, no card's slowness. A
`cancelled` one (the client left before the end of the answer) is judged only on what
came before it left: see `slaguard.service.pending.sla_met`."""

MAX_ID_LENGTH = 128
"""Request and target ids are stored as VARCHAR(128)."""


class CandidateScore(TypedDict, total=False):
    """One eligible candidate as the scheduler explains it (`scheduler.explain`)."""

    target: str
    card: str
    components: dict[str, float]
    """Component scores: compute, interconnect, memory, load, jitter."""
    score: float
    """The weighted sum the router compared."""
    v_h_gb: float
    v_peak_gb: float
    limit_gb: float


class RejectedTarget(TypedDict):
    """A candidate that was not eligible, and why (human words)."""

    target: str
    reason: str


class ExplanationDict(TypedDict, total=False):
    """The keys `audit explain` renders; any other key is kept and shown as JSON."""

    policy: str
    weights: dict[str, float]
    weights_version: str
    candidates: list[CandidateScore]
    rejected: list[RejectedTarget]
    prefiltered_out: int
    chosen: str | None
    spill: dict[str, Any] | None
    degraded_from: str | None
    notes: list[str]


class ExplanationSource(Protocol):
    """An explanation kept in the producer's own form. `enqueue()` snapshots it: the
    scheduler's `Explanation` as raw arrays (rendered in the writer process by the same
    code as its `to_dict()`), any other object through `to_dict()`; so the stored text is
    what the router saw at decision time."""

    def to_dict(self) -> dict[str, Any]: ...


def _check_choice(name: str, value: str, allowed: frozenset[str]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {sorted(allowed)}, got {value!r}")


def check_id(name: str, value: str) -> None:
    if not value or len(value) > MAX_ID_LENGTH:
        raise ValueError(f"{name} must be 1..{MAX_ID_LENGTH} characters, got {value!r}")


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """One routing decision with everything a postmortem needs to replay its reasoning.

    `target_id`/`card_type` are None exactly when `outcome == "no_capacity"`.
    `explanation` is a JSON-able mapping (keys: `ExplanationDict`) or an object with
    `to_dict()` (the scheduler's `Explanation`), serialized when the record is enqueued.
    """

    request_id: str
    decided_at_s: float
    model_id: str
    priority: PriorityName
    prompt_tokens: int
    max_new_tokens: int
    deadline_s: float
    policy_arm: PolicyArm
    fleet_mode: str
    outcome: DecisionOutcome
    target_id: str | None
    card_type: str | None
    explanation: Mapping[str, Any] | ExplanationSource
    weights_version: str
    config_hash: str
    decision_latency_s: float

    def __post_init__(self) -> None:
        check_id("request_id", self.request_id)
        _check_choice("priority", self.priority, PRIORITIES)
        _check_choice("policy_arm", self.policy_arm, POLICY_ARMS)
        _check_choice("outcome", self.outcome, DECISION_OUTCOMES)
        if (self.target_id is None) != (self.outcome == "no_capacity"):
            raise ValueError(
                f"{self.request_id}: target_id must be None exactly when outcome is "
                f"'no_capacity' (outcome={self.outcome!r}, target_id={self.target_id!r})"
            )
        if self.prompt_tokens < 0 or self.max_new_tokens < 0:
            raise ValueError(f"{self.request_id}: token counts must be >= 0")


@dataclass(frozen=True, slots=True)
class OutcomeRecord:
    """How the request went, joined to its decision by `request_id`.

    Latencies are None when the request never produced a token (rejected, failed early);
    `sla_met` is None for a request no SLA judges (`UNJUDGED_STATUSES`, and a `cancelled`
    one whose client left before both its first token and its deadline).
    """

    request_id: str
    finished_at_s: float
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    status: RequestStatus
    sla_met: bool | None

    def __post_init__(self) -> None:
        check_id("request_id", self.request_id)
        _check_choice("status", self.status, REQUEST_STATUSES)


@dataclass(frozen=True, slots=True)
class ModeChangeRecord:
    """A fleet mode switch (`from_mode` -> `to_mode`, FleetMode labels like `rollout(10)`)."""

    at_s: float
    from_mode: str
    to_mode: str
    reason: str
    actor: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    incident_id: int | None = None


@dataclass(frozen=True, slots=True)
class IncidentRecord:
    """A detector's finding; `resolved_at_s` is None while it is open.

    `slack_channel` + `slack_ts` identify the incident's Slack thread once notified.
    """

    opened_at_s: float
    detector: str
    severity: str
    subject: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    resolved_at_s: float | None = None
    notification_state: str = "pending"
    slack_channel: str | None = None
    slack_ts: str | None = None


@dataclass(frozen=True, slots=True)
class WeightVersionRecord:
    """One version of the router's component weights, as refitted (hourly)."""

    version: str
    at_s: float
    weights: Mapping[str, float]


AuditRecord = DecisionRecord | OutcomeRecord
"""What the background writer accepts."""
