"""Alembic helpers: upgrade, report, and refuse to run on a schema we do not match.

The migration scripts live in `migrations/` at the repository top level; they are found
from this package's location (editable installs and checkouts), or `$SLAGUARD_MIGRATIONS`.
"""

from __future__ import annotations

import os
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text

from slaguard.audit.engine import shown_url
from slaguard.audit.schema import create_private_sqlite_file

MIGRATIONS_ENV_VAR = "SLAGUARD_MIGRATIONS"


class SchemaNotCurrentError(RuntimeError):
    """The database schema is missing, behind, or at a revision this slaguard does not know;
    `missing`: no slaguard schema at all (a new database, or the wrong one)."""

    def __init__(self, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing


def migrations_dir() -> Path:
    """Where the Alembic scripts are (`migrations/` beside the package)."""
    override = os.environ.get(MIGRATIONS_ENV_VAR)
    path = Path(override) if override else Path(__file__).resolve().parents[2] / "migrations"
    if not (path / "env.py").is_file():
        raise FileNotFoundError(
            f"Alembic scripts not found in {path}; set ${MIGRATIONS_ENV_VAR} to the "
            "repository's migrations/ directory"
        )
    return path


def alembic_config() -> Config:
    """An Alembic config pointing at our scripts (the connection is passed per call)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    return cfg


def head_revision() -> str:
    """The newest revision this slaguard knows."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise RuntimeError("no Alembic revisions found")
    return head


def known_revisions() -> set[str]:
    """Every revision id in our scripts."""
    script = ScriptDirectory.from_config(alembic_config())
    return {rev.revision for rev in script.walk_revisions()}


def current_revision(engine: Engine) -> str | None:
    """The revision stamped in the database, None when it was never migrated (the first
    connection of `serve` and of the schema checks: a new SQLite file is made private)."""
    create_private_sqlite_file(engine.url)
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


MIGRATION_LOCK_KEY = 0x534C4147_4D494752  # "SLAGMIGR"
"""PostgreSQL advisory lock taken around a migration: replicas started together on a new
database each ran it and collided (`duplicate key ... pg_type_typname_nsp_index`)."""


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the schema up to `revision` (creates everything on an empty database); on
    PostgreSQL one migration at a time, the others waiting and then finding it done."""
    create_private_sqlite_file(engine.url)
    cfg = alembic_config()
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def downgrade(engine: Engine, revision: str) -> None:
    """Step the schema back to `revision` ("base" drops every audit table)."""
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


def refuse_newer_schema(engine: Engine) -> None:
    """Raise SchemaNotCurrentError when the database is at a revision our scripts do not
    know (a newer slaguard's, or another Alembic application's): Alembic cannot upgrade
    from it, and our code would misread it."""
    _refuse_unknown(engine, current_revision(engine))


def _refuse_unknown(engine: Engine, current: str | None) -> None:
    """Both causes, with their fixes: the revision alone cannot tell them apart (another
    application's database was called newer, with `upgrade slaguard` as the only fix)."""
    if current is not None and current not in known_revisions():
        raise SchemaNotCurrentError(
            f"database {shown_url(engine.url)} is at schema revision {current}, which this "
            f"slaguard (head {head_revision()}) does not know: either a newer slaguard "
            "migrated it (fix: upgrade slaguard, `pip install -U slaguard`) or it is another "
            "application's database (fix: give slaguard a database, or a schema, of its own)"
        )


def require_current_schema(engine: Engine) -> None:
    """Raise SchemaNotCurrentError, naming the command to run, unless the DB is at head."""
    url = shown_url(engine.url)
    current = current_revision(engine)
    head = head_revision()
    if current == head:
        return
    _refuse_unknown(engine, current)
    if current is None:
        raise SchemaNotCurrentError(
            f"database {url} has no slaguard schema; fix: run `slaguard db upgrade --db {url}`",
            missing=True,
        )
    raise SchemaNotCurrentError(
        f"database {url} is at schema revision {current}, this slaguard needs {head}; "
        f"fix: run `slaguard db upgrade --db {url}`"
    )
