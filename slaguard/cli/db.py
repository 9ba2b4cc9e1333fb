"""`slaguard db`: create, upgrade and inspect the audit database schema (Alembic).

Also the one place CLI commands open the audit database: URL resolution, reachability
and the schema check each turn into a single `error:` line and exit 2.
"""

from __future__ import annotations

import typer
from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

from slaguard.audit.engine import (
    DatabaseUrlError,
    create_audit_engine,
    error_line,
    resolve_db_url,
    shown_url,
    sqlite_path,
)
from slaguard.audit.migrate import (
    SchemaNotCurrentError,
    create_private_sqlite_file,
    current_revision,
    head_revision,
    known_revisions,
    refuse_newer_schema,
    require_current_schema,
    upgrade,
)
from slaguard.cli.errors import fail

app = typer.Typer(help="Audit database schema: create, upgrade, inspect.", no_args_is_help=True)

DB_HELP = (
    "Database URL (postgresql+psycopg://user@host/db) or SQLite file; "
    "default $SLAGUARD_DB or ./slaguard.db"
)
DbOption = typer.Option(None, "--db", help=DB_HELP, show_default=False)


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
    try:
        url = resolve_db_url(db, option)
    except DatabaseUrlError as exc:
        fail(str(exc))
    path = sqlite_path(url)
    if path is not None and not create and not path.is_file():
        fail(
            f"{option}: SQLite file {path} does not exist; create it with "
            f"`slaguard db upgrade --db {path}` or pass the right {option}"
        )
    if path is not None and create and not path.parent.is_dir():
        why = "is not a directory" if path.parent.exists() else "does not exist"
        fail(f"{option}: {path.parent} {why}; fix: create the directory or pick another path")
    if create:
        create_private_sqlite_file(url)
    engine = create_audit_engine(url, statement_timeout_s=statement_timeout_s)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        fail(f"cannot reach database {shown_url(url)}: {error_line(exc)}; check {option}")
    return engine


def open_audit_db(db: str | None, *, statement_timeout_s: float | None = None) -> Engine:
    """A reachable database at the schema this slaguard expects, or one error line."""
    engine = connect(db, statement_timeout_s=statement_timeout_s)
    try:
        require_current_schema(engine)
    except SchemaNotCurrentError as exc:
        fail(str(exc))
    return engine


@app.command("upgrade")
def upgrade_command(
    db: str | None = DbOption,
    revision: str = typer.Option("head", help="Target revision."),
) -> None:
    """Create or upgrade the audit schema (SQLite file is created if missing)."""
    if revision != "head" and revision not in known_revisions():
        fail(
            f"--revision: unknown revision {revision!r}; use head or one of "
            f"{sorted(known_revisions())}"
        )
    engine = connect(db, create=True)
    before = current_revision(engine)
    try:
        refuse_newer_schema(engine)
    except SchemaNotCurrentError as exc:
        fail(str(exc))
    try:
        upgrade(engine, revision)
    except SQLAlchemyError as exc:
        fail(f"upgrade of {shown_url(engine.url)} failed: {error_line(exc)}")
    after = current_revision(engine)
    past = revision not in ("head", after)
    note = f" (already past {revision}: upgrade never goes back)" if past else ""
    typer.echo(f"{shown_url(engine.url)}: {before or 'empty'} -> {after}{note}")


@app.command("current")
def current_command(db: str | None = DbOption) -> None:
    """Show the database's schema revision and whether it matches this slaguard."""
    engine = connect(db)
    current = current_revision(engine)
    head = head_revision()
    upgrade_it = f"`slaguard db upgrade --db {shown_url(engine.url)}`"
    if current == head:
        state = "up to date"
    elif current is None:
        state = f"not migrated: run {upgrade_it}"
    elif current in known_revisions():
        state = f"behind: run {upgrade_it}"
    else:
        state = "newer than this slaguard: upgrade slaguard"
    typer.echo(f"{shown_url(engine.url)}: revision {current or 'none'} (head {head}): {state}")
    if current != head:
        raise typer.Exit(1)
