"""Audit records from the scheduler's objects: the one place that maps a Decision to a row."""

from __future__ import annotations

from slaguard.audit.records import DecisionRecord
from slaguard.fleet.fleet import Target
from slaguard.scheduler.explain import Decision


def decision_record(
    decision: Decision,
    *,
    decided_at_s: float,
    fleet_mode: str,
    config_hash: str,
    latency_s: float,
    served_by: Target | None = None,
) -> DecisionRecord:
    """The audit row for `decision`; `served_by` overrides the target (gateway retries)."""
    req = decision.request
    target = served_by if served_by is not None else decision.target
    return DecisionRecord(
        request_id=req.request_id,
        decided_at_s=decided_at_s,
        model_id=req.model_id,
        priority=req.priority.value,
        prompt_tokens=req.prompt_tokens,
        max_new_tokens=req.max_new_tokens,
        deadline_s=req.deadline_s,
        policy_arm=decision.arm.value,
        fleet_mode=fleet_mode,
        outcome=decision.outcome.value,
        target_id=None if target is None else target.id,
        card_type=None if target is None else target.card.id,
        explanation=decision.explanation,
        weights_version=decision.explanation.weights_version,
        config_hash=config_hash,
        decision_latency_s=latency_s,
    )
