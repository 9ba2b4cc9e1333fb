"""Which replica runs the detectors and sends notifications: one leader per database.

The lease (`LeaderLease`) is a PostgreSQL advisory lock held on a session of its own
(`lease_pg.py`: released when the holder dies, stalls or vanishes, within `lease_s`), an
exclusive `flock` beside a SQLite file (`lease_file.py`: one host), or, for an
in-memory SQLite database, which has one process by definition, that process itself
(`SoloLease`: it always leads).

The lease also carries the leader's router inputs (jitter Z-scores, demotions) to the
other replicas: `publish(text)` on the leader, `latest()` elsewhere (no I/O: the last
text received by a poll). The other direction: followers forward their guard samples
and arrivals to the leader (`forward(texts)` on a follower, `take_forwarded()` on the
leader; see `forward.py`).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Protocol

from sqlalchemy.engine import URL

from slaguard.audit.engine import sqlite_path
from slaguard.guard.lease_file import FileLeaderLease, current_leader_in
from slaguard.guard.lease_pg import (
    LEASE_S,
    PostgresLeaderLease,
    pg_current_leader,
    pg_guard_replicas,
)


class LeaderLease(Protocol):
    """Leadership as seen by one replica."""

    kind: str

    @property
    def held(self) -> bool:
        """Leader as of the last poll (no I/O)."""
        ...

    @property
    def vacant(self) -> bool:
        """Nobody held leadership at the last poll without `take` (no I/O)."""
        ...

    def poll(self, *, take: bool = True) -> bool:
        """Re-check or (`take`) try to take leadership (blocking, bounded); True if
        leading now. Without `take` it keeps up the follower's side (router inputs) and
        sees whether anybody leads (`vacant`)."""
        ...

    def release(self) -> None:
        """Give leadership up and stay a follower (another replica's poll takes it)."""
        ...

    def publish(self, text: str) -> None:
        """Leader: hand `text` to the other replicas (blocking, bounded; best effort)."""
        ...

    def latest(self) -> str | None:
        """The last text another replica published, as of the last poll (no I/O)."""
        ...

    def forward(self, texts: list[str]) -> None:
        """Follower: hand these batches to the leader (blocking, bounded; best effort)."""
        ...

    def take_forwarded(self) -> list[str]:
        """Leader: the batches forwarded to it since the last call, each once."""
        ...

    def close(self) -> None:
        """Give leadership up."""
        ...


class SoloLease:
    """One process, one database (in-memory SQLite): always the leader."""

    kind = "single process"

    vacant = False

    @property
    def held(self) -> bool:
        return True

    def poll(self, *, take: bool = True) -> bool:
        return True

    def release(self) -> None:
        return None  # the one process: nobody else could take over

    def publish(self, text: str) -> None:
        return None

    def latest(self) -> str | None:
        return None

    def forward(self, texts: list[str]) -> None:
        return None

    def take_forwarded(self) -> list[str]:
        return []

    def close(self) -> None:
        return None


def leader_lock_file(url: URL) -> Path | None:
    """The lock file beside a SQLite database file (None for other backends)."""
    path = sqlite_path(url)
    return None if path is None else path.with_name(path.name + ".guard-leader")


def lease_for(url: URL, replica_id: str, *, lease_s: float = LEASE_S) -> LeaderLease:
    """The right lease for the database behind `url`."""
    if url.get_backend_name() == "postgresql":
        return PostgresLeaderLease(url, replica_id, lease_s=lease_s)
    lock_file = leader_lock_file(url)
    return SoloLease() if lock_file is None else FileLeaderLease(lock_file, replica_id)


def default_replica_id() -> str:
    """`host:pid`: unique per process, readable in `slaguard guard status`."""
    return f"{socket.gethostname()}:{os.getpid()}"


def current_leader(url: URL) -> str | None:
    """The replica id of whoever leads now, None when nobody does (for `slaguard status`)."""
    if url.get_backend_name() == "postgresql":
        return pg_current_leader(url)
    lock_file = leader_lock_file(url)
    return None if lock_file is None else current_leader_in(lock_file)


def guard_replicas(url: URL) -> list[str] | None:
    """The replicas connected to the lease (for `slaguard status`); None where the backend
    cannot tell (a SQLite lock file shows its holder only)."""
    return pg_guard_replicas(url) if url.get_backend_name() == "postgresql" else None
