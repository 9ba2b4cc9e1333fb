"""PostgreSQL behind a proxy that freezes: the server never hears the query, so its
`statement_timeout` never fires. A replica's mode sync then waited forever, it kept the
mode the fleet had left and called itself leader for 20 s beside the real one; the
client-side deadline (`pg_deadline`) turns the silence into a lost connection."""

from __future__ import annotations

import time

import psycopg
import pytest
from frozen_proxy import FrozenProxy
from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.exc import OperationalError

from slaguard.audit import engine as audit_engine
from slaguard.audit.engine import create_audit_engine
from slaguard.guard.lease_pg import PostgresLeaderLease

pytestmark = pytest.mark.postgres


def _through(url: URL, proxy: FrozenProxy) -> URL:
    return url.set(host="127.0.0.1", port=proxy.port)


def test_a_statement_nobody_answers_fails_after_its_deadline(
    pg_url: URL, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(audit_engine, "PG_NO_ANSWER_MARGIN_S", 1.0)
    with FrozenProxy((pg_url.host or "127.0.0.1", pg_url.port or 5432)) as proxy:
        engine = create_audit_engine(_through(pg_url, proxy), statement_timeout_s=0.5)
        try:
            with engine.connect() as conn:
                assert conn.execute(text("SELECT 1")).scalar() == 1
            proxy.freeze()
            started = time.monotonic()
            # the pre-ping gets no answer in 1.5 s, the pool's new connection none in
            # its connect timeout (3 s): bounded, where it waited forever
            with pytest.raises(OperationalError), engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            waited = time.monotonic() - started
            assert 1.5 <= waited < 6.0
            proxy.thaw()
            with engine.connect() as conn:
                assert conn.execute(text("SELECT 1")).scalar() == 1
            raw = engine.raw_connection()  # a statement on a checked-out connection alone
            try:
                proxy.freeze()
                started = time.monotonic()
                with pytest.raises(psycopg.OperationalError, match=r"no answer .* in 1\.5 s"):
                    raw.cursor().execute("SELECT 1")
                assert 1.5 <= time.monotonic() - started < 2.5
            finally:
                raw.invalidate()
            proxy.thaw()
            with engine.connect() as conn:  # the dead connection left the pool
                assert conn.execute(text("SELECT 2")).scalar() == 2
        finally:
            engine.dispose()


def test_a_leader_whose_lease_query_gets_no_answer_steps_down_before_the_lease_expires(
    pg_url: URL,
) -> None:
    with FrozenProxy((pg_url.host or "127.0.0.1", pg_url.port or 5432)) as proxy:
        frozen = PostgresLeaderLease(_through(pg_url, proxy), "frozen", lease_s=4.0)
        other = PostgresLeaderLease(pg_url, "other", lease_s=4.0)
        try:
            assert frozen.poll() and frozen.held
            last_answer = time.monotonic()
            proxy.freeze()
            assert not frozen.poll() and not frozen.held
            stepped_down = time.monotonic() - last_answer
            assert 2.0 <= stepped_down < 3.0, stepped_down  # lease_s / 2
            # the server ends the frozen session at lease_s idle: only then can another lead
            took = None
            while took is None and time.monotonic() - last_answer < 10.0:
                if other.poll():
                    took = time.monotonic() - last_answer
            # (its idle clock started at its last lease query, a little before the poll
            # returned; the step-down came well before)
            assert took is not None and took >= 3.5 and took > stepped_down + 0.5
        finally:
            other.close()
            proxy.thaw()
            frozen.close()
