"""Where CLI commands open the audit database: URL resolution, reachability and the
schema check each turn into a single `error:` line and exit 2.

No Alembic here (`audit/schema.py` says why): every command that reads or changes the
fleet mode starts through this module.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

from sqlalchemy import Engine, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError

from slaguard.audit.engine import (
    DB_ENV_VAR,
    DatabaseUrlError,
    create_audit_engine,
    db_url_source,
    error_line,
    operator_url,
    resolve_db_url,
    shown_url,
    sqlite_path,
)
from slaguard.audit.schema import create_private_sqlite_file, is_current
from slaguard.cli.errors import fail
from slaguard.cli.paths import db_option

DB_HELP = (
    "Database URL (postgresql+psycopg://user@host/db) or SQLite file; "
    "default $SLAGUARD_DB or ./slaguard.db"
)
DbOption = db_option(None, "--db", help=DB_HELP, show_default=False)

WRITTEN_DB = (
    "the database `slaguard serve` uses (its --db, `db:` or $SLAGUARD_SERVE_DB) or a "
    "`slaguard simulate --audit-db` run wrote"
)
"""What a command reading the audit database is pointed at: a service's, or a simulated
run's (the fix named only the service's)."""


def connect(
    db: str | None,
    *,
    create: bool = False,
    option: str = "--db",
    statement_timeout_s: float | None = None,
) -> Engine:
    """An engine that has answered once; `create` allows a new SQLite file. `option`
    names the flag the URL came from; `statement_timeout_s` bounds each PostgreSQL
    statement (a command waiting on a lock then fails in one line instead of hanging)."""
    option = db_url_source(db, option)  # `$SLAGUARD_DB` when the URL is its
    try:
        url = resolve_db_url(db, option)
    except DatabaseUrlError as exc:
        fail(str(exc))
    path = sqlite_path(url)
    _refuse_directory(path, option)
    if path is not None and not create and not path.is_file():
        fail(_missing_file(path, option, defaulted=not db and not os.environ.get(DB_ENV_VAR)))
    if create:
        check_sqlite_directory(url, option)
        create_private_sqlite_file(url)
    engine = create_audit_engine(url, statement_timeout_s=statement_timeout_s)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        unreachable = f"cannot reach database {shown_url(url)}: {error_line(exc)}"
        what = (
            "the host, port, user and database name in {}, and that the server is up"
            if path is None
            else "{} and the SQLite file it names"
        )
        fail(
            _not_sqlite(exc, path, option, create)
            or _unreadable_directory(url, option)
            or f"{unreachable}; fix: check {what.format(option)}"
        )
    return engine


def _not_sqlite(exc: SQLAlchemyError, path: Path | None, option: str, create: bool) -> str | None:
    """A file that is not SQLite's (a text file given as `--db`) read as an unreachable
    database, with no fix."""
    if (
        path is None
        or getattr(getattr(exc, "orig", None), "sqlite_errorname", None) != "SQLITE_NOTADB"
    ):
        return None
    return _not_a_database(path, option, error_line(exc), create)


def _not_a_database(path: Path, option: str, sqlite_said: str, create: bool) -> str:
    fix = (
        "name a file that does not exist yet for a new database"
        if create
        else f"pass as {option} {WRITTEN_DB}"
    )
    return (
        f"{option}: {path} is not a SQLite database (SQLite: {sqlite_said}); "
        f"fix: check the path, or {fix}"
    )


def _unreadable_directory(url: URL, option: str) -> str | None:
    """SQLite only says "unable to open database file" for a file in a directory this user
    cannot write: WAL mode needs to create the `-shm` file beside it, even to read."""
    path = sqlite_path(url)
    if path is None or not path.is_file() or os.access(path.parent, os.W_OK):
        return None
    shm, wal = f"{path.name}-shm", f"{path.name}-wal"
    return (
        f"{option}: cannot open SQLite file {path}: its directory {path.parent} is not "
        f"writable for this user, and SQLite's WAL mode needs to create {shm} beside it, "
        f"even to read; fix: copy {path.name} (with {wal} if there is one) to a writable "
        f"directory and pass the copy as {option}, or make {path.parent} writable"
    )


def db_origin(db: str | None) -> str:
    """Where a command's database came from: `--db`, `$SLAGUARD_DB`, or `default` (the
    file `slaguard.db` in the working directory, which a stray copy there answers for)."""
    if db:
        return "--db"
    return f"${DB_ENV_VAR}" if os.environ.get(DB_ENV_VAR) else "default"


def _missing_file(path: Path, option: str, *, defaulted: bool) -> str:
    """A missing file is almost always the wrong database, not one to create: run away
    from the service's directory, the default `./slaguard.db` was named `--db`, and
    `db upgrade` (an empty database) was the advice given mid-incident."""
    if defaulted:
        return (
            f"no database given (no --db, ${DB_ENV_VAR} unset or empty) and the default SQLite "
            f"file {path} is not in {Path.cwd()}; fix: pass --db or set {DB_ENV_VAR} to "
            f"{WRITTEN_DB}"
        )
    path = path.absolute()  # a relative file was looked for in the working directory
    if not path.parent.is_dir():
        # `db upgrade --db` then said only that the directory does not exist
        return (
            f"{option}: SQLite file {path} does not exist, nor does its directory "
            f"{path.parent}; fix: check the path, or {_give(option)} {WRITTEN_DB}; only for "
            f"a new, empty one create {path.parent}, then run `slaguard db upgrade --db {path}`"
        )
    return (
        f"{option}: SQLite file {path} does not exist; fix: check the path, or "
        f"{_give(option)} {WRITTEN_DB}; only for a new, empty one run "
        f"`slaguard db upgrade --db {path}`"
    )


def _refuse_directory(path: Path | None, option: str) -> None:
    """A directory given as the SQLite file: read commands called it missing and offered
    `db upgrade`, which then said only "unable to open database file", and `serve`
    started unready on it."""
    if path is not None and path.is_dir():
        example = path / "slaguard.db"
        give = f"{option} {example}" if option.startswith("--") else f"{example} there"
        fail(
            f"{option}: {path} is a directory, not a SQLite file; fix: name the database "
            f"file, e.g. {give}"
        )


def check_sqlite_directory(url: URL, option: str) -> None:
    """A SQLite file slaguard may create needs its directory: SQLite only says "unable to
    open database file", and `serve` went on half-started (its spill journal then made the
    directory, and a later connection the file, readable by anyone)."""
    path = sqlite_path(url)
    _refuse_directory(path, option)
    if path is not None and not path.parent.is_dir():
        why = "is not a directory" if path.parent.exists() else "does not exist"
        fail(f"{option}: {path.parent} {why}; fix: create the directory or pick another path")


def check_sqlite_file(url: URL, option: str) -> None:
    """An existing file slaguard would open as its SQLite database must be one: `serve`
    started on a text file, served unready ("file is not a database") and made its spill
    journal beside it."""
    path = sqlite_path(url)
    if path is None or not path.is_file():
        return
    try:
        with contextlib.closing(
            sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
        ) as conn:
            conn.execute("PRAGMA schema_version")
    except sqlite3.DatabaseError as exc:
        if getattr(exc, "sqlite_errorname", None) == "SQLITE_NOTADB":
            fail(_not_a_database(path, option, str(exc), create=True))


PG_QUERY_CANCELED = "57014"
PG_WHO_LOCKS = (
    "SELECT pid, pg_blocking_pids(pid) AS blocked_by, state, query FROM pg_stat_activity "
    "WHERE wait_event_type = 'Lock' OR state LIKE 'idle in transaction%'"
)


def failure_line(exc: SQLAlchemyError, url: URL, statement_timeout_s: float | None = None) -> str:
    """A database failure mid-command in one line. A lock another session holds was only
    the driver's `canceling statement due to statement timeout` or `database is locked`:
    it is named, with where to find its holder."""
    said = error_line(exc)
    orig = getattr(exc, "orig", None)
    if getattr(orig, "sqlstate", None) == PG_QUERY_CANCELED:
        waited = (
            "" if statement_timeout_s is None else f"no answer within {statement_timeout_s:g} s: "
        )
        return (
            f"{said} ({waited}another session holds a lock on slaguard's tables, e.g. a "
            "running `slaguard db upgrade`, a `LOCK TABLE` or a transaction left open; find "
            f"it: {PG_WHO_LOCKS}); fix: let it finish or end it (pg_terminate_backend(pid)), "
            "then run the command again"
        )
    path = sqlite_path(url)
    if path is not None and "database is locked" in said:
        return (
            f"{said}: another process holds the SQLite file's write lock (a `serve` or "
            f"`simulate` writer releases it within a second; a longer hold is a stuck "
            f"writer or an open sqlite3 shell); find it: fuser {path}; fix: let it finish "
            "or stop it, then run the command again"
        )
    return said


def open_audit_db(db: str | None, *, statement_timeout_s: float | None = None) -> Engine:
    """A reachable database at the schema this slaguard expects, or one error line."""
    engine = connect(db, statement_timeout_s=statement_timeout_s)
    try:
        current = is_current(engine)
    except SQLAlchemyError as exc:
        said = failure_line(exc, engine.url, statement_timeout_s)
        fail(f"cannot read the schema revision of {shown_url(engine.url)}: {said}")
    if not current:
        # Alembic, loaded only now, words which command fixes it
        from slaguard.audit.migrate import SchemaNotCurrentError, require_current_schema

        try:
            require_current_schema(engine)
        except SchemaNotCurrentError as exc:
            fail(_no_schema(engine.url, db_url_source(db, "--db")) if exc.missing else str(exc))
    return engine


def _no_schema(url: URL, option: str) -> str:
    """An empty database, or one of another application's, is almost always the wrong one
    for a command on an existing fleet: `db upgrade` is right only for a new one."""
    shown = shown_url(operator_url(url))
    return (
        f"database {shown} has no slaguard schema; fix: {_give(option)} {WRITTEN_DB}; only "
        f"for a new, empty one run `slaguard db upgrade --db {shown}`"
    )


def _give(option: str) -> str:
    return f"set {option} to" if option.startswith("$") else f"pass as {option}"
