"""Postmortem queries: plain functions over an engine, answers as pandas DataFrames.

The per-group statistics behind `summary` are in `group_stats`; an incident's timeline
is in `incident_timeline`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pandas as pd  # type: ignore[import-untyped]
from sqlalchemy import Engine, and_, delete, exists, func, select

from slaguard.audit.frames import read_frame
from slaguard.audit.group_stats import TargetCapacity, decided_between, grouped_stats, with_shares
from slaguard.audit.models import Decision, Outcome


class UnknownRequestError(LookupError):
    """No decision with that request id."""


def decisions(
    engine: Engine,
    since: datetime,
    until: datetime,
    *,
    target: str | None = None,
    model: str | None = None,
    policy: str | None = None,
    mode: str | None = None,
    limit: int | None = None,
) -> pd.DataFrame:
    """Decisions in [since, until) with their outcomes, oldest first (ties by request id)."""
    stmt = (
        select(
            Decision.request_id,
            Decision.decided_at,
            Decision.model_id,
            Decision.priority,
            Decision.policy_arm,
            Decision.fleet_mode,
            Decision.outcome,
            Decision.target_id,
            Decision.card_type,
            Decision.prompt_tokens,
            Decision.max_new_tokens,
            Decision.deadline_s,
            Decision.decision_latency_s,
            Decision.weights_version,
            Outcome.ttft_s,
            Outcome.tpot_s,
            Outcome.e2e_s,
            Outcome.status,
            Outcome.sla_met,
        )
        .outerjoin(Outcome, Outcome.request_id == Decision.request_id)
        .where(*decided_between(since, until))
        # retried requests share a tick's timestamp: without the id, --limit cut ties in
        # the backend's own order (SQLite and PostgreSQL differed); the decided_at index
        # still serves the range, each tie sorted on its own
        .order_by(Decision.decided_at, Decision.request_id)
    )
    filters = {
        Decision.target_id: target, Decision.model_id: model,
        Decision.policy_arm: policy, Decision.fleet_mode: mode,
    }  # fmt: skip
    for col, value in filters.items():
        if value is not None:
            stmt = stmt.where(col == value)
    if limit:
        stmt = stmt.limit(limit)
    with engine.connect() as conn:
        return read_frame(stmt, conn)


@dataclass(frozen=True)
class DecisionExplanation:
    """Why one request went where it went."""

    decision: dict[str, Any]
    outcome: dict[str, Any] | None
    candidates: pd.DataFrame
    rejected: pd.DataFrame
    weights: dict[str, float]
    other: dict[str, Any]
    """Explanation keys beyond candidates/rejected/weights (spill, notes, ...)."""


def explain(engine: Engine, request_id: str) -> DecisionExplanation:
    """The stored decision, its candidates' component scores and the rejected targets."""
    with engine.connect() as conn:
        row = conn.execute(
            select(Decision.__table__).where(Decision.request_id == request_id)
        ).one_or_none()
        if row is None:
            raise UnknownRequestError(f"no decision with request id {request_id!r}")
        out = conn.execute(
            select(Outcome.__table__).where(Outcome.request_id == request_id)
        ).one_or_none()
    decision = dict(row._mapping)
    expl: dict[str, Any] = dict(decision.pop("explanation") or {})
    candidates = pd.json_normalize(expl.pop("candidates", []) or [])
    candidates.columns = [str(c).removeprefix("components.") for c in candidates.columns]
    if "score" in candidates.columns:
        candidates = candidates.sort_values("score", ascending=False, ignore_index=True)
    rejected = pd.DataFrame(expl.pop("rejected", []) or [], columns=["target", "reason"])
    weights = dict(expl.pop("weights", {}) or {})
    return DecisionExplanation(
        decision=decision,
        outcome=None if out is None else dict(out._mapping),
        candidates=candidates,
        rejected=rejected,
        weights=weights,
        other=expl,
    )


def summary(
    engine: Engine,
    since: datetime,
    until: datetime,
    capacity: Mapping[str, TargetCapacity] | None = None,
) -> pd.DataFrame:
    """Per policy arm, model, target and card type: decision share (within arm and model)
    vs capacity share (of the model's targets' TFLOPS), TTFT p50/p99, SLA violation rate."""
    keys = [Decision.policy_arm, Decision.model_id, Decision.target_id, Decision.card_type]
    with engine.connect() as conn:
        frame = grouped_stats(conn, since, until, keys)
    frame = with_shares(frame, ["policy_arm", "model_id"], capacity or {})
    order = [
        "policy_arm", "model_id", "target_id", "card_type", "decisions", "decision_share",
        "capacity_share", "ttft_p50_s", "ttft_p99_s", "sla_violation_rate", "outcomes",
    ]  # fmt: skip
    return frame[order].sort_values(["policy_arm", "model_id", "target_id"], ignore_index=True)


def ttft_p99_series(
    engine: Engine, since: datetime, until: datetime, bucket: str = "1min"
) -> pd.DataFrame:
    """TTFT p99 per target per time bucket (columns: target ids). The rows are every
    bucket from the first to the last with data, labelled by its start, with the bucket
    width as the index's `freq`: a plot draws each value over the span it covers."""
    with engine.connect() as conn:
        rows = pd.read_sql(
            select(Decision.decided_at, Decision.target_id, Outcome.ttft_s)
            .join(Outcome, Outcome.request_id == Decision.request_id)
            .where(*decided_between(since, until), Outcome.ttft_s.is_not(None)),
            conn,
        )
    if rows.empty:
        return pd.DataFrame()
    grouped = rows.groupby([pd.Grouper(key="decided_at", freq=bucket), "target_id"])
    p99 = grouped["ttft_s"].quantile(0.99).unstack("target_id").sort_index()
    return p99.reindex(pd.date_range(p99.index[0], p99.index[-1], freq=bucket))


@dataclass(frozen=True, slots=True)
class PruneResult:
    """Rows removed (or that would be, on a dry run) by retention."""

    cutoff: datetime
    decisions: int
    outcomes: int
    dry_run: bool


def prune(engine: Engine, cutoff: datetime, *, dry_run: bool = False) -> PruneResult:
    """Delete decisions older than `cutoff` and their outcomes (and older outcomes).

    Mode changes, incidents and weight versions are kept: they are small and are what a
    postmortem starts from."""
    # Two filters, not `IN (old ids) OR finished_at < cutoff`: PostgreSQL runs that OR as a
    # subplan re-scanning the old ids per outcome once they outgrow work_mem (300k rows:
    # still running after 10 minutes); EXISTS is a semi-join (seconds).
    of_old_decision = exists().where(
        Decision.request_id == Outcome.request_id, Decision.decided_at < cutoff
    )
    late = and_(Outcome.finished_at < cutoff, ~of_old_decision)
    with engine.begin() as conn:
        if dry_run:
            n_out = sum(
                conn.execute(select(func.count()).select_from(Outcome).where(w)).scalar_one()
                for w in (of_old_decision, late)
            )
            n_dec = conn.execute(
                select(func.count()).select_from(Decision).where(Decision.decided_at < cutoff)
            ).scalar_one()
        else:
            n_out = conn.execute(delete(Outcome).where(of_old_decision)).rowcount
            n_out += conn.execute(delete(Outcome).where(Outcome.finished_at < cutoff)).rowcount
            n_dec = conn.execute(delete(Decision).where(Decision.decided_at < cutoff)).rowcount
    return PruneResult(cutoff, int(n_dec), int(n_out), dry_run)
