"""The guard leader's demotions kept in the database (`guard_router_inputs`, one row), for
a leader that starts after every replica restarted at once.

On PostgreSQL the router inputs travel by NOTIFY (`lease_pg.py`), which reaches only the
sessions listening at that moment: after a host reboot or a restart of the only replica
the first leader had nothing to inherit, and a target demoted as persistently slow got
its full share back until the TTFT detector learned it again. (SQLite keeps the inputs
in a file beside its lock, `lease_file.py`.) The row holds what a successor needs, the
demoted targets and the fleet digest, without the Z-scores it recomputes; it is written
on the lease's own connection when those change, and again every `KEEP_REFRESH_S` while
a target is demoted so that its age (`INHERIT_MAX_AGE_S`) means something, never at
every 500 ms publish. Each statement has a short lock and statement timeout: a failing
or blocked write is logged (`FailureLog`) and stops neither the publish nor the lease.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from slaguard.audit.engine import error_line
from slaguard.failure_log import FailureLog
from slaguard.guard.router_inputs import RouterInputs, parse_published

log = logging.getLogger(__name__)

KEEP_REFRESH_S = 30.0
"""Unchanged demotions are written again this often: a successor then judges their age
(`INHERIT_MAX_AGE_S`, 300 s) at most this much older than the truth."""
STATEMENT_TIMEOUT_S = 0.25
"""Statement timeout of each kept-row statement (its lock timeout half that): well inside
the lease connection's deadline (`lease_s / 2`), past which the lease would be dropped."""
_UPSERT = (
    "INSERT INTO guard_router_inputs (id, published_at, inputs) "
    "VALUES (1, to_timestamp(%s), %s) ON CONFLICT (id) DO UPDATE "
    "SET published_at = EXCLUDED.published_at, inputs = EXCLUDED.inputs"
)
_SELECT = "SELECT inputs FROM guard_router_inputs WHERE id = 1"


class KeptDemotions:
    """The leader's side (`keep` at each publish) and its successor's (`load` on taking
    the lease) of the kept row."""

    def __init__(self, lease_s: float) -> None:
        self._timeout_ms = max(2, int(1000 * min(STATEMENT_TIMEOUT_S, lease_s / 4)))
        self._written: tuple[str, frozenset[str], str | None] | None = None
        self._written_at = -math.inf
        self._failures = FailureLog(log, "keeping the guard leader's demotions in the database")

    @contextmanager
    def _bounded(self, conn: psycopg.Connection) -> Iterator[None]:
        with conn.transaction():
            ms = self._timeout_ms  # a lock waited for is named as such, not as a timeout
            conn.execute(f"SET LOCAL lock_timeout = {ms // 2}; SET LOCAL statement_timeout = {ms}")
            yield

    def keep(self, conn: psycopg.Connection, text: str) -> None:
        """Write what a successor needs of the published `text` if it changed, or is due
        for a refresh (something demoted, `KEEP_REFRESH_S` since the last write)."""
        got = parse_published(text)
        if got is None:
            return
        replica, at_s, inputs = got
        key = (replica, inputs.demoted, inputs.fleet)
        if key == self._written and not (
            inputs.demoted and at_s - self._written_at >= KEEP_REFRESH_S
        ):
            return
        kept = RouterInputs(demoted=inputs.demoted, fleet=inputs.fleet).to_text(replica, at_s)
        try:
            with self._bounded(conn):
                conn.execute(_UPSERT, (at_s, kept))
        except psycopg.Error as exc:
            self._failures.failed(_said(exc), at_s)
            return
        self._failures.succeeded(at_s)
        self._written, self._written_at = key, at_s

    def load(self, conn: psycopg.Connection, received: str | None) -> str | None:
        """On taking the lease: the newer of the kept row and the inputs `received` by
        NOTIFY (None: nothing), for the new leader to inherit from; the next `keep`
        writes the row whatever it holds."""
        self._written, self._written_at = None, -math.inf
        try:
            with self._bounded(conn):
                row = conn.execute(_SELECT).fetchone()
        except psycopg.Error as exc:
            log.warning("the last guard leader's kept demotions not read: %s", _said(exc))
            return received
        kept = None if row is None else str(row[0])
        return max((received, kept), key=_published_at)


def _said(exc: psycopg.Error) -> str:
    """The error in one line; a missing table is a schema behind, which says its fix."""
    line = error_line(exc, with_type=True)
    if isinstance(exc, psycopg.errors.UndefinedTable):
        return f"{line}; fix: run slaguard db upgrade on this database"
    return line


def _published_at(text: str | None) -> float:
    got = parse_published(text)
    return -math.inf if got is None else got[1]
