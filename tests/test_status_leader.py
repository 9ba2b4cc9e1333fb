"""`slaguard status` on PostgreSQL tells a fleet whose replicas run but none leads from one
with no replica at all: it said "no guard replica is running" in both, and the first is
exactly when `SlaguardGuardLeaderless` fires (every scraped replica at leader 0), whose
runbook starts with `slaguard status`."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine
from test_guard_cli import ok, url_of

from slaguard.guard.lease_pg import PostgresLeaderLease

pytestmark = pytest.mark.postgres


@pytest.fixture
def leases(pg_audit_engine: Engine) -> Iterator[list[PostgresLeaderLease]]:
    """Real lease sessions on the module's database, closed afterwards."""
    made: list[PostgresLeaderLease] = []
    yield made
    for lease in made:
        lease.close()


def status(engine: Engine) -> tuple[str, dict[str, object]]:
    db = ["--db", url_of(engine)]
    return ok("status", *db), json.loads(ok("status", *db, "--json"))


def test_replicas_connected_but_none_leading_are_named(
    pg_audit_engine: Engine, leases: list[PostgresLeaderLease]
) -> None:
    text, answer = status(pg_audit_engine)
    assert "guard leader: none (no guard replica is connected to this database)" in text
    assert answer["leader"] is None and answer["guard_replicas"] == []
    for replica_id in ("host-b:7", "host-a:3"):  # not ready: they poll without taking
        lease = PostgresLeaderLease(pg_audit_engine.url, replica_id)
        leases.append(lease)
        assert not lease.poll(take=False)
    text, answer = status(pg_audit_engine)
    assert (
        "guard leader: none: 2 guard replicas connected (host-a:3, host-b:7), none holds the "
        "lease (not ready, or cannot write: each one's /readyz and /v1/status .guard say why)"
    ) in text
    assert answer["leader"] is None and answer["guard_replicas"] == ["host-a:3", "host-b:7"]
    assert leases[1].poll()  # host-a:3 leads: its second session is counted once
    text, answer = status(pg_audit_engine)
    assert "guard leader: host-a:3\n" in text
    assert answer["leader"] == "host-a:3" and answer["guard_replicas"] == ["host-a:3", "host-b:7"]
