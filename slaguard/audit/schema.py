"""Which schema this code is written for, and a check of it that needs no Alembic.

Importing Alembic costs a few hundred milliseconds (its DDL modules, Mako, Pygments); every
CLI command that opens the audit database checks the schema first, and `slaguard rollback`
mid-incident should not pay that. The check reads `alembic_version` with plain SQL and
compares it with `SCHEMA_REVISION`; only a mismatch loads Alembic to word the error. A test
keeps `SCHEMA_REVISION` equal to the newest script in `migrations/versions/`.
"""

from __future__ import annotations

import contextlib
import os

from sqlalchemy import Engine, inspect, text
from sqlalchemy.engine import URL

from slaguard.audit.engine import sqlite_path

SCHEMA_REVISION = "0004_guard_router_inputs"
"""The Alembic head these models and queries describe (update it with each new migration)."""


def create_private_sqlite_file(url: URL) -> None:
    """Create a missing SQLite file empty and owner-only, before the first connection:
    SQLite creates it following the umask (0644: every decision and incident readable by
    any local user) and gives its -wal and -shm files its mode. An existing file, or
    another backend, is left alone; a file that cannot be created is SQLite's error to
    report, on connecting."""
    path = sqlite_path(url)
    if path is not None and not path.exists():
        with contextlib.suppress(OSError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))


def is_current(engine: Engine) -> bool:
    """The database is stamped with exactly `SCHEMA_REVISION` (a missing version table,
    or any other stamp, is False: the Alembic-backed check then says which it is)."""
    create_private_sqlite_file(engine.url)
    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return False
        stamps = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    return list(stamps) == [SCHEMA_REVISION]
