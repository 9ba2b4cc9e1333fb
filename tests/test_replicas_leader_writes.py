"""Only a replica that can store what the guard decides leads (real PostgreSQL): one with a
read-only role never keeps the lease (real runner processes), an unready one does not
take it, and a leader whose writes keep failing gives it up to one that can write."""

from __future__ import annotations

import logging
import secrets
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import create_scratch_database, drop_database, pg_connect
from helpers import wait_for
from sqlalchemy.engine import URL
from test_guard_refused_writes import mode_refused
from test_guard_store import arm_samples, start_rollout, tripping_guard
from test_replicas import FAILOVER_S, start, stop, the_leader
from test_replicas_runtime import run_until_trip

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.migrate import upgrade
from slaguard.guard.breaker import BreakerState
from slaguard.guard.lead_gate import WRITE_FAILURES_TO_STEP_DOWN
from slaguard.guard.leader import current_leader
from slaguard.guard.lease_pg import PostgresLeaderLease
from slaguard.guard.runtime import GuardReplica
from slaguard.guard.store import GuardStore
from slaguard.notify.file import FileNotifier

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture
def scratch() -> Iterator[URL]:
    url = create_scratch_database("slaguard_leadw")
    engine = create_audit_engine(url)
    upgrade(engine)
    engine.dispose()
    yield url
    drop_database(url)


def test_a_read_only_replica_never_keeps_the_lease(scratch: URL, tmp_path: Path) -> None:
    """It took the lease after the leader's SIGKILL and tripped only itself: `permission
    denied for table incidents`, the database still on the learned policy."""
    role = f"slaguard_ro_{secrets.token_hex(4)}"
    with pg_connect(scratch) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{role}"')
    replicas = []
    try:
        (rw,) = replicas = start(scratch, ["rw"], tmp_path)
        assert wait_for("rw leads", lambda: the_leader(replicas)) is rw
        replicas += start(scratch.set(username=role), ["ro"], tmp_path)
        ro = replicas[1]
        killed = rw.kill(signal.SIGKILL)
        wait_for("ro polled for 3 s after the kill", lambda: [
            x for x in ro.events("status", killed + 3.0)])  # fmt: skip
        assert [x for x in ro.events("status", killed) if x["leader"]] == []
        assert current_leader(scratch) is None
        replicas += start(scratch, ["rw2"], tmp_path)
        took = wait_for("rw2 leads", lambda: the_leader(replicas[1:], killed), FAILOVER_S)
        assert took.name == "rw2"
    finally:
        stop(replicas)
        with pg_connect(scratch) as conn:
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')
    errors = (tmp_path / "ro.err").read_text().splitlines()
    given_up = [x for x in errors if "guard leadership given up" in x]
    assert len(given_up) == 1 and "ERROR" in given_up[0], errors
    assert "permission denied for table" in given_up[0]


def make(url: URL, name: str, tmp: Path) -> GuardReplica:
    engine = create_audit_engine(url, statement_timeout_s=0.5)
    config = tripping_guard(GuardStore(engine).load(time.time())).config
    return GuardReplica(
        engine, PostgresLeaderLease(url, name), FileNotifier(tmp / "notify.jsonl"),
        replica_id=name, config=config,
    )  # fmt: skip


def test_an_unready_replica_does_not_lead_and_a_failing_leader_steps_down(
    scratch: URL, tmp_path: Path
) -> None:
    now = time.time()
    a, b = make(scratch, "a", tmp_path), make(scratch, "b", tmp_path)
    start_rollout(GuardStore(a.engine), at_s=now - 30)
    unready: dict[str, str | None] = {"a": "schema 0009 behind 0010"}
    a.not_ready = lambda: unready["a"]
    try:
        assert not a.sync(now).leader and b.sync(now).leader
        b.close()  # the leader stops: the unready replica does not take over
        assert not a.sync(now + 0.5).leader and current_leader(scratch) is None
        unready["a"] = None
        assert a.sync(now + 0.5).gained and current_leader(scratch) == "a"
        assert not b.sync(now + 1).leader
        for sample in arm_samples(now - 5):
            a.observe(sample)
        with mode_refused(a.engine):  # fleet_state locked: a's writes time out
            run_until_trip(a, now + 1)
            for k in range(WRITE_FAILURES_TO_STEP_DOWN - 1):  # the trip's write failed first
                assert a.sync(now + 2 + k / 2).leader
            assert a.reports and a.guard.incidents.current is not None  # its trip's
            assert a.sync(now + 4).lost  # its last retry refused too
        # what only the leader keeps went with the lease, and the loss is counted
        assert a.reports == () and a.guard.incidents.current is None
        assert a.guard.breaker == BreakerState() and a.stats.leader_changes == 2
        assert b.sync(now + 4).gained and current_leader(scratch) == "b"
        assert not a.sync(now + 5).leader  # leaves the lease to the others for a while
        assert GuardStore(a.engine).load(now + 5).mode.label == "round_robin"  # its trip
    finally:
        a.close()
        b.close()
        a.engine.dispose()
        b.engine.dispose()


def test_a_lone_replica_leads_again_as_soon_as_it_can_write(
    scratch: URL, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`fleet_state` locked for a few seconds: the only replica gave the lease up, then
    left it free for 10 s after the lock had gone (no detector ran), saying "another
    replica leads meanwhile"."""
    now = time.time()
    a = make(scratch, "a", tmp_path)
    start_rollout(GuardStore(a.engine), at_s=now - 30)
    try:
        assert a.sync(now).gained
        for sample in arm_samples(now - 5):
            a.observe(sample)
        with caplog.at_level(logging.ERROR), mode_refused(a.engine):
            run_until_trip(a, now)
            for k in range(WRITE_FAILURES_TO_STEP_DOWN - 1):  # the trip's write failed first
                assert a.sync(now + 1 + k / 2).leader
            assert a.sync(now + 2).lost
            assert not a.sync(now + 2.5).leader  # still cannot write: leaves the lease
            assert current_leader(scratch) is None
        back = a.sync(now + 3)  # the lock is gone, the lease still free
        assert back.gained and back.error is None and current_leader(scratch) == "a"
        assert GuardStore(a.engine).load(now + 3).mode.label == "round_robin"  # its trip
    finally:
        a.close()
        a.engine.dispose()
    said = [r.getMessage() for r in caplog.records if "leadership" in r.getMessage()]
    given_up, not_taken = said  # once per reason
    assert given_up.startswith("guard leadership given up: its guard writes failed 3 times")
    assert given_up.endswith(
        "it takes the lease again once it can write and no other replica holds it"
    )
    assert not_taken.startswith("guard leadership not taken: it cannot write: QueryCanceled")
