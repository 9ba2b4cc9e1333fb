"""Postmortem queries: plain functions over an engine, answers as pandas DataFrames.

Aggregation runs in the database (counts, and on PostgreSQL the TTFT percentiles via
`percentile_cont`, so an hour of a 1M-row table answers in well under a second); SQLite
has no percentile aggregate, so its TTFT quantiles are computed in pandas from the
window's rows with the same linear interpolation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd  # type: ignore[import-untyped]
from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Select,
    SQLColumnExpression,
    and_,
    case,
    delete,
    exists,
    func,
    or_,
    select,
    text,
)

from slaguard.audit.models import Decision, Incident, ModeChange, Outcome
from slaguard.audit.store import StoredIncident, UnknownIncidentError, get_incident
from slaguard.fleet.fleet import Fleet

QUERY_WORK_MEM = "64MB"
"""PostgreSQL sort memory for one postmortem query (set per transaction)."""


class UnknownRequestError(LookupError):
    """No decision with that request id."""


@dataclass(frozen=True, slots=True)
class TargetCapacity:
    """What a target can do, for decision share vs capacity share (BF16 TFLOPS)."""

    model_id: str
    tflops: float
    card_id: str


def fleet_capacity(fleet: Fleet) -> dict[str, TargetCapacity]:
    """Capacity per target id from a fleet definition."""
    return {t.id: TargetCapacity(t.model.id, t.tflops, t.card.id) for t in fleet.targets}


def _window(since: datetime, until: datetime) -> list[ColumnElement[bool]]:
    if until <= since:
        raise ValueError(f"empty time range: --since {since} is not before --until {until}")
    return [Decision.decided_at >= since, Decision.decided_at < until]


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
        .where(*_window(since, until))
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
        return pd.read_sql(stmt, conn)


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


def _grouped_stats(
    conn: Connection,
    since: datetime,
    until: datetime,
    keys: Sequence[SQLColumnExpression[Any]],
) -> pd.DataFrame:
    """Per group: decisions, outcomes, SLA violations, TTFT p50/p99 (one indexed scan)."""
    counts: Select[Any] = (
        select(
            *keys,
            func.count().label("decisions"),
            func.count(Outcome.request_id).label("outcomes"),
            func.coalesce(func.sum(case((Outcome.sla_met.is_(False), 1), else_=0)), 0).label(
                "sla_violations"
            ),
        )
        .select_from(Decision)
        .outerjoin(Outcome, Outcome.request_id == Decision.request_id)
        .where(*_window(since, until))
        .group_by(*keys)
    )
    if conn.dialect.name == "postgresql":
        # The per-group sorts of an hour (~40k rows) spill to disk at the default 4 MB.
        conn.execute(text(f"SET LOCAL work_mem = '{QUERY_WORK_MEM}'"))
        counts = counts.add_columns(
            func.percentile_cont(0.5).within_group(Outcome.ttft_s).label("ttft_p50_s"),
            func.percentile_cont(0.99).within_group(Outcome.ttft_s).label("ttft_p99_s"),
        )
        frame = pd.read_sql(counts, conn)
    else:
        frame = pd.read_sql(counts, conn)
        names = list(frame.columns[: len(keys)])
        ttft = pd.read_sql(
            select(*keys, Outcome.ttft_s)
            .join(Outcome, Outcome.request_id == Decision.request_id)
            .where(*_window(since, until), Outcome.ttft_s.is_not(None)),
            conn,
        )
        if ttft.empty:  # no outcomes in the window: pandas cannot take quantiles of nothing
            frame["ttft_p50_s"] = frame["ttft_p99_s"] = float("nan")
        else:
            by_group = ttft.groupby(names, dropna=False)["ttft_s"]
            quantiles = by_group.quantile([0.5, 0.99]).unstack()
            quantiles.columns = ["ttft_p50_s", "ttft_p99_s"]
            frame = frame.merge(quantiles.reset_index(), on=names, how="left")
    frame["sla_violation_rate"] = frame["sla_violations"] / frame["outcomes"].where(
        frame["outcomes"] > 0
    )
    return frame


def _with_shares(
    frame: pd.DataFrame, share_within: list[str], capacity: Mapping[str, TargetCapacity]
) -> pd.DataFrame:
    """Both shares of the same whole, the requests for the row's model: decision share of
    its decisions, capacity share of the TFLOPS of the fleet's targets serving that model.
    A target serving another model (a degraded request's) holds none of that capacity: 0,
    not its share among its own model's targets (a 70b group's shares summed to 1.98)."""
    totals = frame.groupby(share_within, dropna=False)["decisions"].transform("sum")
    frame["decision_share"] = frame["decisions"] / totals
    model_tflops: dict[str, float] = {}
    for cap in capacity.values():
        model_tflops[cap.model_id] = model_tflops.get(cap.model_id, 0.0) + cap.tflops
    # a row of a target the fleet file puts on another card (moved since) has no share
    frame["capacity_share"] = [
        float("nan")
        if t not in capacity or capacity[t].card_id != card
        else capacity[t].tflops / model_tflops[model]
        if capacity[t].model_id == model
        else 0.0
        for model, t, card in zip(
            frame["model_id"], frame["target_id"], frame["card_type"], strict=True
        )
    ]
    return frame


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
        frame = _grouped_stats(conn, since, until, keys)
    frame = _with_shares(frame, ["policy_arm", "model_id"], capacity or {})
    order = [
        "policy_arm", "model_id", "target_id", "card_type", "decisions", "decision_share",
        "capacity_share", "ttft_p50_s", "ttft_p99_s", "sla_violation_rate", "outcomes",
    ]  # fmt: skip
    return frame[order].sort_values(["policy_arm", "model_id", "target_id"], ignore_index=True)


PHASES = ("before", "during", "after")


@dataclass(frozen=True)
class IncidentTimeline:
    """An incident with what happened around it."""

    incident: StoredIncident
    phases: dict[str, tuple[datetime, datetime]]
    mode_changes: pd.DataFrame
    per_target: pd.DataFrame
    """phase, model, target, card: decisions, decision and capacity share, TTFT p50/p99,
    SLA violation rate."""

    @property
    def window(self) -> tuple[datetime, datetime]:
        return self.phases["before"][0], self.phases["after"][1]


GUARD_INCIDENT_PREFIX = "inc-"
"""The guard's own incident ids (`inc-<second>-<n>`), which a simulate report's trips name."""


def incident_with_guard_id(engine: Engine, guard_id: str) -> int:
    """The audit id of the incident a simulated run stored for the guard's `guard_id` (in
    its `evidence.incident`): the report names the guard's id, the database its own."""
    with engine.connect() as conn:
        rows = conn.execute(select(Incident.id, Incident.evidence).order_by(Incident.id)).all()
    for incident_id, evidence in rows:
        if isinstance(evidence, dict) and evidence.get("incident") == guard_id:
            return int(incident_id)
    raise UnknownIncidentError(
        f"no incident with guard id {guard_id} (a simulate report's trips name these; "
        "`slaguard incidents` lists the audit ids)"
    )


def incident_timeline(
    engine: Engine,
    incident_id: int,
    *,
    before: timedelta = timedelta(minutes=30),
    after: timedelta = timedelta(minutes=30),
    now: datetime,
    capacity: Mapping[str, TargetCapacity] | None = None,
) -> IncidentTimeline:
    """Detector evidence, mode switches and per-target stats before/during/after."""
    stored = get_incident(engine, incident_id)
    rec = stored.record
    opened = datetime.fromtimestamp(rec.opened_at_s, UTC)
    resolved = now if rec.resolved_at_s is None else datetime.fromtimestamp(rec.resolved_at_s, UTC)
    # an open incident lasts until now and has no "after" yet (it was 30 minutes of future)
    later = resolved if rec.resolved_at_s is None else resolved + after
    phases = {
        "before": (opened - before, opened),
        "during": (opened, resolved),
        "after": (resolved, later),
    }
    start, end = phases["before"][0], phases["after"][1]
    phase = case(
        (Decision.decided_at < opened, "before"),
        (Decision.decided_at < resolved, "during"),
        else_="after",
    ).label("phase")
    keys = [phase, Decision.model_id, Decision.target_id, Decision.card_type]
    with engine.connect() as conn:
        per_target = _grouped_stats(conn, start, end, keys)
        changes = pd.read_sql(
            select(
                ModeChange.id,
                ModeChange.at,
                ModeChange.from_mode,
                ModeChange.to_mode,
                ModeChange.reason,
                ModeChange.actor,
                ModeChange.incident_id,
            )
            .where(
                or_(
                    ModeChange.incident_id == incident_id,
                    ModeChange.at.between(start, end),
                )
            )
            .order_by(ModeChange.at),
            conn,
            dtype={"incident_id": "Int64"},  # nullable: float64 wrote incident 1 as 1.0
        )
    per_target = _with_shares(per_target, ["phase", "model_id"], capacity or {})
    per_target["phase"] = pd.Categorical(per_target["phase"], categories=PHASES, ordered=True)
    per_target = per_target.sort_values(["phase", "model_id", "target_id"], ignore_index=True)
    cols = ["phase", "model_id", "target_id", "card_type", "decisions", "decision_share",
            "capacity_share", "ttft_p50_s", "ttft_p99_s", "sla_violation_rate"]  # fmt: skip
    return IncidentTimeline(stored, phases, changes, per_target[cols])


def ttft_p99_series(
    engine: Engine, since: datetime, until: datetime, bucket: str = "1min"
) -> pd.DataFrame:
    """TTFT p99 per target per time bucket (rows: bucket start, columns: target ids)."""
    with engine.connect() as conn:
        rows = pd.read_sql(
            select(Decision.decided_at, Decision.target_id, Outcome.ttft_s)
            .join(Outcome, Outcome.request_id == Decision.request_id)
            .where(*_window(since, until), Outcome.ttft_s.is_not(None)),
            conn,
        )
    if rows.empty:
        return pd.DataFrame()
    grouped = rows.groupby([pd.Grouper(key="decided_at", freq=bucket), "target_id"])
    return grouped["ttft_s"].quantile(0.99).unstack("target_id").sort_index()


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
