"""Shared fixtures: a throwaway PostgreSQL database per test module, SQLite files, and a
guard that fails a module leaving a child process running (`child_processes.py`).

The PostgreSQL server is the machine's own (127.0.0.1:5432, trust auth, database `test`,
override with $SLAGUARD_TEST_PG_URL). Each module that asks for `pg_url` gets a fresh
database `slaguard_test_<random>`, created through `test` and dropped afterwards. When
the server is missing the tests skip, except under CI=true, where they fail: CI must
exercise the real backend.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from child_processes import no_child_left_running as no_child_left_running
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL, make_url

PG_ADMIN_URL = os.environ.get(
    "SLAGUARD_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
CONNECT_RETRY_S = 15.0
"""How long to keep retrying a connection (another test may be restarting the server)."""


def libpq_url(url: URL | str) -> str:
    """A SQLAlchemy URL as psycopg's connection string."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def pg_connect(url: URL | str, retry_s: float = CONNECT_RETRY_S) -> psycopg.Connection:
    """An autocommit connection, retried while the server restarts."""
    deadline = time.monotonic() + retry_s
    while True:
        try:
            return psycopg.connect(libpq_url(url), autocommit=True, connect_timeout=3)
        except psycopg.OperationalError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def require_postgres() -> None:
    """Skip (or fail under CI=true) when the PostgreSQL server does not answer."""
    try:
        pg_connect(PG_ADMIN_URL, retry_s=3.0).close()
    except psycopg.OperationalError as exc:
        message = f"PostgreSQL not reachable at {make_url(PG_ADMIN_URL)!r}: {exc}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def create_scratch_database(prefix: str = "slaguard_test") -> URL:
    """A new empty database on the test server; the caller drops it."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    with pg_connect(PG_ADMIN_URL) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return make_url(PG_ADMIN_URL).set(database=name)


def drop_database(url: URL) -> None:
    """Drop a scratch database, disconnecting whoever still uses it."""
    with pg_connect(PG_ADMIN_URL) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{url.database}" WITH (FORCE)')


@pytest.fixture(scope="module")
def pg_url() -> Iterator[URL]:
    """A fresh PostgreSQL database for this test module, dropped after it."""
    require_postgres()
    url = create_scratch_database()
    try:
        yield url
    finally:
        drop_database(url)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> URL:
    """A SQLite file URL in the test's temporary directory (file not created yet)."""
    return make_url(f"sqlite:///{tmp_path / 'audit.db'}")


BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
"""Parameters for fixtures that run a test on each audit backend."""

AUDIT_TABLES = (
    "outcomes", "decisions", "mode_changes", "incidents", "weight_versions",
    "guard_router_inputs",
)  # fmt: skip


@pytest.fixture(scope="module")
def pg_audit_engine(pg_url: URL) -> Iterator[Engine]:
    """A migrated audit schema in this module's PostgreSQL database."""
    from slaguard.audit.engine import create_audit_engine
    from slaguard.audit.migrate import upgrade

    engine = create_audit_engine(pg_url)
    upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture(params=BACKENDS)
def audit_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """A migrated, empty audit database on each backend (PostgreSQL: truncated per test)."""
    from slaguard.audit.engine import create_audit_engine
    from slaguard.audit.migrate import upgrade

    if request.param == "sqlite":
        engine = create_audit_engine(f"sqlite:///{tmp_path / 'audit.db'}")
        upgrade(engine)
        yield engine
        engine.dispose()
        return
    engine = request.getfixturevalue("pg_audit_engine")
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {', '.join(AUDIT_TABLES)} RESTART IDENTITY"))
        conn.execute(text("UPDATE fleet_state SET mode = 'round_robin', version = 0"))
    yield engine
