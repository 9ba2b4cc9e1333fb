"""A new guard leader keeps the last leader's demotions across restarts: younger than
`INHERIT_MAX_AGE_S` and published for its own fleet file. On a simulated clock; the
replicas are real `GuardReplica`s on a real SQLite file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import FAST_GUARD
from sqlalchemy import Engine
from test_serve_replicas_router import SLOW
from test_serve_replicas_router import _slow_h200 as slow_h200

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.migrate import upgrade
from slaguard.guard.config import GuardConfig
from slaguard.guard.leader import lease_for
from slaguard.guard.runtime import GuardReplica
from slaguard.notify.console import ConsoleNotifier

FLEET_A, FLEET_B = "fleet-digest-a", "fleet-digest-b"


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


def demoting_leader(replicas: Replicas, now: float) -> tuple[GuardReplica, float]:
    """A leader that demoted the slow H200 and published it at its sync; the time."""
    first = replicas.new("a")
    assert first.sync(now).leader
    now = slow_h200(first, now)
    first.sync(now)
    assert first.router.demoted == {SLOW}
    return first, now


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
