"""A mode command or `status` against a database another session has locked: after the
statement timeout (PostgreSQL) or the busy timeout (SQLite) it printed only the driver's
line (`canceling statement due to statement timeout`, `database is locked`), which
names neither the lock nor where to find who holds it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from conftest import pg_connect
from sqlalchemy import Engine
from test_guard_cli import url_of
from test_guard_store import start_rollout
from typer.testing import CliRunner

from slaguard.audit.engine import sqlite_path
from slaguard.cli.main import app
from slaguard.guard.store import GuardStore

runner = CliRunner()
TIMEOUT_S = 0.5


@contextmanager
def locked(engine: Engine) -> Iterator[None]:
    """PostgreSQL: another session holds `fleet_state` in ACCESS EXCLUSIVE mode (as a
    migration's ALTER TABLE does); SQLite: another connection holds the write lock."""
    if engine.dialect.name == "postgresql":
        with pg_connect(engine.url) as blocker:
            blocker.execute("BEGIN")
            blocker.execute("LOCK TABLE fleet_state IN ACCESS EXCLUSIVE MODE")
            yield
            blocker.execute("ROLLBACK")
        return
    path = sqlite_path(engine.url)
    assert path is not None
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()


@pytest.mark.parametrize("command", [["status"], ["rollback", "--reason", "drill"]])
def test_a_locked_database_is_named_with_where_to_look(
    audit_engine: Engine, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    for module in ("slaguard.cli.mode", "slaguard.cli.status"):
        monkeypatch.setattr(f"{module}.GUARD_STATEMENT_TIMEOUT_S", TIMEOUT_S)
    start_rollout(GuardStore(audit_engine), at_s=0.0)
    with locked(audit_engine):
        result = runner.invoke(app, [*command, "--db", url_of(audit_engine)])
    if audit_engine.dialect.name == "sqlite" and command == ["status"]:
        assert result.exit_code == 0, "WAL: a reader is never blocked by a writer's lock"
        assert "fleet mode:   rollout(50)" in result.stdout
        return
    assert result.exit_code == 2, result.output
    line = result.stderr
    assert line.count("\n") == 1 and line.startswith("error: database "), line
    if audit_engine.dialect.name == "postgresql":
        assert "canceling statement due to statement timeout" in line
        assert f"no answer within {TIMEOUT_S:g} s: another session holds a lock" in line
        assert "wait_event_type = 'Lock'" in line and "pg_blocking_pids" in line
    else:
        assert "database is locked: another process holds the SQLite file's write lock" in line
        assert "fuser" in line
    assert "fix: " in line
