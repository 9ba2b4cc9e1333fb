"""A client-side deadline on each PostgreSQL call of a connection.

`statement_timeout` is the server's limit: it never fires for a query the server never
received. Behind a frozen proxy or connection pooler (its kernel still acknowledges the
bytes, so TCP keepalives pass) or a route that drops packets, a call waited forever: a
replica's mode sync stopped, it kept routing on a mode the fleet had left and called
itself the guard leader while another replica led. `DeadlineConnection` gives every wait
on the socket a deadline (psycopg's own `wait(timeout=)`); past it the connection is
closed and the call fails as a lost connection does: counted, logged and retried by its
caller, and SQLAlchemy's pool drops the connection.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
from psycopg.abc import PQGen
from psycopg.rows import Row


class DeadlineConnection(psycopg.Connection[Row]):
    """A psycopg connection whose calls fail after `deadline_s` without an answer."""

    deadline_s: float | None = None

    def wait(self, gen: PQGen[Any], interval: float = 0.1, timeout: float | None = None) -> Any:
        limit = self.deadline_s if timeout is None else timeout
        started = time.monotonic()
        try:
            return super().wait(gen, interval, limit)
        except psycopg.OperationalError as exc:
            if limit is None or time.monotonic() - started < limit or self.closed:
                raise
            self.close()  # mid-protocol: the connection cannot be used again
            raise psycopg.OperationalError(
                f"no answer from the database server in {limit:g} s (a frozen proxy or "
                "pooler, or a network dropping packets?); connection closed"
            ) from exc


def connect_with_deadline(deadline_s: float, *args: Any, **kwargs: Any) -> DeadlineConnection[Any]:
    """`psycopg.connect(*args, **kwargs)` giving a connection whose calls have a deadline."""
    conn: DeadlineConnection[Any] = DeadlineConnection.connect(*args, **kwargs)
    conn.deadline_s = deadline_s
    return conn
