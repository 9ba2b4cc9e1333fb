"""A new guard leader keeps the last leader's demotions after every replica restarted.

On PostgreSQL the leader's router inputs reach the others by NOTIFY only, so when every
replica restarted at once (a host reboot, `systemctl restart` of the only replica) the
first leader had nothing to inherit and a target demoted as persistently slow got its
full share back until the TTFT detector re-learned it. The leader now also keeps its
demotions in the database (`guard_router_inputs`); a successor takes them when younger
than `INHERIT_MAX_AGE_S` and published for its own fleet. On a simulated clock; the
replicas are real `GuardReplica`s on a real PostgreSQL database (or SQLite file).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from conftest import create_scratch_database, drop_database, pg_connect, require_postgres
from helpers import FAST_GUARD
from sqlalchemy import Engine
from test_serve_replicas_router import SLOW
from test_serve_replicas_router import _slow_h200 as slow_h200

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.migrate import upgrade
from slaguard.guard.config import GuardConfig
from slaguard.guard.leader import lease_for
from slaguard.guard.router_inputs import INHERIT_MAX_AGE_S, RouterInputs
from slaguard.guard.runtime import GuardReplica
from slaguard.notify.console import ConsoleNotifier

FLEET_A, FLEET_B = "fleet-digest-a", "fleet-digest-b"


@pytest.fixture
def pg_engine() -> Iterator[Engine]:
    """A migrated PostgreSQL database of this test's own (the kept inputs are per database)."""
    require_postgres()
    url = create_scratch_database("slaguard_inherit")
    engine = create_audit_engine(url)
    try:
        upgrade(engine)
        yield engine
    finally:
        engine.dispose()
        drop_database(url)


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Iterator[Engine]:
    engine = create_audit_engine(f"sqlite:///{tmp_path / 'audit.db'}")
    upgrade(engine)
    yield engine
    engine.dispose()


class Replicas:
    """Replicas made on one database, each closed at the end."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.made: list[GuardReplica] = []

    def new(self, rid: str, fleet: str | None = FLEET_A) -> GuardReplica:
        replica = GuardReplica(
            self.engine, lease_for(self.engine.url, rid), ConsoleNotifier(), replica_id=rid,
            config=GuardConfig.model_validate(FAST_GUARD), fleet_digest=fleet,
        )  # fmt: skip
        self.made.append(replica)
        return replica

    def close(self) -> None:
        for replica in self.made:
            replica.close()


@pytest.fixture
def pg(pg_engine: Engine) -> Iterator[Replicas]:
    replicas = Replicas(pg_engine)
    yield replicas
    replicas.close()


def demoting_leader(replicas: Replicas, now: float) -> tuple[GuardReplica, float]:
    """A leader that demoted the slow H200 and published it at its sync; the time."""
    first = replicas.new("a")
    assert first.sync(now).leader
    now = slow_h200(first, now)
    first.sync(now)
    assert first.router.demoted == {SLOW}
    return first, now


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("after_s", "kept"),
    [(5.0, {SLOW}), (INHERIT_MAX_AGE_S - 1.0, {SLOW}), (INHERIT_MAX_AGE_S + 1.0, set())],
)
def test_a_leader_after_every_replica_restarted_keeps_the_demotion(
    pg: Replicas, after_s: float, kept: set[str]
) -> None:
    """The only replica stops (its session closed: nothing more by NOTIFY); a brand-new one
    leads and routes around the slow target from its first sync, unless the demotion was
    published longer ago than `INHERIT_MAX_AGE_S`."""
    first, now = demoting_leader(pg, 1_000.0)
    first.close()
    restarted = pg.new("a-restarted")
    assert restarted.sync(now + after_s).leader
    assert restarted.router.demoted == kept  # from the first sync, before it evaluates
    restarted.evaluate(now + after_s + 0.5)
    assert restarted.router.demoted == kept
    restarted.sync(now + after_s + 1.0)
    other = pg.new("b")  # a later restart again takes what the restarted leader kept
    restarted.close()
    assert other.sync(now + after_s + 2.0).leader
    assert other.router.demoted == kept


@pytest.mark.postgres
def test_another_fleets_demotions_are_not_inherited_on_postgresql(pg: Replicas) -> None:
    first, now = demoting_leader(pg, 1_000.0)
    first.close()
    other_fleet = pg.new("c", fleet=FLEET_B)
    assert other_fleet.sync(now + 5.0).leader
    other_fleet.evaluate(now + 5.5)
    assert other_fleet.router.demoted == set()


def test_a_sqlite_leader_keeps_demotions_across_restarts_of_its_own_fleet_only(
    sqlite_engine: Engine,
) -> None:
    """A restarted leader's first sync published no demotion (its router was empty until
    it evaluated), so a second restart within that second lost them; and the lock file's
    inputs were taken whatever fleet published them (a target id of the old fleet file
    may name another card or URL in the new one)."""
    replicas = Replicas(sqlite_engine)
    try:
        first, now = demoting_leader(replicas, 1_000.0)
        first.close()
        restarted = replicas.new("a")
        assert restarted.sync(now + 5.0).leader
        assert restarted.router.demoted == {SLOW}  # routed around at once, and published
        restarted.close()  # before it ever evaluated
        again = replicas.new("a")
        assert again.sync(now + 6.0).leader
        again.evaluate(now + 6.5)
        assert again.router.demoted == {SLOW}
        again.sync(now + 7.0)
        again.close()
        other_fleet = replicas.new("c", fleet=FLEET_B)
        assert other_fleet.sync(now + 8.0).leader
        assert other_fleet.router.demoted == set()
        other_fleet.evaluate(now + 8.5)
        assert other_fleet.router.demoted == set()
    finally:
        replicas.close()


def kept_row(engine: Engine) -> tuple[float, str]:
    """(published_at as epoch seconds, inputs) of the kept row."""
    with pg_connect(engine.url) as conn:
        return kept_row_on(conn)


def kept_row_on(conn: psycopg.Connection) -> tuple[float, str]:
    row = conn.execute(
        "SELECT extract(epoch FROM published_at)::float8, inputs FROM guard_router_inputs"
    ).fetchone()
    assert row is not None
    return float(row[0]), str(row[1])


@pytest.mark.postgres
def test_the_database_is_written_when_demotions_change_and_refreshed_slowly(
    pg: Replicas,
) -> None:
    """Publishing every 500 ms rewrites the row only when the demoted set changes or
    every `KEEP_REFRESH_S` while something is demoted (the age a successor judges)."""
    from slaguard.guard.lease_pg_kept import KEEP_REFRESH_S

    first, now = demoting_leader(pg, 1_000.0)
    written = kept_row(pg.engine)
    assert written[0] == pytest.approx(now, abs=0.01) and f'"{SLOW}"' in written[1]
    t = now
    while t < now + KEEP_REFRESH_S - 1.0:
        t += 0.5
        first.sync(t)
        assert kept_row(pg.engine) == written  # the same demotions: not written again
    first.sync(now + KEEP_REFRESH_S)
    assert kept_row(pg.engine)[0] == pytest.approx(now + KEEP_REFRESH_S, abs=0.01)


@pytest.mark.postgres
def test_a_failing_write_stops_neither_the_lease_nor_the_published_inputs(
    pg: Replicas, caplog: pytest.LogCaptureFixture
) -> None:
    """The kept row's table locked by someone else: the leader's sync still leads, within
    a second, and the follower still takes its new inputs (NOTIFY); the row is written
    at the first sync after the lock is gone."""
    first, now = demoting_leader(pg, 1_000.0)
    follower = pg.new("b")
    assert not follower.sync(now + 0.1).leader
    first.sync(now + 0.5)
    follower.sync(now + 0.6)
    assert follower.router.demoted == {SLOW}
    with pg_connect(pg.engine.url) as locker:
        with locker.transaction():
            locker.execute("LOCK TABLE guard_router_inputs IN ACCESS EXCLUSIVE MODE")
            first.router = RouterInputs(first.router.jitter_z, frozenset(), FLEET_A)
            started = time.monotonic()
            report = first.sync(now + 1.0)
            assert report.leader and report.error is None
            assert time.monotonic() - started < 1.0
            follower.sync(now + 1.1)
            assert follower.router.demoted == set()
            assert f'"{SLOW}"' in kept_row_on(locker)[1]
        first.sync(now + 1.5)
    assert f'"{SLOW}"' not in kept_row(pg.engine)[1]
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [m for m in said if "demotions in the database failed: LockNotAvailable" in m], said
