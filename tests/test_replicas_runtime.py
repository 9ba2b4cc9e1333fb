"""`GuardReplica` in one process over a real SQLite file (leadership by the file lock):
only the leader evaluates, stores and sends; a switch the database refused is written
at the next sync; the audit feed brings each stored outcome exactly once."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select, update
from sqlalchemy.engine import URL
from test_guard_store import arm_samples, insert_arm_rows, start_rollout
from test_guard_store import tripping_guard as _tripping

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.migrate import upgrade
from slaguard.audit.models import FleetState, Incident, Outcome, utc_from_unix
from slaguard.guard import runner
from slaguard.guard.events import ModeChangedEvent
from slaguard.guard.feed import AuditSampleFeed
from slaguard.guard.leader import lease_for
from slaguard.guard.manual import ManualAction
from slaguard.guard.runtime import GuardReplica
from slaguard.guard.store import GuardStore
from slaguard.guard.verdicts import Action, Severity, Verdict
from slaguard.notify.file import FileNotifier


@pytest.fixture
def engine(sqlite_url: URL) -> Engine:
    engine = create_audit_engine(sqlite_url)
    upgrade(engine)
    return engine


def make(engine: Engine, name: str, tmp: Path, feed: bool = False) -> GuardReplica:
    config = _tripping(GuardStore(engine).load(time.time())).config
    return GuardReplica(
        engine, lease_for(engine.url, name), FileNotifier(tmp / "notify.jsonl"),
        replica_id=name, config=config, feed=AuditSampleFeed(engine) if feed else None,
    )  # fmt: skip


def run_until_trip(replica: GuardReplica, now: float) -> list[ModeChangedEvent]:
    for k in range(10):
        changes = [e for e in replica.evaluate(now + k) if isinstance(e, ModeChangedEvent)]
        if changes:
            return changes
    return []


def test_only_the_leader_evaluates_stores_and_sends(engine: Engine, tmp_path: Path) -> None:
    now = time.time()
    start_rollout(GuardStore(engine), at_s=now - 30)
    a, b = make(engine, "a", tmp_path), make(engine, "b", tmp_path)
    assert a.sync(now).leader and not b.sync(now).leader
    assert a.current().label == b.current().label == "rollout(50)"
    for replica in (a, b):
        for sample in arm_samples(now - 5):
            replica.observe(sample)
    assert run_until_trip(b, now) == [] and b.stats.evaluations == 0
    (change,) = run_until_trip(a, now)
    assert (change.transition.to_mode, a.current().label) == ("round_robin", "round_robin")
    assert b.deliver(now + 20) == []
    assert [r.ok for _, r in a.deliver(now + 20)] == [True]
    lines = (tmp_path / "notify.jsonl").read_text().splitlines()
    assert [json.loads(x)["incident"]["state"] for x in lines] == ["opened"]
    report = b.sync(now + 21)
    assert report.adopted is not None and b.current().label == "round_robin"
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Incident)).scalar() == 1
    a.close()
    report = b.sync(now + 22)
    assert report.gained and b.guard.incidents.current is not None  # continues the incident
    b.close()


def test_the_leader_publishes_its_reports_and_router_inputs_others_none(
    engine: Engine, tmp_path: Path
) -> None:
    now = time.time()
    start_rollout(GuardStore(engine), at_s=now - 30)
    a, b = make(engine, "a", tmp_path), make(engine, "b", tmp_path)
    assert a.sync(now).leader and not b.sync(now).leader
    for replica in (a, b):
        for sample in arm_samples(now - 5):
            replica.observe(sample)
        replica.evaluate(now)
    assert [r.detector for r in a.reports] == [
        "ttft_zscore", "hot_spot", "cold_start", "rollout_compare",
    ]  # fmt: skip
    (compare,) = [r for r in a.reports if r.detector == "rollout_compare"]
    assert compare.evidence["learned"]["requests"] == 60
    assert compare.evidence["learned"]["violations"] == 24  # 2 in every 5
    assert b.reports == () and b.router.jitter_z == {}
    a.close()
    assert b.sync(now + 1).gained
    a.sync(now + 1)
    assert a.reports == () and not a.is_leader
    b.close()


def test_an_alert_rollback_opens_an_incident_with_the_alert_and_resume_resolves_it(
    engine: Engine, tmp_path: Path
) -> None:
    now = time.time()
    start_rollout(GuardStore(engine), at_s=now - 30)
    replica = make(engine, "a", tmp_path)
    replica.sync(now)
    alert = Verdict(
        "alertmanager", Action.TRIP, "SlaguardSLAErrorBudgetBurn", Severity.CRITICAL,
        "SlaguardSLAErrorBudgetBurn firing (burning 14.4x)", now,
        {"alerts": [{"labels": {"severity": "critical"}, "annotations": {}}]},
    )  # fmt: skip
    out = replica.command(
        ManualAction.ROLLBACK, now, actor="alertmanager", reason="alertmanager: x", alert=alert
    )
    assert out.result.changed and out.incident_id is not None
    (opened,) = out.queued
    assert (opened.state.value, opened.detector, opened.mode_after) == (
        "opened", "alertmanager", "round_robin",
    )  # fmt: skip
    assert opened.evidence["verdicts"][0]["evidence"]["alerts"][0]["labels"] == {
        "severity": "critical"
    }
    again = replica.command(
        ManualAction.ROLLBACK, now + 1, actor="alertmanager", reason="again", alert=alert
    )
    assert not again.result.changed and again.queued == []
    resumed = replica.command(ManualAction.RESUME, now + 2, actor="ana", reason="fixed")
    assert [(e.incident_id, e.state.value) for e in resumed.queued] == [
        (str(out.incident_id), "resolved")
    ]
    with pytest.raises(ValueError, match="only ask for a rollback"):
        replica.command(ManualAction.HOLD, now + 3, actor="x", reason="x", alert=alert)
    replica.close()


def test_a_switch_the_database_refused_is_written_at_the_next_sync(
    engine: Engine, sqlite_url: URL, tmp_path: Path
) -> None:
    now = time.time()
    start_rollout(GuardStore(engine), at_s=now - 30)
    leader = make(engine, "a", tmp_path)
    assert leader.sync(now).leader
    for sample in arm_samples(now - 5):
        leader.observe(sample)
    blocker = sqlite3.connect(str(sqlite_url.database), timeout=0.1)
    blocker.execute("BEGIN IMMEDIATE")  # another writer holds the database
    try:
        (change,) = run_until_trip(leader, now)
        assert leader.stats.persist_errors == 1 and "locked" in str(leader.stats.last_error)
        assert leader.stats.last_error_at_s is not None and now <= leader.stats.last_error_at_s
        assert leader.current().label == "round_robin"  # this replica is safe at once
        assert GuardStore(engine).load(now).mode.label == "rollout(50)"
    finally:
        blocker.rollback()
        blocker.close()
    leader.sync(now + 5)
    stored = GuardStore(engine).load(now + 5)
    assert (stored.mode.label, stored.version) == ("round_robin", change.transition.version)
    leader.close()


def test_the_audit_feed_brings_each_outcome_once(engine: Engine) -> None:
    now = time.time()
    feed = AuditSampleFeed(engine, lag_s=5.0, warmup_s=300.0)
    insert_arm_rows(engine, now - 400, n=10, prefix="old-")  # before the warm-up window
    insert_arm_rows(engine, now - 60, n=10, prefix="a-")
    first = feed.poll(now)
    assert len(first) == 20 and [s.at_s for s in first] == sorted(s.at_s for s in first)
    assert {s.arm.value for s in first if s.arm} == {"learned", "round_robin"}
    assert feed.poll(now + 1) == []
    insert_arm_rows(engine, now - 62, n=5, prefix="late-")  # landed late, within the lag
    insert_arm_rows(engine, now - 10, n=5, prefix="b-")
    assert len(feed.poll(now + 2)) == 20
    assert feed.poll(now + 3) == []
    feed.restart(now + 4)
    assert len(feed.poll(now + 4)) == 40 and feed.fed == 80  # all but the 400 s old rows


def test_runner_refuses_an_unmigrated_database_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    assert runner.main(["--db", str(empty), "--replica-id", "x"]) == 2
    (line,) = capsys.readouterr().out.splitlines()
    event = json.loads(line)
    assert (event["event"], event["where"]) == ("error", "start")
    assert "has no slaguard schema" in event["detail"]


def test_the_baseline_counts_from_the_first_leaders_start_not_the_db_upgrade(
    audit_engine: Engine, tmp_path: Path
) -> None:
    """`db upgrade` seeds `fleet_state.since`: run a day before the first replica started,
    the plan's 24 h round-robin baseline had already elapsed and the first evaluation took
    the fleet to rollout(10) with no baseline gathered."""
    upgraded = time.time() - 86_400 - 600
    with audit_engine.begin() as conn:  # the seed as `db upgrade` left it a day ago
        conn.execute(
            update(FleetState).values(
                since=utc_from_unix(upgraded), actor="migration 0002_guard_state", version=0
            )
        )
    now = time.time()
    a, b = make(audit_engine, "a", tmp_path), make(audit_engine, "b", tmp_path)
    assert b.lease.poll()  # b holds the lock; a follows and reads the seed before b's sync
    assert a.sync(now).leader is False and a.state().since_s == pytest.approx(upgraded, abs=1e-3)
    started = now + 0.5
    assert b.sync(started).gained
    a.sync(now + 1)
    for replica in (a, b):  # the leader stamped its start; the follower took it
        assert replica.state().since_s == pytest.approx(started, abs=1e-3), replica.replica_id
        assert replica.state().actor == "guard" and replica.state().version == 0
    assert b.evaluate(now + 1) == [] and b.current().label == "round_robin"
    b.close()
    assert a.sync(now + 60).gained  # a new leader keeps the first one's start
    assert GuardStore(audit_engine).load(now + 60).since_s == pytest.approx(started, abs=1e-3)
    assert a.state().since_s == pytest.approx(started, abs=1e-3)
    later = started + 86_401  # a day after the first start the plan advances as configured
    changes = [e for e in a.evaluate(later) if isinstance(e, ModeChangedEvent)]
    assert [c.transition.to_mode for c in changes] == ["rollout(10)"]
    a.close()


def test_the_audit_feed_leaves_out_outcomes_no_sla_judges(engine: Engine) -> None:
    """A `client_error` (sla_met null) is no card's doing: the leader's feed of every
    replica's outcomes took it for a miss, as the replica that routed it does not."""
    now = time.time()
    feed = AuditSampleFeed(engine, lag_s=5.0, warmup_s=300.0)
    insert_arm_rows(engine, now - 60, n=10, prefix="a-")
    refused = [f"a-{k:06d}" for k in range(0, 20, 4)]
    with engine.begin() as conn:
        conn.execute(
            update(Outcome)
            .where(Outcome.request_id.in_(refused))
            .values(status="client_error", sla_met=None, ttft_s=None)
        )
        judged = dict(conn.execute(select(Outcome.request_id, Outcome.sla_met)).all())
    misses = sum(met is False for met in judged.values())
    samples = feed.poll(now)
    assert (len(samples), sum(not s.sla_met for s in samples)) == (15, misses)
    assert misses == 3 and feed.fed == 15
