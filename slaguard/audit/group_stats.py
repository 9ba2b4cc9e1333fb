"""Per-group decision statistics and decision vs capacity shares, which `summary` and the
incident timeline both report.

Aggregation runs in the database (counts, and on PostgreSQL the TTFT percentiles via
`percentile_cont`, so an hour of a 1M-row table answers in well under a second); SQLite
has no percentile aggregate, so its TTFT quantiles are computed in pandas from the
window's rows with the same linear interpolation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pandas as pd  # type: ignore[import-untyped]
from sqlalchemy import (
    ColumnElement,
    Connection,
    Select,
    SQLColumnExpression,
    case,
    func,
    select,
    text,
)

from slaguard.audit.frames import read_frame
from slaguard.audit.models import Decision, Outcome
from slaguard.fleet.fleet import Fleet

QUERY_WORK_MEM = "64MB"
"""PostgreSQL sort memory for one postmortem query (set per transaction)."""


@dataclass(frozen=True, slots=True)
class TargetCapacity:
    """What a target can do, for decision share vs capacity share (BF16 TFLOPS)."""

    model_id: str
    tflops: float
    card_id: str


def fleet_capacity(fleet: Fleet) -> dict[str, TargetCapacity]:
    """Capacity per target id from a fleet definition."""
    return {t.id: TargetCapacity(t.model.id, t.tflops, t.card.id) for t in fleet.targets}


def decided_between(since: datetime, until: datetime) -> list[ColumnElement[bool]]:
    """The filter for decisions in [since, until); an empty range is refused."""
    if until <= since:
        raise ValueError(f"empty time range: --since {since} is not before --until {until}")
    return [Decision.decided_at >= since, Decision.decided_at < until]


def grouped_stats(
    conn: Connection,
    since: datetime,
    until: datetime,
    keys: Sequence[SQLColumnExpression[Any]],
) -> pd.DataFrame:
    """Per group: decisions, outcomes an SLA judges (a `client_error` is none), SLA
    violations, TTFT p50/p99 (one indexed scan)."""
    counts: Select[Any] = (
        select(
            *keys,
            func.count().label("decisions"),
            func.count(Outcome.sla_met).label("outcomes"),
            func.coalesce(func.sum(case((Outcome.sla_met.is_(False), 1), else_=0)), 0).label(
                "sla_violations"
            ),
        )
        .select_from(Decision)
        .outerjoin(Outcome, Outcome.request_id == Decision.request_id)
        .where(*decided_between(since, until))
        .group_by(*keys)
    )
    if conn.dialect.name == "postgresql":
        # The per-group sorts of an hour (~40k rows) spill to disk at the default 4 MB.
        conn.execute(text(f"SET LOCAL work_mem = '{QUERY_WORK_MEM}'"))
        counts = counts.add_columns(
            func.percentile_cont(0.5).within_group(Outcome.ttft_s).label("ttft_p50_s"),
            func.percentile_cont(0.99).within_group(Outcome.ttft_s).label("ttft_p99_s"),
        )
        frame = read_frame(counts, conn)
    else:
        frame = read_frame(counts, conn)
        names = list(frame.columns[: len(keys)])
        ttft = pd.read_sql(
            select(*keys, Outcome.ttft_s)
            .join(Outcome, Outcome.request_id == Decision.request_id)
            .where(*decided_between(since, until), Outcome.ttft_s.is_not(None)),
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


def with_shares(
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
