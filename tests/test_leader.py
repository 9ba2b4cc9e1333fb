"""Leadership: one holder of the PostgreSQL advisory lock (or the SQLite lock file) at a
time; a closed, killed or silent holder's lock passes to the next poller."""

from __future__ import annotations

import stat
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from conftest import libpq_url
from helpers import usual_umask
from sqlalchemy.engine import URL, make_url

from slaguard.guard.leader import SoloLease, current_leader, lease_for
from slaguard.guard.lease_file import FileLeaderLease
from slaguard.guard.lease_pg import APPLICATION_PREFIX, PostgresLeaderLease


@pytest.fixture
def leases(pg_url: URL) -> Iterator[list[PostgresLeaderLease]]:
    made: list[PostgresLeaderLease] = []
    yield made
    for lease in made:
        lease.close()


def pg_lease(
    made: list[PostgresLeaderLease], url: URL, rid: str, **kw: float
) -> PostgresLeaderLease:
    lease = PostgresLeaderLease(url, rid, **kw)
    made.append(lease)
    return lease


def poll_until(lease: PostgresLeaderLease | FileLeaderLease, timeout_s: float) -> float:
    """Poll every 50 ms until `lease` leads; the seconds it took."""
    start = time.monotonic()
    while not lease.poll():
        assert time.monotonic() - start < timeout_s, "leadership never passed on"
        time.sleep(0.05)
    return time.monotonic() - start


def test_one_leader_and_a_closed_leader_hands_over_at_the_next_poll(
    pg_url: URL, leases: list[PostgresLeaderLease]
) -> None:
    a, b, c = (pg_lease(leases, pg_url, rid) for rid in ("a", "b", "c"))
    assert [x.poll() for x in (a, b, c)] == [True, False, False]
    assert [x.poll() for x in (a, b, c)] == [True, False, False]  # re-checked, still one
    assert current_leader(pg_url) == "a"
    a.close()
    assert not a.held
    assert [b.poll(), c.poll()] == [True, False]
    assert current_leader(pg_url) == "b"


def test_a_terminated_session_loses_leadership(
    pg_url: URL, leases: list[PostgresLeaderLease]
) -> None:
    a, b = pg_lease(leases, pg_url, "a"), pg_lease(leases, pg_url, "b")
    assert a.poll() and not b.poll()
    with psycopg.connect(libpq_url(pg_url), autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = %s AND datname = current_database()",
            (APPLICATION_PREFIX + "a",),
        )
    assert poll_until(b, 5.0) < 5.0
    assert not a.poll()  # finds its session gone, steps down (and cannot retake the lock)
    assert current_leader(pg_url) == "b"


def test_a_silent_leader_loses_the_lease_after_lease_s(
    pg_url: URL, leases: list[PostgresLeaderLease]
) -> None:
    """A stalled leader (no query for `lease_s`) is cut off by the server's
    idle_session_timeout; nobody has to trust it to notice."""
    a = pg_lease(leases, pg_url, "a", lease_s=1.0)
    b = pg_lease(leases, pg_url, "b")
    assert a.poll() and not b.poll()
    took = poll_until(b, 5.0)  # `a` says nothing from here on
    assert 0.5 < took < 3.0
    assert not a.poll()


def test_a_silent_leader_loses_the_lease_while_followers_forward_and_publish(
    pg_url: URL, leases: list[PostgresLeaderLease]
) -> None:
    """Followers keep forwarding samples (and the leader had published) while the leader
    is silent: none of that may keep its lock's session alive past `lease_s`."""
    a = pg_lease(leases, pg_url, "a", lease_s=1.0)
    b = pg_lease(leases, pg_url, "b")
    assert a.poll() and not b.poll()
    a.poll()  # opens its samples connection and LISTENs
    a.publish('{"replica":"a"}')
    start = time.monotonic()
    while not b.poll():
        assert time.monotonic() - start < 5.0, "a silent leader kept its lease"
        b.forward(['{"r":"b","at":0,"s":[],"a":[]}'] * 3)
        time.sleep(0.05)
    assert 0.5 < time.monotonic() - start < 3.0
    assert not a.poll()
    assert b.take_forwarded() == []  # it leads now; what it sent before is not its input


def test_other_databases_have_their_own_leader(
    pg_url: URL, leases: list[PostgresLeaderLease]
) -> None:
    from conftest import create_scratch_database, drop_database

    other = create_scratch_database("slaguard_lease")
    try:
        assert pg_lease(leases, pg_url, "here").poll()
        assert pg_lease(leases, other, "there").poll()
        assert current_leader(other) == "there"
    finally:
        for lease in leases:
            lease.close()
        drop_database(other)


def test_sqlite_file_lock_one_holder_named_in_the_file(tmp_path: Path) -> None:
    url = make_url(f"sqlite:///{tmp_path / 'audit.db'}")
    a, b = lease_for(url, "host:1"), lease_for(url, "host:2")
    assert isinstance(a, FileLeaderLease) and isinstance(b, FileLeaderLease)
    assert current_leader(url) is None
    assert a.poll() and not b.poll() and a.poll()
    assert current_leader(url) == "host:1"
    a.close()
    assert current_leader(url) is None
    assert poll_until(b, 1.0) < 1.0 and current_leader(url) == "host:2"
    b.close()


def test_in_memory_sqlite_is_always_its_own_leader() -> None:
    lease = lease_for(make_url("sqlite://"), "solo")
    assert isinstance(lease, SoloLease) and lease.poll() and lease.held
    assert current_leader(make_url("sqlite://")) is None


def test_the_file_lease_and_its_spool_are_the_owners_alone(tmp_path: Path) -> None:
    """The lock file was 0644: any local user could open it and take the flock, and no
    replica would ever lead again."""
    with usual_umask():
        lease = lease_for(make_url(f"sqlite:///{tmp_path / 'audit.db'}"), "a")
        assert isinstance(lease, FileLeaderLease) and lease.poll()
        lease.forward(['{"r":"a","at":0,"s":[],"o":[],"f":[],"a":[]}'])
        lease.publish('{"replica":"a","at":0,"jitter_z":{},"demoted":[]}')
        try:
            assert stat.S_IMODE(lease.path.stat().st_mode) == 0o600
            assert stat.S_IMODE(lease.spool.path.stat().st_mode) == 0o700
            assert stat.S_IMODE(lease.router_path.stat().st_mode) == 0o600
        finally:
            lease.close()
