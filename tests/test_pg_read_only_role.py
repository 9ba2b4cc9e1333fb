"""A role that may read slaguard's tables but not write them: the service says so, names
the grant to give, once at ERROR; it said "audit database busy" and retried in silence."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import pg_connect
from service_helpers import Clock, build_test_service
from sqlalchemy import Engine
from sqlalchemy.engine import URL

pytestmark = pytest.mark.postgres


@pytest.fixture
def read_only_url(pg_audit_engine: Engine) -> Iterator[URL]:
    """The migrated database as a role granted SELECT only (dropped afterwards)."""
    role = f"fixD_ro_{secrets.token_hex(4)}"
    url = pg_audit_engine.url
    with pg_connect(url) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{role}"')
    try:
        yield url.set(username=role)
    finally:
        with pg_connect(url) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


def test_a_role_that_cannot_write_is_named_with_the_grant_to_give(
    read_only_url: URL, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    role = read_only_url.username
    db = read_only_url.render_as_string(hide_password=False)
    service = build_test_service(tmp_path, Clock(time.time()), db=db)
    try:
        for _ in range(3):  # every mode sync asks again
            asyncio.run(service.readiness())
    finally:
        service.close()
    expected = (
        "audit database refuses slaguard's writes: permission denied for table "
        f"weight_versions; fix: grant SELECT, INSERT, UPDATE on slaguard's tables and USAGE "
        f"on their sequences to {role}, or use a role that owns them"
    )
    assert service.runtime.ready_problem == expected
    errors = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.ERROR and r.name == "slaguard.service.bootstrap"
    ]
    assert errors == [f"not ready: {expected}"]
