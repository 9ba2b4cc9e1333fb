"""A PostgreSQL URL's own `options` (a `search_path`) hold on every connection, the ones
with a statement timeout too: those dropped it and read the `public` schema instead."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from conftest import pg_connect
from service_helpers import Clock, build_test_service
from sqlalchemy import text
from sqlalchemy.engine import URL
from typer.testing import CliRunner

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.migrate import upgrade
from slaguard.cli.main import app

pytestmark = pytest.mark.postgres


def _modes(url: URL) -> dict[str, str]:
    with pg_connect(url) as conn:
        rows = conn.execute(
            "SELECT 'public', mode FROM public.fleet_state UNION ALL "
            "SELECT 'sg', mode FROM sg.fleet_state"
        ).fetchall()
    return {schema: mode for schema, mode in rows}


def test_a_search_path_in_the_url_is_kept_with_the_statement_timeout(
    pg_url: URL, tmp_path: Path
) -> None:
    """serve migrated `sg`, then said "no slaguard schema" forever; `status` read public
    and `rollback` switched the fleet whose tables sit in `public`."""
    other_fleet = create_audit_engine(pg_url)
    upgrade(other_fleet)
    other_fleet.dispose()
    with pg_connect(pg_url) as conn:
        conn.execute("CREATE SCHEMA sg")
    in_sg = pg_url.update_query_dict({"options": "-csearch_path=sg"})
    db = in_sg.render_as_string(hide_password=False)
    assert "options=-csearch_path%3Dsg" in db

    engine = create_audit_engine(in_sg, statement_timeout_s=2.5)
    with engine.connect() as conn:
        shown = [
            conn.execute(text(f"SHOW {name}")).scalar()
            for name in ("search_path", "statement_timeout")
        ]
    engine.dispose()
    assert shown == ["sg", "2500ms"]

    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade", "--db", db]).exit_code == 0
    with pg_connect(pg_url) as conn:
        conn.execute("UPDATE public.fleet_state SET mode = 'learned'")
        conn.execute("UPDATE sg.fleet_state SET mode = 'learned'")
    service = build_test_service(tmp_path, Clock(time.time()), db=db)
    try:
        asyncio.run(service.readiness())
        assert service.runtime.ready_problem is None
        assert service.modes.replica.stats.last_error is None
    finally:
        service.close()
    status = runner.invoke(app, ["status", "--db", db])
    assert status.exit_code == 0, status.output
    assert "learned" in status.stdout
    rollback = runner.invoke(app, ["rollback", "--reason", "drill", "--db", db])
    assert rollback.exit_code == 0, rollback.output
    assert _modes(pg_url) == {"public": "learned", "sg": "round_robin"}
