"""Opening the audit database: URL resolution and engines tuned per backend.

SQLite runs in WAL mode (readers never block the writer) with a short busy timeout so a
locked file turns into a quick, retried write error instead of a stalled writer thread.
PostgreSQL connections have a connect timeout and are pinged before reuse, so a server
restart costs one failed batch, not a stuck pool.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from slaguard.audit.jsonenc import json_encoder
from slaguard.audit.pg_deadline import connect_with_deadline

log = logging.getLogger(__name__)

DEFAULT_SQLITE_FILE = "slaguard.db"
DB_ENV_VAR = "SLAGUARD_DB"
SQLITE_BUSY_TIMEOUT_S = 1.0
PG_CONNECT_TIMEOUT_S = 3
PG_NO_ANSWER_MARGIN_S = 5.0
"""With a statement timeout, a call with no answer this long after it is given up on the
client (`pg_deadline`): the server would have cancelled the statement and said so."""


class DatabaseUrlError(ValueError):
    """A `--db` value that is not a database URL we can use."""


def default_db_url() -> str:
    """`$SLAGUARD_DB`, else the SQLite file `slaguard.db` in the working directory."""
    return os.environ.get(DB_ENV_VAR) or f"sqlite:///{DEFAULT_SQLITE_FILE}"


def db_url_source(value: str | None, option: str) -> str:
    """Where a database URL came from: `option`, or `$SLAGUARD_DB` when `option` gave
    none and that is set (its mistakes were blamed on `--db`)."""
    return option if value or not os.environ.get(DB_ENV_VAR) else f"${DB_ENV_VAR}"


def resolve_db_url(value: str | None, option: str = "--db") -> URL:
    """A `--db` value (URL, or a bare SQLite file path) -> SQLAlchemy URL; `option` names
    where the value came from in the errors (`$SLAGUARD_DB` when the value is its)."""
    option = db_url_source(value, option)
    env = os.environ.get(DB_ENV_VAR, "")
    if not value and env and not env.strip():
        # a file named " " was created (`db upgrade`) and read (`status`) without a word
        raise DatabaseUrlError(
            f"{option}: blank ({env!r}); fix: give a database URL or SQLite file path, or "
            f"unset {DB_ENV_VAR}"
        )
    text = value or default_db_url()
    if "://" not in text:
        text = f"sqlite:///{text}"
    if text.startswith("postgres://"):  # libpq's short form; SQLAlchemy dropped the alias
        text = "postgresql" + text.removeprefix("postgres")
    try:
        url = make_url(text)
    except (ArgumentError, ValueError):  # ValueError: a port that is not a number
        shown = _PASSWORD_OPTION.sub(r"\1***", _PASSWORD.sub(r"\1***@", text))
        raise DatabaseUrlError(
            f"{option}: cannot read {shown!r} as a database URL; fix: use "
            "postgresql+psycopg://user@host:5432/db or a SQLite file path"
        ) from None
    if url.get_backend_name() not in {"sqlite", "postgresql"}:
        raise DatabaseUrlError(
            f"{option}: backend {url.get_backend_name()!r} is not supported; fix: use a "
            "SQLite file path or postgresql+psycopg://user@host:5432/db"
        )
    if url.get_backend_name() == "sqlite" and url.host:
        # `sqlite://audit.db` reads the file name as a host; SQLAlchemy refuses it later
        raise DatabaseUrlError(
            f"{option}: {shown_url(url)!r} names a host ({url.host!r}), which a SQLite URL "
            "cannot have; fix: sqlite:///FILE (three slashes; four for an absolute path) or "
            "a bare file path"
        )
    if url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    if url.drivername not in {"sqlite", "postgresql+psycopg"}:
        raise DatabaseUrlError(
            f"{option}: driver {url.drivername!r} is not installed; fix: use "
            "postgresql+psycopg://... or sqlite:///FILE"
        )
    return url


_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")
"""The password of a URL that does not parse, to mask it in the error line."""

PASSWORD_OPTIONS = ("password", "sslpassword")
"""libpq's URL options that carry a secret (`?password=`): a password all the same."""

_PASSWORD_OPTION = re.compile(rf"([?&](?:{'|'.join(PASSWORD_OPTIONS)})=)[^&#]*")


def shown_url(url: URL | str) -> str:
    """The URL with any password masked, for messages and logs: the one before `@` and
    the one given as an option (`?password=`)."""
    return _PASSWORD_OPTION.sub(r"\1***", make_url(url).render_as_string(hide_password=True))


def without_password(url: URL) -> URL:
    """The URL with no password at all, for a command an operator copies: libpq takes it
    from `PGPASSWORD` or `~/.pgpass` (a masked `***` pasted is a wrong password)."""
    bare = URL.create(  # `url.set(password=None)` would keep it
        url.drivername, url.username, None, url.host, url.port, url.database, url.query
    )
    return bare.difference_update_query(PASSWORD_OPTIONS)


def has_password(url: URL) -> bool:
    """Whether the URL carries a password, before `@` or as an option."""
    return url.password is not None or any(k in url.query for k in PASSWORD_OPTIONS)


def operator_url(url: URL) -> str:
    """The URL as an operator on this host types it elsewhere: a relative SQLite file made
    absolute (a command copied from an incident message runs in another directory)."""
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        url = url.set(database=str(Path(url.database).resolve()))
    return url.render_as_string(hide_password=False)


def error_line(exc: BaseException, *, with_type: bool = False) -> str:
    """A database error in one line: the driver's own first line (SQLAlchemy wraps it in
    `orig`), optionally prefixed by its type; the type alone when it says nothing."""
    original = getattr(exc, "orig", None) or exc
    lines = str(original).strip().splitlines()
    if not lines:
        return type(original).__name__
    return f"{type(original).__name__}: {lines[0]}" if with_type else lines[0]


PG_INSUFFICIENT_PRIVILEGE = "42501"


def refused_writes(url: URL, exc: BaseException) -> str | None:
    """What to say when the database refuses the role's writes (PostgreSQL: permission
    denied), None for any other error: retrying cannot help, a grant does."""
    if getattr(getattr(exc, "orig", None), "sqlstate", None) != PG_INSUFFICIENT_PRIVILEGE:
        return None
    role = url.username or "the role slaguard connects as"
    return (
        f"audit database refuses slaguard's writes: {error_line(exc)}; fix: grant SELECT, "
        f"INSERT, UPDATE on slaguard's tables and USAGE on their sequences to {role}, or use "
        "a role that owns them"
    )


def sqlite_path(url: URL) -> Path | None:
    """The file behind a SQLite URL, None for other backends or in-memory databases."""
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return Path(str(url.database))


def _file_identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


@dataclass(slots=True)
class SqliteFileWatch:
    """Notices an engine's SQLite file deleted or replaced while in use: its open
    connections would go on reading and committing into the deleted file, which vanishes
    with the last of them (an `rm` of the audit database lost every later record)."""

    engine: Engine
    path: Path
    identity: tuple[int, int] | None

    @classmethod
    def of(cls, engine: Engine) -> SqliteFileWatch | None:
        """A watch on `engine`'s file; None for PostgreSQL and in-memory SQLite."""
        path = sqlite_path(engine.url)
        return None if path is None else cls(engine, path, _file_identity(path))

    def problem(self) -> str | None:
        """What is wrong with the file now (one `stat`), or None. A file put back in its
        place (restored, re-created by `slaguard db upgrade`) is adopted: the old file's
        connections are dropped, the next one opens the new file."""
        identity = _file_identity(self.path)
        if identity is None:
            return f"SQLite file {self.path} was deleted while in use; put it back or restart"
        if identity != self.identity:
            if self.identity is not None:
                log.warning("audit database %s was replaced; using the new file", self.path)
                self.engine.dispose()
            self.identity = identity
        return None


def default_spill_dir(url: URL) -> Path:
    """Where a writer keeps its journal by default: beside a SQLite file, else in `./`."""
    path = sqlite_path(url)
    if path is not None:
        return path.with_name(path.name + ".spill")
    return Path(f"slaguard-audit-{url.database or 'db'}.spill")


def _compact_json(value: Any) -> str:
    return json_encoder.encode(value).decode()


def _set_sqlite_pragmas(dbapi_conn: sqlite3.Connection, _record: object) -> None:
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _options_with_statement_timeout(url: URL, timeout_s: float) -> str:
    """The URL's libpq `options` (a `search_path`, say) with the statement timeout added:
    `connect_args` replaces the URL's value, and dropping it read another schema."""
    given = url.query.get("options", ())
    timeout = f"-c statement_timeout={max(1, round(timeout_s * 1000))}"
    return " ".join([*([given] if isinstance(given, str) else given), timeout])


def create_audit_engine(url: URL | str, *, statement_timeout_s: float | None = None) -> Engine:
    """An engine for the audit database (SQLite WAL or PostgreSQL via psycopg 3).

    `statement_timeout_s` bounds each PostgreSQL statement (the writer's, so a batch
    waiting on a table lock fails, is reported and retried instead of blocking silently);
    SQLite's waits are bounded by its busy timeout already."""
    url = resolve_db_url(str(url) if isinstance(url, str) else url.render_as_string(False))
    common: dict[str, Any] = {
        "json_serializer": _compact_json,
        "json_deserializer": msgspec.json.decode,
    }
    if url.get_backend_name() == "sqlite":
        engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S}, **common)
        event.listen(engine, "connect", _set_sqlite_pragmas)
        return engine
    connect_args: dict[str, Any] = {"connect_timeout": PG_CONNECT_TIMEOUT_S}
    if statement_timeout_s is not None:
        connect_args["options"] = _options_with_statement_timeout(url, statement_timeout_s)
    engine = create_engine(
        url,
        connect_args=connect_args,
        pool_pre_ping=True,
        **common,
    )
    if statement_timeout_s is not None:
        deadline_s = statement_timeout_s + PG_NO_ANSWER_MARGIN_S

        @event.listens_for(engine, "do_connect")
        def _connect(dialect: Any, record: Any, cargs: Any, cparams: dict[str, Any]) -> Any:
            return connect_with_deadline(deadline_s, *cargs, **cparams)

    return engine
