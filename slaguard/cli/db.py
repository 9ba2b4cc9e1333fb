"""`slaguard db`: create, upgrade and inspect the audit database schema (Alembic)."""

from __future__ import annotations

import typer
from sqlalchemy.exc import SQLAlchemyError

from slaguard.audit.engine import error_line, shown_url
from slaguard.audit.migrate import (
    SchemaNotCurrentError,
    current_revision,
    head_revision,
    known_revisions,
    refuse_newer_schema,
    upgrade,
)
from slaguard.cli.dbopen import DbOption, connect
from slaguard.cli.errors import fail

app = typer.Typer(help="Audit database schema: create, upgrade, inspect.", no_args_is_help=True)


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
        state = (
            "unknown to this slaguard: a newer slaguard's (upgrade slaguard) or another "
            "application's database (use one of slaguard's own)"
        )
    typer.echo(f"{shown_url(engine.url)}: revision {current or 'none'} (head {head}): {state}")
    if current != head:
        raise typer.Exit(1)
