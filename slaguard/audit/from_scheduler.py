"""Audit rows from the scheduler's objects: the one place that maps a Decision to a row."""

from __future__ import annotations

from typing import Any

from slaguard.audit.lines import DecisionHeader
from slaguard.audit.records import DecisionRecord, check_id
from slaguard.fleet.fleet import Target
from slaguard.scheduler.explain import Decision, Explanation


def decision_head(
    decision: Decision,
    *,
    decided_at_s: float,
    fleet_mode: str,
    config_hash: str,
    latency_s: float,
    served_by: Target | None = None,
) -> tuple[Any, ...]:
    """The row's fields other than the explanation, in `lines.DecisionHeader` order;
    `served_by` overrides the target (gateway retries). `AuditWriter.enqueue_decision`
    journals it with the explanation; `record_from_head` makes a `DecisionRecord` of it."""
    req = decision.request
    check_id("request_id", req.request_id)
    target = served_by if served_by is not None else decision.target
    # `_value_` is the member's value (what `.value` returns through a slower property).
    return (
        req.request_id, decided_at_s, req.model_id, req.priority._value_, req.prompt_tokens,
        req.max_new_tokens, req.deadline_s, decision.arm._value_, fleet_mode,
        decision.outcome._value_, None if target is None else target.id,
        None if target is None else target.card.id, decision.explanation.weights_version,
        config_hash, latency_s,
    )  # fmt: skip


def record_from_head(head: tuple[Any, ...], explanation: Explanation) -> DecisionRecord:
    """The `DecisionRecord` of a `decision_head` (validated like any record)."""
    fields = dict(zip(DecisionHeader.__struct_fields__, head, strict=True))
    return DecisionRecord(**fields, explanation=explanation)
