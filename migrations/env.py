"""Alembic environment for the slaguard audit schema (SQLite and PostgreSQL).

Run through `slaguard db upgrade` (which passes its connection), or plain `alembic` with
the top-level alembic.ini (URL from `$SLAGUARD_DB`, else `sqlalchemy.url`). Either way a
missing SQLite file is created owner-only (0600) before the first connection.
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy.engine import Connection

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.models import Base
from slaguard.audit.schema import create_private_sqlite_file

config = context.config
target_metadata = Base.metadata


def _configured_url() -> str:
    return os.environ.get("SLAGUARD_DB") or config.get_main_option(
        "sqlalchemy.url", "sqlite:///slaguard.db"
    )


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    """Emit SQL without a database (`alembic upgrade head --sql`)."""
    context.configure(
        url=_configured_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Use the caller's connection when given one, else open the configured URL."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_audit_engine(_configured_url())
    create_private_sqlite_file(engine.url)  # as `slaguard db upgrade`: not the umask's 0644
    with engine.begin() as conn:
        _run(conn)
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
