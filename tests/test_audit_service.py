"""Postmortem queries give the numbers an independent pandas computation gives, on both
backends (PostgreSQL aggregates in SQL, SQLite partly in pandas)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import BACKENDS
from sqlalchemy import Engine
from sqlalchemy.engine import URL

from slaguard.audit import service
from slaguard.audit.engine import create_audit_engine
from slaguard.audit.group_stats import fleet_capacity
from slaguard.audit.incident_timeline import incident_timeline
from slaguard.audit.migrate import upgrade
from slaguard.audit.records import IncidentRecord, RequestStatus
from slaguard.audit.sample import SICK_TARGET, load_run, synthetic_run
from slaguard.audit.store import open_incident
from slaguard.fleet.fleet import load_fleet
from slaguard.guard.status_rows import arm_sla

START_S = 1_796_000_000.0
RUN = synthetic_run(2000, start_s=START_S, seed=5)
SINCE = datetime.fromtimestamp(START_S, UTC)
UNTIL = SINCE + timedelta(hours=1)
CAPACITY = fleet_capacity(load_fleet())


def expected_frame() -> pd.DataFrame:
    decisions = pd.DataFrame([
        {"request_id": d.request_id, "at": d.decided_at_s, "policy_arm": d.policy_arm,
         "model_id": d.model_id, "target_id": d.target_id} for d in RUN.decisions
    ])  # fmt: skip
    outcomes = pd.DataFrame([
        {"request_id": o.request_id, "ttft_s": o.ttft_s, "sla_met": o.sla_met}
        for o in RUN.outcomes
    ])  # fmt: skip
    return decisions.merge(outcomes, on="request_id")


@pytest.fixture(scope="module", params=BACKENDS)
def loaded(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Engine, int]]:
    tmp: Path = tmp_path_factory.mktemp("svc")
    if request.param == "sqlite":
        engine = create_audit_engine(f"sqlite:///{tmp / 'audit.db'}")
    else:
        url: URL = request.getfixturevalue("pg_url")
        engine = create_audit_engine(url)
    upgrade(engine)
    incident_id = load_run(engine, RUN, tmp / "spill")
    yield engine, incident_id
    engine.dispose()


def test_decisions_filters_and_orders(loaded: tuple[Engine, int]) -> None:
    engine, _ = loaded
    frame = service.decisions(engine, SINCE, UNTIL, target=SICK_TARGET, policy="learned")
    want = [d.request_id for d in RUN.decisions
            if d.target_id == SICK_TARGET and d.policy_arm == "learned"]  # fmt: skip
    assert list(frame["request_id"]) == want
    assert len(want) > 10
    assert frame["decided_at"].is_monotonic_increasing
    assert str(frame["decided_at"].dt.tz) == "UTC"
    held = service.decisions(engine, SINCE, UNTIL, mode="held_round_robin", limit=5)
    assert len(held) == 5
    assert set(held["policy_arm"]) == {"round_robin"}
    with pytest.raises(ValueError, match="empty time range"):
        service.decisions(engine, UNTIL, SINCE)


def test_summary_matches_an_independent_computation(loaded: tuple[Engine, int]) -> None:
    engine, _ = loaded
    got = service.summary(engine, SINCE, UNTIL, CAPACITY)
    exp = expected_frame()
    assert got["decisions"].sum() == len(RUN.decisions)
    for (arm, target), group in exp.dropna(subset=["target_id"]).groupby(
        ["policy_arm", "target_id"]
    ):
        row = got[(got.policy_arm == arm) & (got.target_id == target)].iloc[0]
        ttft = group["ttft_s"].to_numpy()
        assert row["decisions"] == len(group)
        assert row["ttft_p50_s"] == pytest.approx(np.quantile(ttft, 0.5), rel=1e-9)
        assert row["ttft_p99_s"] == pytest.approx(np.quantile(ttft, 0.99), rel=1e-9)
        assert row["sla_violation_rate"] == pytest.approx(1 - group["sla_met"].mean())
    shares = got.groupby(["policy_arm", "model_id"])["decision_share"].sum()
    assert np.allclose(shares.to_numpy(), 1.0)
    h100 = got[got.target_id == "h100-70b-0"].iloc[0]
    assert h100["capacity_share"] == pytest.approx(
        CAPACITY["h100-70b-0"].tflops
        / sum(c.tflops for c in CAPACITY.values() if c.model_id == "llama3.1-70b")
    )
    no_target = got[got.target_id.isna()]
    assert no_target["decisions"].sum() == sum(d.target_id is None for d in RUN.decisions)


def test_incident_timeline_shows_the_sick_target(loaded: tuple[Engine, int]) -> None:
    engine, incident_id = loaded
    tl = incident_timeline(engine, incident_id, now=UNTIL, capacity=CAPACITY)
    assert tl.incident.record.detector == "ttft_zscore"
    assert list(tl.mode_changes["to_mode"]) == ["rollout(50)", "held_round_robin", "rollout(50)"]
    sick = tl.per_target[tl.per_target.target_id == SICK_TARGET].set_index("phase")
    assert list(sick.index) == ["before", "during", "after"]
    assert sick.loc["during", "ttft_p99_s"] > 4 * sick.loc["before", "ttft_p99_s"]
    assert sick.loc["during", "sla_violation_rate"] > 0.5
    opened = RUN.incident.opened_at_s
    resolved = RUN.incident.resolved_at_s
    assert resolved is not None
    during = sum(opened <= d.decided_at_s < resolved for d in RUN.decisions)
    assert tl.per_target.loc[tl.per_target.phase == "during", "decisions"].sum() == during


def test_ttft_series_buckets_per_minute(loaded: tuple[Engine, int]) -> None:
    engine, _ = loaded
    series = service.ttft_p99_series(engine, SINCE, UNTIL)
    # 00:53:20 .. 01:53:20 touches 61 calendar minutes.
    assert len(series) == 61
    assert set(np.diff(series.index.to_numpy()).astype("timedelta64[s]").astype(int)) == {60}
    assert SICK_TARGET in series.columns
    assert series[SICK_TARGET].max() > 3 * series[SICK_TARGET].median()


def test_explain_unknown_request(loaded: tuple[Engine, int]) -> None:
    engine, _ = loaded
    with pytest.raises(service.UnknownRequestError, match="no decision with request id 'nope'"):
        service.explain(engine, "nope")
    expl = service.explain(engine, RUN.decisions[0].request_id)
    assert expl.candidates.iloc[0]["target"] == RUN.decisions[0].target_id
    assert {"compute", "interconnect", "memory", "load", "jitter", "score"} <= set(
        expl.candidates.columns
    )


def test_prune_deletes_by_age_and_dry_run_only_counts(audit_engine: Engine, tmp_path: Path) -> None:
    small = synthetic_run(300, start_s=START_S, seed=9)
    load_run(audit_engine, small, tmp_path / "spill")
    cutoff = SINCE + timedelta(minutes=20)
    old = sum(d.decided_at_s < START_S + 1200 for d in small.decisions)
    dry = service.prune(audit_engine, cutoff, dry_run=True)
    assert (dry.decisions, dry.outcomes, dry.dry_run) == (old, old, True)
    done = service.prune(audit_engine, cutoff)
    assert (done.decisions, done.outcomes) == (old, old)
    left = service.decisions(audit_engine, SINCE, UNTIL)
    assert len(left) == 300 - old
    assert left["decided_at"].min() >= cutoff


def test_an_open_incident_runs_until_now(audit_engine: Engine, tmp_path: Path) -> None:
    load_run(audit_engine, synthetic_run(200, start_s=START_S, seed=2), tmp_path / "spill")
    opened = START_S + 3000
    iid = open_incident(audit_engine, IncidentRecord(opened, "hot_spot", "ticket", "prefix x"))
    now = UNTIL
    tl = incident_timeline(audit_engine, iid, now=now, before=timedelta(minutes=10))
    assert tl.phases["during"] == (datetime.fromtimestamp(opened, UTC), now)
    assert tl.phases["after"] == (now, now), "no future half hour"
    assert set(tl.per_target["phase"]) == {"before", "during"}
    start, end = tl.window
    assert tl.mode_changes["at"].between(start, end).all()  # switches in the window, any cause


def test_decisions_that_share_a_timestamp_come_in_request_id_order(
    audit_engine: Engine, tmp_path: Path
) -> None:
    """Retried requests share a tick's timestamp: `--limit` cut such ties in insertion
    order on SQLite and heap order on PostgreSQL, so the two answered differently."""
    small = synthetic_run(12, start_s=START_S, seed=3)
    tick = START_S + 60.0
    tied = [replace(d, decided_at_s=tick) for d in reversed(small.decisions)]
    load_run(audit_engine, replace(small, decisions=tied), tmp_path / "spill")
    ids = sorted(d.request_id for d in small.decisions)
    assert list(service.decisions(audit_engine, SINCE, UNTIL)["request_id"]) == ids
    assert list(service.decisions(audit_engine, SINCE, UNTIL, limit=5)["request_id"]) == ids[:5]


def test_degraded_decisions_hold_no_capacity_share_of_the_requested_model(
    audit_engine: Engine, tmp_path: Path
) -> None:
    """70b requests degraded to 8b targets got the target's share among the 8b targets,
    so a 70b group's capacity shares summed to ~2 while its decision shares summed to 1."""
    small = synthetic_run(400, start_s=START_S, seed=11)
    big = [i for i, d in enumerate(small.decisions)
           if d.model_id == "llama3.1-70b" and d.target_id is not None][:20]  # fmt: skip
    degraded = list(small.decisions)
    for i in big:
        degraded[i] = replace(degraded[i], outcome="degraded", target_id="h200-8b",
                              card_type="h200")  # fmt: skip
    incident_id = load_run(audit_engine, replace(small, decisions=degraded), tmp_path / "spill")
    frames = [
        service.summary(audit_engine, SINCE, UNTIL, CAPACITY),
        incident_timeline(
            audit_engine, incident_id, now=UNTIL, capacity=CAPACITY
        ).per_target.rename(columns={"phase": "policy_arm"}),
    ]
    for got in frames:
        # at most 1: a target with no decision in the group has no row
        capacity = got.groupby(["policy_arm", "model_id"])["capacity_share"].sum()
        assert (capacity <= 1 + 1e-9).all() and capacity.max() > 0.9
        assert np.allclose(got.groupby(["policy_arm", "model_id"])["decision_share"].sum(), 1)
        row = got[(got.model_id == "llama3.1-70b") & (got.target_id == "h200-8b")]
        assert len(row) >= 1 and (row["capacity_share"] == 0).all()
        own = got[(got.model_id == "llama3.1-8b") & (got.target_id == "h200-8b")]
        assert (own["capacity_share"] > 0.1).all()


@pytest.mark.parametrize("status", ["client_error", "cancelled"])
def test_unjudged_outcomes_count_in_no_violation_rate(
    audit_engine: Engine, tmp_path: Path, status: RequestStatus
) -> None:
    """A `client_error`, or a `cancelled` request left before its first token and its
    deadline (sla_met null), is judged by no SLA: `summary` and `status`'s per-arm
    figures leave it out of both outcomes and violations, where counting it as an
    outcome diluted the rate the rollback rule reads."""
    small = synthetic_run(400, start_s=START_S, seed=4)
    outcomes = [
        replace(o, status=status, sla_met=None, ttft_s=None, tpot_s=None)
        if i % 4 == 0 and o.status == "ok"
        else o
        for i, o in enumerate(small.outcomes)
    ]
    load_run(audit_engine, replace(small, outcomes=outcomes), tmp_path / "spill")
    arm_of = {d.request_id: d.policy_arm for d in small.decisions}
    judged = [o for o in outcomes if o.sla_met is not None]
    assert 50 < len(outcomes) - len(judged) < len(outcomes) // 4 + 1
    got = service.summary(audit_engine, SINCE, UNTIL, CAPACITY)
    arms = arm_sla(audit_engine, SINCE, UNTIL)
    for arm in ("learned", "round_robin"):
        mine = [o for o in judged if arm_of[o.request_id] == arm]
        missed = sum(not o.sla_met for o in mine)
        rows = got[got.policy_arm == arm]
        assert rows["outcomes"].sum() == len(mine)
        rates = rows["sla_violation_rate"].fillna(0.0)
        assert (rates * rows["outcomes"]).sum() == pytest.approx(missed)
        row = next(r for r in arms.arms if r["arm"] == arm)
        assert (row["outcomes"], row["sla_violations"]) == (len(mine), missed)
        assert row["sla_violation_rate"] == pytest.approx(missed / len(mine))
