"""What one guard replica reports: each sync's outcome, and its running counters."""

from __future__ import annotations

from dataclasses import dataclass

from slaguard.guard.modes import ModeState


@dataclass(frozen=True, slots=True)
class SyncReport:
    """One sync: leadership now and whether it changed, a mode adopted from the database."""

    leader: bool
    gained: bool = False
    lost: bool = False
    adopted: ModeState | None = None
    error: str | None = None


@dataclass(slots=True)
class ReplicaStats:
    """Counters for metrics and the runner's status lines."""

    syncs: int = 0
    sync_errors: int = 0
    evaluations: int = 0
    persist_errors: int = 0
    leader_changes: int = 0
    sent: int = 0
    send_failures: int = 0
    forwarded_out: int = 0
    forwarded_in: int = 0
    handed_work_partial: bool = False
    """A replica of an earlier version forwards arrivals without their handed work: the
    leader ignores handed work until every replica sends it (a rolling upgrade)."""
    last_error: str | None = None
    last_error_at_s: float | None = None
    """When `last_error` happened: a status read after a recovery shows an old error as old."""

    def note_error(self, message: str, at_s: float) -> str:
        """Keep `message` as the last error, seen at `at_s`; returns it."""
        self.last_error, self.last_error_at_s = message, at_s
        return message
