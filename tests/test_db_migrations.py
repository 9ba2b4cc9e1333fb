"""Alembic migrations create, upgrade and downgrade both backends; the schema guard and
`slaguard db` report what to run."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from conftest import BACKENDS, create_scratch_database, drop_database, require_postgres
from helpers import usual_umask
from sqlalchemy import Engine, inspect, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import IntegrityError
from test_engine_support import AZURE_FIXTURE
from typer.testing import CliRunner

from slaguard.audit.engine import create_audit_engine, resolve_db_url
from slaguard.audit.migrate import (
    SchemaNotCurrentError,
    current_revision,
    downgrade,
    head_revision,
    require_current_schema,
    upgrade,
)
from slaguard.audit.models import Base
from slaguard.audit.store import current_mode
from slaguard.cli.main import app
from slaguard.service.bootstrap import build_service
from slaguard.service.config import load_config

FIRST = "0001_audit_log"
EXPECTED_INDEXES = {
    "decisions": {"ix_decisions_decided_at", "ix_decisions_target_id_decided_at"},
    "outcomes": {"ix_outcomes_finished_at"},
    "mode_changes": {"ix_mode_changes_at", "ix_mode_changes_incident_id"},
    "incidents": {"ix_incidents_opened_at"},
}


@pytest.fixture(params=BACKENDS)
def empty_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Engine:
    if request.param == "sqlite":
        return create_audit_engine(f"sqlite:///{tmp_path / 'm.db'}")
    url: URL = request.getfixturevalue("pg_url")
    engine = create_audit_engine(url)
    if current_revision(engine) is not None:
        downgrade(engine, "base")
    return engine


def test_upgrade_from_empty_and_from_first_revision_reaches_head(empty_engine: Engine) -> None:
    with pytest.raises(SchemaNotCurrentError, match="no slaguard schema; fix: run `slaguard db"):
        require_current_schema(empty_engine)
    upgrade(empty_engine, FIRST)
    with pytest.raises(SchemaNotCurrentError, match=f"at schema revision {FIRST}.*db upgrade"):
        require_current_schema(empty_engine)
    upgrade(empty_engine)
    require_current_schema(empty_engine)
    assert current_revision(empty_engine) == head_revision() == "0004_guard_router_inputs"
    tables = set(inspect(empty_engine).get_table_names())
    assert {"decisions", "outcomes", "mode_changes", "incidents", "weight_versions",
            "fleet_state", "guard_router_inputs", "alembic_version"} <= tables  # fmt: skip
    for table, names in EXPECTED_INDEXES.items():
        assert names <= {ix["name"] for ix in inspect(empty_engine).get_indexes(table)}
    assert current_mode(empty_engine).mode == "round_robin"
    assert current_mode(empty_engine).version == 0


def test_models_and_migrations_describe_the_same_schema(empty_engine: Engine) -> None:
    upgrade(empty_engine)
    with empty_engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(ctx, Base.metadata) == []


def test_downgrade_to_base_drops_everything_and_upgrade_restores(empty_engine: Engine) -> None:
    upgrade(empty_engine)
    downgrade(empty_engine, "base")
    assert set(inspect(empty_engine).get_table_names()) <= {"alembic_version"}
    assert current_revision(empty_engine) is None
    upgrade(empty_engine)
    assert current_revision(empty_engine) == head_revision()


def test_unjudged_outcomes_keep_the_rows_and_go_back_as_misses(empty_engine: Engine) -> None:
    """0003 makes `sla_met` nullable without losing an outcome (SQLite rebuilds the
    table); going back, an unjudged outcome becomes the miss older slaguard recorded."""
    upgrade(empty_engine, "0002_guard_state")
    insert = text(
        "INSERT INTO outcomes (request_id, finished_at, status, sla_met) "
        "VALUES (:id, :at, :status, :met)"
    )
    at = "2026-12-01 00:00:00+00:00"
    with empty_engine.begin() as conn:
        met = {"id": "met", "at": at, "status": "ok", "met": True}
        conn.execute(insert, [met, {"id": "missed", "at": at, "status": "failed", "met": False}])
    upgrade(empty_engine)
    with empty_engine.begin() as conn:
        conn.execute(insert, {"id": "unjudged", "at": at, "status": "client_error", "met": None})
    stored = "SELECT request_id, sla_met FROM outcomes ORDER BY request_id"
    with empty_engine.connect() as conn:
        rows = {r: None if m is None else bool(m) for r, m in conn.execute(text(stored))}
    assert rows == {"met": True, "missed": False, "unjudged": None}
    assert {ix["name"] for ix in inspect(empty_engine).get_indexes("outcomes")} == {
        "ix_outcomes_finished_at"
    }
    downgrade(empty_engine, "0002_guard_state")
    with empty_engine.connect() as conn:
        rows = {r: bool(m) for r, m in conn.execute(text(stored))}
    assert rows == {"met": True, "missed": False, "unjudged": False}
    assert not next(c for c in inspect(empty_engine).get_columns("outcomes")
                    if c["name"] == "sla_met")["nullable"]  # fmt: skip
    upgrade(empty_engine)


def test_the_kept_demotions_row_is_one_and_goes_with_its_revision(empty_engine: Engine) -> None:
    """0004 adds `guard_router_inputs` (one row: the guard leader's demotions kept for its
    successor); going back to 0003 drops it and nothing else."""
    upgrade(empty_engine)
    insert = text(
        "INSERT INTO guard_router_inputs (id, published_at, inputs) VALUES (:id, :at, '{}')"
    )
    at = "2026-12-01 00:00:00+00:00"
    with empty_engine.begin() as conn:
        conn.execute(insert, {"id": 1, "at": at})
    with pytest.raises(IntegrityError), empty_engine.begin() as conn:
        conn.execute(insert, {"id": 2, "at": at})
    before = set(inspect(empty_engine).get_table_names())
    downgrade(empty_engine, "0003_unjudged_outcomes")
    assert set(inspect(empty_engine).get_table_names()) == before - {"guard_router_inputs"}
    assert current_revision(empty_engine) == "0003_unjudged_outcomes"
    upgrade(empty_engine)
    with empty_engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM guard_router_inputs")).scalar() == 0


@pytest.mark.parametrize("revision", ["0099_from_the_future", "abc123def"])
def test_an_unknown_revision_is_refused_with_both_fixes(
    empty_engine: Engine, revision: str
) -> None:
    """Another Alembic-managed application's database (`abc123def`) was called newer than
    this slaguard, with `upgrade slaguard` as the only fix."""
    upgrade(empty_engine)
    with empty_engine.begin() as conn:
        conn.execute(text(f"UPDATE alembic_version SET version_num = '{revision}'"))
    url = empty_engine.url.render_as_string(hide_password=True)
    try:
        with pytest.raises(SchemaNotCurrentError) as refused:
            require_current_schema(empty_engine)
        current = CliRunner().invoke(app, ["db", "current", "--db", url])
    finally:  # the next test's fixture downgrades this database: only from a known revision
        with empty_engine.begin() as conn:
            conn.execute(text(f"UPDATE alembic_version SET version_num = '{head_revision()}'"))
    assert str(refused.value) == (
        f"database {url} is at schema revision {revision}, which this slaguard (head "
        "0004_guard_router_inputs) does not know: either a newer slaguard migrated it (fix: "
        "upgrade slaguard, `pip install -U slaguard`) or it is another application's database "
        "(fix: give slaguard a database, or a schema, of its own)"
    )
    assert current.exit_code == 1 and current.stdout == (
        f"{url}: revision {revision} (head 0004_guard_router_inputs): unknown to this slaguard: a "
        "newer slaguard's (upgrade slaguard) or another application's database (use one of "
        "slaguard's own)\n"
    )


def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    engine = create_audit_engine(f"sqlite:///{tmp_path / 'w.db'}")
    upgrade(engine)
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"


def test_bare_paths_and_plain_postgres_urls_are_normalised() -> None:
    assert resolve_db_url("x/audit.db").render_as_string() == "sqlite:///x/audit.db"
    pg = resolve_db_url("postgresql://u@h:5432/d")
    assert pg.drivername == "postgresql+psycopg"
    # libpq's and most DATABASE_URLs' spelling: it was "backend 'postgres' is not supported"
    short = resolve_db_url("postgres://u:pw@h:5433/d?options=-csearch_path%3Dsg")
    assert short.render_as_string(hide_password=False) == (
        "postgresql+psycopg://u:pw@h:5433/d?options=-csearch_path%3Dsg"
    )


def test_db_cli_upgrade_then_current(tmp_path: Path) -> None:
    runner = CliRunner()
    db = str(tmp_path / "cli.db")
    result = runner.invoke(app, ["db", "current", "--db", db])
    assert result.exit_code == 2
    assert "does not exist" in result.output and "slaguard db upgrade" in result.output
    result = runner.invoke(app, ["db", "upgrade", "--db", db])
    assert result.exit_code == 0, result.output
    assert "empty -> 0004_guard_router_inputs" in result.output
    result = runner.invoke(app, ["db", "current", "--db", db])
    assert result.exit_code == 0
    assert (
        "revision 0004_guard_router_inputs (head 0004_guard_router_inputs): up to date"
        in result.output
    )
    bogus = runner.invoke(app, ["db", "upgrade", "--db", db, "--revision", "bogus"])
    assert bogus.exit_code == 2 and bogus.output.startswith(
        "error: --revision: unknown revision 'bogus'; use head or one of ['0001_"
    )
    back = runner.invoke(app, ["db", "upgrade", "--db", db, "--revision", FIRST])
    assert back.exit_code == 0 and back.output.endswith(
        "0004_guard_router_inputs -> 0004_guard_router_inputs "
        f"(already past {FIRST}: upgrade never goes back)\n"
    )


def test_db_cli_reports_a_stale_schema_and_unreachable_server(tmp_path: Path) -> None:
    runner = CliRunner()
    db = str(tmp_path / "old.db")
    upgrade(create_audit_engine(f"sqlite:///{db}"), FIRST)
    result = runner.invoke(app, ["db", "current", "--db", db])
    assert result.exit_code == 1
    # the hint names the database: run as printed it migrated ./slaguard.db instead
    assert f"behind: run `slaguard db upgrade --db sqlite:///{db}`" in result.output
    result = runner.invoke(app, ["audit", "summary", "--db", db])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1
    assert f"at schema revision {FIRST}" in result.output
    # the fix was given without the "fix:" every other one-line error carries
    assert result.output.endswith(f"; fix: run `slaguard db upgrade --db sqlite:///{db}`\n")
    result = runner.invoke(
        app, ["db", "current", "--db", "postgresql+psycopg://postgres@127.0.0.1:1/nowhere"]
    )
    assert result.exit_code == 2
    assert result.output.startswith("error: cannot reach database postgresql+psycopg://")
    assert result.output.count("\n") == 1


def test_unsupported_drivers_are_refused_in_one_line() -> None:
    result = CliRunner().invoke(app, ["db", "current", "--db", "mysql://u@h/d"])
    assert result.exit_code == 2
    assert result.output == (
        "error: --db: backend 'mysql' is not supported; fix: use a SQLite file path or postgresql+psycopg://user@host:5432/db\n"
    )
    result = CliRunner().invoke(app, ["db", "current", "--db", "postgresql+psycopg2://u@h/d"])
    assert result.exit_code == 2
    assert "driver 'postgresql+psycopg2' is not installed" in result.output


@pytest.mark.parametrize(
    "command",
    [["status"], ["audit", "decisions"], ["rollback", "--reason", "x"], ["db", "current"]],
)
def test_a_sqlite_url_with_two_slashes_is_one_line_naming_the_fix(command: list[str]) -> None:
    """`sqlite://audit.db` reads `audit.db` as a host: SQLAlchemy's ArgumentError was a
    traceback, exit 1, from every command."""
    result = CliRunner().invoke(app, [*command, "--db", "sqlite://audit.db"])
    assert result.exit_code == 2, result.output
    assert result.output == (
        "error: --db: 'sqlite://audit.db' names a host ('audit.db'), which a SQLite URL "
        "cannot have; fix: sqlite:///FILE (three slashes; four for an absolute path) or a "
        "bare file path\n"
    )


def test_a_bad_slaguard_db_is_named_as_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its mistakes were blamed on `--db`, which the command was not given."""
    monkeypatch.setenv("SLAGUARD_DB", "mysql://x/y")
    result = CliRunner().invoke(app, ["status"])
    assert result.exit_code == 2 and result.stderr == (
        "error: $SLAGUARD_DB: backend 'mysql' is not supported; fix: use a SQLite file path or postgresql+psycopg://user@host:5432/db\n"
    )
    missing = tmp_path / "absent.db"
    monkeypatch.setenv("SLAGUARD_DB", str(missing))
    result = CliRunner().invoke(app, ["status"])
    assert result.exit_code == 2 and result.stderr == (
        f"error: $SLAGUARD_DB: SQLite file {missing} does not exist; fix: check the path, or "
        "set $SLAGUARD_DB to the database `slaguard serve` uses (its --db, `db:` or "
        "$SLAGUARD_SERVE_DB) or a `slaguard simulate --audit-db` run wrote; only for a new, "
        f"empty one run `slaguard db upgrade --db {missing}`\n"
    )
    passed = CliRunner().invoke(app, ["status", "--db", "mysql://x/y"])
    assert passed.stderr.startswith("error: --db: backend 'mysql'")


def test_a_missing_default_database_says_none_was_given_not_create_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run away from the service's directory, `status` blamed `--db` (not given) and
    advised `db upgrade`: an empty database, the wrong advice mid-incident."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLAGUARD_DB", raising=False)
    for command in (["status"], ["incidents"], ["audit", "summary"]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2 and result.stderr == (
            "error: no database given (no --db, $SLAGUARD_DB unset or empty) and the default "
            f"SQLite file slaguard.db is not in {tmp_path}; fix: pass --db or set SLAGUARD_DB to "
            "the database `slaguard serve` uses (its --db, `db:` or $SLAGUARD_SERVE_DB) or a "
            "`slaguard simulate --audit-db` run wrote\n"
        ), command
    assert list(tmp_path.iterdir()) == []


def test_default_database_is_env_then_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLAGUARD_DB", raising=False)
    assert CliRunner().invoke(app, ["db", "upgrade"]).exit_code == 0
    assert (tmp_path / "slaguard.db").is_file()
    elsewhere = tmp_path / "env.db"
    monkeypatch.setenv("SLAGUARD_DB", f"sqlite:///{elsewhere}")
    result = CliRunner().invoke(app, ["db", "upgrade"])
    assert result.exit_code == 0 and str(elsewhere) in result.output
    assert elsewhere.is_file()


@pytest.mark.postgres
def test_replicas_migrating_a_new_database_at_once_all_succeed() -> None:
    """Three replicas started together on a new database each ran the migration: one in
    four starts hit `duplicate key ... pg_type_typname_nsp_index`. Now they take turns."""
    require_postgres()
    url = create_scratch_database()
    engines = [create_audit_engine(url) for _ in range(3)]
    start = threading.Barrier(3)
    errors: list[BaseException] = []

    def migrate(engine: Engine) -> None:
        start.wait()
        try:
            upgrade(engine)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=migrate, args=(e,)) for e in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    try:
        assert errors == [] and current_revision(engines[0]) == head_revision()
    finally:
        for engine in engines:
            engine.dispose()
        drop_database(url)


def _modes(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mode & 0o777 for p in sorted(directory.iterdir())}


def test_an_audit_database_slaguard_creates_is_its_owners_only(tmp_path: Path) -> None:
    """SQLite created the file (and its -wal, -shm) following the umask: 0644, every
    decision and incident readable by any local user."""
    runner = CliRunner()
    for name in ("db", "sim", "serve", "existing"):
        (tmp_path / name).mkdir()
    kept = tmp_path / "existing" / "kept.db"
    kept.touch()
    kept.chmod(0o644)
    with usual_umask():
        for args in (
            ["db", "upgrade", "--db", str(tmp_path / "db" / "a.db")],
            ["simulate", "--trace", str(AZURE_FIXTURE), "--audit-db", f"{tmp_path}/sim/s.db"],
            ["db", "upgrade", "--db", str(kept)],
        ):
            result = runner.invoke(app, args)
            assert result.exit_code == 0, result.output
        build_service(load_config(None, {"db": str(tmp_path / "serve" / "v.db")})).close()
    for name in ("db", "sim", "serve"):
        modes = _modes(tmp_path / name)
        database = {m for n, m in modes.items() if n.endswith((".db", ".db-wal", ".db-shm"))}
        spill = {m for n, m in modes.items() if n.endswith(".db.spill")}
        # a drained simulated run removes its emptied journal directory; serve keeps its own
        assert (database, spill) == ({0o600}, {0o700} if name == "serve" else set()), modes
    assert _modes(tmp_path / "existing")["kept.db"] == 0o644  # not created by slaguard: kept


def test_plain_alembic_creates_the_sqlite_file_owners_only(tmp_path: Path) -> None:
    """`alembic upgrade head` with the top-level alembic.ini, as docs/audit.md offers it
    beside `slaguard db upgrade`: the file it creates is 0600 too, not the umask's 0644."""
    root = Path(__file__).resolve().parents[1]
    db = tmp_path / "alembic" / "a.db"
    db.parent.mkdir()
    env = {**os.environ, "SLAGUARD_DB": f"sqlite:///{db}", "PYTHONPATH": str(root)}
    command = [sys.executable, "-m", "alembic", "-c", str(root / "alembic.ini"), "upgrade", "head"]
    with usual_umask():
        done = subprocess.run(
            command, cwd=root, env=env, capture_output=True, text=True, timeout=120, check=False
        )
    assert done.returncode == 0, done.stderr
    engine = create_audit_engine(f"sqlite:///{db}")
    assert current_revision(engine) == head_revision()
    engine.dispose()
    modes = _modes(db.parent)
    assert modes and set(modes.values()) == {0o600}, modes
