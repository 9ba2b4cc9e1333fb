"""The guard lease on PostgreSQL (`leader.py`): a session-level advisory lock
(`pg_try_advisory_lock`) held on a dedicated connection that does nothing else. Each
`poll()` (every 500 ms from the mode sync) re-checks it on that connection, or tries to
take it. The lock dies with the session, so leadership is released when:
* the leader process dies (SIGKILL included): the kernel closes its socket, the server
  ends the session at once and the next replica's poll takes the lock (< 1 s measured);
* the leader stalls (stopped, swapped, a blocked loop): the session sets
  `idle_session_timeout` (`lease_s`, 4 s), so a session that sends nothing for that long
  is ended by the server;
* the leader's host or network vanishes: server-side TCP keepalives on the session
  (2 s idle, 1 s interval, 2 probes) end it after about 4 s.
A replica that finds its connection gone steps down at its next poll; one whose query
gets no answer for `lease_s / 2` (a frozen proxy or pooler, a network dropping packets:
the server sees an idle session and ends it at `lease_s`) gives up on it then
(`pg_deadline`) and steps down before another replica can take the lock; every write it
might still attempt is a compare-and-set on the mode version, so a stale leader can
never overwrite a newer mode.

Router inputs: `pg_notify` on the lease connection, which every replica LISTENs on (the
poll's query delivers what arrived); what a successor needs of them (the demotions) is
also kept in the database (`lease_pg_kept.py`) and read by the replica that takes the
lock, which may have started after every other replica stopped. Forwarded samples:
`pg_notify` on a second channel that only the leader LISTENs on, on a second connection
opened at the poll that takes the lock (notifications arriving on the lock's own
connection would keep a frozen leader's session from ever timing out).
"""

from __future__ import annotations

import logging

import psycopg
from sqlalchemy.engine import URL

from slaguard.audit.engine import error_line
from slaguard.audit.pg_deadline import connect_with_deadline
from slaguard.guard.forward import MAX_BATCH_BYTES
from slaguard.guard.lease_pg_kept import KeptDemotions

log = logging.getLogger(__name__)

LOCK_KEY = int.from_bytes(b"slaguard", "big")
"""The advisory lock key (a bigint; advisory locks are per database)."""
APPLICATION_PREFIX = "slaguard-guard:"
ROUTER_CHANNEL = "slaguard_guard_router"
SAMPLES_CHANNEL = "slaguard_guard_samples"
LEASE_S = 4.0
CONNECT_TIMEOUT_S = 2
_CLASS_ID, _OBJ_ID = LOCK_KEY >> 32, LOCK_KEY & 0xFFFFFFFF
_HELD_SQL = (
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() "
    "AND classid = %s AND objid = %s AND objsubid = 1 AND granted"
)
_HOLDER_SQL = (
    "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE l.locktype = 'advisory' AND l.classid = %s AND l.objid = %s AND l.objsubid = 1 "
    "AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = "
    "current_database())"
)
_REPLICAS_SQL = (
    "SELECT DISTINCT application_name FROM pg_stat_activity WHERE datname = current_database() "
    "AND starts_with(application_name, %s) ORDER BY 1"
)


def libpq_conninfo(url: URL) -> str:
    """A SQLAlchemy PostgreSQL URL as a libpq connection string (password kept)."""
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


class PostgresLeaderLease:
    """A session advisory lock on a connection of its own."""

    kind = "postgresql advisory lock"

    def __init__(self, url: URL, replica_id: str, *, lease_s: float = LEASE_S) -> None:
        self.conninfo = libpq_conninfo(url)
        self.replica_id = replica_id
        self.lease_s = lease_s
        self._conn: psycopg.Connection | None = None
        self._held = False
        self._latest: str | None = None
        self._forwarded: list[str] = []
        self._samples_conn: psycopg.Connection | None = None
        self._vacant = False
        self._kept = KeptDemotions(lease_s)

    @property
    def held(self) -> bool:
        return self._held

    @property
    def vacant(self) -> bool:
        return self._vacant

    def publish(self, text: str) -> None:
        if len(text.encode()) > MAX_BATCH_BYTES:
            log.warning("router inputs not published: %d bytes", len(text.encode()))
        else:
            self._notify(ROUTER_CHANNEL, [text])
        if self._held and self._conn is not None and not self._conn.closed:
            self._kept.keep(self._conn, text)  # the demotions alone: far below the limit

    def latest(self) -> str | None:
        return self._latest

    def forward(self, texts: list[str]) -> None:
        self._notify(SAMPLES_CHANNEL, texts)

    def take_forwarded(self) -> list[str]:
        """What the last polls received (the notifications arrive with their queries)."""
        texts, self._forwarded = self._forwarded, []
        return texts

    def _notify(self, channel: str, texts: list[str]) -> None:
        conn = self._conn
        if conn is None or conn.closed or not texts:
            return
        try:
            for text in texts:
                conn.execute("SELECT pg_notify(%s, %s)", (channel, text))
        except psycopg.Error as exc:
            log.debug("notification on %s not sent: %s", channel, exc)

    def _on_notify(self, notify: psycopg.Notify) -> None:
        if notify.channel == ROUTER_CHANNEL:
            self._latest = notify.payload
        elif notify.channel == SAMPLES_CHANNEL and self._held:
            self._forwarded.append(notify.payload)

    def _connect(self, *, idle_timeout: bool = True) -> psycopg.Connection:
        lease_ms = int(self.lease_s * 1000)
        idle = f"-c idle_session_timeout={lease_ms} " if idle_timeout else ""
        options = (
            f"{idle}-c statement_timeout={lease_ms} "
            f"-c idle_in_transaction_session_timeout={lease_ms} "
            "-c tcp_keepalives_idle=2 -c tcp_keepalives_interval=1 -c tcp_keepalives_count=2"
        )
        conn = connect_with_deadline(
            self.lease_s / 2,  # no answer this long: step down before the session expires
            self.conninfo,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_S,
            application_name=(APPLICATION_PREFIX + self.replica_id)[:63],
            options=options,
            keepalives=1,
            keepalives_idle=2,
            keepalives_interval=1,
            keepalives_count=2,
        )
        conn.add_notify_handler(self._on_notify)
        return conn

    def poll(self, *, take: bool = True) -> bool:
        self._vacant = False
        try:
            if self._conn is None or self._conn.closed:
                self._held = False
                self._conn = self._connect()
                self._conn.execute(f"LISTEN {ROUTER_CHANNEL}")
            if self._held:
                row = self._conn.execute(_HELD_SQL, (_CLASS_ID, _OBJ_ID)).fetchone()
                self._held = bool(row and row[0])
            if not self._held and take:
                row = self._conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone()
                self._held = bool(row and row[0])
                if self._held:  # for the demotions: NOTIFY brought none after a full restart
                    self._latest = self._kept.load(self._conn, self._latest)
            elif not self._held:  # the query delivers the router inputs that arrived
                row = self._conn.execute(_HOLDER_SQL, (_CLASS_ID, _OBJ_ID)).fetchone()
                self._vacant = row is None
        except psycopg.Error as exc:
            if self._held:
                log.warning("guard leadership lost: %s", error_line(exc))
            self._drop()
        self._pump_samples()
        return self._held

    def _pump_samples(self) -> None:
        """The leader LISTENs for forwarded samples on a connection of its own: a steady
        stream of notifications keeps a session from ever being idle, and the lock's
        session must time out (`idle_session_timeout`) when its process freezes."""
        if not self._held:
            self._close_samples()
            return
        try:
            if self._samples_conn is None or self._samples_conn.closed:
                self._samples_conn = self._connect(idle_timeout=False)
                self._samples_conn.execute(f"LISTEN {SAMPLES_CHANNEL}")
            self._samples_conn.execute("SELECT 1")  # delivers what arrived
        except psycopg.Error as exc:
            log.debug("forwarded samples not received: %s", exc)
            self._close_samples()

    def _close_samples(self) -> None:
        conn, self._samples_conn = self._samples_conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                log.debug("closing the samples connection failed", exc_info=True)

    def _drop(self) -> None:
        self._held = False
        self._forwarded = []
        self._close_samples()
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg.Error:
                log.debug("closing the leader connection failed", exc_info=True)
            self._conn = None

    def release(self) -> None:
        if self._held and self._conn is not None and not self._conn.closed:
            try:
                self._conn.execute("SELECT pg_advisory_unlock_all()")
            except psycopg.Error as exc:  # the session goes, and the lock with it
                log.debug("unlocking failed: %s", exc)
                self._drop()
        self._held = False
        self._forwarded = []
        self._close_samples()

    def close(self) -> None:
        """Unlock before closing: the server ends a closed session a moment later, and
        the next replica should not have to wait for that."""
        if self._held and self._conn is not None and not self._conn.closed:
            try:
                self._conn.execute("SELECT pg_advisory_unlock_all()")
            except psycopg.Error:
                log.debug("unlocking before close failed", exc_info=True)
        self._drop()


def pg_current_leader(url: URL) -> str | None:
    """The replica id of whoever holds the lock now, None when nobody does."""
    with connect_with_deadline(
        LEASE_S, libpq_conninfo(url), autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
    ) as conn:
        row = conn.execute(_HOLDER_SQL, (_CLASS_ID, _OBJ_ID)).fetchone()
    return None if row is None else str(row[0]).removeprefix(APPLICATION_PREFIX)


def pg_guard_replicas(url: URL) -> list[str]:
    """The ids of the replicas whose lease session is connected to this database, the
    leader's included: every replica polls the lease, ready or not, so "none leads" with
    replicas here is a fleet that cannot lead, not one that is down."""
    with connect_with_deadline(
        LEASE_S, libpq_conninfo(url), autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
    ) as conn:
        rows = conn.execute(_REPLICAS_SQL, (APPLICATION_PREFIX,)).fetchall()
    return [str(row[0]).removeprefix(APPLICATION_PREFIX) for row in rows]
